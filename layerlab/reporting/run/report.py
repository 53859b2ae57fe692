"""``layerlab report``: one self-contained HTML page from run folders and archives.

The page holds, in order: the findings (per model, in sentences built from the numbers:
:mod:`layerlab.reporting.run.findings`); per-model results (strict success S, safe resolution,
groundedness false positives GF, each with a 95% interval, and the shares of malformed replies
and provider errors) per mitigation arm; the reference agents as a separately labelled baseline
block (never pooled with models); a per-model × scenario breakdown; diagnostic counts; figures
(embedded PNG) of the measures that vary; the focused study if one is given; the run's metadata
and provenance from every manifest (models, local model file hashes and runtime, spec hashes,
settings, archive checksums); and the column glossary (:mod:`layerlab.reporting.records.dictionary`).
Sections with nothing to show are left out. Everything is computed from archives, which hold no
prose or answers, so the page is as shareable as the archives themselves. The same inputs give
the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import __version__, archive
from layerlab._io import sha256_file
from layerlab.analysis import results, stats
from layerlab.analysis.records import records_frame
from layerlab.reporting.format import cells, page
from layerlab.reporting.records import dictionary
from layerlab.reporting.run import convreport  # conversational runs: a page of their own

SECTIONS = (  # in page order; a section with nothing to show is left out
    ("findings", "Findings"),
    ("models", "Results by model"),
    ("baselines", "Reference agents (baseline)"),
    ("scenarios", "By model and scenario"),
    ("diagnostics", "Diagnostics"),
    ("figures", "Figures"),
    ("study", "Focused study"),
    ("provenance", "Provenance and metadata"),
    ("glossary", "Glossary"),
)
BASELINE_NOTE = (
    "Reference agents are deterministic baselines run through the same harness "
    "(layerlab/extractive reads the evidence extractively; layerlab/cautious abstains on partial, "
    "stale or foreign-session evidence). They are not models: their numbers show what the "
    "benchmark credits, not any provider's ability, and they are never pooled with models here."
)


class ReportError(ValueError):
    """An input the report cannot use (message names the path and the problem)."""


@dataclass
class Inputs:
    """What the report reads: record archives, study archives, and each source's provenance."""

    record_paths: list[Path] = field(default_factory=list)
    study_paths: list[Path] = field(default_factory=list)
    provenance: list[dict[str, Any]] = field(default_factory=list)


def _provenance(path: Path) -> dict[str, Any]:
    if path.is_dir():
        m = archive.read_manifest(path)
        arch = path / (
            archive.STUDY_ARCHIVE if m.get("kind") == "langchain_study" else archive.ARCHIVE
        )
        return {"path": str(path), "manifest": m, "sha256": sha256_file(arch)}
    return {"path": str(path), "manifest": None, "sha256": sha256_file(path)}


def classify(paths_: Sequence[Path]) -> Inputs:
    """Sort the given run folders and archive files into record and study archives."""
    inp = Inputs()
    for p in map(Path, paths_):
        if not p.exists():
            raise ReportError(f"{p}: does not exist (expected a run folder or an archive file)")
        try:
            archive.check_path(p)
            prov = _provenance(p)
        except archive.ArchiveError as exc:
            raise ReportError(str(exc)) from None
        m = prov["manifest"]
        study = (m is not None and m.get("kind") == "langchain_study") or (
            p.is_file() and p.name == archive.STUDY_ARCHIVE
        )
        (inp.study_paths if study else inp.record_paths).append(p)
        inp.provenance.append(prov)
    return inp


def _scenario_table(m: dict[str, Any], answerable: dict[str, bool]) -> pd.DataFrame:
    rows = []
    arms = list(m["arms"])
    for s, per in m["by_scenario"].items():
        row: dict[str, Any] = {
            "scenario": s,
            "kind": "answerable" if answerable.get(s, False) else "unsafe",
        }
        for arm in arms:
            c = per.get(arm)
            row[f"S {arm}"] = cells.rate_cell(c["S"]) if c else cells.NONE
        for arm in arms:
            c = per.get(arm)
            row[f"safe {arm}"] = cells.rate_cell(c["safe"]) if c else cells.NONE
        for arm in arms:
            c = per.get(arm)
            row[f"GF {arm}"] = cells.rate_cell(c["GF"]) if c else cells.NONE
        rows.append(row)
    return pd.DataFrame(rows)


def _diagnostic_table(res: dict[str, Any]) -> pd.DataFrame:
    """Records per diagnostic label (rows) and model x arm (columns); labels no record has are
    left out, labels the glossary does not know are kept."""
    meanings = {**dictionary.DIAGNOSTIC_MEANINGS, **dictionary.TABLE_DIAGNOSTIC_MEANINGS}
    cols: dict[str, dict[str, int]] = {}
    for m in res["models"]:
        for arm in results.arm_order(m["diagnostics"]):
            tag = " (agent)" if m["reference_agent"] else ""
            cols[f"{m['model']}{tag} {arm}"] = m["diagnostics"][arm]
    seen = {d for c in cols.values() for d in c}
    labels = [d for d in meanings if d in seen] + sorted(seen - set(meanings))
    rows = [
        {"diagnostic": d, **{name: int(c.get(d, 0)) for name, c in cols.items()}} for d in labels
    ]
    return pd.DataFrame(rows)


def _diagnostic_meanings(labels: Sequence[str]) -> pd.DataFrame:
    meanings = {**dictionary.DIAGNOSTIC_MEANINGS, **dictionary.TABLE_DIAGNOSTIC_MEANINGS}
    return pd.DataFrame([{"diagnostic": d, "meaning": meanings.get(d, "-")} for d in labels])


def _answerable() -> dict[str, bool]:
    from layerlab.faults.scenario import known_scenarios

    return {n: s.spec.answerable for n, s in known_scenarios().items()}


def _agent_parts(paths_: Sequence[Path]) -> list[str]:
    """Per agent run folder: its mode and its per-scenario steps (none for single-call runs)."""
    from layerlab.reporting.run import agentsummary

    parts = []
    for p in paths_:
        got = agentsummary.of_folder(p)
        if got is None:
            continue
        agent, table = got
        parts += [
            f"<h3>{page.esc(str(p))}</h3>",
            page.para(agentsummary.describe(agent) + ".", "muted"),
            page.table(table, nowrap=True),
        ]
    if parts:
        parts.append(
            page.para(
                "From each run's agent.parquet (one row per record), arms pooled: mean model "
                "calls (steps, the final reply's included) and tool calls per record, the share "
                "of tool calls whose arguments broke the tool's schema, mean calls made right "
                "after a call that ended in a fault, and the share of records that used every "
                "tool-calling turn.",
                "muted",
            )
        )
    return parts


def _provenance_block(p: dict[str, Any]) -> str:
    m = p["manifest"]
    items: list[tuple[str, Any]] = [("path", p["path"]), ("archive sha256", p["sha256"])]
    if m is None:
        items.append(("manifest", "none (a bare archive file: completeness and settings unknown)"))
        return page.kv_table(items)
    for k in (
        "run_id",
        "kind",
        "complete",
        "records",
        "expected_records",
        "layerlab_version",
        "corpus",
        "prompt_version",
        "retriever",
        "replicates",
        "share_replies",
        "response_format",
        "seed",
        "n_tasks",
    ):
        if k in m:
            items.append((k, m[k]))
    for k in ("models", "scenarios", "mitigations", "conditions", "arms", "tasks"):
        if k in m:
            items.append((k, ", ".join(map(str, m[k]))))
    if isinstance(m.get("target"), dict):  # a target run: the system under test beside models
        items.append(("target", results.target_line(m["target"])))
    prov = archive.provenance_of(m)
    if prov:
        items.append(("provenance", ", ".join(f"{a}={b}" for a, b in sorted(prov.items()))))
    for k in ("settings", "calls", "controls", "agent"):
        if k in m and m[k] is not None:
            items.append((k, ", ".join(f"{a}={b}" for a, b in sorted(m[k].items()))))
    if m.get("sources"):
        items.append(("merged from", ", ".join(s["run_id"] for s in m["sources"])))
    out = page.kv_table(items)
    if m.get("local_models"):
        out += page.details(
            "local models: GGUF file hashes, runtime and server settings",
            f"<pre>{page.esc(json.dumps(m['local_models'], indent=2, sort_keys=True))}</pre>",
            open_=True,
        )
    return out


def _glossary(agent: bool = False) -> str:
    """The archives' columns; the agent step table's only when an agent run is reported."""
    from layerlab.archive.agenttable import SCHEMA as AGENT_SCHEMA

    parts = []
    for title, where, schema, cols, _ in dictionary.ARCHIVES:
        if schema is AGENT_SCHEMA and not agent:
            continue
        rows = [
            {
                "column": f.name,
                "type": str(f.type),
                "meaning": cols[f.name].meaning.replace("**", ""),
                "values": cols[f.name].vocab().replace("`", "").replace("**", "") or "-",
            }
            for f in schema
        ]
        parts.append(
            page.details(f"{title} — {where.replace('`', '')}", page.table(pd.DataFrame(rows)))
        )
    return "\n".join(parts)


def _findings(
    res: dict[str, Any] | None, df: pd.DataFrame | None, n_study: int, arms: Any = None,
    sample_log: Path | None = None,
) -> str:  # fmt: skip
    """The findings section's body: per model, then per reference agent, its sentences
    (``arms``: the runs' own definitions of their arms, whatever is importable now;
    ``sample_log``: the runs' private log, for a failing fault-free layer's dominant failure)."""
    from layerlab.reporting.run import findings

    if res is None or df is None:
        return page.para(
            f"No record archives given: only {n_study} focused-study archive(s) (below).", "muted"
        )
    found = findings.findings(res, df, arms, sample_log)
    parts = []
    if not any(not f.reference for f in found):
        parts.append(
            page.para(
                "No model records in these archives: only reference agents (below). Give a "
                "run folder of a model, e.g. data/archives/local_models/<model>/.",
                "muted",
            )
        )
    for f in found:
        items = "".join(f"<li>{page.esc(x)}</li>" for x in f.sentences)
        block = f"<h3>{page.esc(f.unit)}</h3><ul>{items}</ul>"
        if f.system:  # a target: what the system did per layer first, the harness's apart
            from layerlab.reporting.run.findings import HARNESS_NOTE, JUDGED_BY

            def ul(xs: Sequence[str]) -> str:
                return "<ul>" + "".join(f"<li>{page.esc(x)}</li>" for x in xs) + "</ul>"

            block = (
                f"<h3>{page.esc(f.unit)} — what the system did, layer by layer</h3>"
                + page.para(f"Baseline arm; judged by {JUDGED_BY}.", "muted")
                + ul(f.system)
                + "<h4>The harness's contract arms (layerlab's, not the system's)</h4>"
                + page.para(f"Said apart: {HARNESS_NOTE}.", "muted")
                + ul(f.harness)
                + "<h4>Over every arm</h4>"
                + f"<ul>{items}</ul>"
            )
        if f.reference:
            block = (
                f'<div class="baseline"><h3>{page.esc(f.unit)} — reference agent '
                f"(a deterministic baseline, not a model)</h3><ul>{items}</ul></div>"
            )
        parts.append(block)
    return "\n".join(parts)


def _figures(res: dict[str, Any]) -> list[str]:
    """Figures of the measures whose rates vary (a measure flat in every cell says nothing drawn);
    a note names the flat ones."""
    from layerlab import extras
    from layerlab.reporting.run import findings

    try:
        from layerlab.reporting.paper import figures
    except ModuleNotFoundError as exc:  # installed without the figure stack
        module = extras.missing_module(exc)
        if module is None:
            raise
        return [page.para(f"Figures left out: they need {module} ({extras.install_hint(module)}).",
                          "muted")]  # fmt: skip

    out = []
    for ref, what in ((False, "models"), (True, "reference agents (baselines, not models)")):
        flat = []
        for key, label in findings.MEASURES:
            long = findings.long_rates(res, ref, key)
            if long.empty:
                continue
            if not findings.varying(long):
                flat.append(f"{label} is {long['rate'].iloc[0]:.3f} in every cell")
                continue
            fig = figures.rates_by_scenario(
                long,
                f"{label[0].upper()}{label[1:]} by scenario and arm — {what}; "
                "95% Clopper-Pearson intervals clustered by task",
                label=label,
            )
            out.append(
                page.figure(
                    fig,
                    f"{label[0].upper()}{label[1:]} by scenario, one panel per "
                    f"{what.split(' (')[0][:-1]}; points are arms, bars 95% intervals; n records "
                    "per point in each panel title.",
                    f"{label} by scenario for {what}",
                )
            )
        if flat:
            out.append(page.para(f"Not drawn for {what}: {'; '.join(flat)}.", "muted"))
    return out


def _arm_book(record_paths: Sequence[Path], df: pd.DataFrame) -> Any:
    """What each arm of the records was when the runs were made (their manifests), not what is
    importable now, as gate, recompute and compare read it: a plug-in guard keeps its verdict."""
    from layerlab.archive.manifest import book_for
    from layerlab.mitigations import book

    try:
        return book_for(record_paths, df["mitigation"])
    except book.UnknownArmError as exc:
        raise ReportError(str(exc)) from None


def _records(paths_: Sequence[Path]) -> pd.DataFrame:
    """The record archives as one checked frame (:func:`~layerlab.analysis.records.records_frame`:
    each archive vetted on read, a run given twice counted once)."""
    try:
        return records_frame(paths_)
    except archive.ArchiveError:
        raise
    except ValueError:  # no records at all
        raise ReportError("the record archives hold no records") from None


def _result_sections(
    res: dict[str, Any],
    models: list[dict[str, Any]],
    agents: list[dict[str, Any]],
    agent_parts: list[str],
) -> list[tuple[str, str, list[str]]]:
    """The sections of the record archives' results: by model, the reference agents, by model
    and scenario, agent mode, diagnostics and figures (each when there is something to show)."""
    answerable = _answerable()
    sections: list[tuple[str, str, list[str]]] = []
    if models:
        sections.append(
            (
                "models",
                "Results by model",
                [
                    page.table(cells.results_table(res, reference=False), nowrap=True),
                    page.para(
                        "Malformed replies and provider errors are failures (never counted as "
                        "safe refusals); their shares say how much of a model's score is lost "
                        "before scoring.",
                        "muted",
                    ),
                ],
            )
        )
    if agents:
        base = page.table(cells.results_table(res, reference=True), nowrap=True)
        sections.append(
            (
                "baselines",
                "Reference agents (deterministic baselines, not models)",
                [f'<div class="baseline">{page.para(BASELINE_NOTE)}{base}</div>'],
            )
        )
    scen_parts = []
    for m in models + agents:
        label = f"{m['provider']}/{m['model']}" + (
            " — reference agent (baseline)" if m["reference_agent"] else ""
        )
        scen_parts.append(f"<h3>{page.esc(label)}</h3>")
        scen_parts.append(
            page.para(
                f"{m['records']} records, {m['tasks']} tasks, {m['replicates']} replicate(s) "
                "per cell.",
                "muted",
            )
        )
        scen_parts.append(page.table(_scenario_table(m, answerable), nowrap=True))
    sections.append(("scenarios", "By model and scenario", scen_parts))
    if agent_parts:
        sections.append(("agent", "Agent mode", agent_parts))
    diag = _diagnostic_table(res)
    sections.append(
        (
            "diagnostics",
            "Diagnostics",
            [
                page.para(
                    "Records per diagnostic label (the first layer that failed) for each "
                    "model and arm; reference agents are marked (agent).",
                    "muted",
                ),
                page.table(diag, nowrap=True),
                page.details(
                    "what each diagnostic label means",
                    page.table(_diagnostic_meanings(list(diag["diagnostic"]))),
                ),
            ],
        )
    )
    figs = _figures(res)
    if figs:  # the figures, or the note saying why none is drawn (a missing extra, flat rates)
        sections.append(("figures", "Figures", figs))
    return sections


SURFACE_THRESHOLD = 0.9  # the share the report's tolerance lines ask safe resolution to keep


def _surface_section(df: Any) -> list[tuple[str, str, list[str]]]:
    """A swept run's reliability surface (:mod:`layerlab.analysis.surface`): its figure, a
    tolerance line per layer at :data:`SURFACE_THRESHOLD` and the table; none without a sweep."""
    from layerlab.analysis import surface

    if df is None or not surface.swept(df):
        return []
    curves = surface.surface(df)
    lines = [cells.tolerance_line(surface.tolerance(c, SURFACE_THRESHOLD))
             for c in curves if c.scenario != surface.CLEAN]  # fmt: skip
    parts = [page.para("Each layer's safe resolution and S over the fault's intensity λ (the share "
                       "of policies or tasks it strikes); how far along λ safe resolution stays "
                       f">= {SURFACE_THRESHOLD}, and whether the 95% lower bounds decide it:"),
             "<ul>" + "".join(f"<li>{page.esc(x)}</li>" for x in lines) + "</ul>"]  # fmt: skip
    try:
        from layerlab.reporting.paper import figures
    except ModuleNotFoundError:  # installed without the figure stack: the table alone
        figures = None  # type: ignore[assignment]
    if figures is not None:
        fig = figures.reliability_surface(curves, "Reliability surface")
        parts.append(page.figure(fig, "One panel per layer, a row per model and arm; bars are 95% "
                                 "intervals, the dashed line the clean scenario.",
                                 "reliability surface"))  # fmt: skip
    parts.append(page.table(cells.surface_table(curves), nowrap=True))
    return [("surface", "Reliability surface", parts)]


def _study_section(study_paths: Sequence[Path]) -> tuple[str, str, list[str]]:
    """The focused study's section: its cells and Table 7 (overall and by condition)."""
    from layerlab.reporting.paper import tables

    rows = [r for p in study_paths for r in archive.read_study(p)]
    return (
        "study",
        "Focused study",
        [
            page.para(
                f"{len(rows)} cells (task × condition × arm) of "
                + ", ".join(sorted({f"{r['provider']}/{r['model']}" for r in rows}))
                + ".",
                "muted",
            ),
            page.table(tables.table7(rows)),
            page.table(tables.table7_by_condition(rows)),
        ],
    )


def _overview(
    inp: Inputs, df: pd.DataFrame | None, models: list[dict[str, Any]], agents: list[dict[str, Any]]
) -> list[tuple[str, Any]]:
    """The provenance section's key/value overview: what the page was built from."""
    return [
        ("generated by", f"layerlab {__version__} from {len(inp.provenance)} archive(s)"),
        ("records", len(df) if df is not None else 0),
        ("models", ", ".join(f"{m['provider']}/{m['model']}" for m in models) or "none"),
        (
            "reference agents (baselines)",
            ", ".join(f"{m['provider']}/{m['model']}" for m in agents) or "none",
        ),
        ("scenarios", ", ".join(stats.scenario_order(df)) if df is not None else "-"),
        ("arms", ", ".join(results.arm_order(df[results.ARM].unique())) if df is not None else "-"),
        ("study archives", len(inp.study_paths)),
        ("interval", results.INTERVAL),
    ]


def build(
    paths_: Sequence[Path], title: str = "LayerRAG-Bench report", sample_log: Path | None = None
) -> str:
    """The report as one HTML string (see the module docstring); ``sample_log``: the runs'
    private log (``run live --sample-log``), whose dominant failure of a failing fault-free
    layer joins its finding (counts only). Conversational runs: :mod:`.convreport`'s page."""
    if paths_ and convreport.conversational(paths_):
        return convreport.build(paths_, title)
    inp = classify(paths_)
    if not inp.record_paths and not inp.study_paths:
        raise ReportError("no archives given")
    res: dict[str, Any] | None = None
    df = arms = None
    if inp.record_paths:
        df = _records(inp.record_paths)
        res = results.summarize(df)
        arms = _arm_book(inp.record_paths, df)
    models = [m for m in (res or {"models": []})["models"] if not m["reference_agent"]]
    agents = [m for m in (res or {"models": []})["models"] if m["reference_agent"]]
    sections: list[tuple[str, str, list[str]]] = [
        ("findings", "Findings", [_findings(res, df, len(inp.study_paths), arms, sample_log)])
    ]
    agent_parts = _agent_parts(inp.record_paths) if res is not None else []
    if res is not None:
        sections += _result_sections(res, models, agents, agent_parts)
        sections += _surface_section(df)
    if inp.study_paths:
        sections.append(_study_section(inp.study_paths))
    overview = _overview(inp, df, models, agents)
    usage = usage_parts(inp.provenance)  # none without usage in any manifest
    if usage:
        sections.append(("usage", "Cost and time", usage))
    prov = [
        page.details(
            f"{p['path']} — {p['manifest']['run_id'] if p['manifest'] else 'archive file'}",
            _provenance_block(p),
            open_=True,
        )
        for p in inp.provenance
    ]
    sections.append(("provenance", "Provenance and metadata", [page.kv_table(overview), *prov]))
    sections.append(("glossary", "Glossary", [_glossary(agent=bool(agent_parts))]))
    body = [
        f"<h1>{page.esc(title)}</h1>",
        *filter(None, [page.partial_banner(paths_)]),
        page.para(
            "Rates are shares of records with a 95% interval; S = E ∧ R ∧ G ∧ V (strict "
            "success), safe resolution = S on answerable scenarios and a structured non-answer "
            "on unsafe ones, GF = grounded ∧ ¬S (grounded: the answer is stated in a document "
            "delivered to the reader, cited or not).",
            "lead",
        ),
        page.toc([(sid, t) for sid, t, _ in sections]),
        *(page.section(sid, t, *parts) for sid, t, parts in sections),
    ]
    return page.document(title, "\n".join(body))


def usage_parts(provenance: Sequence[dict[str, Any]]) -> list[str]:
    """The "Cost and time" section's parts: per run and model, answered calls, mean latency,
    tokens, cost (litellm's price where known) and compute time (local servers' CPU-seconds, else
    call wall time), summed over every invocation of the run, from the manifests; none when no
    manifest records usage."""
    parts = []
    for p in provenance:
        usage = results.usage_summary(p["manifest"]) if p["manifest"] else {}
        if usage:
            parts.append(f"<h3>{page.esc(p['manifest'].get('run_id', p['path']))}</h3>")
            parts.append(page.table(cells.usage_table(usage), nowrap=True))
    if not parts:
        return []
    note = page.para(
        "Over every invocation of each run (a resume adds to the totals). Cost: "
        f"{results.COST_BASIS}, '-' where no price is known (local models, reference agents). "
        f"Compute: {results.COMPUTE_CPU} where measured, else {results.COMPUTE_WALL}.",
        "muted",
    )
    return [note, *parts]


def write(
    paths_: Sequence[Path], out: Path, title: str = "LayerRAG-Bench report",
    sample_log: Path | None = None,
) -> Path:  # fmt: skip
    """Build the report and write it atomically to ``out``."""
    from layerlab._io import atomic_write_text

    html = build(paths_, title, sample_log)
    atomic_write_text(Path(out), html)
    return Path(out)

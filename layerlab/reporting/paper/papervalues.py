"""The numbers and verdicts the manuscript's prose quotes, as LaTeX macros (one producer).

``paper/main.tex`` states no number and no mitigation verdict of its own: its prose uses the
macros of ``paper/generated/values.tex`` (``\\vName``), which :func:`write` produces from the
generated tables (``paper/tables/*.csv``), the committed archives they were built from and the
specs, in deterministic bytes. ``layerlab reproduce`` writes the file after the notebooks have
written the tables, and ``python -m layerlab.reporting.paper.papervalues`` writes it alone (``--check``:
exit 1 when the committed file is not what the current tables give).

:func:`stray_numbers` and :func:`stray_verdicts` are the manuscript's checks
(``tests/test_paper.py``): a digit or a number word in the prose outside a macro, or a verdict
word (read from the tables' ``verdict`` columns) in a clause that names a mitigation, is one the
tables do not vouch for.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import paths
from layerlab.reporting.paper.texvalues import NUMBER_WORDS, ValuesError, word
from layerlab.reporting.paper.texvalues import camel as _camel
from layerlab.reporting.paper.texvalues import csv_table as _csv
from layerlab.reporting.paper.texvalues import rate as _rate
from layerlab.reporting.paper.texvalues import tex as _tex

VALUES_FILE = Path("generated") / "values.tex"
"""Where the macros go, relative to the paper folder (``\\input`` by ``main.tex``)."""

BLOCKS = {"Ref": "reference agents", "Model": "real models", "User": "targets"}
"""Macro prefix of each block of Table 10 / user_table10 (matched on the block label's start)."""

VERDICT_TABLES = {"table10": "", "user_table10": "", "user_table10_sized": "Sized"}
"""The tables whose verdicts the prose may quote, each with the word its macros add after the
block's prefix (``\\vVerdictUserValidityResolution``, ``\\vVerdictUserSizedValidityResolution``)."""


def verdict_prefix(table: str, block: str) -> str | None:
    """The macro prefix of a verdict row of ``table`` in ``block`` (None: a block with none)."""
    prefix = next((p for p, b in BLOCKS.items() if block.startswith(b)), None)
    return None if prefix is None else prefix + VERDICT_TABLES[table]


def _row(tables: Path, name: str, **match: str) -> pd.Series:
    """The one row of the generated table ``name`` whose columns match (``block``: its start)."""
    sel = _csv(tables, name)
    for k, v in match.items():
        sel = sel[sel[k].str.startswith(v)] if k == "block" else sel[sel[k] == v]
    if len(sel) != 1:
        raise ValuesError(f"{name}.csv: expected one row with {match}, found {len(sel)}")
    return sel.iloc[0]


# --- the values ------------------------------------------------------------------------------


def _design(tables: Path) -> dict[str, str]:
    from layerlab.analysis import coverage, stats
    from layerlab.corpus import build as corpus_mod

    c = corpus_mod.load(paths.CORPUS_DIR)
    domains = {t.domain for t in c.tasks}
    policies = {t.policy_id for t in c.tasks}
    return {
        "Domains": word(len(domains)),
        "UnitsPerDomain": word(len(policies) // len(domains)),
        "Variants": word(len(c.tasks) // len(policies)),
        "Scenarios": word(len(_csv(tables, "table1"))),
        "CiLevel": f"{round(100 * coverage.NOMINAL)}\\%",
        # the verdict's levels: each claim at alpha, the equivalence tests' intervals at 1 - 2 alpha
        "CiAlpha": f"{round(100 * (1 - coverage.NOMINAL))}\\%",
        "TostLevel": f"{round(100 * (1 - 2 * (1 - coverage.NOMINAL)))}\\%",
        # a null mitigation's two possible false claims: specific (one-sided target, alpha/2)
        # and over-broad (the band, alpha); their rates add
        "SpecificNullAlpha": f"{100 * (1 - coverage.NOMINAL) / 2:g}\\%",
        "AnyClaimBound": f"{100 * 1.5 * (1 - coverage.NOMINAL):g}\\%",
        "MinUnits": word(stats.MIN_UNITS),
    }


def _models() -> dict[str, str]:
    import yaml

    spec = yaml.safe_load(paths.MODEL_SPEC.read_text(encoding="utf-8"))
    by = {m["name"]: m for m in spec["models"]}
    out = {}
    for macro, name in (("Qwen", "qwen2.5-coder-1.5b"), ("Smol", "smollm2-135m"),
                        ("Gemma", "gemma3-270m-base")):  # fmt: skip
        title, _, rest = by[name]["title"].rpartition(", ")
        out[f"{macro}Name"] = _tex(title.split(" (")[0])
        out[f"{macro}Quant"] = _tex(rest.removesuffix(" GGUF"))
        out[f"{macro}Licence"] = _tex(str(by[name].get("licence", "")).split(" (")[0])
    return out


def _verdicts(tables: Path) -> dict[str, str]:
    out = {}
    for name in VERDICT_TABLES:
        t = _csv(tables, name)
        for _, r in t.iterrows():
            prefix = verdict_prefix(name, r["block"])
            if prefix is None:
                raise ValuesError(f"{name}.csv: block {r['block']!r} has no macro prefix")
            m = _camel(r["mitigation"])
            out[f"Verdict{prefix}{m}"] = _tex(r["verdict"])
            # the design's reach: the probability a run of this size is called specific if
            # the guard changes nothing off target, and the largest off-target change
            out[f"PSpecific{prefix}{m}"] = _tex(str(r["P(specific) at this size"]))
            out[f"OffTarget{prefix}{m}"] = _tex(str(r["change (pp)"]))
    from layerlab.analysis import specificity

    out["Delta"] = f"{100 * specificity.DELTA:.0f}"
    out["SpecificFloor"] = str(specificity.specific_floor())
    return out


def _model_matrix(tables: Path) -> dict[str, str]:
    from layerlab.analysis import stats

    out = {}
    for prefix in ("Ref", "Model"):
        r = _row(tables, "table10_cells", block=BLOCKS[prefix], mitigation="ignore_metadata")
        for s in ("clean", "conflicting_evidence"):
            out[f"Ignore{prefix}{_camel(s)}"] = _tex(r[s].lstrip("*"))
    for prefix, folder in (("Model", paths.LOCAL_MODEL_MITIGATIONS), ("Ref", paths.ARCHIVES /
                           "mitigations")):  # fmt: skip
        df = stats.records_frame(paths.archives_in(folder) if prefix == "Model" else [folder])
        out[f"MatrixTasks{prefix}"] = str(df["task_id"].nunique())
    return out


def _sampling() -> dict[str, str]:
    """What the committed real-model records show about decoding and identical prompts."""
    from layerlab.analysis import stats

    out = {}
    qwen = stats.records_frame(paths.archives_in(paths.LOCAL_MODEL_ARCHIVES))
    (run,) = qwen.attrs["runs"].values()
    out["QwenTemperature"] = f"{run['temperature']:g}"
    out["ModelTasks"] = str(qwen["task_id"].nunique())
    rep = stats.records_frame(paths.archives_in(paths.LOCAL_MODEL_REPLICATES))
    (r,) = rep.attrs["runs"].values()
    out["ReplicateTemperature"] = f"{r['temperature']:g}"
    out["ReplicateDraws"] = word(int(r["replicates"]))
    old = stats.records_frame([paths.RETIRED_ARCHIVES / "smollm2-135m"])
    (o,) = old.attrs["runs"].values()
    if o["temperature"] is not None:
        raise ValuesError("the retired SmolLM2 archive records a temperature: revise the prose")
    out["SmolReplySchema"] = str(o["reply_schema"]).rsplit("/", 1)[-1]
    d = stats.identical_prompt_discordance(old, "safe_resolution")
    s = d[d["scenario"] == "stale_index"].iloc[0]
    out["SmolStalePairs"] = str(int(s["identical pairs"]))
    return {**out, **_discordant("SmolStale", s, 4)}


def _discordant(key: str, r: Mapping[str, Any], digits: int) -> dict[str, str]:
    """A paired strict/repair comparison's discordant counts and its sign test's p (a row of
    :func:`~layerlab.analysis.stats.identical_prompt_discordance` or of the exchangeability
    table): ``{key}StrictOnly``, ``{key}RepairOnly``, ``{key}P``."""
    return {
        f"{key}StrictOnly": str(int(float(r["strict only"]))),
        f"{key}RepairOnly": str(int(float(r["repair only"]))),
        f"{key}P": f"{float(r['sign-test p']):.{digits}f}",
    }


def _exchangeability(tables: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for s in ("clean", "stale_index"):
        out |= _discordant(f"Exch{_camel(s)}", _row(tables, "exchangeability_models", scenario=s), 2)
    return out


def _user_pipeline() -> dict[str, str]:
    from layerlab.analysis import stats

    df = stats.records_frame([paths.USER_PIPELINES / "my-rag-chain"])
    strict = df[df["mitigation"] == "strict"]
    clean = strict[strict["scenario"] == "clean"]
    conf = strict[strict["scenario"] == "conflicting_evidence"].set_index("task_id")
    diag = conf["diagnostic"].value_counts()
    out = {
        "UserTasks": str(df["task_id"].nunique()),
        "UserCleanFreshness": str(int((clean["diagnostic"] == "freshness").sum())),
        "UserCleanRecords": str(len(clean)),
        "UserConflictReader": str(int(diag.get("reader", 0))),
        "UserConflictFreshness": str(int(diag.get("freshness", 0))),
        "UserConflictRecords": str(len(conf)),
    }
    repaired: set[str] = set()
    for guard in ("freshness_guard", "metadata_integrity"):
        g = df[(df["mitigation"] == guard) & (df["scenario"] == "conflicting_evidence")]
        g = g.set_index("task_id")
        repaired |= set(g.index[g["success"] & ~conf.loc[g.index, "success"]])
    out["UserGuardRepaired"] = str(len(repaired))
    out["UserGuardRepairedReader"] = str(int((conf.loc[sorted(repaired), "diagnostic"] ==
                                              "reader").sum()))  # fmt: skip
    contract = df[df["mitigation"].isin(stats.contract_arms())]
    out["UserDriftInputs"] = str(stats.identical_inputs(contract)["schema_drift"])
    old = stats.arm_pairs(contract)
    drift = old[old["scenario"] == "schema_drift"]
    out["UserDriftRequests"] = f"{int((drift['prompt_hash_a'] == drift['prompt_hash_b']).sum())}"
    out["UserDriftPairs"] = str(len(drift))
    return out


def _user_sized() -> dict[str, str]:
    """The larger user-pipeline run: its tasks, and validity resolution's paired change on clean
    questions (tasks it turned into a success, and the other way) against the baseline."""
    from layerlab.analysis import stats

    df = stats.records_frame([paths.USER_PIPELINES / "my-rag-chain-48"])
    clean = df[df["scenario"] == "clean"].pivot_table(
        index="task_id", columns="mitigation", values="success", aggfunc="first"
    )
    base, guard = clean["strict"].astype(bool), clean["validity_resolution"].astype(bool)
    out = {
        "UserSizedTasks": str(df["task_id"].nunique()),
        "UserSizedRecords": f"{len(df):,}".replace(",", "{,}"),
        "UserSizedCleanUp": str(int((guard & ~base).sum())),
        "UserSizedCleanDown": str(int((base & ~guard).sum())),
    }
    # its tasks hold the first run's, which motivated it: the change on the new tasks alone
    from layerlab.reporting.format.display import points
    from layerlab.reporting.paper.tables.userpipeline import sized_task_split

    split = sized_task_split(df, stats.records_frame([paths.USER_PIPELINES / "my-rag-chain"]))
    shared, new = (split.set_index("tasks").loc[k] for k in ("tasks of the first run",
                                                              "new tasks only"))  # fmt: skip
    out["UserSizedSharedTasks"], out["UserSizedNewTasks"] = str(shared["n"]), str(new["n"])
    out["UserSizedNewCleanUp"], out["UserSizedNewCleanDown"] = str(new["up"]), str(new["down"])
    for key, col in (("Change", "change (pp)"), ("Low", "95% low (pp)"), ("High", "95% high (pp)")):
        out[f"UserSizedNewClean{key}"] = _tex(points(new[col]))
    return out


def _null_verdicts(tables: Path) -> dict[str, str]:
    """What the coverage table shows of a mitigation with no effect (the verdict's reported rows
    whose truth calls for ``ineffective``): the largest share called specific, called over-broad
    and given either over those settings, the largest share called specific at an off-target
    effect of exactly ±δ, and,
    at one unit, the range over its task counts of the shares called inconclusive and the
    largest share called ineffective."""
    t = _csv(tables, "coverage")
    verdict = t[(t["quantity"] == "verdict") & (t["status"] == "reported")]
    null = verdict[verdict["estimand"] == "ineffective"]
    # specific's own null at its edge: an off-target change of exactly ±δ beside a large gain
    edge = verdict[verdict["setting"].str.contains(r"off-target [+-]\d+ pp \(", regex=True)]
    # one unit and few tasks, each answered once (the sentence's design; the sampled and
    # policy-clustered nulls of a team's designs are reported in the table itself)
    one = null[(null["units"] == "1") & null["setting"].str.contains("Beta(2,2) null", regex=False)]
    if null.empty or one.empty or edge.empty:
        raise ValuesError(
            "coverage.csv: no reported verdict rows of a null setting at one unit, or none at an "
            "off-target effect of exactly ±δ (run `make coverage`)"
        )
    tasks = one["setting"].str.extract(r"x (\d+) tasks")[0].astype(int)
    inconclusive = one["inconclusive"].astype(float)

    def pct(v: float) -> str:
        return f"{100 * v:.1f}\\%"

    return {
        "NullSettings": word(len(null)),
        "NullFalseSpecificMax": pct(null["specific"].astype(float).max()),
        "NullFalseOverBroadMax": pct(null["over-broad"].astype(float).max()),
        "NullFalseFlagMax": pct(null["false flag"].astype(float).max()),
        "EdgeFalseSpecificMax": pct(edge["specific"].astype(float).max()),
        "NullOneUnitTasksLow": str(tasks.min()),
        "NullOneUnitTasksHigh": str(tasks.max()),
        "NullOneUnitInconclusiveLow": pct(inconclusive.min()),
        "NullOneUnitInconclusiveHigh": pct(inconclusive.max()),
        "NullOneUnitIneffectiveHigh": pct(one["ineffective"].astype(float).max()),
    }


def _figure_methods() -> dict[str, str]:
    """The interval method the figures of paired effects drew (their titles say it too): the
    forest's panels, one unit each (notebook 06's records), and the specificity heatmaps, every
    arm of each block against the baseline (notebook 09's), each cell's method as
    :func:`layerlab.analysis.exact.cell_methods` chooses it for the design the effects use."""
    from layerlab.analysis import exact, specificity, stats
    from layerlab.analysis.units import MIN_UNITS, resolve_design
    from layerlab.mitigations import load_mitigations
    from layerlab.reporting.format.display import interval_methods

    def methods(p: Any) -> tuple[str, ...]:
        return exact.cell_methods(p, resolve_design("auto", len(p.units), p.shares_tasks,
                                                    MIN_UNITS))  # fmt: skip

    df = stats.records_frame(paths.live_archives())
    labels = stats.unit_labels(df)
    forest = [m for u in sorted(set(labels)) for m in methods(stats.paired(df[labels == u]))]
    out = {"MethodsForest": _tex(interval_methods(forest))}
    for block, f in specificity.block_frames().items():
        base = load_mitigations().baseline
        cells = [m for arm in dict.fromkeys(f["mitigation"]) if arm != base
                 for m in methods(stats.paired(f, specificity.OUTCOME, arm, base))]  # fmt: skip
        prefix = verdict_prefix("table10", block)
        if prefix is not None:
            out[f"MethodsMatrix{prefix}"] = _tex(interval_methods(cells))
    return out


def _agent(tables: Path) -> dict[str, str]:
    from layerlab.harness.live.agentlog import read_table

    folder = paths.LOCAL_MODEL_AGENT / "qwen2.5-coder-1.5b"
    from layerlab import archive

    rows = read_table(folder)
    n = len(rows)
    calls = sum(r["tool_calls"] for r in rows)
    out = {
        "AgentMaxSteps": word(int(archive.read_manifest(folder)["agent"]["max_steps"])),
        "AgentRecords": f"{n:,}".replace(",", "{,}"),
        "AgentModelCalls": f"{sum(r['steps'] for r in rows) / n:.1f}",
        "AgentToolCalls": f"{calls / n:.1f}",
        "AgentCalls": f"{calls:,}".replace(",", "{,}"),
        "AgentInvalid": str(sum(r["invalid_calls"] for r in rows)),
        "AgentAllTurns": f"{round(100 * sum(r['step_limit'] for r in rows) / n)}\\%",
    }
    out["AgentTasks"] = _row(tables, "agent_vs_single", arm="strict", scenario="clean")["tasks"]
    for s in ("clean", "stale_index", "missing_tool_output", "partial_timeout",
              "conflicting_evidence", "permission_denied", "corrupted_metadata",
              "wrong_session"):  # fmt: skip
        r = _row(tables, "agent_vs_single", arm="strict", scenario=s)
        key = _camel(s)
        out[f"Agent{key}Single"] = _rate(float(r["single call"]))
        out[f"Agent{key}Agent"] = _rate(float(r["agent"]))
        out[f"Agent{key}Diff"] = _tex(r["agent - single [95% CI]"])
        out[f"Agent{key}GfSingle"] = _rate(float(r["GF single"]))
        out[f"Agent{key}GfAgent"] = _rate(float(r["GF agent"]))
    return out


def _findings(tables: Path) -> dict[str, str]:
    """The real model's headline numbers the abstract and the README state: the contract
    treatment's target gain on schema drift with its own interval (Table 5), the specificity
    margin with the margin's interval and the largest off-target change (Table A1), grounded
    false positives and strict success on the stale index and wrong session (Tables 5 and 4,
    the strict arm) and its strict success on clean questions."""
    model = BLOCKS["Model"]
    m = _row(tables, "specificity_margin", block=model)
    gain = _row(tables, "table5", block=model, scenario="schema_drift")

    def pp(v: str) -> str:
        return f"{float(v):.1f}"

    def pct(v: str) -> str:
        return f"{100 * float(v):.1f}\\%"

    out = {
        "ModelDriftGain": pp(gain["repair-strict (pp)"]),
        "ModelDriftGainLow": pp(gain["95% low (pp)"]),
        "ModelDriftGainHigh": pp(gain["95% high (pp)"]),
        "ModelDriftMargin": pp(m["margin (pp)"]),
        "ModelDriftMarginLow": pp(m["95% low (pp)"]),
        "ModelDriftMarginHigh": pp(m["95% high (pp)"]),
        "ModelDriftOffTarget": pp(m["off-target change (pp)"]),
        "ModelStaleGf": pct(_row(tables, "table5", block=model, scenario="stale_index")["GF strict"]),
        "ModelCleanS": pct(_row(tables, "table4", block=model, scenario="clean")["strict"]),
    }
    for s in ("stale_index", "wrong_session"):  # the README's lead, as rates
        out[f"ModelGf{_camel(s)}"] = _rate(float(_row(tables, "table5", block=model,
                                                       scenario=s)["GF strict"]))  # fmt: skip
        out[f"ModelS{_camel(s)}"] = _rate(float(_row(tables, "table4", block=model,
                                                      scenario=s)["strict"]))  # fmt: skip
    return out


def _surface(tables: Path) -> dict[str, str]:
    """The real model's reliability surface (:mod:`layerlab.reporting.paper.surfacevalues`)."""
    from layerlab.reporting.paper import surfacevalues

    return surfacevalues.values(_csv(tables, "surface_models"))


def values(tables: Path | None = None) -> dict[str, str]:
    """Every macro the prose uses (name without ``\\v`` → LaTeX text), from the generated tables
    in ``tables`` (default ``paper/tables``), the committed archives and the specs."""
    from layerlab.reporting.paper import convvalues  # the conversations section's

    tables = Path(tables or paths.TABLES)
    out: dict[str, str] = {}
    for part in (
        _design(tables),
        _models(),
        _verdicts(tables),
        _model_matrix(tables),
        _sampling(),
        _exchangeability(tables),
        _user_pipeline(),
        _user_sized(),
        _null_verdicts(tables),
        _figure_methods(),
        _agent(tables),
        _findings(tables),
        convvalues.values(tables),
        _surface(tables),
    ):
        clash = set(out) & set(part)
        if clash:
            raise ValuesError(f"two values named {sorted(clash)}")
        out.update(part)
    bad = [k for k in out if not re.fullmatch(r"[A-Za-z]+", k)]
    if bad:
        raise ValuesError(f"macro names must be letters only: {bad}")
    return out


def render(vals: Mapping[str, str]) -> str:
    """The macro file's text: a header and one ``\\newcommand`` per value, sorted by name."""
    head = (
        "% Generated by layerlab.reporting.paper.papervalues from paper/tables/*.csv, the committed\n"
        "% archives and the specs (`layerlab reproduce`). Do not edit: every number and verdict\n"
        "% of paper/main.tex's prose is one of these macros (tests/test_paper.py checks it).\n"
    )
    lines = [f"\\newcommand{{\\v{k}}}{{{v}}}" for k, v in sorted(vals.items())]
    return head + "\n".join(lines) + "\n"


def write(tables: Path | None = None, out: Path | None = None) -> Path:
    """Write the macro file (atomically) from ``tables``; its path."""
    from layerlab._io import atomic_write_text

    out = Path(out or paths.ARTIFACTS / "paper" / VALUES_FILE)
    text = render(values(tables))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    return out


# --- the manuscript's checks -----------------------------------------------------------------


def macros(text: str) -> dict[str, str]:
    """The ``\\newcommand{\\vName}{value}`` definitions of a macro file."""
    return dict(re.findall(r"^\\newcommand\{\\v([A-Za-z]+)\}\{(.*)\}$", text, flags=re.M))


_DROP = (
    r"(?<!\\)%.*",  # comments
    r"\\(?:input|label|ref|eqref|includegraphics|setcounter|graphicspath|usepackage|"
    r"documentclass|begin|end|setlength|renewcommand)\*?(?:\[[^\]]*\])?(?:\{[^{}]*\})*",
    r"\\[A-Za-z]+\{\\[A-Za-z]+\}(?:\{[^{}]*\})?",  # \renewcommand{\thetable}{...} and the like
    r"\[[^\]]*\\linewidth\]",
)


def prose(tex: str) -> str:
    """The document body's prose: comments, labels, references, inputs and layout options
    removed (what a reader reads as text)."""
    body = tex.split("\\begin{document}", 1)[-1]
    for pat in _DROP:
        body = re.sub(pat, " ", body)
    return body


def stray_numbers(tex: str, known: Iterable[str]) -> list[str]:
    """Numbers the prose states by hand: each digit run or number word outside a ``\\v``
    macro of ``known`` (with a little context); an unknown ``\\v`` macro is reported too.
    Digits inside a name (``BM25``) and number words in a compound (``two-way``) are not
    numbers the prose states."""
    known = set(known)
    body = prose(tex)
    found = []
    for m in re.finditer(r"\\v([A-Za-z]+)", body):
        if m.group(1) not in known:
            found.append(f"\\v{m.group(1)} (no generated value)")
    body = re.sub(r"\\v[A-Za-z]+", " ", body)
    body = re.sub(r"\\[A-Za-z]+", " ", body)  # command names (\section, \texttt, ...)
    words = "|".join(NUMBER_WORDS)
    # a digit inside a name (BM25, SmolLM2) is not a number; a number word in a compound
    # adjective (two-way) is not a count
    for m in re.finditer(rf"(?<![A-Za-z\d])\d+(?:[.,]\d+)*|\b(?:{words})\b(?!-)", body, flags=re.I):
        ctx = " ".join(body[max(0, m.start() - 30) : m.end() + 30].split())
        found.append(f"{m.group(0)!r} in '…{ctx}…'")
    return found


def verdict_words(tables: Path | None = None) -> set[str]:
    """The verdict vocabulary, read from every generated table with a ``verdict`` column (its
    values' first word: ``specific``, ``over-broad``, ...; ``inconclusive`` once a table gives
    it), with the verdict rule's own list where :mod:`layerlab.analysis.specificity` has one."""
    from layerlab.analysis import specificity

    words = set(getattr(specificity, "VERDICTS", ()))  # the rule's own list, where it has one
    for p in sorted(Path(tables or paths.TABLES).glob("*.csv")):
        t = pd.read_csv(p, dtype=str, keep_default_na=False)
        if "verdict" in t.columns:
            words |= {v.split()[0] for v in t["verdict"] if v.strip()}
    return words


def mitigation_names(tables: Path | None = None) -> set[str]:
    """How the prose names each mitigation of the generated tables: its id with spaces or
    hyphens (``validity resolution``, ``ignore-metadata``); ``controls`` as ``controls stack``."""
    names = set()
    for p in sorted(Path(tables or paths.TABLES).glob("*.csv")):
        t = pd.read_csv(p, dtype=str, keep_default_na=False)
        if "verdict" in t.columns and "mitigation" in t.columns:
            for m in t["mitigation"]:
                parts = m.split("_")
                if len(parts) == 1:
                    names.add(f"{m} stack" if m == "controls" else m)
                else:
                    names |= {" ".join(parts), "-".join(parts)}
    return names


def stray_verdicts(tex: str, words: Iterable[str], names: Iterable[str]) -> list[str]:
    """Clauses of the prose that name a mitigation and state a verdict word by hand (a verdict
    must be a ``\\vVerdict...`` macro, which carries the current table's verdict)."""
    body = re.sub(r"\\v[A-Za-z]+", " ", prose(tex))
    body = re.sub(r"\\[A-Za-z]+|[{}~]", " ", body)
    found: list[str] = []
    vocab = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    named = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    if not vocab or not named:
        return found
    for clause in re.split(r"[.;:]\s", " ".join(body.split())):
        v = re.search(rf"(?<![\w-])(?:{vocab})(?![\w-])", clause, flags=re.I)
        n = re.search(rf"(?<![\w-])(?:{named})s?(?![\w-])", clause, flags=re.I)
        if v and n:
            found.append(f"{v.group(0)!r} for {n.group(0)!r} in '{clause.strip()[:160]}'")
    return found


def main(argv: list[str] | None = None) -> int:
    """``python -m layerlab.reporting.paper.papervalues [--check]``: write the macro file, or exit 1
    when the committed one differs from what the current tables give."""
    argv = list(argv or [])
    target = paths.COMMITTED_ARTIFACTS / "paper" / VALUES_FILE
    try:
        text = render(values())
    except ValuesError as exc:
        print(exc, file=sys.stderr)
        return 2
    if "--check" in argv:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print(f"{target}: not what the current tables give (run without --check)",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    print(f"wrote {write()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

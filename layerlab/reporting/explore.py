"""The failure-case explorer: one record's whole path, from question to diagnosis.

An evaluator-side view (it shows the answer key next to what the reader did): the question, what
each fault did to this task, what the retriever returned, the tool payload before and after the
contract, the reader's reply, each of E/R/G/V/S with its reason, groundedness and the diagnostic
label. :func:`render` prints it; :func:`widget` wraps it in widgets.

The notebook explorer (:func:`browser`) reads an archive, a run folder or a private per-sample log
(``run live --sample-log``): choose the source, run, model, scenario and mitigation, filter by
outcome and diagnostic; each record shows its verdict first and its path below, collapsed
(:func:`records_html` renders the same without widgets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from layerlab.corpus.build import AnswerKey, AnswerKeyEntry, Corpus, Task
from layerlab.faults.operators import Payload
from layerlab.faults.roles import load_roles
from layerlab.faults.scenario import Scenario
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import Reading, RecordContext, RecordStep
from layerlab.mitigations import contract_pair, load_mitigations
from layerlab.scoring.score import Labels
from layerlab.system import retrieval
from layerlab.system.contract import ContractResult
from layerlab.system.reader import READERS, ReaderInput, ReaderOutput


@dataclass(frozen=True)
class Trace:
    task: Task
    entry: AnswerKeyEntry
    scenario: str
    mode: str
    reader: str
    faults: tuple[str, ...]
    retrieved: tuple[dict[str, Any], ...]
    sent: dict[str, Any]
    received: Payload
    contract: ContractResult
    inp: ReaderInput | None
    out: ReaderOutput | None
    labels: Labels
    actions: tuple[str, ...] = ()  # what the arm's mitigations did, in order


def _index_effects(
    corpus: Corpus, scenario: Scenario, prepared: PreparedScenario, task: Task
) -> list[str]:
    clean = {d.doc_id: d for d in corpus.documents if d.policy_id == task.policy_id}
    faulted = {i: d for i, d in prepared.index.items() if d.policy_id == task.policy_id}
    out = []
    for i in sorted(set(clean) - set(faulted)):
        out.append(f"index: {i} ({clean[i].status}) is absent from the index")
    for i in sorted(set(faulted) - set(clean)):
        d = faulted[i]
        out.append(
            f"index: {i} added (status {d.status}, year {d.effective_year}, owner {d.owner})"
        )
    for i in sorted(set(clean) & set(faulted)):
        a, b = asdict(clean[i]), asdict(faulted[i])
        changed = [
            f"{k} {a[k]!r}->{b[k]!r}"
            for k in ("status", "effective_year", "version", "domain")
            if a[k] != b[k]
        ]
        if changed:
            out.append(f"metadata of {i}: " + ", ".join(changed))
    return out


def _tool_effects(sent: dict[str, Any], received: Payload) -> list[str]:
    if received is None or received == {}:
        return ["tool: no usable output (the call returned nothing)"]
    out = []
    if set(received) != set(sent):
        out.append(f"tool: top-level keys {sorted(sent)} arrived as {sorted(received)}")
    res = received.get("results")
    if isinstance(res, list) and res is not sent["results"]:
        if len(res) != len(sent["results"]):
            out.append(f"tool: {len(res)} of {len(sent['results'])} results arrived")
        for a, b in zip(sent["results"], res, strict=False):
            if isinstance(b, dict) and "text" in b and len(b["text"]) < len(a["text"]):
                out.append(
                    f"tool: text of {a['doc_id']} cut to {len(b['text'])} of {len(a['text'])} characters"
                )
            if isinstance(b, dict) and b.get("session_id") != a.get("session_id"):
                other_text = b.get("text") != a.get("text")
                out.append(
                    f"session: {b.get('doc_id')} arrived from session {b.get('session_id')} "
                    f"(tenant {b.get('tenant')})"
                    + (", with that tenant's own text" if other_text else "")
                )
    if received.get("status") != sent.get("status") and "status" in received:
        out.append(f"tool: status {sent.get('status')!r} -> {received.get('status')!r}")
    return out


def trace(
    task_id: str,
    scenario: str,
    mode: str | None = None,
    reader: str = "extractive",
    *,
    corpus: Corpus | None = None,
    key: AnswerKey | None = None,
    scenarios: Mapping[str, Scenario] | None = None,
) -> Trace:
    """Run one cell of the deterministic harness and keep every intermediate step."""
    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios

    c = corpus or corpus_mod.load()
    k = key or corpus_mod.load_answer_key()
    scen = scenarios or load_scenarios()
    tasks = {t.task_id: t for t in c.tasks}
    if task_id not in tasks:
        raise KeyError(f"unknown task {task_id!r} (e.g. {c.tasks[0].task_id})")
    if scenario not in scen:
        raise KeyError(f"unknown scenario {scenario!r}; known: {list(scen)}")
    task = tasks[task_id]
    mode = mode or load_mitigations().baseline
    prep = prepare(c, scen[scenario], retrieval.REPORTED.name)
    sent, received = prep.sent[task_id], prep.received[task_id]
    step = RecordStep(task, prep, mode)
    reading = Reading(READERS[reader]().read(step.inp)) if step.inp is not None else None
    done = step.finish(RecordContext(c, k, "deterministic", reader, "explore"), reading)
    g, out, labels = done.gate, done.out, done.labels
    faults = [
        f"{f.op}({', '.join(f'{a}={v!r}' for a, v in f.params.items())})"
        for f in scen[scenario].spec.faults
    ]
    effects = _index_effects(c, scen[scenario], prep, task) + _tool_effects(sent, received)
    if sent["status"] == "denied":
        effects.append(
            f"access: every hit withheld ({sent['withheld']}); the tool answered 'denied'"
        )
    retrieved = tuple(
        {
            k2: r[k2]
            for k2 in (
                "rank",
                "doc_id",
                "status",
                "version",
                "effective_year",
                "domain",
                "session_id",
                "score",
            )
        }
        for r in sent["results"]
    )
    return Trace(
        task,
        k[task_id],
        scenario,
        mode,
        reader,
        tuple(faults or ["none"]) + tuple(effects),
        retrieved,
        sent,
        received,
        g.contract,
        g.inp,
        out,
        labels,
        (*g.actions, *([f"attempts: {g.attempts}"] if g.attempts > 1 else [])),
    )


def _short(payload: Any, width: int = 70) -> str:
    def cut(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: cut(v) for k, v in x.items()}
        if isinstance(x, list):
            return [cut(v) for v in x]
        if isinstance(x, str) and len(x) > width:
            return x[:width] + "…"
        return x

    return json.dumps(cut(payload), indent=2, ensure_ascii=False)


def reasons(t: Trace) -> dict[str, str]:
    """One-line reason for each of E, R, G, V, S."""
    lab, out = t.labels, t.out
    delivered = [e.doc_id for e in t.inp.evidence] if t.inp else []
    ans = out.answer if out else None
    return {
        "E": f"{lab.exact_match}: answer {ans!r} vs expected {t.entry.expected_answer!r}",
        "R": f"{lab.retrieval_ok}: required {list(t.entry.required_doc_ids)} among delivered {delivered}",
        "G": f"{lab.citation_ok}: citations {list(out.citations) if out else []} (need >= 1, all delivered)",
        "V": f"{lab.schema_ok}: contract {t.contract.outcome}"
        + (f"; {len(t.contract.edits)} repair edit(s)" if t.contract.edits else "")
        + (f"; {t.contract.problems[0]}" if t.contract.problems else ""),
        "S": f"{lab.success}: E and R and G and V",
        "answer": f"contained {lab.contained}, token F1 {lab.token_f1:.2f} "
        "(secondary measures beside E, never part of S)",
    }


def render(t: Trace) -> str:
    """The trace as readable text."""
    lines = [
        f"task {t.task.task_id} ({t.task.domain}, policy {t.task.policy_id}, {t.task.answer_kind})",
        f"question: {t.task.question}",
        f"scenario: {t.scenario}   mitigation: {t.mode}   reader: {t.reader}",
        "",
        "what the fault did:",
        *[f"  - {f}" for f in t.faults],
        "",
        "retrieved (top 3, before transport faults):",
    ]
    for r in t.retrieved:
        lines.append(
            f"  {r['rank']}. {r['doc_id']:16} status={r['status']:11} v{r['version']} {r['effective_year']} "
            f"domain={r['domain']:8} session={r['session_id']} score={r['score']:.3f}"
        )
    lines += [
        "",
        "tool payload as sent:",
        _short(t.sent),
        "",
        "tool payload as received:",
        _short(t.received),
    ]
    lines += ["", f"contract ({t.mode}): {t.contract.outcome}"]
    lines += [f"  edit: {e}" for e in t.contract.edits[:12]]
    if len(t.contract.edits) > 12:
        lines.append(f"  ... {len(t.contract.edits) - 12} more edit(s)")
    lines += [f"  problem: {p}" for p in t.contract.problems[:6]]
    lines += [f"  mitigation: {a}" for a in t.actions]
    if t.out is None:
        lines += ["", "reader: not reached (the record ended before the reader)"]
    else:
        lines += [
            "",
            f"reader: {t.out.status}; answer {t.out.answer!r}; citations {list(t.out.citations)}"
            + (f"; reason {t.out.reason!r}" if t.out.reason else ""),
        ]
    lines += ["", "scores:"] + [f"  {k}: {v}" for k, v in reasons(t).items()]
    lines += [
        f"  grounded: {t.labels.grounded} (answer stated in a delivered document, cited or not)",
        f"  grounded in a cited document: {t.labels.grounded_cited}",
        f"  groundedness false positive: {t.labels.grounded_false_positive}",
        f"  safe resolution: {t.labels.safe_resolution}",
        f"  diagnostic: {t.labels.diagnostic}",
    ]
    return "\n".join(lines)


def cases() -> list[tuple[str, str, str, str]]:
    """Table 6's cases as ``(case, scenario, arm, rule)``, from ``data/specs/roles.yaml`` (each
    arm is one of the mitigations spec's contract pair)."""
    arms = dict(zip(("baseline", "treatment"), contract_pair(), strict=True))
    return [
        (c.case.format(arm=arms[c.arm]), c.scenario, arms[c.arm], c.rule)
        for c in load_roles().explorer
    ]


def representative_cases(df: Any, model: str = "extractive") -> list[tuple[str, str, str, str]]:
    """Pick Table 6's cases (:func:`cases`) from an archive by rule, not by hand.

    Eligible tasks per case (records of ``model`` on the treatment arm), by the case's rule:
    ``repaired`` — the baseline fails and the treatment succeeds; ``grounded_false_positive`` —
    grounded but not successful; ``denied`` — ended at the access layer; ``completeness`` —
    reached the reader and failed at completeness. The chosen task is the first task id eligible
    for every case if there is one, else the first eligible per case.
    Returns ``(case, task_id, scenario, mode)`` tuples.
    """
    base, treat = contract_pair()
    d = df[df["model"] == model]

    def ids(mask: Any) -> set[str]:
        return set(d.loc[mask, "task_id"].unique())

    def cell(s: str, m: str) -> Any:
        return (d["scenario"] == s) & (d["mitigation"] == m)

    def eligible(scenario: str, rule: str) -> set[str]:
        on = cell(scenario, treat)
        if rule == "repaired":
            return ids(on & d["success"]) & ids(cell(scenario, base) & ~d["success"])
        if rule == "grounded_false_positive":
            return ids(on & d["grounded_false_positive"])
        if rule == "denied":
            return ids(on & (d["stage"] == "denied"))
        return ids(
            on & d["reached_reader"] & ~d["success"] & (d["diagnostic"] == "completeness")
        )

    chosen = cases()
    pools = [eligible(scenario, rule) for _, scenario, _, rule in chosen]
    common = set.intersection(*pools)
    out = []
    for (case, scenario, mode, _), pool in zip(chosen, pools, strict=True):
        picks = sorted(common) or sorted(pool)
        if not picks:
            raise ValueError(f"no task in the archive fits the case {case!r}")
        out.append((case, picks[0], scenario, mode))
    return out


def widget(corpus: Corpus | None = None) -> Any:
    """An ipywidgets explorer: choose task, scenario and mode; see the whole trace."""
    import ipywidgets as w

    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios

    c = corpus or corpus_mod.load()
    key = corpus_mod.load_answer_key()
    scen = load_scenarios()
    task = w.Dropdown(options=[t.task_id for t in c.tasks], description="task")
    scenario = w.Dropdown(options=list(scen), description="scenario")
    spec = load_mitigations()
    mode = w.Dropdown(options=list(spec.arms), value=spec.baseline, description="mitigation")
    out = w.Output()

    def show(*_: Any) -> None:
        out.clear_output()
        with out:
            print(
                render(
                    trace(task.value, scenario.value, mode.value, corpus=c, key=key, scenarios=scen)
                )
            )

    for control in (task, scenario, mode):
        control.observe(show, names="value")
    show()
    return w.VBox([w.HBox([task, scenario]), mode, out])


# --- the notebook explorer: records of an archive or a private sample log -----------------------
# The same rows as ``layerlab view`` (:func:`layerlab.reporting.viewer.load`), rendered in Python so that a
# notebook shows them without a script: each record a collapsible block whose summary is the
# verdict (outcome, S/E/R/G/V, diagnostic), the reasons next, and the path (question, evidence,
# contract, mitigation actions, raw reply) in a collapsed block below.

FILTERS = ("run_id", "model", "scenario", "mitigation", "outcome", "diagnostic")
SHOWN = 12  # records rendered at once in the notebook (the count of all matches is shown)
_VERDICT_LABELS = (("S", "success"), ("E", "exact_match"), ("R", "retrieval_ok"), ("G", "citation_ok"), ("V", "schema_ok"))
_GOOD = frozenset({"success", "safe_non_answer"})
_STYLE = """<style>
.llx { font: 13px/1.45 system-ui, "DejaVu Sans", sans-serif; color: #1d2330; }
.llx details.rec { border: 1px solid #d9dee7; border-radius: 6px; padding: 4px 10px; margin: 6px 0; }
.llx summary { cursor: pointer; line-height: 1.9; }
.llx .b { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
  border: 1px solid #d9dee7; background: #f5f7fa; margin-right: 2px; }
.llx .ok { color: #1a7f37; border-color: #1a7f37; } .llx .bad { color: #b42318; border-color: #b42318; }
.llx .muted { color: #5b6475; } .llx .verdict { margin: 4px 0 0 16px; }
.llx .path { margin: 6px 0 4px 16px; } .llx table { border-collapse: collapse; margin: 4px 0; }
.llx th, .llx td { border: 1px solid #d9dee7; padding: 2px 6px; text-align: left; }
.llx pre { background: #f5f7fa; padding: 6px; white-space: pre-wrap; }
</style>"""


def default_sources() -> list[Path]:
    """The committed record archives: reference agents, the mitigation matrix, local models."""
    from layerlab import paths

    local = sorted(p for p in paths.LOCAL_MODEL_ARCHIVES.glob("*") if p.is_dir()) if paths.LOCAL_MODEL_ARCHIVES.exists() else []
    return [paths.ARCHIVES / "reference_agents", paths.ARCHIVES / "mitigations", *local]


def load_rows(source: Path | str) -> list[dict[str, Any]]:
    """The rows of one archive, run folder or sample log, as the viewer reads them."""
    from layerlab.reporting import viewer

    rows, _ = viewer.load([Path(source)])
    return rows


def unit_of(row: Mapping[str, Any]) -> str:
    return f"{row['provider']}/{row['model']}"


def _value(row: Mapping[str, Any], field: str) -> str:
    return unit_of(row) if field == "model" else str(row.get(field))


def choices(rows: Sequence[Mapping[str, Any]], field: str) -> list[str]:
    """The values of a filter field among ``rows`` (sorted)."""
    return sorted({_value(r, field) for r in rows})


def select(rows: Sequence[Mapping[str, Any]], **want: str | None) -> list[Mapping[str, Any]]:
    """Rows matching every given filter (``run_id``, ``model`` as provider/model, ``scenario``,
    ``mitigation``, ``outcome``, ``diagnostic``); ``None`` or ``""`` means any."""
    bad = sorted(set(want) - set(FILTERS))
    if bad:
        raise KeyError(f"unknown filter(s) {bad}; known: {list(FILTERS)}")
    return [r for r in rows if all(not v or _value(r, f) == v for f, v in want.items())]


def _chip(name: str, v: Any) -> str:
    return f'<span class="b {"ok" if v else "bad"}">{name} {"✓" if v else "✗"}</span>'


def record_html(row: Mapping[str, Any], open_: bool = False) -> str:
    """One record as a collapsible block: the verdict first, the path below (collapsed)."""
    from layerlab.reporting.page import esc

    v = row.get("verdict", {})
    outcome = str(row.get("outcome"))
    head = (
        f'<span class="b {"ok" if outcome in _GOOD else "bad"}">{esc(outcome)}</span> '
        + "".join(_chip(n, v.get(k)) for n, k in _VERDICT_LABELS)
        + f' <span class="b">{esc(row.get("diagnostic"))}</span> <code>{esc(row["task_id"])}</code> '
        + (f'<span class="muted">rep {row["replicate"]}</span> ' if row.get("replicate") else "")
        + f'<span class="muted">{esc(unit_of(row))} · {esc(row["scenario"])} · {esc(row["mitigation"])}</span>'
    )
    verdict = ['<div class="verdict"><b>Verdict</b><ul>']
    reasons_ = row.get("reasons") or {}
    for k in ("S", "E", "R", "G", "V", "grounded", "answer"):
        if k in reasons_:
            verdict.append(f"<li><b>{k}</b> {esc(reasons_[k])}</li>")
    verdict.append(
        "<li>"
        + " · ".join(
            f"{label} {esc(v.get(k))}"
            for label, k in (
                ("grounded", "grounded"),
                ("grounded (cited)", "grounded_cited"),
                ("GF", "grounded_false_positive"),
                ("contained", "contained"),
                ("token F1", "token_f1"),
                ("safe resolution", "safe_resolution"),
                ("answered", "answered"),
                ("abstained", "abstained"),
            )
        )
        + (
            f" · scenario {'answerable' if row['answerable'] else 'unsafe'}"
            if row.get("answerable") is not None
            else ""
        )
        + "</li></ul>"
    )
    parsed = row.get("parsed")
    if parsed:
        verdict.append(
            f"<p><b>reply</b>: {esc(parsed.get('status'))}"
            + (f" — answer <code>{esc(parsed['answer'])}</code>" if parsed.get("answer") is not None else "")
            + f" — citations {esc(', '.join(parsed.get('citations') or []) or 'none')}"
            + (f" — reason: {esc(parsed['reason'])}" if parsed.get("reason") else "")
            + "</p>"
        )
    if "expected" in row:
        verdict.append(f"<p><b>expected</b>: <code>{esc(row['expected'])}</code></p>")
    verdict.append("</div>")
    contract = row.get("contract")
    path = [
        f'<details class="path"><summary>Path: stage {esc(row.get("stage"))}'
        + (f", contract {esc(contract['outcome'])}" if contract else "")
        + "</summary>"
    ]
    if row.get("question"):
        path.append(f"<p><b>question</b>: {esc(row['question'])}</p>")
    path.append(
        f"<p>policy <code>{esc(row.get('policy_id'))}</code> · domain {esc(row.get('domain'))} · run "
        f"<code>{esc(row.get('run_id'))}</code>"
        + (f" · tool status {esc(row['tool_status'])}" if row.get("tool_status") else "")
        + "</p>"
    )
    if contract:
        if contract.get("edits"):
            path.append("<p>repair edits: " + "; ".join(map(esc, contract["edits"])) + "</p>")
        if contract.get("problems"):
            path.append("<p>contract problems: " + "; ".join(map(esc, contract["problems"])) + "</p>")
    if row.get("mitigation_actions"):
        path.append("<p>mitigation: " + "; ".join(map(esc, row["mitigation_actions"])) + "</p>")
    evidence = row.get("evidence")
    if evidence:
        cols = ("rank", "doc_id", "domain", "status", "effective_year", "version", "session_id", "truncated")
        path.append(
            "<table><tr>" + "".join(f"<th>{c}</th>" for c in cols) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(e.get(c))}</td>" for c in cols) + "</tr>" for e in evidence)
            + "</table>"
        )
    elif evidence is not None:
        path.append('<p class="muted">no evidence reached the reader</p>')
    if row.get("reply") is not None:
        path.append(f"<details><summary>raw reply</summary><pre>{esc(row['reply'])}</pre></details>")
    if "reply" not in row:
        path.append(
            '<p class="muted">archive record: no reply or evidence is kept (run with '
            "--sample-log to see them)</p>"
        )
    path.append("</details>")
    return (
        f'<details class="rec"{" open" if open_ else ""}><summary>{head}</summary>'
        + "".join(verdict)
        + "".join(path)
        + "</details>"
    )


def records_html(rows: Sequence[Mapping[str, Any]], shown: int = SHOWN) -> str:
    """Matching records as an HTML fragment: a count line, then the first ``shown`` records
    (the first one open)."""
    from collections import Counter

    counts = Counter(str(r.get("outcome")) for r in rows)
    line = (
        f"{len(rows)} record(s)"
        + (f" (showing the first {shown})" if len(rows) > shown else "")
        + (" — " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)) if counts else "")
    )
    body = "".join(record_html(r, open_=i == 0) for i, r in enumerate(rows[:shown]))
    private = any("reply" in r for r in rows)
    warn = (
        '<p class="bad"><b>Private</b>: from a per-sample log (replies and expected answers); '
        "do not publish this output.</p>"
        if private
        else ""
    )
    return f'{_STYLE}<div class="llx">{warn}<p class="muted">{line}</p>{body}</div>'


def browser(sources: Sequence[Path | str] | None = None, shown: int = SHOWN, **want: str) -> Any:
    """The notebook explorer: choose the archive or sample log, then run, model, scenario and
    mitigation; filter by outcome and diagnostic. Each record shows its verdict first and its path
    below, collapsed. ipywidgets controls in a live kernel; without ipywidgets, the static HTML of
    the first source filtered by ``want``."""
    srcs = [Path(s) for s in (sources or default_sources())]
    if not srcs:
        raise ValueError("no archive or sample log to explore")
    cache: dict[Path, list[dict[str, Any]]] = {}

    def rows_of(p: Path) -> list[dict[str, Any]]:
        if p not in cache:
            cache[p] = load_rows(p)
        return cache[p]

    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is in the lock
        from IPython.display import HTML

        return HTML(records_html(select(rows_of(srcs[0]), **want), shown))
    from layerlab import paths

    def label(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(paths.ROOT))
        except ValueError:
            return str(p)

    layout = w.Layout(width="auto")
    source = w.Dropdown(
        options=[(label(p), p) for p in srcs], description="source", layout=w.Layout(width="60%")
    )
    boxes = {f: w.Dropdown(description=f.replace("_id", ""), layout=layout) for f in FILTERS}
    view = w.HTML()

    def refill(*_: Any) -> None:
        rows = rows_of(source.value)
        for f, box in boxes.items():
            opts = [("all", "")] + [(v, v) for v in choices(rows, f)]
            keep = box.value if box.value in dict(opts).values() else want.get(f, "")
            box.unobserve(show, names="value")
            box.options = opts
            box.value = keep if keep in dict(opts).values() else ""
            box.observe(show, names="value")
        show()

    def show(*_: Any) -> None:
        rows = select(rows_of(source.value), **{f: b.value for f, b in boxes.items()})
        view.value = records_html(rows, shown)

    for box in boxes.values():
        box.observe(show, names="value")
    source.observe(refill, names="value")
    refill()
    grid = w.GridBox(
        list(boxes.values()),
        layout=w.Layout(grid_template_columns="repeat(3, minmax(180px, 1fr))", grid_gap="4px 10px"),
    )
    return w.VBox([source, grid, view])


def show(source: Path | str | None = None, shown: int = 3, **want: str) -> Any:
    """A static view (no widgets) of one source's records matching ``want``, for a notebook
    cell whose output is checked: the first committed archive by default."""
    from IPython.display import HTML

    src = Path(source) if source is not None else default_sources()[0]
    return HTML(records_html(select(load_rows(src), **want), shown))

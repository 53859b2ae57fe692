"""The failure-case explorer: one record's whole path, from question to diagnosis.

An evaluator-side view (it shows the answer key next to what the reader did): the question, what
each fault did to this task, what the retriever returned, the tool payload before and after the
contract, the reader's reply, each of E/R/G/V/S with its reason, groundedness and the diagnostic
label. :func:`render` prints it; :func:`widget` wraps it in widgets.

The notebook explorer (:func:`browser`, from :mod:`layerlab.reporting.browse`) reads an archive,
a run folder or a private per-sample log (``run live --sample-log``): choose the source, run,
model, scenario and mitigation, filter by outcome and diagnostic; each record shows its verdict
first and its path below, collapsed (:func:`records_html` renders the same without widgets).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from layerlab.corpus.build import AnswerKey, AnswerKeyEntry, Corpus, Task
from layerlab.faults.operators import Payload
from layerlab.faults.roles import load_roles
from layerlab.faults.scenario import Scenario
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import Reading, RecordContext, RecordStep
from layerlab.mitigations import contract_pair, load_mitigations
from layerlab.reporting.browse import (  # noqa: F401  (the notebook explorer's public names)
    FILTERS,
    SHOWN,
    browser,
    choices,
    default_sources,
    empty_state,
    load_rows,
    record_html,
    records_html,
    select,
    show,
    unit_of,
)
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
        raise KeyError(f"--task: unknown task {task_id!r} (e.g. {c.tasks[0].task_id})")
    if scenario not in scen:
        raise KeyError(f"--scenario: unknown scenario {scenario!r}; known: {list(scen)}")
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
        return ids(on & d["reached_reader"] & ~d["success"] & (d["diagnostic"] == "completeness"))

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

    def redraw(*_: Any) -> None:
        out.clear_output()
        with out:
            print(
                render(
                    trace(task.value, scenario.value, mode.value, corpus=c, key=key, scenarios=scen)
                )
            )

    for control in (task, scenario, mode):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([task, scenario]), mode, out])

"""One cell of the deterministic harness with every intermediate step kept: a :class:`Trace`.

What ``layerlab explore`` prints (:func:`layerlab.reporting.records.explore.render`) and what an archived
record's recomputed evidence is built from (:mod:`layerlab.reporting.records.evidence`): the question,
what each fault did to this task, what the retriever returned, the tool payload before and after
the contract, the reader's input and reply, and the labels. :mod:`layerlab.reporting.records.explore`
re-exports these names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from layerlab.corpus.build import AnswerKey, AnswerKeyEntry, Corpus, Task
from layerlab.faults.operators import Payload
from layerlab.faults.scenario import Scenario
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import Reading, RecordContext, RecordStep
from layerlab.mitigations import load_mitigations
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
    if isinstance(res, list) and "results" in sent and res is not sent["results"]:
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
    retriever: str | None = None,
    prepared: dict[tuple[str, str], PreparedScenario] | None = None,
) -> Trace:
    """Run one cell of the deterministic harness and keep every intermediate step.

    ``retriever`` is the run's (a live run's manifest records it; default: the reported one);
    ``prepared`` memoises each (scenario, retriever) made concrete, for many traces at once."""
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
    retr = retriever or retrieval.REPORTED.name
    made = prepared if prepared is not None else {}
    if (scenario, retr) not in made:
        made[scenario, retr] = prepare(c, scen[scenario], retr)
    prep = made[scenario, retr]
    sent, received = prep.sent[task_id], prep.received[task_id]
    step = RecordStep(task, prep, mode)
    reading = Reading(READERS[reader]().read(step.inp)) if step.inp is not None else None
    done = step.finish(RecordContext(c, k, "deterministic", reader, "explore"), reading)
    g, out, labels = done.admission, done.out, done.labels
    faults = [
        f"{f.op}({', '.join(f'{a}={v!r}' for a, v in f.params.items())})"
        for f in scen[scenario].spec.faults
    ]
    effects = _index_effects(c, scen[scenario], prep, task) + _tool_effects(sent, received)
    if sent.get("status") == "denied":
        effects.append(
            f"access: every hit withheld ({sent['withheld']}); the tool answered 'denied'"
        )
    elif "status" not in sent and isinstance(sent.get("error"), dict):  # the store failed
        err = sent["error"]
        effects.append(
            f"store: the search failed ({err.get('code')}: {err.get('message')}); the tool "
            "returned that error and no results"
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
        for r in sent.get("results", ())
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

"""The deterministic harness: every task under every scenario and contract mode, no model.

For each scenario the index view is built once, the retriever is fitted on it and all questions
are searched in one batch; each task's tool payload then goes through the scenario's transport
faults, each contract mode, the reader and the scorer. The same :func:`prepare` and
:func:`evaluate` steps serve the live harness, which swaps the reader for a model.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from layerlab import retrieval
from layerlab._io import canonical_json
from layerlab.archive import SCHEMA_VERSION, Record
from layerlab.contract import ContractResult, get_mode, search_payload
from layerlab.corpus import AnswerKey, Corpus, Document, Task
from layerlab.reader import ExtractiveReader, Reader, ReaderInput, ReaderOutput, reader_input
from layerlab.scenario import Payload, Scenario, ToolContext, stable_int
from layerlab.score import Labels, score

MODES = ("strict", "repair")


def session_for(task_id: str) -> str:
    """The request's session id for a task (stable, opaque)."""
    return f"s-{stable_int('session', task_id) % 16**8:08x}"


@dataclass(frozen=True)
class PreparedScenario:
    """One scenario made concrete: its index and every task's payload before and after transport."""

    scenario: Scenario
    index: Mapping[str, Document]
    sent: Mapping[str, dict[str, Any]]
    received: Mapping[str, Payload]


def prepare(
    corpus: Corpus, scenario: Scenario, retriever: str = retrieval.REPORTED.name
) -> PreparedScenario:
    """Build the scenario's index, search all tasks in one batch, apply the transport faults."""
    docs = scenario.index(corpus.documents)
    r = retrieval.make(retriever, docs, corpus.cue_words)
    tasks = corpus.tasks
    ranking = r.search([t.question for t in tasks], [t.domain for t in tasks])
    scopes = scenario.principal_scopes()
    sent: dict[str, dict[str, Any]] = {}
    received: dict[str, Payload] = {}
    foreign = corpus.foreign_by_policy()
    for i, t in enumerate(tasks):
        sid = session_for(t.task_id)
        keep = ranking.indices[i] >= 0
        payload = search_payload(
            t.question, ranking.docs(i), ranking.scores[i][keep].tolist(), sid, scopes
        )
        sent[t.task_id] = payload
        ctx = ToolContext(t.task_id, t.policy_id, sid, foreign=foreign)
        received[t.task_id] = scenario.transport(payload, ctx)
    return PreparedScenario(scenario, {d.doc_id: d for d in docs}, sent, received)


def input_hash(inp: ReaderInput) -> str:
    """SHA-256 of what the reader saw (the prompt hash of the deterministic harness)."""
    return hashlib.sha256(canonical_json(asdict(inp)).encode()).hexdigest()


@dataclass(frozen=True)
class Gate:
    """A payload after the contract: the result and, if accepted, the reader's input."""

    contract: ContractResult
    inp: ReaderInput | None


def gate(task: Task, payload: Payload, mode: str) -> Gate:
    """Run the contract mode; build the reader input only for an accepted payload."""
    cr = get_mode(mode).check(payload)
    inp = reader_input(task, cr.payload) if cr.payload is not None else None
    return Gate(cr, inp)


def evaluate(
    task: Task,
    key: AnswerKey,
    corpus: Corpus,
    prepared: PreparedScenario,
    mode: str,
    g: Gate,
    out: ReaderOutput | None,
    *,
    provider: str,
    model: str,
    run_id: str,
    prompt_hash: str,
    failure: str | None = None,
    replicate: int = 0,
) -> tuple[Record, Labels]:
    """Score one record and shape it for the archive."""
    spec = prepared.scenario.spec
    labels = score(
        task,
        key[task.task_id],
        spec.answerable,
        g.contract,
        g.inp,
        out,
        corpus,
        prepared.index,
        failure,
    )
    stage = "reader" if g.inp is not None else g.contract.outcome
    rec = Record(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        provider=provider,
        model=model,
        scenario=spec.name,
        mitigation=mode,
        task_id=task.task_id,
        replicate=replicate,
        policy_id=task.policy_id,
        variant=task.variant,
        stage=stage,
        reached_reader=g.inp is not None,
        prompt_hash=prompt_hash,
        **asdict(labels),
    )
    return rec, labels


def run_deterministic(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    modes: Sequence[str] = MODES,
    retriever: str = retrieval.REPORTED.name,
    reader: Reader | None = None,
    run_id: str = "deterministic",
) -> list[Record]:
    """All tasks x scenarios x modes through the extractive reader (or ``reader``)."""
    reader = reader or ExtractiveReader()
    records: list[Record] = []
    for scenario in scenarios.values():
        prepared = prepare(corpus, scenario, retriever)
        for task in corpus.tasks:
            payload = prepared.received[task.task_id]
            for mode in modes:
                g = gate(task, payload, mode)
                out = reader.read(g.inp) if g.inp is not None else None
                ph = input_hash(g.inp) if g.inp is not None else ""
                rec, _ = evaluate(
                    task,
                    key,
                    corpus,
                    prepared,
                    mode,
                    g,
                    out,
                    provider="deterministic",
                    model=reader.name,
                    run_id=run_id,
                    prompt_hash=ph,
                )
                records.append(rec)
    return records


def _rate(xs: list[bool]) -> float:
    return round(sum(xs) / len(xs), 4) if xs else 0.0


def summarize(records: Iterable[Record]) -> dict[str, Any]:
    """Per scenario x mode rates (success, groundedness false positives, safe resolution)."""
    records = list(records)
    cells: dict[tuple[str, str], list[Record]] = defaultdict(list)
    order: list[str] = []
    for r in records:
        if r.scenario not in order:
            order.append(r.scenario)
        cells[(r.scenario, r.mitigation)].append(r)
    modes = sorted({r.mitigation for r in records}, key=lambda m: (m != "strict", m))

    def table(attr: str) -> dict[str, dict[str, float]]:
        return {
            s: {
                m: _rate([getattr(r, attr) for r in cells[(s, m)]])
                for m in modes
                if (s, m) in cells
            }
            for s in order
        }

    diagnostics = {
        s: {m: dict(sorted(Counter(r.diagnostic for r in cells[(s, m)]).items())) for m in modes}
        for s in order
    }
    return {
        "records": len(records),
        "success": table("success"),
        "grounded_false_positive": table("grounded_false_positive"),
        "safe_resolution": table("safe_resolution"),
        "reached_reader": sum(r.reached_reader for r in records),
        "diagnostics": diagnostics,
    }

"""The deterministic harness: every task under every scenario and mitigation arm, no model.

For each scenario the index view is built once, the retriever is fitted on it and all questions
are searched in one batch; each task's tool payload then goes through the scenario's transport
faults and each arm — a contract plus mitigation steps (:mod:`layerlab.mitigation`), which may
call the faulted tool again, filter the evidence or refuse — then the reader and the scorer. The same :func:`prepare` and
:func:`evaluate` steps serve the live harness, which swaps the reader for a model.
"""

from __future__ import annotations

import gc
import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from layerlab import mitigation, retrieval
from layerlab._io import canonical_json
from layerlab.archive import SCHEMA_VERSION, Record
from layerlab.contract import ContractMode, ContractResult, search_payload
from layerlab.corpus import AnswerKey, Corpus, Document, Task
from layerlab.mitigation import MAX_ATTEMPTS, PASS, Act, Arm, Call
from layerlab.reader import (
    Evidence,
    ExtractiveReader,
    Reader,
    ReaderInput,
    ReaderOutput,
    reader_input,
)
from layerlab.scenario import Payload, Scenario, ToolContext, stable_int
from layerlab.score import Labels, score


def contract_arms() -> tuple[str, ...]:
    """The contract arms of the committed mitigations spec, baseline first (Tables 2, 4, 5)."""
    return mitigation.load_mitigations().contract_arms


MODES = contract_arms()


@lru_cache(maxsize=65536)  # pure; asked for every record, tool call and retry
def session_for(task_id: str) -> str:
    """The request's session id for a task (stable, opaque)."""
    return f"s-{stable_int('session', task_id) % 16**8:08x}"


def domain_owners(corpus: Corpus) -> dict[str, frozenset[str]]:
    """Owner -> the domains it publishes (public corpus metadata a mitigation may check)."""
    out: dict[str, set[str]] = {}
    for d in corpus.domains:
        out.setdefault(d.owner, set()).add(d.domain)
    return {k: frozenset(v) for k, v in out.items()}


RankingCache = dict[tuple[Any, ...], retrieval.Ranking]


def _search(
    corpus: Corpus,
    docs: Sequence[Document],
    retriever: str,
    scopes: frozenset[str] | None,
    rankings: RankingCache | None = None,
) -> dict[str, dict[str, Any]]:
    """Every task's tool payload under ``retriever`` over ``docs``.

    ``rankings`` memoises the fitted retriever's batch ranking by (retriever, index, tasks):
    most scenarios fault the tool, not the index, so within one run they share one TF-IDF fit.
    """
    tasks = corpus.tasks
    ck = (retriever, tuple(docs), tasks, tuple(sorted(corpus.cue_words.items())))
    ranking = rankings.get(ck) if rankings is not None else None
    if ranking is None:
        r = retrieval.make(retriever, docs, corpus.cue_words)
        ranking = r.search([t.question for t in tasks], [t.domain for t in tasks])
        if rankings is not None:
            rankings[ck] = ranking
    sent: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(tasks):
        keep = ranking.indices[i] >= 0
        sent[t.task_id] = search_payload(
            t.question,
            ranking.docs(i),
            ranking.scores[i][keep].tolist(),
            session_for(t.task_id),
            scopes,
        )
    return sent


@dataclass(frozen=True)
class PreparedScenario:
    """One scenario made concrete: its index and every task's payload before and after transport.

    :meth:`fetch` calls the (faulted) tool again — a retry (``attempt`` > 0) or a re-query with
    another registered retriever, whose batch search is computed once and cached.
    """

    scenario: Scenario
    index: Mapping[str, Document]
    sent: Mapping[str, dict[str, Any]]
    received: Mapping[str, Payload]
    corpus: Corpus | None = None
    retriever: str = retrieval.REPORTED.name
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)
    _other: dict[str, Mapping[str, dict[str, Any]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _rankings: RankingCache | None = field(default=None, compare=False, repr=False)
    _foreign: Mapping[str, Document] = field(default_factory=dict, compare=False, repr=False)
    _checked: dict[tuple[ContractMode, str], tuple[ContractResult, ReaderInput | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def sent_by(self, retriever: str) -> Mapping[str, dict[str, Any]]:
        """Every task's tool payload (before transport faults) under ``retriever``."""
        if retriever == self.retriever:
            return self.sent
        if retriever not in self._other:
            if self.corpus is None:
                raise ValueError("this prepared scenario cannot re-query (built without a corpus)")
            self._other[retriever] = _search(
                self.corpus,
                list(self.index.values()),
                retriever,
                self.scenario.principal_scopes(),
                self._rankings,
            )
        return self._other[retriever]

    def fetch(self, task: Task, attempt: int = 0, retriever: str | None = None) -> Payload:
        """The tool reply for ``task`` on call ``attempt`` with ``retriever`` (after transport)."""
        retriever = retriever or self.retriever
        if attempt == 0 and retriever == self.retriever:
            return self.received[task.task_id]
        sent = self.sent_by(retriever)[task.task_id]
        ctx = ToolContext(task.task_id, task.policy_id, sent["session_id"], attempt, self._foreign)
        return self.scenario.transport(sent, ctx)


    def checked(
        self, contract: ContractMode, task: Task, attempt: int = 0, retriever: str | None = None
    ) -> tuple[ContractResult, ReaderInput | None]:
        """The contract's verdict on :meth:`fetch`'s reply, and the reader's view of an accepted
        payload. The first call's reply is fixed per task, so its verdict is computed once per
        contract and shared by every arm with that contract (values are frozen)."""
        retriever = retriever or self.retriever
        first = attempt == 0 and retriever == self.retriever
        if first and (contract, task.task_id) in self._checked:
            return self._checked[(contract, task.task_id)]
        cr = contract.check(self.fetch(task, attempt, retriever))
        out = cr, (reader_input(task, cr.payload) if cr.payload is not None else None)
        if first:
            self._checked[(contract, task.task_id)] = out
        return out


def prepare(
    corpus: Corpus,
    scenario: Scenario,
    retriever: str = retrieval.REPORTED.name,
    rankings: RankingCache | None = None,
) -> PreparedScenario:
    """Build the scenario's index, search all tasks in one batch, apply the transport faults.

    Pass the same ``rankings`` dict to every scenario of a run to fit the retriever once per
    distinct index (the results are identical; only the repeated TF-IDF work goes).
    """
    docs = scenario.index(corpus.documents)
    if rankings is None:
        rankings = {}
    sent = _search(corpus, docs, retriever, scenario.principal_scopes(), rankings)
    foreign = corpus.foreign_by_policy()
    received: dict[str, Payload] = {
        t.task_id: scenario.transport(
            sent[t.task_id],
            ToolContext(t.task_id, t.policy_id, session_for(t.task_id), foreign=foreign),
        )
        for t in corpus.tasks
    }
    return PreparedScenario(
        scenario,
        {d.doc_id: d for d in docs},
        sent,
        received,
        corpus,
        retriever,
        domain_owners(corpus),
        _rankings=rankings,
        _foreign=foreign,
    )


def input_hash(inp: ReaderInput) -> str:
    """SHA-256 of what the reader saw (the prompt hash of the deterministic harness).

    The canonical JSON of ``dataclasses.asdict(inp)``, built field by field: every field is a
    plain value, so the shallow dicts serialise to the same bytes at a tenth of the cost.
    """
    data = {f: getattr(inp, f) for f in _INPUT_FIELDS}
    data["evidence"] = [{f: getattr(e, f) for f in _EVIDENCE_FIELDS} for e in inp.evidence]
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


_INPUT_FIELDS = tuple(f.name for f in fields(ReaderInput))
_EVIDENCE_FIELDS = tuple(f.name for f in fields(Evidence))


@dataclass(frozen=True)
class Gate:
    """A task after the pre-reader part of an arm: the contract's result and either the reader's
    input or a mitigation's structured refusal; with what the mitigations did on the way."""

    contract: ContractResult
    inp: ReaderInput | None
    refusal: str | None = None
    attempts: int = 1
    retriever: str = retrieval.REPORTED.name
    waited_s: float = 0.0  # simulated backoff (the tool is local: nothing sleeps)
    actions: tuple[str, ...] = ()


def _arm(arm: str | Arm) -> Arm:
    return arm if isinstance(arm, Arm) else mitigation.arm(arm)


def _empty_input(task: Task, session_id: str) -> ReaderInput:
    return ReaderInput(task.question, task.answer_kind, session_id, "ok", None, ())


def gate(task: Task, prepared: PreparedScenario, arm: str | Arm) -> Gate:
    """Run an arm's index, tool, access, contract and reader-input steps for one task.

    Retries call the faulted tool again (bounded by each mitigation and by ``MAX_ATTEMPTS``);
    a refusal ends the record with a structured non-answer before the reader.
    """
    a = _arm(arm)
    retr = a.retriever(prepared.retriever)
    sid = session_for(task.task_id)
    attempt, waited, log = 0, 0.0, []
    while True:
        call = Call(task.task_id, task.question, sid, attempt, retr, prepared.owners)
        cr, accepted = prepared.checked(a.contract, task, attempt, retr)
        act, who, inp = PASS, "", None
        for m in a.at("access", "tool"):
            act, who = m.on_tool(cr, call), m.name
            if act.action != "pass":
                break
        if act.action == "pass" and accepted is not None:
            inp = accepted
            for m in a.at("reader_input"):
                act, who = m.on_input(inp, call), m.name
                if act.action == "filter" and act.inp is not None:
                    log.append(f"{who}: filter ({act.reason})")
                    inp, act = act.inp, PASS
                elif act.action != "pass":
                    break
        if act.action == "retry" and attempt + 1 < MAX_ATTEMPTS:
            log.append(f"{who}: retry ({act.reason})")
            attempt, waited, retr = attempt + 1, waited + act.delay_s, act.retriever or retr
            continue
        if act.action in ("retry", "refuse"):
            why = act.reason if act.action == "refuse" else f"cap of {MAX_ATTEMPTS} tool calls"
            log.append(f"{who}: refuse ({why})")
            return Gate(cr, None, f"{who}: {why}", attempt + 1, retr, waited, tuple(log))
        if inp is None and a.empty_context_on_failure:
            inp = _empty_input(task, sid)
        return Gate(cr, inp, None, attempt + 1, retr, waited, tuple(log))


def after_reader(
    task: Task, prepared: PreparedScenario, arm: str | Arm, g: Gate, out: ReaderOutput
) -> tuple[Gate, ReaderOutput | None]:
    """Run an arm's after-reader steps on a parsed reply: pass it, or refuse it."""
    a = _arm(arm)
    if g.inp is None:
        return g, out
    call = Call(
        task.task_id, task.question, g.inp.session_id, g.attempts - 1, g.retriever, prepared.owners
    )
    for m in a.at("after_reader"):
        act: Act = m.on_output(g.inp, out, call)
        if act.action == "refuse":
            refused = Gate(
                g.contract,
                g.inp,
                f"{m.name}: {act.reason}",
                g.attempts,
                g.retriever,
                g.waited_s,
                (*g.actions, f"{m.name}: refuse ({act.reason})"),
            )
            return refused, None
    return g, out


def evaluate(
    task: Task,
    key: AnswerKey,
    corpus: Corpus,
    prepared: PreparedScenario,
    arm: str,
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
        g.refusal,
    )
    if g.inp is not None:
        stage = "reader"
    elif g.refusal is not None:
        stage = "refused"
    else:
        stage = g.contract.outcome
    rec = Record(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        provider=provider,
        model=model,
        scenario=spec.name,
        answerable=spec.answerable,
        mitigation=arm,
        task_id=task.task_id,
        replicate=replicate,
        domain=task.domain,
        policy_id=task.policy_id,
        variant=task.variant,
        stage=stage,
        reached_reader=g.inp is not None,
        prompt_hash=prompt_hash or None,  # null when no prompt was built
        **{f: getattr(labels, f) for f in _LABEL_FIELDS},
    )
    return rec, labels


_LABEL_FIELDS = tuple(f.name for f in fields(Labels))


def run_deterministic(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    modes: Sequence[str | Arm] | None = None,
    retriever: str = retrieval.REPORTED.name,
    reader: Reader | None = None,
    run_id: str = "deterministic",
) -> list[Record]:
    """All tasks x scenarios x mitigation arms (default: the contract arms) through the
    extractive reader (or ``reader``). Arms are names in the committed mitigations spec or
    :class:`~layerlab.mitigation.Arm` values (e.g. from another spec file)."""
    reader = reader or ExtractiveReader()
    arms = [_arm(m) for m in (modes if modes is not None else contract_arms())]
    with _gc_paused():
        return _run_deterministic(corpus, key, scenarios, arms, retriever, reader, run_id)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: a run allocates hundreds of thousands of small
    acyclic values (payload dicts, frozen records) that keep triggering collections that find
    nothing (about a fifth of the run's time). Reference counting still frees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run_deterministic(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    arms: Sequence[Arm],
    retriever: str,
    reader: Reader,
    run_id: str,
) -> list[Record]:
    records: list[Record] = []
    rankings: RankingCache = {}
    hashes: dict[ReaderInput, str] = {}  # arms that deliver the same input share its hash
    for scenario in scenarios.values():
        prepared = prepare(corpus, scenario, retriever, rankings)
        for task in corpus.tasks:
            for a in arms:
                g = gate(task, prepared, a)
                out = reader.read(g.inp) if g.inp is not None else None
                ph = ""
                if g.inp is not None:
                    ph = hashes.get(g.inp) or hashes.setdefault(g.inp, input_hash(g.inp))
                if out is not None:
                    g, out = after_reader(task, prepared, a, g, out)
                rec, _ = evaluate(
                    task,
                    key,
                    corpus,
                    prepared,
                    a.name,
                    g,
                    out,
                    provider="deterministic",
                    model=reader.name,
                    run_id=run_id,
                    prompt_hash=ph,
                )
                records.append(rec)
    return records


def clear_caches() -> None:
    """Forget the memoised pure-function results (span extraction, answer normalisation) that
    the harness shares across runs in one process; benchmarks call it to time a cold run."""
    from layerlab import extract, text

    extract.extract.cache_clear()
    text.clear_caches()


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
    baseline = mitigation.load_mitigations().baseline
    modes = sorted({r.mitigation for r in records}, key=lambda m: (m != baseline, m))

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

"""A scenario made concrete, once per run: its index, the search, every task's tool payload
before and after the transport faults, and the contract's verdict on it.

:func:`prepare` builds a :class:`PreparedScenario`; the record step (:mod:`layerlab.harness.step`)
asks it for the (faulted) tool's reply to each call, retries and re-queries included. Each
search is made for the task's :class:`~layerlab.system.retrieval.Principal` (the corpus's
tenant, the task's session, the scenario's scopes). A registered retriever searches every task
in one batch (cheap, shared by the scenarios of one index); a team's store is asked a task's
question only when that task's payload is first read (:class:`OnDemand`), so a run of two tasks
asks it two questions per index, whatever the corpus holds.

The transport faults are applied to the tool's reply after the search — except for a team's
store whose ``search`` takes ``transport``: it meets them itself, asked anew for each tool call
with a :class:`~layerlab.faults.transport.Wire` whose requests raise the fault's exception
(:meth:`PreparedScenario.ask_wired`), and its reply (or the fault that escaped it) is the tool's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

from layerlab._io import canonical_json
from layerlab.corpus.build import TENANT, Corpus, Document, Task
from layerlab.faults.operators import Payload, ToolContext, stable_int
from layerlab.faults.scenario import Scenario
from layerlab.faults.transport import TransportEvent, Wire
from layerlab.system import retrieval
from layerlab.system.contract import ContractMode, ContractResult, search_failure, search_payload
from layerlab.system.reader import (
    Evidence,
    ReaderInput,
    reader_input,
)


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


class OnDemand(Mapping[str, Any]):
    """Task id -> a value made on first read, then kept: a team's store is asked a task's
    question only when a run reads that task's payload. Iterating lists every task of the
    corpus; reading all the values asks for them all."""

    def __init__(self, keys: Sequence[str], make: Callable[[str], Any]):
        self._keys, self._known = tuple(keys), frozenset(keys)
        self._make = make
        self._made: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._made:
            if key not in self._known:
                raise KeyError(key)
            self._made[key] = self._make(key)
        return self._made[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def principal_for(
    corpus: Corpus, task_id: str, scopes: frozenset[str] | None
) -> retrieval.Principal:
    """Who task ``task_id``'s search is for: the corpus's tenant, the task's session, ``scopes``."""
    return retrieval.Principal(corpus.tenant, session_for(task_id), scopes)


def _payload(t: Task, ranking: retrieval.Ranking, i: int, scopes: frozenset[str] | None) -> Any:
    """Task ``t``'s tool payload from row ``i`` of ``ranking`` (a failed search: the error)."""
    if ranking.error(i):
        return search_failure(ranking.error(i))
    keep = ranking.indices[i] >= 0
    return search_payload(
        t.question, ranking.docs(i), ranking.scores[i][keep].tolist(), session_for(t.task_id),
        scopes,
    )  # fmt: skip


def _search(
    corpus: Corpus,
    docs: Sequence[Document],
    retriever: str,
    scopes: Callable[[str], frozenset[str] | None],
    rankings: RankingCache | None = None,
) -> Mapping[str, dict[str, Any]]:
    """Every task's tool payload under ``retriever`` over ``docs`` (a registered name, or a
    team's ``KIND:MODULE:FACTORY``: a query its store failed gets the tool's error reply).

    A team's store is indexed now and asked each task's question on first read
    (:class:`OnDemand`; the store remembers each distinct question per index). A registered
    retriever searches all tasks in one batch; ``rankings`` memoises that ranking by
    (retriever, index, tasks): most scenarios fault the tool, not the index, so within one run
    they share one fit. ``scopes(task_id)``: the access scopes of that task's principal.
    """
    tasks = corpus.tasks
    if retrieval.is_external(retriever):
        store = retrieval.make(retriever, docs, corpus.cue_words)
        by_id = {t.task_id: t for t in tasks}

        def one(task_id: str) -> Any:
            t = by_id[task_id]
            held = scopes(task_id)
            ranking = store.search([t.question], [t.domain], principal_scopes=held,
                                   principals=[principal_for(corpus, task_id, held)])  # fmt: skip
            return _payload(t, ranking, 0, held)

        return OnDemand(list(by_id), one)
    ck = (retriever, tuple(docs), tasks, tuple(sorted(corpus.cue_words.items())), corpus.tenant)
    ranking = rankings.get(ck) if rankings is not None else None
    if ranking is None:
        r = retrieval.make(retriever, docs, corpus.cue_words)
        ranking = r.search([t.question for t in tasks], [t.domain for t in tasks],
                           principals=[principal_for(corpus, t.task_id, None) for t in tasks])  # fmt: skip
        if rankings is not None:
            rankings[ck] = ranking
    return {t.task_id: _payload(t, ranking, i, scopes(t.task_id)) for i, t in enumerate(tasks)}


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
    _policies: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    _checked: dict[tuple[ContractMode, str], tuple[ContractResult, ReaderInput | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _fitted: dict[str, retrieval.Searcher] = field(
        default_factory=dict, compare=False, repr=False
    )
    _wired: dict[tuple[Any, ...], tuple[Payload, TransportEvent | None]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def principal(self, task: Task) -> retrieval.Principal:
        """Who ``task``'s searches are for: the corpus's tenant, its session, the scopes."""
        tenant = self.corpus.tenant if self.corpus is not None else TENANT
        return retrieval.Principal(
            tenant, session_for(task.task_id), self.scenario.principal_scopes(task.task_id)
        )

    def fitted(self, retriever: str | None = None) -> retrieval.Searcher:
        """``retriever`` (registered, or a team's) fitted on this scenario's index (once; a
        team's store is indexed once per distinct index in the process): what an agent's or a
        target's own queries are searched with (:mod:`layerlab.harness.tools`)."""
        name = retriever or self.retriever
        if name not in self._fitted:
            if self.corpus is None:
                raise ValueError("this prepared scenario cannot search (built without a corpus)")
            self._fitted[name] = retrieval.make(
                name, list(self.index.values()), self.corpus.cue_words
            )
        return self._fitted[name]

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
                self.scenario.principal_scopes,
                self._rankings,
            )
        return self._other[retriever]

    def wired(self, retriever: str | None = None) -> bool:
        """Whether ``retriever``'s calls meet this scenario's transport faults inside it: a
        team's store whose ``search`` takes ``transport``, under a scenario with some."""
        name = retriever or self.retriever
        return (self.scenario.has_transport and retrieval.is_external(name)
                and bool(getattr(self.fitted(name), "wired", False)))  # fmt: skip

    def ask_wired(
        self, task: Task, query: str, k: int, attempt: int = 0, retriever: str | None = None
    ) -> tuple[Payload, TransportEvent | None]:
        """Tool call ``attempt`` of ``task``'s record searched in a wired store (:meth:`wired`):
        the store asked ``query`` with a :class:`~layerlab.faults.transport.Wire` whose request
        ``j`` meets the record's call ``attempt + j`` (a retry inside the store is a call of the
        record: ``lasts: N`` counts it). The tool's reply — the store's results, its failure, or
        the error of the transport fault that escaped it — after the tool-stage faults only; and
        that escaped fault's event (None: none escaped). Deterministic, so kept per call."""
        name = retriever or self.retriever
        ck = (task.task_id, query, k, attempt, name)
        if ck not in self._wired:
            store, scopes = self.fitted(name), self.scenario.principal_scopes(task.task_id)
            wire = Wire(lambda j: self.scenario.transport_event(self.tool_context(task, attempt + j)))
            ranking, escaped = store.search_wired(query, k, self.principal(task), scopes, wire)  # type: ignore[attr-defined]
            if escaped is not None:
                sent: Payload = escaped.event.payload()
            elif ranking.error(0):
                sent = search_failure(ranking.error(0))
            else:
                keep = ranking.indices[0] >= 0
                sent = search_payload(query, ranking.docs(0), ranking.scores[0][keep].tolist(),
                                      session_for(task.task_id), scopes)  # fmt: skip
            ctx = self.tool_context(task, attempt)
            self._wired[ck] = (self.scenario.transport(sent, ctx, delivered=True),
                               None if escaped is None else escaped.event)  # fmt: skip
        return self._wired[ck]

    def fetch(self, task: Task, attempt: int = 0, retriever: str | None = None) -> Payload:
        """The tool reply for ``task`` on call ``attempt`` with ``retriever`` (after transport;
        a wired store's: :meth:`ask_wired`)."""
        retriever = retriever or self.retriever
        if attempt == 0 and retriever == self.retriever:
            return self.received[task.task_id]
        if self.wired(retriever):
            return self.ask_wired(task, task.question, retrieval.TOP_K, attempt, retriever)[0]
        sent = self.sent_by(retriever)[task.task_id]
        return self.scenario.transport(sent, self.tool_context(task, attempt))

    def tool_context(self, task: Task, attempt: int = 0) -> ToolContext:
        """What the tool-stage faults may know about ``task``'s tool call number ``attempt``."""
        return ToolContext(
            task.task_id,
            task.policy_id,
            session_for(task.task_id),
            attempt,
            self._foreign,
            self._policies,
        )

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
    """Build the scenario's index, search the tasks (a registered retriever: all in one batch; a
    team's store: each when first read), apply the transport faults.

    Pass the same ``rankings`` dict to every scenario of a run to fit the retriever once per
    distinct index (the results are identical; only the repeated TF-IDF work goes).
    """
    docs = scenario.index(corpus.documents, corpus.foreign)
    if rankings is None:
        rankings = {}
    sent = _search(corpus, docs, retriever, scenario.principal_scopes, rankings)
    foreign, policies = corpus.foreign_by_policy(), corpus.policy_by_doc()
    by_id = {t.task_id: t for t in corpus.tasks}

    def arrived(task_id: str) -> Payload:
        t = by_id[task_id]
        ctx = ToolContext(
            t.task_id, t.policy_id, session_for(t.task_id), foreign=foreign, policies=policies
        )
        return scenario.transport(sent[task_id], ctx)

    made: list[PreparedScenario] = []  # a wired store's first calls are asked of it, once made

    def first_call(task_id: str) -> Payload:
        t = by_id[task_id]
        return made[0].ask_wired(t, t.question, retrieval.TOP_K)[0]

    received: Mapping[str, Payload] = (
        OnDemand(list(by_id), arrived)
        if isinstance(sent, OnDemand)
        else {t: arrived(t) for t in by_id}
    )
    made.append(PreparedScenario(
        scenario,
        {d.doc_id: d for d in docs},
        sent,
        received,
        corpus,
        retriever,
        domain_owners(corpus),
        _rankings=rankings,
        _foreign=foreign,
        _policies=policies,
    ))  # fmt: skip
    if isinstance(sent, OnDemand) and made[0].wired():
        made[0] = replace(made[0], received=OnDemand(list(by_id), first_call))
    return made[0]


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

"""A scenario made concrete, once per run: its index, the batch search, every task's tool payload
before and after the transport faults, and the contract's verdict on it.

:func:`prepare` builds a :class:`PreparedScenario`; the record step (:mod:`layerlab.harness.step`)
asks it for the (faulted) tool's reply to each call, retries and re-queries included.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from layerlab._io import canonical_json
from layerlab.corpus.build import Corpus, Document, Task
from layerlab.faults.operators import Payload, ToolContext, stable_int
from layerlab.faults.scenario import Scenario
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


def _search(
    corpus: Corpus,
    docs: Sequence[Document],
    retriever: str,
    scopes: frozenset[str] | None,
    rankings: RankingCache | None = None,
) -> dict[str, dict[str, Any]]:
    """Every task's tool payload under ``retriever`` over ``docs`` (a registered name, or a
    team's ``KIND:MODULE:FACTORY``: a query its store failed gets the tool's error reply).

    ``rankings`` memoises the fitted retriever's batch ranking by (retriever, index, tasks):
    most scenarios fault the tool, not the index, so within one run they share one fit (and an
    external store is asked each question once per distinct index).
    """
    tasks = corpus.tasks
    # a team's store may filter by the principal's scopes itself: its ranking depends on them
    asked = scopes if retrieval.is_external(retriever) else None
    ck = (retriever, tuple(docs), tasks, tuple(sorted(corpus.cue_words.items())), asked)
    ranking = rankings.get(ck) if rankings is not None else None
    if ranking is None:
        r = retrieval.make(retriever, docs, corpus.cue_words)
        ranking = r.search([t.question for t in tasks], [t.domain for t in tasks],
                           principal_scopes=scopes)  # fmt: skip
        if rankings is not None:
            rankings[ck] = ranking
    sent: dict[str, dict[str, Any]] = {}
    for i, t in enumerate(tasks):
        if ranking.error(i):
            sent[t.task_id] = search_failure(ranking.error(i))
            continue
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
    _policies: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    _checked: dict[tuple[ContractMode, str], tuple[ContractResult, ReaderInput | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _fitted: dict[str, retrieval.Searcher] = field(
        default_factory=dict, compare=False, repr=False
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
    """Build the scenario's index, search all tasks in one batch, apply the transport faults.

    Pass the same ``rankings`` dict to every scenario of a run to fit the retriever once per
    distinct index (the results are identical; only the repeated TF-IDF work goes).
    """
    docs = scenario.index(corpus.documents)
    if rankings is None:
        rankings = {}
    sent = _search(corpus, docs, retriever, scenario.principal_scopes(), rankings)
    foreign, policies = corpus.foreign_by_policy(), corpus.policy_by_doc()
    received: dict[str, Payload] = {
        t.task_id: scenario.transport(
            sent[t.task_id],
            ToolContext(
                t.task_id, t.policy_id, session_for(t.task_id), foreign=foreign, policies=policies
            ),
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
        _policies=policies,
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

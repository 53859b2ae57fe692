"""The retriever audit (paper Table 3): recall and version preference per condition.

An evaluator-side computation: it reads the answer key to know which document each task
needs. Conditions are index views (the clean corpus, or a faulted copy of it); each retriever
is fitted on the view and searched with every task's question in one batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerlab import retrieval
from layerlab.corpus import AnswerKey, Corpus, Document
from layerlab.cues import CueMatcher
from layerlab.scenario import Scenario


@dataclass(frozen=True)
class ConditionMetrics:
    top1_recall: float
    top3_recall: float
    current_version_preference: float

    def as_dict(self) -> dict[str, float]:
        return {
            "top1_recall": round(self.top1_recall, 4),
            "top3_recall": round(self.top3_recall, 4),
            "current_version_preference": round(self.current_version_preference, 4),
        }


def _other_version(corpus: Corpus, key: AnswerKey) -> dict[str, str]:
    """policy_id -> id of the document that is *not* required (the superseded one)."""
    required = {e.policy_id: e.required_doc_ids[0] for e in key.values()}
    out: dict[str, str] = {}
    for d in corpus.documents:
        if d.doc_id != required[d.policy_id]:
            out[d.policy_id] = d.doc_id
    return out


def evaluate(
    name: str,
    index: Sequence[Document],
    corpus: Corpus,
    key: AnswerKey,
) -> ConditionMetrics:
    """Recall and current-version preference of retriever ``name`` over ``index``.

    * top-1 / top-3 recall: the required document is ranked first / within the top 3;
    * current-version preference: the policy's current document outranks its superseded one
      in the full ranking (a document missing from the index ranks last).
    """
    r = retrieval.make(name, index, corpus.cue_words)
    tasks = corpus.tasks
    scores = r.score([t.question for t in tasks], [t.domain for t in tasks])
    ranking = r.rank(scores)
    pos = {d.doc_id: j for j, d in enumerate(r.documents)}
    superseded = _other_version(corpus, key)
    top1 = top3 = prefer = 0
    for i, t in enumerate(tasks):
        need = key[t.task_id].required_doc_ids
        got = ranking.doc_ids(i)
        top1 += bool(got) and got[0] in need
        top3 += all(n in got for n in need)
        cur_j, sup_j = pos.get(need[0]), pos.get(superseded[t.policy_id])
        cur_s = scores[i, cur_j] if cur_j is not None else -np.inf
        sup_s = scores[i, sup_j] if sup_j is not None else -np.inf
        prefer += bool(cur_s > sup_s)
    n = len(tasks)
    return ConditionMetrics(top1 / n, top3 / n, prefer / n)


def domain_cue_counts(corpus: Corpus) -> dict[str, int]:
    """How the query-derived domain heuristic fares against the tasks' labelled domains."""
    m = CueMatcher(corpus.cue_words)
    counts = {"correct": 0, "incorrect": 0, "unresolved": 0}
    for t in corpus.tasks:
        d = m.resolve(t.question)
        counts["unresolved" if d is None else "correct" if d == t.domain else "incorrect"] += 1
    return counts


def duplicate_queries(corpus: Corpus, key: AnswerKey) -> list[dict[str, Any]]:
    """Questions asked verbatim in more than one domain, and which retrievers resolve them."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(corpus.tasks):
        groups[t.question].append(i)
    out = []
    for q, idx in sorted(groups.items()):
        if len({corpus.tasks[i].domain for i in idx}) < 2:
            continue
        tasks = [corpus.tasks[i] for i in idx]
        entry: dict[str, Any] = {
            "question": q,
            "tasks": [t.task_id for t in tasks],
            "domains": [t.domain for t in tasks],
            "top1_correct": {},
        }
        for name in ("tfidf_domain_validity", "explicit_domain_filter"):
            r = retrieval.make(name, corpus.documents, corpus.cue_words)
            ranking = r.search([t.question for t in tasks], [t.domain for t in tasks])
            entry["top1_correct"][name] = sum(
                bool(ranking.doc_ids(j))
                and ranking.doc_ids(j)[0] in key[t.task_id].required_doc_ids
                for j, t in enumerate(tasks)
            )
        out.append(entry)
    return out


AUDIT_CONDITIONS = ("clean", "conflicting_evidence", "corrupted_metadata")


def conditions_from(
    corpus: Corpus, scenarios: Mapping[str, Scenario], names: Sequence[str] = AUDIT_CONDITIONS
) -> dict[str, list[Document]]:
    """Index views for the audit: each named scenario's index-stage faults applied to the corpus."""
    out: dict[str, list[Document]] = {}
    for n in names:
        if n not in scenarios:
            raise KeyError(f"audit condition {n!r} is not a scenario; known: {sorted(scenarios)}")
        out[n] = scenarios[n].index(corpus.documents)
    return out


def audit(
    corpus: Corpus,
    key: AnswerKey,
    conditions: Mapping[str, Sequence[Document]] | None = None,
    retrievers: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The full audit as a JSON-ready dict (see ``layerlab audit retriever --json``)."""
    conditions = conditions or {"clean": corpus.documents}
    names = list(retrievers or retrieval.REGISTRY)
    return {
        "n_tasks": len(corpus.tasks),
        "retrievers": {
            name: {c: evaluate(name, docs, corpus, key).as_dict() for c, docs in conditions.items()}
            for name in names
        },
        "domain_cues": domain_cue_counts(corpus),
        "duplicate_query": {"queries": duplicate_queries(corpus, key)},
    }

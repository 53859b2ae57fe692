"""Evaluator-side audits: the retriever audit (paper Table 3) and the corpus-tells audit.

The retriever audit reads the answer key to know which document each task needs. Conditions
are index views (the clean corpus, or a faulted copy of it); each retriever is fitted on the
view and searched with every task's question in one batch.

The corpus-tells audit (:func:`corpus_tells`) measures what could give version validity or
session state away outside the metadata: past-tense prose in superseded documents, id suffixes
that track the current version, and wrong-session evidence that states the right answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from layerlab.corpus.build import AnswerKey, Corpus, Document
from layerlab.corpus.cues import CueMatcher
from layerlab.corpus.extract import sentences
from layerlab.corpus.text import states_value, words
from layerlab.faults.operators import ForeignSession
from layerlab.faults.roles import load_roles
from layerlab.faults.scenario import Scenario
from layerlab.scoring.score import Labels
from layerlab.system import retrieval


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


def conditions_from(
    corpus: Corpus, scenarios: Mapping[str, Scenario], names: Sequence[str] | None = None
) -> dict[str, list[Document]]:
    """Index views for the audit: each named scenario's index-stage faults applied to the corpus
    (default: the audit conditions of ``data/specs/roles.yaml``)."""
    names = load_roles().audit if names is None else names
    out: dict[str, list[Document]] = {}
    for n in names:
        if n not in scenarios:
            raise KeyError(f"audit condition {n!r} is not a scenario; known: {sorted(scenarios)}")
        out[n] = scenarios[n].index(corpus.documents, corpus.foreign)
    return out


BEYOND_PAPER = ("dense", "dense_validity")
"""Registered retrievers the audit adds to the paper's as extra rows, "beyond the paper" (the
dense kind: bundled wordllama embeddings, the ``dense`` extra)."""

STORE_EXAMPLES = (
    "python:notebooks.my_dense_store:DenseStore",
    "python:notebooks.my_dense_store:UnfilteredDenseStore",
)
"""The store-backed worked example (wordllama vectors in Qdrant, with and without its status
filter) as retriever specs, importable from the checkout's root (notebook 03's extra rows)."""


def beyond_paper(extra: Sequence[str] = ()) -> list[str]:
    """The extra rows' retrievers: :data:`BEYOND_PAPER` when the dense extra is installed, then
    ``extra`` (registered names or a team's ``KIND:MODULE:FACTORY``), each once."""
    import importlib.util

    dense = list(BEYOND_PAPER) if importlib.util.find_spec("wordllama") is not None else []
    if any(e in STORE_EXAMPLES for e in extra):
        import sys

        from layerlab import paths

        # the examples are the checkout's notebooks/my_dense_store.py, imported from its root: a
        # notebook's kernel (nbval, JupyterLab) runs in notebooks/, where `notebooks` is no module
        if str(paths.ROOT) not in sys.path:
            sys.path.append(str(paths.ROOT))
    return list(dict.fromkeys([*dense, *extra]))


def audit(
    corpus: Corpus,
    key: AnswerKey,
    conditions: Mapping[str, Sequence[Document]] | None = None,
    retrievers: Sequence[str] | None = None,
    beyond: Sequence[str] = (),
) -> dict[str, Any]:
    """The full audit as a JSON-ready dict (see ``layerlab audit retriever --json``).

    ``retrievers`` (default: the paper's, :func:`~layerlab.system.retrieval.paper_retrievers`)
    fill ``retrievers``; ``beyond`` (e.g. :func:`beyond_paper`) fills ``beyond_paper`` with the
    same metrics, rows that are not the paper's (Table 3 labels them so)."""
    conditions = conditions or {"clean": corpus.documents}
    names = list(retrievers or retrieval.paper_retrievers())

    def rows(name: str) -> dict[str, dict[str, float]]:
        return {c: evaluate(name, docs, corpus, key).as_dict() for c, docs in conditions.items()}

    out: dict[str, Any] = {
        "n_tasks": len(corpus.tasks),
        "retrievers": {name: rows(name) for name in names},
        "domain_cues": domain_cue_counts(corpus),
        "duplicate_query": {"queries": duplicate_queries(corpus, key)},
    }
    if beyond:
        out["beyond_paper"] = {name: rows(name) for name in beyond}
    return out


# --- corpus tells ------------------------------------------------------------------------------

# Finite past-tense forms that policy prose written in the present does not need: the past of
# be/have/do and common irregular simple pasts. Regular "-ed" forms are left out on purpose: in
# policy prose they are mostly participles ("is approved", "the signed agreement"), and the modals
# could/would mostly carry present possibility ("maintenance that could interrupt").
PAST_TENSE_MARKERS = frozenset(
    """
    was were had did went came became began ran took gave knew wrote rose fell chose drew grew
    saw flew spoke broke drove forgot
    """.split()
)


def past_tense_markers(text: str) -> list[str]:
    """The past-tense markers in ``text``, in order (see :data:`PAST_TENSE_MARKERS`)."""
    return [w for w in words(text) if w in PAST_TENSE_MARKERS]


def _share(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 4) if flags else 0.0


def past_tense_rates(corpus: Corpus) -> dict[str, float]:
    """Share of documents (and of sentences) with a past-tense marker, per version status."""
    out: dict[str, float] = {}
    for status in ("current", "superseded"):
        docs = [d for d in corpus.documents if d.status == status]
        out[status] = _share([bool(past_tense_markers(d.text)) for d in docs])
        sents = [s for d in docs for s in sentences(d.text)]
        out[f"{status}_sentences"] = _share([bool(past_tense_markers(s)) for s in sents])
    out["gap_points"] = round(abs(out["current"] - out["superseded"]) * 100, 2)
    return out


def id_suffix_shares(corpus: Corpus) -> dict[str, float]:
    """For each document id suffix, the share of policies whose current version holds it."""
    current = [d.doc_id.rsplit("-", 1)[-1] for d in corpus.documents if d.status == "current"]
    return {s: _share([c == s for c in current]) for s in sorted(set(current))}


def wrong_session_scenarios(scenarios: Mapping[str, Scenario]) -> dict[str, Scenario]:
    """The scenarios that apply the ``foreign_session`` operator: what the wrong-session check
    runs through the deterministic harness (the caller runs them; the harness sits above the
    scorer) before :func:`wrong_session_answers` judges the records."""
    return {
        n: s
        for n, s in scenarios.items()
        if any(isinstance(op, ForeignSession) for op in s.operators)
    }


def wrong_session_answers(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    records: Sequence[Labels],
) -> dict[str, Any]:
    """What the extractive reader answers from wrong-session evidence in the deterministic run.

    ``records`` are the deterministic harness's records of :func:`wrong_session_scenarios` (their
    labels; none when no scenario applies the ``foreign_session`` operator); a grounded answer
    there must differ from the expected one (the other tenant's value), and no other-tenant
    document may state a task's expected answer.
    """
    names = list(wrong_session_scenarios(scenarios))
    grounded = [r for r in records if r.grounded]
    foreign = corpus.foreign_by_policy()
    leaks = sorted(
        t.task_id
        for t in corpus.tasks
        if t.policy_id in foreign
        and states_value(foreign[t.policy_id].text, key[t.task_id].expected_answer)
    )
    return {
        "scenarios": names,
        "records": len(records),
        "answered": sum(r.answered for r in records),
        "grounded": len(grounded),
        "grounded_and_correct": sum(r.exact_match for r in grounded),
        "foreign_documents": len(foreign),
        "foreign_documents_stating_expected": leaks,
        "policies_without_foreign_version": sorted(
            {d.policy_id for d in corpus.documents} - set(foreign)
        ),
    }


def corpus_tells(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    records: Sequence[Labels],
) -> dict[str, Any]:
    """The corpus-tells audit as a JSON-ready dict (see ``layerlab audit corpus --json``);
    ``records``: the deterministic run of :func:`wrong_session_scenarios`."""
    return {
        "past_tense": past_tense_rates(corpus),
        "current_id_suffix": id_suffix_shares(corpus),
        "wrong_session": wrong_session_answers(corpus, key, scenarios, records),
    }


def tells_problems(result: Mapping[str, Any], max_gap_points: float = 10.0) -> list[str]:
    """The corpus-tells audit's verdict: one line per criterion that fails (empty = clean).

    Criteria: past-tense rates of current and superseded documents within ``max_gap_points``;
    the current version holds each id suffix 40-60% of the time; in the deterministic run no
    grounded wrong-session answer equals the expected answer; no other-tenant document states
    an expected answer, and every policy has one.
    """
    out: list[str] = []
    pt = result["past_tense"]
    if pt["gap_points"] > max_gap_points:
        out.append(
            f"past tense: current {pt['current']:.1%} vs superseded {pt['superseded']:.1%} "
            f"differ by {pt['gap_points']:.1f} points (at most {max_gap_points:g} expected)"
        )
    for suffix, share in result["current_id_suffix"].items():
        if not 0.4 <= share <= 0.6:
            out.append(
                f"id suffix -{suffix}: current version holds it {share:.1%} (40-60% expected)"
            )
    ws = result["wrong_session"]
    if ws["grounded_and_correct"]:
        out.append(
            f"wrong session: {ws['grounded_and_correct']} grounded answer(s) equal the expected answer"
        )
    if ws["foreign_documents_stating_expected"]:
        out.append(
            "wrong session: other-tenant documents state the expected answer of "
            + ", ".join(ws["foreign_documents_stating_expected"])
        )
    if ws["policies_without_foreign_version"]:
        out.append(
            "wrong session: no other-tenant version of "
            + ", ".join(ws["policies_without_foreign_version"])
        )
    return out

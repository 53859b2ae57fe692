"""A store's own tenant filter under the session fault, and a store asked only what a run needs
(issue 46 items 1 and 2; layerlab/system/retrieval/external.py, python.py, base.py,
layerlab/harness/prepare.py, layerlab/faults/operators.py, data/specs/scenarios_store.yaml).

Two team stores over word overlap: ``Naive`` searches everything it indexed, ``Filtering`` keeps
the request's tenant and session (its search takes ``tenant`` and ``session_id``). Under
``wrong_session_store`` (another tenant's documents inside the index) the filtering store is
credited and the naive one leaks; under ``wrong_session`` (the swap after the search) neither can
help. A two-task run asks the store at most two questions per index.
"""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import paths
from layerlab.analysis import layers
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic, live
from layerlab.harness.prepare import prepare, session_for
from layerlab.reporting.run import findings
from layerlab.system import retrieval
from layerlab.system.retrieval import external

FIXTURES = Path(__file__).parents[1] / "fixtures"
TEAM = textwrap.dedent(
    '''
    import re

    LOG = {"index": [], "search": []}


    def _words(text):
        return set(re.findall(r"[a-z0-9]+", text.lower()))


    class Naive:
        """Word overlap over everything it indexed (ties: the last indexed first)."""

        def index(self, documents):
            LOG["index"].append(list(documents))
            self.docs = list(documents)

        def _rank(self, query, docs, top_k):
            q = _words(query)
            return [d.id for d in sorted(reversed(docs), key=lambda d: -len(q & _words(d.text)))][:top_k]

        def search(self, query, top_k):
            LOG["search"].append((query, top_k, {}))
            return self._rank(query, self.docs, top_k)


    class Filtering(Naive):
        """The same, after a metadata filter on the request's tenant and session."""

        def search(self, query, top_k, tenant=None, session_id=None):
            LOG["search"].append((query, top_k, {"tenant": tenant, "session_id": session_id}))
            mine = [d for d in self.docs if d.metadata["tenant"] == tenant
                    and d.metadata.get("session_id") in (None, session_id)]
            return self._rank(query, mine, top_k)


    class Everything(Naive):
        def search(self, query, top_k, **principal):
            LOG["search"].append((query, top_k, principal))
            return self._rank(query, self.docs, top_k)
    '''
)


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    name = "isostore_" + re.sub(r"\W", "_", tmp_path.name)
    (tmp_path / f"{name}.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    external.clear()
    yield __import__(name)
    external.clear()
    sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    """The paper's nine and the store variant (from its own file)."""
    return {**load_scenarios(), **load_scenarios(paths.STORE_SCENARIO_SPEC)}


def _spec(team: Any, attr: str) -> str:
    return f"python:{team.__name__}:{attr}"


def _by_task(records: list[Any], scenario: str) -> dict[str, Any]:
    return {r.task_id: r for r in records if r.scenario == scenario}


def test_the_store_variant_is_its_own_file_not_one_of_the_papers_nine(scen) -> None:
    nine = load_scenarios()
    assert "wrong_session_store" not in nine and len(nine) == 9
    store = load_scenarios(paths.STORE_SCENARIO_SPEC)
    assert list(store) == ["wrong_session_store"]
    s = store["wrong_session_store"].spec
    assert s.layer == nine["wrong_session"].spec.layer == "session_state"
    assert s.outcome == "success"  # a store whose filter holds answers: that is the safe outcome


def test_the_store_indexes_the_other_tenants_documents_with_their_metadata(
    corpus, scen, team
) -> None:
    p = prepare(corpus, scen["wrong_session_store"], _spec(team, "Naive"))
    (got,) = team.LOG["index"]
    theirs = [d for d in got if d.metadata["tenant"] != corpus.tenant]
    assert len(got) == len(corpus.documents) + len(corpus.foreign) == len(p.index)
    assert {d.id for d in theirs} == {d.doc_id for d in corpus.foreign}
    assert {d.metadata["session_id"] for d in theirs} == {theirs[0].metadata["session_id"]}
    assert all("session_id" not in d.metadata for d in got if d not in theirs)
    assert not team.LOG["search"]  # indexed; nothing asked until a task is read


def test_a_filtering_store_resolves_the_store_variant(corpus, key, scen, team) -> None:
    spec = _spec(team, "Filtering")
    use = {n: scen[n] for n in ("clean", "wrong_session_store")}
    recs = deterministic.run_deterministic(corpus, key, use, ["strict"], retriever=spec)
    clean, store = _by_task(recs, "clean"), _by_task(recs, "wrong_session_store")
    for task, r in store.items():  # its filter held: exactly the clean run's outcome
        assert (r.success, r.safe_resolution, r.grounded_false_positive) == (
            clean[task].success, clean[task].success, clean[task].grounded_false_positive
        )  # fmt: skip
        assert r.diagnostic != "session_state"
    assert sum(r.safe_resolution for r in store.values()) > len(store) // 2
    # its findings line counts no wrong answer as "answered from another session's documents"
    found = layers.unit_findings(pd.DataFrame([r.__dict__ for r in recs]), scenarios=use, n_boot=50)
    e = next(x for x in found["layers"] if x["scenario"] == "wrong_session_store")
    line = findings.layer_line(e)
    assert e["kinds"]["answered"] and "another session" not in line, line
    assert f"How they failed: answered wrongly in {e['kinds']['answered']}, abstained in " in line
    # each search carried the request's tenant and session
    asked = {q: kw for q, _, kw in team.LOG["search"]}
    t = corpus.tasks[0]
    assert asked[t.question] == {"tenant": corpus.tenant, "session_id": session_for(t.task_id)}


def test_a_store_that_does_not_filter_leaks_and_the_scorer_says_so(corpus, key, scen, team) -> None:
    spec = _spec(team, "Naive")
    use = {n: scen[n] for n in ("clean", "wrong_session_store")}
    recs = deterministic.run_deterministic(corpus, key, use, ["strict"], retriever=spec)
    clean, store = _by_task(recs, "clean"), _by_task(recs, "wrong_session_store")
    leaked = [r for r in store.values() if r.diagnostic == "session_state"]
    assert len(leaked) > len(store) // 2
    assert all(not r.safe_resolution and r.grounded_false_positive for r in leaked)
    found = layers.unit_findings(pd.DataFrame([r.__dict__ for r in recs]), scenarios=use, n_boot=50)
    e = next(x for x in found["layers"] if x["scenario"] == "wrong_session_store")
    other = e["kinds"]["answered"] - len(leaked)  # wrong answers the scorer diagnosed otherwise
    assert other > 0 and e["kinds"]["abstained"] > 0  # what the line must not count as leaks
    assert (
        f"How they failed: answered from another session's documents in {len(leaked)}, answered "
        f"wrongly otherwise in {other}, abstained in {e['kinds']['abstained']} "
    ) in findings.layer_line(e)
    assert sum(r.safe_resolution for r in store.values()) < sum(r.success for r in clean.values())
    p = prepare(corpus, scen["wrong_session_store"], spec)
    foreign = {d.doc_id for d in corpus.foreign}
    assert any(r["doc_id"] in foreign for r in p.sent[corpus.tasks[0].task_id]["results"])
    # a tool-layer guard after the search (session_isolation) drops what the store leaked
    guarded = deterministic.run_deterministic(
        corpus, key, {"wrong_session_store": scen["wrong_session_store"]}, ["session_isolation"],
        retriever=spec,
    )  # fmt: skip
    assert not any(r.diagnostic == "session_state" for r in guarded)


def test_the_tool_layer_variant_is_unchanged_and_no_store_filter_helps(
    corpus, key, scen, team
) -> None:
    """wrong_session swaps after the search: the filtering and the naive store fare alike."""
    use = {"wrong_session": scen["wrong_session"]}
    runs = [
        deterministic.run_deterministic(corpus, key, use, ["strict"], retriever=_spec(team, a))
        for a in ("Naive", "Filtering")
    ]
    labels = [[(r.task_id, r.success, r.safe_resolution, r.diagnostic) for r in x] for x in runs]
    assert labels[0] == labels[1]
    assert not any(r.safe_resolution for r in runs[0] if r.diagnostic == "session_state")


def test_layerlabs_own_retriever_filters_by_tenant(corpus, key, scen) -> None:
    use = {n: scen[n] for n in ("clean", "wrong_session_store")}
    recs = deterministic.run_deterministic(corpus, key, use, ["strict"])
    clean, store = _by_task(recs, "clean"), _by_task(recs, "wrong_session_store")
    assert {t: r.success for t, r in store.items()} == {t: r.success for t, r in clean.items()}
    p = prepare(corpus, scen["wrong_session_store"])
    assert {d.doc_id for d in corpus.foreign} <= set(p.index)  # in its index, never in a result
    assert not any(
        r["tenant"] != corpus.tenant for t in corpus.tasks for r in p.sent[t.task_id]["results"]
    )


def test_a_store_taking_keywords_gets_all_three_and_the_scopes(corpus, scen, team) -> None:
    p = prepare(corpus, scen["permission_denied"], _spec(team, "Everything"))
    t = corpus.tasks[0]
    assert p.sent[t.task_id]
    ((_, _, kw),) = team.LOG["search"]
    assert kw == {"tenant": corpus.tenant, "session_id": session_for(t.task_id),
                  "principal_scopes": frozenset()}  # fmt: skip
    assert external.keywords(("tenant",), None) == (("tenant", None),)


def test_a_two_task_run_asks_the_store_two_questions_per_index(
    corpus, key, scen, team, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    spec = _spec(team, "Filtering")
    tasks = ("finance-01-q1", "it_ops-01-q2")
    nine = load_scenarios()
    cfg = live.LiveConfig(models=(), scenarios=tuple(nine), task_ids=tasks,
                          target="python:user_targets:extractive", retriever=spec)  # fmt: skip
    r = live.run_live(corpus, key, nine, cfg, tmp_path / "run", cache_dir=tmp_path / "cache",
                      scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    assert r.complete
    indexes = len(team.LOG["index"])
    questions = {t.question for t in corpus.tasks if t.task_id in tasks}
    assert indexes == 4 and {q for q, _, _ in team.LOG["search"]} == questions
    assert len(team.LOG["search"]) <= len(tasks) * indexes
    assert retrieval.report(spec).endswith(f"{len(team.LOG['search'])} searches")

"""The store-backed worked example (notebooks/my_dense_store.py: wordllama vectors in an embedded
Qdrant collection with a status filter) as ``--retriever python:my_dense_store:DenseStore``.

Each fault is checked at its layer inside that store: the index-layer faults by what the Qdrant
collection holds and what its filter then returns (a stale index: superseded versions only, so
the filter returns nothing; corrupted metadata: the filter acts on the corrupted labels;
conflicting evidence: the filter drops the superseded version and the unverified note), the
tool-layer faults by what became of the store's own results on their way to the chain.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from layerlab import paths
from layerlab.corpus import build as corpus_mod
from layerlab.faults.operators import SCOPED_ID
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.prepare import prepare
from layerlab.scoring import audit
from layerlab.system.retrieval import external

pytest.importorskip("qdrant_client")
pytest.importorskip("wordllama")

SPEC = "python:my_dense_store:DenseStore"


@pytest.fixture
def store_mod(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The example module (notebooks/ on the path), every store it builds kept for inspection."""
    monkeypatch.syspath_prepend(str(paths.NOTEBOOKS))
    import my_dense_store

    built: list[Any] = []
    real = my_dense_store.DenseStore.index

    def index(self: Any, documents: list[Any]) -> None:
        built.append(self)
        real(self, documents)

    monkeypatch.setattr(my_dense_store.DenseStore, "index", index)
    my_dense_store.BUILT = built
    external.clear()
    yield my_dense_store
    external.clear()


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    return load_scenarios()


def _held(store: Any) -> dict[str, dict[str, Any]]:
    """doc_id -> payload of every point in the store's Qdrant collection."""
    points, _ = store.client.scroll(store_collection(store), limit=10_000, with_payload=True)
    return {p.payload["doc_id"]: p.payload for p in points}


def store_collection(store: Any) -> str:
    import my_dense_store

    return my_dense_store.COLLECTION


def _store_for(store_mod: Any, p: Any) -> Any:
    """The store built for prepared scenario ``p``'s index."""
    ids = list(p.index)
    (hit,) = [s for s in store_mod.BUILT if s.ids == ids]
    return hit


def _sent_ids(p: Any, task_id: str) -> list[str]:
    return [r["doc_id"] for r in p.sent[task_id]["results"]]


def test_clean_the_filter_keeps_current_versions_and_finds_the_required_one(
    store_mod: Any, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey, scen: dict[str, Any]
) -> None:
    p = prepare(corpus, scen["clean"], SPEC)
    held = _held(_store_for(store_mod, p))
    assert set(held) == {d.doc_id for d in corpus.documents}  # the whole index, with labels
    assert {v["status"] for v in held.values()} == {"current", "superseded"}
    status = {d.doc_id: d.status for d in corpus.documents}
    sent = {t.task_id: _sent_ids(p, t.task_id) for t in corpus.tasks}
    assert all(status[i] == "current" for ids in sent.values() for i in ids)
    top1 = sum(bool(ids) and ids[0] in key[t].required_doc_ids for t, ids in sent.items())
    assert top1 / len(sent) > 0.9
    # without the filter the same vectors rank a superseded version first for many questions
    plain = audit.evaluate(
        "python:my_dense_store:UnfilteredDenseStore", corpus.documents, corpus, key
    )
    assert plain.current_version_preference < 0.8


def test_stale_index_the_store_holds_superseded_versions_and_its_filter_returns_none(
    store_mod: Any, corpus: corpus_mod.Corpus, scen: dict[str, Any]
) -> None:
    p = prepare(corpus, scen["stale_index"], SPEC)
    held = _held(_store_for(store_mod, p))
    assert len(held) == len(corpus.documents) // 2
    assert {v["status"] for v in held.values()} == {"superseded"}
    # the team's status filter turns the stale index into empty results: the chain abstains
    assert all(p.sent[t.task_id]["results"] == [] for t in corpus.tasks)


def test_corrupted_metadata_the_filter_acts_on_the_corrupted_labels(
    store_mod: Any, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey, scen: dict[str, Any]
) -> None:
    p = prepare(corpus, scen["corrupted_metadata"], SPEC)
    held = _held(_store_for(store_mod, p))
    clean = {d.doc_id: d for d in corpus.documents}
    assert {i: v["status"] for i, v in held.items()} == {i: d.status for i, d in p.index.items()}
    swapped = {i for i, v in held.items() if v["status"] != clean[i].status}
    assert 0 < len(swapped) < len(held)
    hurt = kept = 0
    for t in corpus.tasks:
        ids = _sent_ids(p, t.task_id)
        assert all(held[i]["status"] == "current" for i in ids)  # the filter, on the labels held
        need = key[t.task_id].required_doc_ids[0]
        if need in swapped:  # the required version is labelled superseded: filtered out
            hurt += need not in ids
            assert any(i in swapped and clean[i].status == "superseded" for i in ids)
        else:
            kept += bool(ids) and ids[0] == need
    assert hurt == sum(key[t.task_id].required_doc_ids[0] in swapped for t in corpus.tasks) > 0
    assert kept > 0


def test_conflicting_evidence_the_filter_drops_the_note_and_the_old_version(
    store_mod: Any, corpus: corpus_mod.Corpus, scen: dict[str, Any]
) -> None:
    p = prepare(corpus, scen["conflicting_evidence"], SPEC)
    held = _held(_store_for(store_mod, p))
    assert {v["status"] for v in held.values()} == {"current", "superseded", "unverified"}
    assert len(held) == len(p.index)
    for t in corpus.tasks:
        assert all(held[i]["status"] == "current" for i in _sent_ids(p, t.task_id))


def test_tool_layer_faults_act_on_the_stores_own_results(
    store_mod: Any, corpus: corpus_mod.Corpus, scen: dict[str, Any]
) -> None:
    names = ("clean", "schema_drift", "missing_tool_output", "partial_timeout",
             "permission_denied", "wrong_session")  # fmt: skip
    p = {n: prepare(corpus, scen[n], SPEC) for n in names}
    assert len(store_mod.BUILT) == 1  # they share the clean index: one store, indexed once
    store = store_mod.BUILT[0]
    t = next(t for t in corpus.tasks if t.task_id == "finance-01-q1")
    own = [i for i, _ in store.search(t.question, 3)]
    assert _sent_ids(p["clean"], t.task_id) == own and own
    drift = p["schema_drift"].received[t.task_id]
    assert "results" not in drift and [r["id"] for r in drift["hits"]] == own
    assert not p["missing_tool_output"].received[t.task_id]
    part = p["partial_timeout"].received[t.task_id]
    assert part["status"] == "partial" and [r["doc_id"] for r in part["results"]] == own[:1]
    denied = p["permission_denied"].sent[t.task_id]
    assert denied["status"] == "denied" and not denied["results"]
    foreign = p["wrong_session"].received[t.task_id]["results"]
    assert foreign and {r["doc_id"].rpartition(SCOPED_ID)[0] for r in foreign} <= set(own)


def test_offline_and_reproducible(
    store_mod: Any, corpus: corpus_mod.Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the store tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    docs = [external.store_document(d) for d in corpus.documents]
    qs = [t.question for t in corpus.tasks[:40]]
    runs = []
    for _ in range(2):
        s = store_mod.DenseStore()
        s.index(docs)
        runs.append([s.search(q, 3) for q in qs])
    assert runs[0] == runs[1]


# --- the committed worked example: the chain over this store, through --retriever ----------------

DENSE_ARCHIVE = paths.USER_PIPELINES / "my-dense-chain"


@pytest.mark.skipif(not DENSE_ARCHIVE.exists(), reason="the dense-chain archive is not committed")
def test_the_committed_dense_chain_is_a_complete_run_through_the_store() -> None:
    from typer.testing import CliRunner

    from layerlab import archive
    from layerlab.cli import app

    res = CliRunner().invoke(app, ["archive", "check", str(DENSE_ARCHIVE)])
    assert res.exit_code == 0, res.output
    m = archive.read_manifest(DENSE_ARCHIVE)
    assert m["complete"] and m["retriever"] == SPEC and m["mitigations"] == ["strict", "repair"]
    assert m["records"] == m["n_tasks"] * len(load_scenarios()) * 2
    assert (m["target"]["kind"], m["target"]["name"]) == ("langchain", "my-dense-chain")
    recs = archive.read_records(DENSE_ARCHIVE / archive.ARCHIVE)
    stale = [r for r in recs if r.scenario == "stale_index"]
    # the store's filter returned nothing on the stale index: no evidence, nothing retrieved
    assert stale and not any(r.retrieval_ok for r in stale) and not any(r.answered for r in stale)
    clean = [r for r in recs if r.scenario == "clean"]
    assert sum(r.retrieval_ok for r in clean) >= len(clean) // 2  # a real first stage

"""Bring your own retriever (issue 32 item 1; layerlab/system/retrieval/external.py, python.py,
langchain.py): a team's store as the search tool's first stage.

A tiny team module is written to ``tmp_path`` and used through ``python:`` and ``langchain:``
(the real langchain-core ``InMemoryVectorStore``). Each fault is checked at its layer *inside
that store*: index-layer faults by what the store received, tool-layer faults by what became of
the store's own results; R from the store's ids; one index per distinct index; bad specs and bad
replies as one line; a deterministic run, a target run and a resume refused after the store's
code changed. The answer key never reaches the store.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import paths
from layerlab.cli import main
from layerlab.corpus.spec import SpecError, spec_hash
from layerlab.faults.operators import SCOPED_ID
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic, live
from layerlab.harness.live import agentlog
from layerlab.harness.prepare import prepare
from layerlab.harness.runconfig import load_run_config
from layerlab.harness.step import admit
from layerlab.harness.tools import ToolBox
from layerlab.mitigations import load_mitigations
from layerlab.system import retrieval
from layerlab.system.contract import search_failure
from layerlab.system.retrieval import external

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "retrievers.md"
FIXTURES = Path(__file__).parents[1] / "fixtures"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")

TEAM = textwrap.dedent(
    '''
    """A team's retriever: word overlap over what it indexed (a stand-in for embeddings)."""
    import math
    import re

    LOG = {"index": [], "search": [], "replies": [], "lc": []}
    MODE = {"reply": "pairs"}


    def _words(text):
        return set(re.findall(r"[a-z0-9]+", text.lower()))


    class Store:
        def index(self, documents):
            LOG["index"].append(list(documents))
            self.docs = list(documents)
            self.words = [_words(d.text) for d in self.docs]

        def search(self, query, top_k):
            LOG["search"].append((query, top_k))
            q = _words(query)
            scored = sorted(((len(q & w) / (1 + len(w)) ** 0.5, i)
                             for i, w in enumerate(self.words)), key=lambda s: (-s[0], s[1]))
            top = [(self.docs[i].id, s) for s, i in scored[:top_k]]
            LOG["replies"].append((id(self), query, [d for d, _ in top]))
            mode = MODE["reply"]
            if mode == "ids":
                return [d for d, _ in top]
            if mode == "mappings":
                return [{"doc_id": d, "score": s} for d, s in top]
            if mode == "unknown":
                return [top[0][0], "not-a-doc"]
            if mode == "duplicate":
                return [top[0][0], top[0][0]]
            if mode == "too_many":
                return [d for d, _ in scored_all(self, q)][: top_k + 1]
            if mode == "wrong_type":
                return {"ids": [d for d, _ in top]}
            if mode == "bad_score":
                return [(top[0][0], math.nan)]
            if mode == "raises":
                raise ConnectionError("vector db unreachable")
            return top


    def scored_all(store, q):
        return [(d.id, 0) for d in store.docs]


    class Worst(Store):
        """Ranks the least overlapping documents first: R must follow its ids."""

        def search(self, query, top_k):
            q = _words(query)
            scored = sorted(((len(q & w), i) for i, w in enumerate(self.words)))
            return [self.docs[i].id for _, i in scored[:top_k]]


    class Scoped(Store):
        """Filters by the principal's scopes itself (its search takes principal_scopes)."""

        def search(self, query, top_k, principal_scopes=None):
            LOG.setdefault("scopes", []).append(principal_scopes)
            hits = super().search(query, 20)
            keep = [(d, s) for d, s in hits if principal_scopes is None
                    or self.docs[[x.id for x in self.docs].index(d)].metadata["access_scope"]
                    in principal_scopes]
            return keep[:top_k]


    def make_store(documents):
        from langchain_core.embeddings import Embeddings
        from langchain_core.vectorstores import InMemoryVectorStore

        class Bow(Embeddings):
            def _vec(self, text):
                v = [0.0] * 256
                for w in _words(text):
                    v[sum(map(ord, w)) % 256] += 1.0
                return v

            def embed_documents(self, texts):
                return [self._vec(t) for t in texts]

            def embed_query(self, text):
                return self._vec(text)

        LOG["lc"].append(list(documents))
        return InMemoryVectorStore.from_documents(documents, Bow())


    def make_retriever(documents):
        return make_store(documents).as_retriever(search_kwargs={"k": 5})


    def not_a_store(documents):
        return 42
    '''
)


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The team's module under a fresh name (nothing cached), its store cache cleared."""
    name = "teamstore_" + re.sub(r"\W", "_", tmp_path.name)
    (tmp_path / f"{name}.py").write_text(TEAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    external.clear()
    mod = __import__(name)
    yield mod
    external.clear()
    sys.modules.pop(name, None)


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    return load_scenarios()


def _spec(team: Any, attr: str = "Store", kind: str = "python") -> str:
    return f"{kind}:{team.__name__}:{attr}"


def _received(team: Any, p: Any) -> list[Any]:
    """What the store was handed for prepared scenario ``p``'s index (by the documents' hash)."""
    got = {external.documents_sha256(docs): docs for docs in team.LOG["index"]}
    return got[external.documents_sha256(map(external.store_document, p.index.values()))]


# --- index-layer faults: what the store receives -------------------------------------------------


def test_each_index_fault_is_in_what_the_store_receives(corpus, scen, team) -> None:
    spec = _spec(team)
    prepared = {n: prepare(corpus, s, spec) for n, s in scen.items()}
    # one index per distinct scenario index, never per scenario or record
    distinct = {tuple(s.index(corpus.documents)) for s in scen.values()}
    assert len(team.LOG["index"]) == len(distinct) == 4
    assert not team.LOG["search"]  # a store is asked a task's question when the task is read
    for p in prepared.values():
        assert len(p.sent) == len(corpus.tasks) and all(p.sent.values())
    assert len(team.LOG["search"]) == 4 * len({t.question for t in corpus.tasks})  # once per index
    for p in prepared.values():
        docs = _received(team, p)
        assert [d.id for d in docs] == list(p.index)  # exactly the scenario's index, in order
        for d in docs:
            src = p.index[d.id]
            assert d.text == f"{src.title}. {src.text}"
            assert dict(d.metadata) == {k: getattr(src, k) for k in external.METADATA
                                        if getattr(src, k) is not None}  # fmt: skip
    clean = {d.doc_id: d for d in corpus.documents}
    stale = _received(team, prepared["stale_index"])
    assert {d.metadata["status"] for d in stale} == {"superseded"}  # the superseded versions only
    assert len(stale) == len(corpus.documents) // 2
    corrupt = _received(team, prepared["corrupted_metadata"])
    assert all(d.metadata["domain"] != clean[d.id].domain for d in corrupt)  # relabelled
    swapped = [d for d in corrupt if d.metadata["status"] != clean[d.id].status]
    assert 0 < len(swapped) < len(corrupt)  # status/year swapped on part of the corpus
    conflict = _received(team, prepared["conflicting_evidence"])
    statuses = {d.metadata["status"] for d in conflict}
    assert statuses == {"current", "superseded", "unverified"}  # both versions and the note
    notes = [d for d in conflict if d.metadata["status"] == "unverified"]
    assert notes and all("Team note" in d.text for d in notes)
    # the tool-layer scenarios index the clean corpus: the same (cached) store
    for n in ("schema_drift", "missing_tool_output", "partial_timeout", "permission_denied",
              "wrong_session"):  # fmt: skip
        assert set(prepared[n].index) == set(clean)


# --- tool-layer faults: what becomes of the store's own results ----------------------------------


def _store_reply(team: Any, query: str) -> list[str]:
    hits = [ids for _, q, ids in team.LOG["replies"] if q == query]
    assert hits, query
    return hits[0]


def test_tool_faults_act_on_the_stores_results(corpus, scen, team) -> None:
    spec = _spec(team)
    t = next(t for t in corpus.tasks if t.task_id == TASKS[0])
    p = {n: prepare(corpus, scen[n], spec) for n in
         ("clean", "schema_drift", "missing_tool_output", "partial_timeout", "permission_denied",
          "wrong_session")}  # fmt: skip
    assert p["clean"].sent[t.task_id]  # read: the store is asked now
    own = _store_reply(team, t.question)
    assert len(team.LOG["index"]) == 1  # all six share the clean index
    assert [r["doc_id"] for r in p["clean"].sent[t.task_id]["results"]] == own
    assert p["clean"].received[t.task_id] == p["clean"].sent[t.task_id]
    drift = p["schema_drift"].received[t.task_id]
    assert "results" not in drift and [r["id"] for r in drift["hits"]] == own
    assert not p["missing_tool_output"].received[t.task_id]
    part = p["partial_timeout"].received[t.task_id]
    assert part["status"] == "partial" and [r["doc_id"] for r in part["results"]] == own[:1]
    denied = p["permission_denied"].sent[t.task_id]  # access control after the store's search
    assert denied["status"] == "denied" and denied["withheld"] == len(own) and not denied["results"]
    foreign = p["wrong_session"].received[t.task_id]["results"]
    assert foreign and all(SCOPED_ID in r["doc_id"] for r in foreign)
    assert {r["doc_id"].rpartition(SCOPED_ID)[0] for r in foreign} <= set(own)


def test_r_is_computed_from_the_stores_ids(corpus, key, scen, team) -> None:
    clean = {"clean": scen["clean"]}
    good = deterministic.run_deterministic(corpus, key, clean, ["strict"], retriever=_spec(team))
    for rec in good:
        task = next(t for t in corpus.tasks if t.task_id == rec.task_id)
        own = set(_store_reply(team, task.question))
        assert rec.retrieval_ok == (set(key[rec.task_id].required_doc_ids) <= own)
    assert 0.2 < sum(r.retrieval_ok for r in good) / len(good) < 1.0  # a real, imperfect store
    worst = deterministic.run_deterministic(corpus, key, clean, ["strict"],
                                            retriever=_spec(team, "Worst"))  # fmt: skip
    assert not any(r.retrieval_ok for r in worst) and not any(r.success for r in worst)


def test_an_agents_own_queries_go_to_the_store_and_requeries_keep_working(
    corpus, scen, team
) -> None:
    spec = _spec(team)
    prep = prepare(corpus, scen["clean"], spec)
    t = corpus.tasks[0]
    box = ToolBox(t, prep, "strict")
    obs = box.call("search", {"query": "notice period for resignation", "top_k": 2}, 0)
    assert team.LOG["search"][-1] == ("notice period for resignation", 2)
    assert [r["doc_id"] for r in obs["results"]] == _store_reply(team, "notice period for resignation")
    assert len(team.LOG["index"]) == 1  # the tools reuse the indexed store
    # a retriever-switching mitigation re-queries with its registered retriever over the same
    # (faulted) index: the store is not asked again for that record
    bad = prepare(corpus, scen["corrupted_metadata"], spec)
    assert bad.sent[t.task_id]  # the task's own search: the store is asked once, here
    asked = len(team.LOG["search"])
    g = admit(t, bad, load_mitigations().arm("metadata_integrity"))
    assert g.retriever == "tfidf_validity" and g.attempts == 2
    assert len(team.LOG["search"]) == asked


def test_a_store_that_filters_by_the_principals_scopes_gets_them(corpus, scen, team) -> None:
    spec = _spec(team, "Scoped")
    clean = prepare(corpus, scen["clean"], spec)
    denied = prepare(corpus, scen["permission_denied"], spec)
    t = corpus.tasks[0].task_id
    assert clean.sent[t] and denied.sent[t]  # read: the store is asked for this task
    assert len(team.LOG["index"]) == 1 and set(team.LOG["scopes"]) == {None, frozenset()}
    assert len(clean.sent[t]["results"]) == 3
    # the store's own filter left nothing to withhold: no results, not a denial
    assert denied.sent[t]["status"] == "ok" and not denied.sent[t]["results"]
    assert denied.sent[t]["withheld"] == 0
    # a store without the keyword is searched as before (layerlab's access layer denies)
    plain = prepare(corpus, scen["permission_denied"], _spec(team))
    assert plain.sent[t]["status"] == "denied"


# --- bad replies and bad specs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,says",
    [
        ("unknown", "unknown id 'not-a-doc'"),
        ("duplicate", "twice"),
        ("too_many", "more than top_k=3"),
        ("wrong_type", "returned a dict (expected a list of results)"),
        ("bad_score", "score is nan (expected a finite number)"),
        ("raises", "raised ConnectionError: vector db unreachable"),
    ],
)
def test_a_bad_reply_is_a_counted_tool_error_not_a_crash(
    corpus, key, scen, team, mode: str, says: str
) -> None:
    team.MODE["reply"] = mode
    spec = _spec(team)
    recs = deterministic.run_deterministic(corpus, key, {"clean": scen["clean"]}, ["strict"],
                                           retriever=spec)  # fmt: skip
    assert len(recs) == len(corpus.tasks)
    assert {r.stage for r in recs} == {"unavailable"} and not any(r.success for r in recs)
    s = external.stats(spec)
    assert s.failed == s.searches == len({t.question for t in corpus.tasks})
    assert says in s.first_failure
    line = retrieval.report(spec)
    assert line.startswith("warning: ") and "\n" not in line and says in line
    p = prepare(corpus, scen["clean"], spec)
    t = corpus.tasks[0]
    assert p.sent[t.task_id] == search_failure(p.sent[t.task_id]["error"]["message"])


def test_reply_shapes_ids_pairs_and_mappings(corpus, scen, team) -> None:
    spec = _spec(team)
    sent = {}
    t = corpus.tasks[3].task_id
    for mode in ("pairs", "ids", "mappings"):
        team.MODE["reply"] = mode
        external.clear()
        sent[mode] = {t: prepare(corpus, scen["clean"], spec).sent[t]}  # asked when read
    ids = {m: [r["doc_id"] for r in s[t]["results"]] for m, s in sent.items()}
    assert ids["pairs"] == ids["ids"] == ids["mappings"]
    assert [r["score"] for r in sent["ids"][t]["results"]] == [1.0, 0.5, 0.3333]  # 1 / rank


@pytest.mark.parametrize(
    "spec,says",
    [
        ("python:no_such_team_module:Store", "no module named 'no_such_team_module'"),
        ("python:{m}:Nope", "has no attribute 'Nope'"),
        ("python:{m}:LOG", "names a dict, not a class or a zero-argument factory"),
        ("pinecone:{m}:Store", "unknown retriever kind 'pinecone'"),
        ("python:{m}", "expected python:MODULE:FACTORY"),
        ("bm42", "unknown retriever 'bm42'"),
    ],
)
def test_bad_specs_are_one_line_exit_2_before_any_folder(
    team, spec: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = spec.format(m=team.__name__)
    out = tmp_path / "run"
    for args in (
        ["run", "deterministic", "--out", str(out)],
        ["run", "live", "--target", "python:user_targets:extractive", "--out", str(out)],
        ["explore", "--task", TASKS[0], "--scenario", "clean"],
        ["audit", "retriever"],
    ):
        code = main([*args, "--retriever", spec])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and says in err, (args, err)
        assert "--retriever" in err
        assert not out.exists()


def test_a_run_configuration_names_the_retriever(team, tmp_path: Path) -> None:
    f = tmp_path / "run.yaml"
    tasks = ["finance-01-q1"]
    f.write_text(f"target: {{spec: 'python:user_targets:extractive'}}\nretriever: python:{team.__name__}:Store\n")
    spec = load_run_config(f, ["clean"], ["strict"], tasks)
    assert spec.retriever == f"python:{team.__name__}:Store"
    f.write_text("target: {spec: 'python:user_targets:extractive'}\n\nretriever: python:nowhere_mod:X\n")
    with pytest.raises(SpecError) as exc:
        load_run_config(f, ["clean"], ["strict"], tasks)
    assert re.search(r"run\.yaml:3: retriever: .*no module named 'nowhere_mod'", str(exc.value))


def test_a_store_that_fails_to_index_is_one_line_and_nothing_written(
    team, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(["run", "deterministic", "--out", str(out), "--retriever",
                 _spec(team, "not_a_store", "langchain")])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "returned a int (expected a LangChain VectorStore or BaseRetriever)" in err
    assert not (out / "records.parquet").exists()


# --- LangChain -----------------------------------------------------------------------------------


def test_a_langchain_vector_store_and_retriever(corpus, scen, team) -> None:
    p = prepare(corpus, scen["conflicting_evidence"], _spec(team, "make_store", "langchain"))
    (docs,) = team.LOG["lc"]
    assert len(docs) == len(p.index) and all(d.id == d.metadata["doc_id"] for d in docs)
    assert {d.metadata["status"] for d in docs} == {"current", "superseded", "unverified"}
    hits = 0
    for t in corpus.tasks:
        res = p.sent[t.task_id]["results"]
        assert len(res) == retrieval.TOP_K and all(r["doc_id"] in p.index for r in res)
        hits += any(r["doc_id"].startswith(t.policy_id) for r in res)
    assert hits > len(corpus.tasks) // 2  # a working store over bag-of-words embeddings
    # a BaseRetriever (k=5) gives its first top_k documents
    r = prepare(corpus, scen["clean"], _spec(team, "make_retriever", "langchain"))
    assert all(len(r.sent[t.task_id]["results"]) == retrieval.TOP_K for t in corpus.tasks[:5])


# --- the answer key never reaches the store ------------------------------------------------------


def test_the_answer_key_never_reaches_the_store(corpus, key, scen, team) -> None:
    deterministic.run_deterministic(corpus, key, scen, ["strict", "repair"], retriever=_spec(team))
    questions = {t.question for t in corpus.tasks}
    assert {q for q, _ in team.LOG["search"]} <= questions  # asked the task questions only
    answers = {e.expected_answer for e in key.values()}
    for docs in team.LOG["index"]:
        for d in docs:
            assert set(vars(d)) == {"id", "text", "metadata"}
            assert set(d.metadata) <= set(external.METADATA)  # the tool payload's fields
            assert not set(map(str, d.metadata.values())) & answers


# --- runs: a target through the store, provenance and resume -------------------------------------


def test_a_target_run_searches_the_teams_store(corpus, key, scen, team, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.syspath_prepend(str(FIXTURES))
    spec = _spec(team)
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS,
                          target="python:user_targets:extractive", retriever=spec)  # fmt: skip
    out = tmp_path / "run"
    r = live.run_live(corpus, key, scen, cfg, out, scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                      cache_dir=tmp_path / "cache")  # fmt: skip
    assert r.complete and f"retriever {spec}: " in r.message
    assert len(team.LOG["index"]) == 4  # once per distinct index, not per record
    man = json.loads((out / "manifest.json").read_text())
    assert man["retriever"] == spec
    assert man["retriever_code"]["module"] == team.__name__
    assert len(man["retriever_code"]["module_sha256"]) == 64
    recs = pd.read_parquet(out / "records.parquet")
    rows = {(x["scenario"], x["mitigation"], x["task_id"]): x
            for x in agentlog.read_table(out, target=True)}  # fmt: skip
    question = {t.task_id: t.question for t in corpus.tasks}
    returned = {d for _, _, ids in team.LOG["replies"] for d in ids}
    for (s, arm, task), row in rows.items():
        calls = row["calls"]
        outcomes = {c["outcome"] for c in calls}
        seen = {d for c in calls for d in c["doc_ids"]}
        assert (question[task], 3) in team.LOG["search"]  # the target's own search: the store's
        assert {d.rpartition(SCOPED_ID)[0] or d for d in seen} <= returned
        if s == "permission_denied":
            assert outcomes == {"denied"}
        elif s == "missing_tool_output":
            assert outcomes == {"unavailable"}
        elif s == "schema_drift":
            assert outcomes == ({"rejected"} if arm == "strict" else {"ok"})
        elif s == "stale_index":
            assert seen and not seen & set(key[task].required_doc_ids)
        elif s == "wrong_session":
            assert seen and all(SCOPED_ID in d for d in seen)
    for rec in recs[recs.scenario == "clean"].itertuples():
        own = set(_store_reply(team, question[rec.task_id]))
        assert rec.retrieval_ok == (set(key[rec.task_id].required_doc_ids) <= own)
    # the viewer's recomputed evidence replays the calls through the same store; once its code
    # changed, it says so instead of showing another store's evidence
    from layerlab.reporting.records.evidence import Recomputer

    book = Recomputer(man, corpus, scen)
    row = next(iter(rows.values()))
    first = recs[(recs.scenario == row["scenario"]) & (recs.task_id == row["task_id"])
                 & (recs.mitigation == row["mitigation"])].iloc[0].to_dict()  # fmt: skip
    assert book.record(first, row["calls"])["status"] == "match"
    Path(team.__file__).write_text(Path(team.__file__).read_text() + "\n# edited\n")
    again = Recomputer(man, corpus, scen).record(first, row["calls"])
    assert again["status"] == "unchecked" and "code" in again["check"], again


def test_resume_after_the_retrievers_code_changed_is_refused(
    team, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:extractive", "--retriever",
            _spec(team), "--tasks", TASKS[0], "--scenario", "clean", "--out", str(out),
            "--no-progress", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    first = json.loads((out / "manifest.json").read_text())
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # unchanged: the same run, nothing to do
    assert "2 of 2 records done" in capsys.readouterr().err
    src = Path(team.__file__)
    src.write_text(src.read_text() + "\n# tuned the scoring\n")
    before = (out / "records.parquet").read_bytes()
    assert main([*args, "--resume"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made with other code: the retriever's module" in err, err
    assert (out / "records.parquet").read_bytes() == before
    assert first["run_id"] == json.loads((out / "manifest.json").read_text())["run_id"]


def test_registered_retrievers_keep_their_run_ids(corpus) -> None:
    from layerlab.harness.live import runmanifest

    cfg = live.LiveConfig(models=("layerlab/extractive",), scenarios=("clean",))
    ident = runmanifest.run_id_for(cfg, corpus, "x")
    with_code = runmanifest.run_id_for(
        live.LiveConfig(models=("layerlab/extractive",), scenarios=("clean",),
                        retriever_code=(("module", "m"),)), corpus, "x")  # fmt: skip
    assert ident != with_code
    assert "retriever_code" not in runmanifest.manifest(cfg, corpus, "x", 1).to_dict()


# --- the documentation page ----------------------------------------------------------------------

FENCE = re.compile(r"^(<!--[^\n]*-->\n)?```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


def test_the_page_runs_as_written(tmp_path: Path) -> None:
    """Every block of docs/retrievers.md marked as run by this file, in order, in one folder
    (a python block whose first line names a ``.py`` file is that file, saved there)."""
    text = PAGE.read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / ".cache"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    ran = 0
    for m in FENCE.finditer(text):
        marker, lang, body = m.group(1) or "", m.group(2), m.group(3)
        if lang not in ("bash", "python") or "not run:" in marker:
            continue
        assert "run by: tests/system/test_retriever_plugins.py" in marker, body[:80]
        named = re.match(r"^# ([\w./-]+\.py)\b", body)
        if lang == "python" and named:
            (tmp_path / named.group(1)).write_text(body)
            continue
        cmd = [sys.executable, "-c", body] if lang == "python" else ["bash", "-e", "-c", body]
        p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300, check=False)  # fmt: skip
        assert p.returncode == 0, f"{body[:200]}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        ran += 1
    assert ran >= 3

"""A team's store under a transport fault (layerlab/harness/prepare.py, layerlab/harness/tools.py,
layerlab/system/retrieval/external.py, layerlab/faults/transport.py's Wire): a store whose
``search`` takes ``transport`` meets the fault in its own call path as the matching exception,
so its own retry or error handling decides the tool's reply; a store that does not take it has
its reply faulted on the tool's wire, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from layerlab import paths
from layerlab.cli import app
from layerlab.faults import transport as tr
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.prepare import prepare
from layerlab.harness.targets import TargetRequest
from layerlab.harness.tools import ToolBox
from layerlab.system import retrieval

HERE = "tests.harness.test_prepare"
runner = CliRunner()


class _Store:
    """Word overlap over what it indexed; ``requests``: what it sent its service."""

    timeout = 10.0  # seconds a search may take (layerlab's default: 30)

    def index(self, documents: list[Any]) -> None:
        self.docs = list(documents)
        self.requests = 0

    def _rank(self, query: str, top_k: int) -> list[str]:
        words = set(query.lower().split())
        hits = sorted(self.docs, key=lambda d: (-len(words & set(d.text.lower().split())), d.id))
        return [d.id for d in hits[:top_k]]


class Retrying(_Store):
    """Retries a request that failed with a ConnectionError, three requests at most."""

    def search(self, query: str, top_k: int, transport: Any = None) -> list[str]:
        for _ in range(3):
            try:
                self.requests += 1
                if transport is not None:
                    transport()  # the request to its service
                return self._rank(query, top_k)
            except ConnectionError:
                continue
        return []


class Plain(_Store):
    """Makes one request and lets whatever it raises escape."""

    def search(self, query: str, top_k: int, transport: Any = None) -> list[str]:
        self.requests += 1
        if transport is not None:
            transport()
        return self._rank(query, top_k)


class Unwired(_Store):
    """Takes no ``transport``: its reply is faulted after it, on the tool's wire."""

    def search(self, query: str, top_k: int, **kwargs: Any) -> list[str]:
        return self._rank(query, top_k)


@pytest.fixture(scope="module")
def scen() -> Any:
    return load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)


@pytest.fixture(autouse=True)
def _no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tr.CLOCK, "sleep", lambda s: None)  # delays counted, not waited


def _prep(corpus, scen, name: str, store: str) -> Any:
    return prepare(corpus, scen[name], f"python:{HERE}:{store}")


def test_a_store_that_retries_recovers_and_one_that_does_not_fails_with_the_faults_kind(
    corpus, scen
) -> None:
    task = corpus.tasks[0]
    clean = _prep(corpus, load_scenarios(), "clean", "Retrying").received[task.task_id]
    # 429 on the record's first two calls: the store's own third request answers
    p = _prep(corpus, scen, "rate_limited", "Retrying")
    assert p.wired() and p.received[task.task_id]["results"] == clean["results"]
    # a store that lets the exception escape: the tool's reply is the fault, its kind the code
    p = _prep(corpus, scen, "rate_limited", "Plain")
    err = p.received[task.task_id]["error"]
    assert (err["code"], err["retry_after"]) == ("rate_limited", 1.5)
    assert p.fetch(task, 1)["error"]["code"] == "rate_limited"  # the record's second call
    assert p.fetch(task, 2)["results"] == clean["results"]  # the third: the fault is over
    assert _prep(corpus, scen, "service_outage", "Plain").received[task.task_id]["error"][
        "code"] == "server_error"  # fmt: skip
    stats = retrieval.external.stats(f"python:{HERE}:Plain")
    assert "raised RateLimited: HTTP 429" in stats.first_failure
    # a store without the keyword: faulted after it, as before (its search asked once)
    p = _prep(corpus, scen, "rate_limited", "Unwired")
    assert not p.wired() and p.received[task.task_id]["error"]["code"] == "rate_limited"
    # without transport faults no store is wired
    assert not _prep(corpus, load_scenarios(), "stale_index", "Retrying").wired()


def test_the_wire_counts_the_stores_requests_as_the_records_calls(corpus, scen) -> None:
    events = [tr.TransportEvent("rate_limited", 429, 1.5), None]
    wire = tr.Wire(lambda j: events[j])
    with pytest.raises(tr.RateLimited) as exc:
        wire()
    assert isinstance(exc.value, ConnectionError) and exc.value.retry_after == 1.5
    wire()  # the second request answers
    assert wire.made == 2
    slow = tr.Clock(sleep=lambda s: None)
    tr.Wire(lambda j: tr.TransportEvent("latency", delay_s=0.3), slow)()
    assert slow.slept == 0.3


def test_a_target_meets_only_what_escaped_the_store(corpus, scen) -> None:
    task = corpus.tasks[0]
    req = TargetRequest(ToolBox(task, _prep(corpus, scen, "rate_limited", "Retrying"), "strict"))
    assert req.search(req.question)["status"] == "ok"  # the store recovered: no exception
    assert req.search("expense approval limit")["status"] == "ok"  # a query of its own too
    req = TargetRequest(ToolBox(task, _prep(corpus, scen, "rate_limited", "Plain"), "strict"))
    with pytest.raises(tr.RateLimited):
        req.search(req.question)
    with pytest.raises(tr.RateLimited):  # the record's second call: still limited
        req.search("expense approval limit")
    assert req.search("expense approval limit")["status"] == "ok"


def _live(tmp_path: Path, store: str, *arms: str) -> pd.DataFrame:
    out = tmp_path / store
    args = ["run", "live", "-m", "layerlab/extractive", "--retriever", f"python:{HERE}:{store}",
            "--limit", "4", "--scenarios", str(paths.TRANSPORT_SCENARIO_SPEC),
            "--scenario", "rate_limited", "--scenario", "server_error", "--max-error-rate", "1",
            *[x for a in arms for x in ("--mitigation", a)], "--out", str(out),
            "--no-progress", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    res = runner.invoke(app, args)
    assert (out / "records.parquet").exists(), res.output
    return pd.read_parquet(out / "records.parquet")


def test_a_live_run_measures_the_stores_own_handling(tmp_path: Path) -> None:
    ok = _live(tmp_path, "Retrying", "strict")
    bad = _live(tmp_path, "Plain", "strict", "transport_retry")
    unwired = _live(tmp_path, "Unwired", "strict")
    # the retrying store answers every transient fault by itself, on the baseline arm
    assert ok["diagnostic"].ne("availability").all() and ok["reached_reader"].all()
    # the store that does not retry loses them (the tool found unavailable) ...
    strict = bad[bad["mitigation"] == "strict"]
    assert (strict["diagnostic"] == "availability").all() and not strict["success"].any()
    assert (unwired["diagnostic"] == "availability").all()
    # ... and the harness's transport retry, acting on the fault's kind, recovers them
    retried = bad[bad["mitigation"] == "transport_retry"].set_index(["scenario", "task_id"])
    assert retried["success"].equals(ok.set_index(["scenario", "task_id"])["success"]
                                     .reindex(retried.index))  # fmt: skip


def test_a_forked_worker_searches_the_store_in_a_thread_of_its_own(corpus) -> None:
    # a live run's worker processes are forked: the store's thread is the parent's alone
    import multiprocessing

    r = retrieval.make(f"python:{HERE}:Unwired", corpus.documents[:20], corpus.cue_words)
    assert r.search(["expense approval limit"]).error(0) == ""  # the parent's thread started
    mp = multiprocessing.get_context("fork")
    got = mp.Queue()
    child = mp.Process(target=lambda: got.put(r.search(["travel booking policy"]).error(0)))
    child.start()
    try:
        assert got.get(timeout=8) == ""  # answered, not timed out
    finally:
        child.join(10)

"""The live harness's fast path: worker processes, litellm's trimmed bookkeeping, the reply cache.

The speed itself is measured by ``make bench`` (``tests/bench``), never by a timed test; these
tests hold what the fast path must keep: the same records and bytes, one writer, the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

import pytest

from layerlab import archive, paths
from layerlab.analysis import results
from layerlab.archive import read_records
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.harness import live
from layerlab.harness.live import calls
from layerlab.harness.prepare import prepare
from layerlab.harness.step import admit
from layerlab.models.llm import ProviderSettings, bookkeeping_needed, import_litellm
from layerlab.system import prompt

SCEN_HASH = spec_hash(paths.SCENARIO_SPEC)


@pytest.fixture(scope="module")
def scen():
    return load_scenarios()


def _cfg(corpus, tasks: int = 12, model: str = "layerlab/extractive") -> live.LiveConfig:
    return live.LiveConfig(
        models=(model,),
        scenarios=("clean", "schema_drift", "permission_denied"),
        task_ids=tuple(t.task_id for t in corpus.tasks[:tasks]),
    )


def test_worker_processes_write_the_same_archive_as_one_process(
    tmp_path: Path, corpus, key, scen
) -> None:
    cfg = _cfg(corpus)
    runs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        res = live.run_live(
            corpus, key, scen, cfg, out, scenario_hash=SCEN_HASH, concurrency=4,
            cache_dir=tmp_path / f"cache{workers}", workers=workers,
        )  # fmt: skip
        assert res.complete, res.message
        runs[workers] = res
    one, two = (tmp_path / "w1" / archive.ARCHIVE), (tmp_path / "w2" / archive.ARCHIVE)
    assert one.read_bytes() == two.read_bytes()
    # results.json, built from the records in memory, is what the folder's files give
    for w in ("w1", "w2"):
        built = json.loads((tmp_path / w / results.RESULTS).read_text())
        assert built == json.loads(json.dumps(results.for_run(tmp_path / w)))
    # every record once in the (single-writer) progress log, every line checksummed
    lines = (tmp_path / "w2" / archive.PROGRESS).read_bytes().splitlines()
    assert len(lines) == len(read_records(two)) == 12 * 3 * 2
    done, report = live.read_progress(tmp_path / "w2" / archive.PROGRESS)
    assert len(done) == len(lines) and report.dropped == 0
    # call counts add up over the workers (the preflight's call included)
    a, b = runs[1].counters, runs[2].counters
    assert (a.calls, a.cache_hits, a.failures) == (b.calls, b.cache_hits, b.failures)
    assert runs[2].manifest["calls"]["this_invocation"]["answered_calls"] == b.calls


def test_the_run_context_pickles(tmp_path: Path, corpus, key, scen) -> None:
    """Worker processes get the run context whole: it pickles, the reply cache as its folder and
    the replies the preflight asked for (their records count as calls, not cache hits)."""
    import pickle

    from layerlab.harness.live.engine import RunContext

    cfg = _cfg(corpus, tasks=2)
    cache = live.ResponseCache(tmp_path / "c")
    cache.put("k", "reply")
    cache.preflighted.add("k")
    cache.close()
    prepared = {n: prepare(corpus, scen[n]) for n in cfg.scenarios}
    ctx = RunContext(corpus, key, cfg, prepared, cache, "live-x", 4, want_samples=False)
    back = pickle.loads(pickle.dumps(ctx))
    assert (back.config, back.run_id, back.concurrency) == (cfg, "live-x", 4)
    assert back.cache.folder == cache.folder and back.cache.preflighted == {"k"}
    assert back.cache.get("k") == "reply"


def test_the_budget_is_shared_by_the_worker_processes(tmp_path: Path, corpus, key, scen) -> None:
    cfg = _cfg(corpus)
    res = live.run_live(
        corpus, key, scen, cfg, tmp_path / "b", scenario_hash=SCEN_HASH, concurrency=4,
        cache_dir=tmp_path / "c", budget=7, workers=2,
    )  # fmt: skip
    assert not res.complete and res.counters.calls == 7
    assert res.manifest["calls"]["made"] == 7
    again = live.run_live(
        corpus, key, scen, cfg, tmp_path / "b", scenario_hash=SCEN_HASH, concurrency=4,
        cache_dir=tmp_path / "c", resume=True, workers=2,
    )  # fmt: skip
    assert again.complete
    live.run_live(
        corpus, key, scen, cfg, tmp_path / "ref", scenario_hash=SCEN_HASH,
        cache_dir=tmp_path / "c2", workers=1,
    )  # fmt: skip
    assert (tmp_path / "b" / archive.ARCHIVE).read_bytes() == (
        tmp_path / "ref" / archive.ARCHIVE
    ).read_bytes()


def test_a_setup_error_in_a_worker_stops_the_run_with_one_line(
    tmp_path: Path, monkeypatch, corpus, key, scen
) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-placeholder")
    with FakeOpenAI() as srv:  # answers the first request, then 404: a model withdrawn mid-run
        cfg = live.LiveConfig(
            models=("openai/gone",),
            scenarios=("clean",),
            task_ids=tuple(t.task_id for t in corpus.tasks[:8]),
            settings=ProviderSettings(timeout_s=5, backoff_s=0.01, api_bases=(srv.base,)),
        )
        with pytest.raises(live.LiveRunError, match="not found.*--resume"):
            live.run_live(
                corpus, key, scen, cfg, tmp_path / "g", scenario_hash=SCEN_HASH,
                cache_dir=tmp_path / "c", workers=2, concurrency=2,
            )  # fmt: skip
    # what was written is a valid partial archive, each record once
    recs = read_records(tmp_path / "g" / archive.ARCHIVE)
    assert len({archive.sort_key(r) for r in recs}) == len(recs) < 16


def test_the_progress_hook_is_throttled_and_ends_with_the_final_count(
    tmp_path: Path, corpus, key, scen
) -> None:
    seen: list[int] = []
    res = live.run_live(
        corpus, key, scen, _cfg(corpus), tmp_path / "p", scenario_hash=SCEN_HASH,
        cache_dir=tmp_path / "c", progress=lambda c, total: seen.append(c.records), workers=1,
    )  # fmt: skip
    assert res.complete and seen[-1] == 72
    assert len(seen) < 72  # not once per record


def test_worker_count_respects_what_a_run_needs(monkeypatch) -> None:
    cfg = live.LiveConfig(models=("layerlab/extractive",), scenarios=("clean",))
    monkeypatch.setenv("LAYERLAB_WORKERS", "3")
    assert live.worker_processes(cfg, {}, 1000) == 3
    assert live.worker_processes(cfg, {}, 4) == 1  # too few cells to share
    # a local model's servers take one request each at a time: one process keeps them so
    assert live.worker_processes(cfg, {"local/x": ["http://127.0.0.1:1/v1"]}, 1000) == 1
    shared = live.LiveConfig(models=cfg.models, scenarios=cfg.scenarios, share_replies=True)
    assert live.worker_processes(shared, {}, 1000) == 1  # in-flight dedupe is per process
    monkeypatch.setenv("LAYERLAB_WORKERS", "1")
    assert live.worker_processes(cfg, {}, 1000) == 1


def _first_messages(corpus, scen) -> list[dict[str, str]]:
    prep = prepare(corpus, scen["clean"])
    for t in corpus.tasks:
        g = admit(t, prep, harness.contract_arms()[0])
        if g.inp is not None:
            return prompt.messages(g.inp)
    raise AssertionError("no task reaches the reader")


def test_litellm_bookkeeping_is_off_until_someone_listens(corpus, scen, monkeypatch) -> None:
    from layerlab.models import agents

    litellm = import_litellm()
    agents.register()
    msgs = _first_messages(corpus, scen)

    async def ask() -> object:
        r = await litellm.acompletion(model="layerlab/extractive", messages=msgs)
        await asyncio.sleep(0.3)  # litellm logs success in a background task
        return r

    assert not bookkeeping_needed(litellm)
    r = asyncio.run(ask())
    assert json.loads(r.choices[0].message.content)["status"] in ("answered", "abstained")
    assert r._hidden_params.get("response_cost") is None  # not priced

    from litellm.integrations.custom_logger import CustomLogger

    seen: list[object] = []

    class Listener(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            seen.append(kwargs.get("standard_logging_object"))

    monkeypatch.setattr(litellm, "callbacks", [Listener()])
    assert bookkeeping_needed(litellm)
    asyncio.run(ask())
    assert seen and seen[0] is not None  # a registered callback gets litellm's full path back


def test_reply_cache_is_one_database_and_still_reads_the_older_layout(tmp_path: Path) -> None:
    import sqlite3
    import threading
    import time

    before = threading.active_count()
    cache = live.ResponseCache(tmp_path)
    k = live.ResponseCache.key("m", {"max_tokens": 1}, "h" * 64)
    assert cache.get(k) is None
    cache.put(k, '{"status": "answered"}')
    cache.put(k, '{"status": "abstained"}')  # replaced
    assert cache.get(k) == '{"status": "abstained"}'  # seen before the writer thread is done
    cache.flush()
    with contextlib.closing(sqlite3.connect(tmp_path / live.CACHE_DB)) as db:
        assert db.execute("SELECT key, reply FROM replies").fetchall() == [
            (k, '{"status": "abstained"}')
        ]
    assert live.ResponseCache(tmp_path).get(k) == '{"status": "abstained"}'  # a later run sees it
    cache.close()  # the writer thread ends: a notebook running many runs keeps no pollers
    deadline = time.monotonic() + 2
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before
    cache.put(k, '{"status": "answered"}')  # a later put works again
    cache.close()
    assert cache.get(k) == '{"status": "answered"}'

    # a cache folder written by an earlier layerlab (one JSON file per reply) is still read
    old = tmp_path / "old"
    k2 = live.ResponseCache.key("m", {"max_tokens": 1}, "g" * 64)
    (old / k2[:2]).mkdir(parents=True)
    (old / k2[:2] / f"{k2}.json").write_text(json.dumps({"reply": "from before"}))
    assert live.ResponseCache(old).get(k2) == "from before"


def test_reply_cache_falls_back_to_files_where_sqlite_cannot_open(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(live.ResponseCache, "_connect", lambda self: None)
    cache = live.ResponseCache(tmp_path)
    k = live.ResponseCache.key("m", {}, "h" * 64)
    assert cache.get(k) is None  # the shard is listed (empty) before the entry exists
    cache.put(k, "r1")
    cache.close()
    f = tmp_path / k[:2] / f"{k}.json"
    assert json.loads(f.read_text()) == {"reply": "r1"}
    assert [p.name for p in f.parent.iterdir()] == [f.name]  # no temporary file left
    assert cache.get(k) == "r1" and live.ResponseCache(tmp_path).get(k) == "r1"


def test_reply_cache_across_a_fork(tmp_path: Path) -> None:
    """A forked worker opens its own connection (SQLite forbids using the parent's) and its
    writes reach the parent."""
    import multiprocessing

    cache = live.ResponseCache(tmp_path)
    k1, k2 = (live.ResponseCache.key("m", {}, c * 64) for c in "ab")
    cache.put(k1, "parent")
    cache.close()
    assert cache.get(k1) == "parent"  # the parent's reading connection is open at the fork

    def child() -> None:
        ok = cache.get(k1) == "parent"
        cache.put(k2, "child")
        cache.close()
        os._exit(0 if ok else 3)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0
    assert cache.get(k2) == "child" and cache.get(k1) == "parent"


def test_the_loop_runs_litellm_dispatch_inline_only_for_marked_calls() -> None:
    import threading

    seen: list[int] = []

    def work() -> int:
        seen.append(threading.get_ident())
        return 7

    def boom() -> None:
        raise ValueError("from completion()")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, work) == 7  # unmarked: a thread, as asyncio's
        token = calls._INLINE_DISPATCH.set(True)
        try:
            assert await loop.run_in_executor(None, work) == 7
            with pytest.raises(ValueError, match="from completion"):
                await loop.run_in_executor(None, boom)
        finally:
            calls._INLINE_DISPATCH.reset(token)

    calls.arun(main())
    assert seen[0] != threading.get_ident() and seen[1] == threading.get_ident()


def test_litellm_dispatch_of_a_live_run_stays_on_the_loop_thread(
    tmp_path: Path, corpus, key, scen, monkeypatch
) -> None:
    """litellm's ``completion()`` (which ``acompletion`` hands to an executor) runs on the event
    loop's thread for the providers in ``INLINE_DISPATCH_PROVIDERS``, and the run's records are
    those of the threaded path."""
    import threading

    import litellm.main

    where: list[bool] = []
    original = litellm.main.completion

    def completion(*args, **kwargs):  # type: ignore[no-untyped-def]
        where.append(threading.current_thread() is threading.main_thread())
        return original(*args, **kwargs)

    cfg = _cfg(corpus, tasks=4)
    monkeypatch.setattr(litellm.main, "completion", completion)
    inline = live.run_live(
        corpus, key, scen, cfg, tmp_path / "a", scenario_hash=SCEN_HASH,
        cache_dir=tmp_path / "c1", workers=1,
    )  # fmt: skip
    assert where and all(where), where
    monkeypatch.setattr(calls, "INLINE_DISPATCH_PROVIDERS", frozenset())
    where.clear()
    threaded = live.run_live(
        corpus, key, scen, cfg, tmp_path / "b", scenario_hash=SCEN_HASH,
        cache_dir=tmp_path / "c2", workers=1,
    )  # fmt: skip
    assert where and not any(where)
    assert inline.complete and threaded.complete
    assert (tmp_path / "a" / archive.ARCHIVE).read_bytes() == (
        tmp_path / "b" / archive.ARCHIVE
    ).read_bytes()

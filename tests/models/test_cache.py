"""Cache-fault trials: a damaged, read-only, locked or misplaced reply cache says so in one line and
is used, rebuilt or refused as designed; the run's records are those of an uncached run.

This machine's tests run as root, which no file mode stops: the permission faults are emulated
(stated per test: SQLite's URI ``mode=ro`` for a read-only cache, a refused header read for an
unreadable one, a folder reported unwritable), and the real ``chmod`` versions run only as a user.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.archive import read_records
from layerlab.cli import app
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.models import cachecheck
from layerlab.models.cache import CACHE_DB, ResponseCache

runner = CliRunner()
SCEN_HASH = spec_hash(paths.SCENARIO_SPEC)
TASKS = ("hr-01-q1", "hr-01-q2", "hr-02-q1")
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def scen():
    return load_scenarios()


@pytest.fixture(scope="module")
def uncached(tmp_path_factory, corpus, key, scen):
    """The records of an uncached run (a fresh cache) and the number of replies it asked for."""
    tmp = tmp_path_factory.mktemp("uncached")
    res = _run(corpus, key, scen, tmp / "run", tmp / "cache")
    assert res.complete and res.counters.cache_hits == 0
    return _records(tmp / "run"), res.counters.calls


def _cfg() -> live.LiveConfig:
    return live.LiveConfig(
        models=("layerlab/extractive",), scenarios=("clean", "stale_index"), task_ids=TASKS
    )


def _run(corpus, key, scen, out: Path, cache: Path, said: list[str] | None = None, **kw):
    said = [] if said is None else said
    return live.run_live(
        corpus, key, scen, _cfg(), out, scenario_hash=SCEN_HASH, cache_dir=cache, workers=1,
        say=said.append, **kw,
    )  # fmt: skip


def _records(out: Path) -> list[dict]:
    recs = [dataclasses.asdict(r) for r in read_records(out / "records.parquet")]
    return sorted(recs, key=lambda r: (r["scenario"], r["mitigation"], r["task_id"]))


@pytest.fixture()
def warm(tmp_path, corpus, key, scen, uncached) -> Path:
    """A cache holding every reply of the run (made by the run itself), at rest: no connection
    open, everything in the database file (as a cache is between runs)."""
    cache = tmp_path / "cache"
    res = _run(corpus, key, scen, tmp_path / "warm", cache)
    assert res.counters.calls == uncached[1] and _entries(cache) == uncached[1]
    del res
    gc.collect()  # the run's reading connection
    con = sqlite3.connect(cache / CACHE_DB)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    assert sorted(p.name for p in cache.iterdir()) == [CACHE_DB]
    return cache


def _overwrite_page(db: Path, seed: int) -> int:
    """Random bytes over one whole page after the header page, chosen by ``seed``."""
    rng = random.Random(seed)
    page = rng.randrange(1, db.stat().st_size // 4096)
    with open(db, "r+b") as fh:
        fh.seek(page * 4096)
        fh.write(rng.randbytes(4096))
    return page


def _entries(cache: Path) -> int | None:
    return cachecheck.inspect(cache)["entries"]


def _calls(out: Path) -> dict:
    return archive.read_manifest(out)["calls"]


def _one_line(said: list[str], *words: str) -> str:
    assert len(said) == 1, said
    line = said[0]
    assert "\n" not in line and all(w in line for w in words), line
    return line


# -- a corrupt cache: set aside, its readable replies salvaged into a fresh one


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_bytes_over_a_page_set_the_cache_aside_and_rebuild_it(
    tmp_path, corpus, key, scen, uncached, warm, seed
) -> None:
    db = warm / CACHE_DB
    _overwrite_page(db, seed)
    assert cachecheck.diagnose(warm).state == "corrupt"
    said: list[str] = []
    res = _run(corpus, key, scen, tmp_path / "run", warm, said)
    line = _one_line(said, str(db), "corrupt", "set aside as replies.sqlite3.corrupt-", "salvaged")
    aside = [p for p in warm.glob(f"{CACHE_DB}.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and aside[0].name in line
    assert _records(tmp_path / "run") == uncached[0]
    calls = _calls(tmp_path / "run")  # what was lost is asked again, and the manifest says so
    assert calls["cache_hits"] + calls["cache_misses"] == uncached[1]
    assert calls["cache_misses"] == calls["made"] == res.counters.calls
    # the rebuilt cache is whole: the next run asks nothing, and says nothing
    said.clear()
    again = _run(corpus, key, scen, tmp_path / "again", warm, said)
    assert said == [] and again.counters.calls == 0
    assert _calls(tmp_path / "again")["cache_hits"] == uncached[1]


@pytest.mark.parametrize("damage", ["truncated", "header"])
def test_a_truncated_or_foreign_file_is_set_aside_and_rebuilt(
    tmp_path, corpus, key, scen, uncached, warm, damage
) -> None:
    db = warm / CACHE_DB
    if damage == "truncated":
        os.truncate(db, db.stat().st_size // 2)
    else:
        db.write_bytes(b"not a database, just some notes\n" * 50)
    said: list[str] = []
    _run(corpus, key, scen, tmp_path / "run", warm, said)
    _one_line(said, "corrupt", "set aside as", "fresh cache")
    assert _records(tmp_path / "run") == uncached[0]
    assert cachecheck.diagnose(warm).state == "ok"
    assert len(list(warm.glob(f"{CACHE_DB}.corrupt-*"))) >= 1  # the damaged file is kept


def test_salvage_keeps_the_readable_replies_of_a_damaged_cache(tmp_path) -> None:
    """A cache of 3,000 replies with one leaf page overwritten keeps nearly all of them."""
    folder = tmp_path / "c"
    cache = cachecheck.open_cache(folder, lambda m: pytest.fail(m))
    keys = [ResponseCache.key("m", {}, str(i)) for i in range(3000)]
    for k in keys:
        cache.put(k, f"reply {k}")
    cache.close()
    db = folder / CACHE_DB
    with open(db, "r+b") as fh:
        fh.seek(db.stat().st_size // 2 // 4096 * 4096)
        fh.write(random.Random(7).randbytes(4096))
    db.chmod(0o600)
    rep = cachecheck.repair(folder)
    assert rep["repaired"] and rep["state"] == "corrupt" and rep["aside"].exists()
    assert db.stat().st_mode & 0o777 == 0o600  # as private as the damaged one
    assert 0.9 * len(keys) < rep["saved"] < len(keys)
    fresh = ResponseCache(folder)
    assert sum(fresh.get(k) == f"reply {k}" for k in keys) == rep["saved"]
    assert cachecheck.diagnose(folder, check_s=None).state == "ok"


def test_salvage_reads_rows_sqlite_cannot_reach(tmp_path) -> None:
    """A destroyed header (no schema, no page size) or root page still leaves the rows of the
    other pages, long replies (overflow pages) included."""
    folder = tmp_path / "c"
    cache = cachecheck.open_cache(folder, lambda m: pytest.fail(m))
    want = {ResponseCache.key("m", {}, str(i)): f"é{i} " + "x" * (i * 37) for i in range(300)}
    for k, v in want.items():
        cache.put(k, v)
    cache.close()
    db = folder / CACHE_DB
    with open(db, "r+b") as fh:
        fh.write(b"\0" * 100)  # the file header
    rep = cachecheck.repair(folder)
    assert rep["saved"] == len(want)
    fresh = ResponseCache(folder)
    assert all(fresh.get(k) == v for k, v in want.items())
    with open(db, "r+b") as fh:  # the rebuilt cache's root page
        fh.seek(4096)
        fh.write(random.Random(5).randbytes(4096))
    rep = cachecheck.repair(folder)
    assert len(want) - 10 < rep["saved"] < len(want)
    fresh = ResponseCache(folder)
    assert sum(fresh.get(k) == v for k, v in want.items()) == rep["saved"]


# -- read-only: used for hits only; cannot be created: run uncached; cannot be read: refused


def test_a_read_only_cache_serves_its_replies_and_keeps_no_new_ones(
    tmp_path, corpus, key, scen, uncached, warm, monkeypatch
) -> None:
    """Emulated (root ignores file modes): every read-write open is made with SQLite's URI
    ``mode=ro``, so writes fail as on a read-only file or folder."""
    real = cachecheck._connect_uri
    monkeypatch.setattr(cachecheck, "_connect_uri", lambda db, mode, t: real(db, "ro", t))
    before = (warm / CACHE_DB).read_bytes()
    said: list[str] = []
    res = _run(corpus, key, scen, tmp_path / "run", warm, said)
    _one_line(said, "read-only", "cached replies only", "not kept")
    assert res.counters.calls == 0 and _calls(tmp_path / "run")["cache_hits"] == uncached[1]
    assert _records(tmp_path / "run") == uncached[0]
    assert (warm / CACHE_DB).read_bytes() == before  # nothing written to the cache
    assert not any(warm.glob("??/*.json"))


def test_a_cache_that_cannot_be_created_runs_uncached(
    tmp_path, corpus, key, scen, uncached, monkeypatch
) -> None:
    """Emulated: the cache's folder is reported unwritable (a read-only file system)."""
    monkeypatch.setattr(cachecheck, "_writable", lambda folder: False)
    said: list[str] = []
    res = _run(corpus, key, scen, tmp_path / "run", tmp_path / "ro" / "cache", said)
    _one_line(said, "cannot be created", "running uncached", "not kept")
    assert not (tmp_path / "ro").exists()
    assert _records(tmp_path / "run") == uncached[0]
    calls = _calls(tmp_path / "run")
    assert calls["cache_misses"] == res.counters.calls == uncached[1] and calls["cache_hits"] == 0


def test_an_unreadable_cache_is_refused_before_anything_is_written(
    tmp_path, corpus, key, scen, warm, monkeypatch
) -> None:
    """Emulated: reading the database's header is refused (EACCES), as for a 0000 file."""

    def refuse(db):
        raise PermissionError(13, "Permission denied", str(db))

    monkeypatch.setattr(cachecheck, "_read_header", refuse)
    with pytest.raises(
        live.LiveRunError, match=r"cannot be read \(Permission denied\).*--cache-dir"
    ):
        _run(corpus, key, scen, tmp_path / "run", warm)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(AS_ROOT, reason="root ignores file modes: emulated in the tests above")
def test_real_permissions(tmp_path, warm) -> None:
    db = warm / CACHE_DB
    db.chmod(0)
    try:
        assert cachecheck.diagnose(warm).state == "unreadable"
    finally:
        db.chmod(0o600)
    warm.chmod(0o500)
    try:
        said: list[str] = []
        cache = cachecheck.open_cache(warm, said.append)
        assert cache.mode == "ro" and "read-only" in said[0]
    finally:
        warm.chmod(0o700)


# -- locked by another process: waited for, then hits only, or refused when not even readable


def _hold(db: Path, exclusive_mode: bool) -> subprocess.Popen:
    pre = "c.execute('PRAGMA locking_mode=EXCLUSIVE')\n" if exclusive_mode else ""
    code = (
        f"import sqlite3, time\nc = sqlite3.connect({str(db)!r}, isolation_level=None)\n{pre}"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "c.execute(\"INSERT OR REPLACE INTO meta VALUES ('held', 'yes')\")\n"
        "print('held', flush=True)\ntime.sleep(120)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "held\n"
    return p


def test_a_cache_locked_by_another_process_is_waited_for_then_serves_hits(
    tmp_path, corpus, key, scen, uncached, warm, monkeypatch
) -> None:
    monkeypatch.setattr(cachecheck, "LOCK_WAIT_S", 0.5)
    monkeypatch.setattr(cachecheck, "PROBE_WAIT_S", 0.2)
    holder = _hold(warm / CACHE_DB, exclusive_mode=False)
    try:
        said: list[str] = []
        res = _run(corpus, key, scen, tmp_path / "run", warm, said)
    finally:
        holder.kill()
        holder.wait()
    _one_line(said, "locked by another process", "waiting up to 0.5 s", "cached replies only")
    assert res.counters.calls == 0 and _records(tmp_path / "run") == uncached[0]
    assert not any(warm.glob("??/*.json"))  # no silent fall-back to one file per reply


def test_a_cache_nobody_else_can_read_is_refused_after_the_wait(
    tmp_path, corpus, key, scen, warm, monkeypatch
) -> None:
    monkeypatch.setattr(cachecheck, "LOCK_WAIT_S", 0.5)
    monkeypatch.setattr(cachecheck, "PROBE_WAIT_S", 0.2)
    holder = _hold(warm / CACHE_DB, exclusive_mode=True)
    try:
        said: list[str] = []
        with pytest.raises(live.LiveRunError, match="still locked .* cannot be read"):
            _run(corpus, key, scen, tmp_path / "run", warm, said)
    finally:
        holder.kill()
        holder.wait()
    _one_line(said, "locked by another process", "then stopping")
    assert not (tmp_path / "run").exists()


def test_a_lock_released_during_the_wait_leaves_the_cache_in_use(
    tmp_path, warm, monkeypatch
) -> None:
    monkeypatch.setattr(cachecheck, "PROBE_WAIT_S", 0.2)
    holder = _hold(warm / CACHE_DB, exclusive_mode=False)
    said: list[str] = []
    try:
        threading.Timer(1.0, holder.kill).start()  # the lock goes with its holder
        cache = cachecheck.open_cache(warm, said.append, lock_wait_s=10)
    finally:
        holder.kill()
        holder.wait()
    assert cache.mode == "rw" and len(said) == 1 and "locked" in said[0]


# -- misplaced: --cache-dir a regular file


def test_cache_dir_a_regular_file_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    out = tmp_path / "run"
    for cache in (notes, notes / "sub"):
        res = runner.invoke(
            app,
            ["run", "live", "-m", "layerlab/extractive", "--tasks", TASKS[0], "--out", str(out),
             "--cache-dir", str(cache), "--no-progress"],
        )  # fmt: skip
        assert res.exit_code == 1, res.output
        lines = res.output.strip().splitlines()
        assert lines == [
            f"error: --cache-dir {cache}: {notes} is a file, not a folder; expected a folder "
            "for the reply cache (nothing written)"
        ]
        assert not out.exists() and notes.read_text() == "mine\n"
    # set by the environment: the message names the variable
    monkeypatch.setenv("LAYERLAB_CACHE_DIR", str(notes))
    res = runner.invoke(
        app,
        ["run", "live", "-m", "layerlab/extractive", "--tasks", TASKS[0], "--out", str(out),
         "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 1 and res.output.startswith(f"error: $LAYERLAB_CACHE_DIR {notes}: ")
    assert not out.exists()


# -- the manifest's hits and misses add up over resumes


def test_cache_hits_and_misses_are_cumulative_across_resumes(
    tmp_path, corpus, key, scen, uncached
) -> None:
    out, cache = tmp_path / "run", tmp_path / "cache"
    first = _run(corpus, key, scen, out, cache, budget=4)
    assert not first.complete and _calls(out)["cache_misses"] == 4
    _run(corpus, key, scen, out, cache, resume=True, budget=8)  # over the run: 4 more
    assert _calls(out)["cache_misses"] == _calls(out)["made"] == 8
    _run(corpus, key, scen, out, cache, resume=True)
    calls = _calls(out)
    assert calls["made"] == calls["cache_misses"] == uncached[1] and calls["cache_hits"] == 0
    assert _records(out) == uncached[0]
    # a lost cache shows: the rerun into a new folder asks everything again
    (cache / CACHE_DB).unlink()
    _run(corpus, key, scen, tmp_path / "rerun", cache)
    assert _calls(tmp_path / "rerun")["cache_misses"] == uncached[1]


# -- layerlab cache check | repair | clear


def test_cache_commands(tmp_path, warm, uncached) -> None:
    arg = ["--cache-dir", str(warm)]
    ok = runner.invoke(app, ["cache", "check", *arg])
    assert (
        ok.exit_code == 0 and f"{uncached[1]} entries" in ok.output and "integrity ok" in ok.output
    )
    _overwrite_page(warm / CACHE_DB, 3)
    bad = runner.invoke(app, ["cache", "check", *arg])
    assert bad.exit_code == 1 and "FAIL" in bad.output and "corrupt" in bad.output
    assert "layerlab cache repair" in bad.output
    fixed = runner.invoke(app, ["cache", "repair", *arg])
    assert fixed.exit_code == 0 and "repaired" in fixed.output, fixed.output
    assert "set aside as replies.sqlite3.corrupt-" in fixed.output
    after = runner.invoke(app, ["cache", "check", *arg])
    assert after.exit_code == 0 and "integrity ok" in after.output
    assert "set aside earlier" in after.output
    again = runner.invoke(app, ["cache", "repair", *arg])
    assert again.exit_code == 0 and "nothing to repair" in again.output
    # clear asks first; "no" (or no answer) deletes nothing
    no = runner.invoke(app, ["cache", "clear", *arg], input="n\n")
    assert no.exit_code == 1 and "nothing deleted" in no.output
    assert (warm / CACHE_DB).exists()
    yes = runner.invoke(app, ["cache", "clear", "--yes", *arg])
    assert yes.exit_code == 0 and "deleted" in yes.output
    assert not (warm / CACHE_DB).exists() and not list(warm.glob(f"{CACHE_DB}*"))
    gone = runner.invoke(app, ["cache", "check", *arg])
    assert gone.exit_code == 0 and "no reply cache" in gone.output


def test_cache_commands_refuse_a_file_and_a_locked_cache(tmp_path, warm) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for cmd in (["check"], ["repair"], ["clear", "--yes"]):
        res = runner.invoke(app, ["cache", *cmd, "--cache-dir", str(notes)])
        assert res.exit_code == 1 and "a file, not a folder" in res.output, res.output
    assert notes.read_text() == "mine\n"
    holder = _hold(warm / CACHE_DB, exclusive_mode=False)
    try:
        res = runner.invoke(app, ["cache", "clear", "--yes", "--cache-dir", str(warm)])
        check = runner.invoke(app, ["cache", "check", "--cache-dir", str(warm)])
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 1 and "in use by another process" in res.output
    assert (warm / CACHE_DB).exists()
    assert check.exit_code == 1 and "locked" in check.output


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(folder.iterdir())
    }


def test_answering_no_to_cache_clear_changes_nothing_on_disk(warm) -> None:
    """Issue 34, item 8: the question is asked after a read-only look (no test write)."""
    import time

    before = _snapshot(warm)
    time.sleep(0.02)  # an mtime written now would differ
    for answer in ("n\n", ""):  # "no", and no answer at all (stdin closed)
        res = runner.invoke(app, ["cache", "clear", "--cache-dir", str(warm)], input=answer)
        assert res.exit_code == 1 and "nothing deleted" in res.output, res.output
        assert _snapshot(warm) == before

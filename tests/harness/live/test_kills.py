"""kill -9 trials: a live run (the extractive reference agent, 24 records) is SIGKILLed at seeded
random moments, inside the archive's write windows too, and its folder must then read PARTIAL
(exit 3) or OK, never corrupt; a resume completes it to the records of an uninterrupted run.

The run is a forked child of the test process (no interpreter start-up per trial), in its own
session so the kill takes its worker processes too. A write window is widened by a wrapper of
``layerlab._io.atomic_write_bytes`` installed in the child only: it marks the window's start in a
file, sleeps, writes, and sleeps again, so a kill lands before, during or after the rename.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import _io, archive
from layerlab.cli import app

runner = CliRunner()
TASKS = "hr-01-q1,hr-02-q1,hr-03-q1,it_ops-01-q1,it_ops-02-q1,it_ops-03-q1"
ARGS = ["run", "live", "-m", "layerlab/extractive@40ms", "--scenario", "clean",
        "--scenario", "wrong_session", "--tasks", TASKS, "--no-progress", "--concurrency", "2"]  # fmt: skip
N_RECORDS = 6 * 2 * 2
WINDOW_S = 0.25


def _child(args: list[str], marks: str) -> None:
    os.setsid()
    real = _io.atomic_write_bytes

    def slow(path, data, *args, **kwargs):  # the write window, widened
        with open(marks, "a") as fh:
            fh.write(f"{Path(path).name}\n")
        time.sleep(WINDOW_S)
        real(path, data, *args, **kwargs)
        time.sleep(WINDOW_S)

    _io.atomic_write_bytes = slow
    from layerlab.cli import main

    try:
        main(args)
    except SystemExit:
        pass
    os._exit(0)


def _start(out: Path, cache: Path, marks: Path, resume: bool = False):
    args = [*ARGS, "--out", str(out), "--cache-dir", str(cache), *(["--resume"] if resume else [])]
    p = multiprocessing.get_context("fork").Process(target=_child, args=(args, str(marks)))
    p.start()
    return p


def _kill(p) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.join(10)


def _marks(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _kill_at(rng: random.Random, out: Path, cache: Path, tmp: Path, resume: bool) -> str:
    """Start a run and SIGKILL it at a seeded moment: a random time, or inside the k-th write."""
    marks = tmp / f"marks-{rng.random()}"
    p = _start(out, cache, marks, resume)
    if rng.random() < 0.5:
        what = f"at {rng.uniform(0.2, 1.5):.2f}s"
        time.sleep(float(what[3:-1]))
    else:
        k = rng.randint(1, 4)
        deadline = time.time() + 60
        while _marks(marks) < k and p.is_alive() and time.time() < deadline:
            time.sleep(0.01)
        delay = rng.uniform(0, 2 * WINDOW_S)
        time.sleep(delay)
        what = f"in write {k} (+{delay:.2f}s)"
    _kill(p)
    return what


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("ref") / "u"
    res = runner.invoke(app, [*ARGS, "--out", str(out), "--cache-dir", str(out.parent / "c")])
    assert res.exit_code == 0, res.output
    return (out / archive.ARCHIVE).read_bytes()


def _trial(seed: int, tmp_path: Path, reference: bytes) -> None:
    rng = random.Random(seed)
    out, cache = tmp_path / "k", tmp_path / "c"
    for attempt in range(rng.randint(1, 2)):  # the first run killed, then maybe a resume too
        what = _kill_at(rng, out, cache, tmp_path, resume=attempt > 0)
        check = runner.invoke(app, ["archive", "check", str(out)])
        if out.exists() and any(out.iterdir()):
            assert check.exit_code in (0, 3), f"seed {seed}, killed {what}: {check.output}"
            if check.exit_code == 3:
                assert "PARTIAL" in check.output and "--resume" in check.output
    res = runner.invoke(app, [*ARGS, "--out", str(out), "--cache-dir", str(cache), "--resume"])
    assert res.exit_code == 0, f"seed {seed}: {res.output}"
    assert runner.invoke(app, ["archive", "check", str(out)]).exit_code == 0
    assert (out / archive.ARCHIVE).read_bytes() == reference, f"seed {seed}"
    recs = archive.read_records(out / archive.ARCHIVE)
    assert len(recs) == N_RECORDS == len({archive.sort_key(r) for r in recs})
    left = [p.name for p in out.iterdir() if p.name.endswith((".tmp", ".pending"))]
    assert not left, f"seed {seed}: temporary files outlived the run: {left}"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_killed_run_reads_partial_and_resumes_to_the_uninterrupted_records(
    seed, tmp_path, reference
) -> None:
    _trial(seed, tmp_path, reference)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 15))
def test_kill_trials_full(seed, tmp_path, reference) -> None:
    _trial(seed, tmp_path, reference)


def test_a_resume_keeps_the_previous_partial_archive_valid_until_its_own_commit(
    tmp_path, monkeypatch
) -> None:
    out = tmp_path / "r"
    res = runner.invoke(app, [*ARGS, "--out", str(out), "--budget", "5"])
    assert res.exit_code == 3, res.output
    before = (out / archive.MANIFEST).read_bytes(), (out / archive.ARCHIVE).read_bytes()
    seen: list[int] = []
    real = archive.write_run

    def spy(folder, records, manifest):  # the folder as readers see it when the resume writes
        seen.append(runner.invoke(app, ["archive", "check", str(folder)]).exit_code)
        return real(folder, records, manifest)

    monkeypatch.setattr(archive, "write_run", spy)
    res = runner.invoke(app, [*ARGS, "--out", str(out), "--resume"])
    assert res.exit_code == 0, res.output
    assert seen == [3]  # the old partial archive, still valid, up to the final write
    assert (out / archive.MANIFEST).read_bytes() != before[0]
    # killed between the commit (manifest) and the rename: the staged archive is read meanwhile
    stage = archive.io.staged(out)
    stage.write_bytes((out / archive.ARCHIVE).read_bytes())
    (out / archive.ARCHIVE).write_bytes(before[1])
    check = runner.invoke(app, ["archive", "check", str(out)])
    assert check.exit_code == 3 and "interrupted" in check.output, check.output
    assert len(archive.load_records([out])) == N_RECORDS
    assert archive.finish_write(out) and not stage.exists()
    assert runner.invoke(app, ["archive", "check", str(out)]).exit_code == 0


def test_stale_temporaries_of_a_killed_writer_are_removed_and_new_ones_kept(tmp_path) -> None:
    old = [tmp_path / ".records.parquet.abcd1234.tmp", tmp_path / ".manifest.json.x_Y9zz00.tmp"]
    for p in old:
        p.write_bytes(b"torn")
        os.utime(p, (time.time() - 10, time.time() - 10))
    fresh = tmp_path / ".results.json.qqqqqqqq.tmp"
    fresh.write_bytes(b"being written")
    mine = tmp_path / "notes.tmp"
    mine.write_bytes(b"a user's file")
    gone = _io.stale_temporaries(tmp_path, before=time.time() - 1)
    assert sorted(gone) == sorted(old) and fresh.exists() and mine.exists()


def test_a_two_model_config_whose_second_model_fails_leaves_a_manifest_naming_the_finished(
    tmp_path, monkeypatch
) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "k3y" * 10)
    with FakeOpenAI() as srv:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(
            "models:\n  - model: layerlab/extractive\n"
            f"  - model: openai/missing\n    api_base: [{srv.base}]\n"
            "scenarios: [clean]\nlimit: 3\ndefaults: {attempts: 1, timeout: 5}\n"
        )
        out = tmp_path / "run"
        res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out),
                                  "--no-progress", "--cache-dir", str(tmp_path / "c")])  # fmt: skip
    assert res.exit_code == 1 and "openai/missing" in res.output, res.output
    m = archive.read_manifest(out)
    assert m["complete"] is False and m["models"] == ["layerlab/extractive"]
    assert (
        "finished layerlab/extractive" in m["note"] and "not finished openai/missing" in m["note"]
    )
    check = runner.invoke(app, ["archive", "check", str(out)])
    assert check.exit_code == 3 and "PARTIAL" in check.output, check.output


# --- issue 34, item 8 and issue 46, item 4: a killed invocation's calls are all counted ---------


@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_invocations_calls_are_kept_on_resume(workers, tmp_path, monkeypatch) -> None:
    """Killed while the provider holds a request: ``calls.made`` counts every call the provider
    saw and ``usage`` each one whose reply reached the run. In one process that is exact (the
    held call is made, not answered); with worker processes each has its own call in flight at
    the kill, so the bound is what is in flight: a call sent and not yet received counts as
    made, one received and not yet answered is not in ``usage``."""
    monkeypatch.setenv("LAYERLAB_WORKERS", str(workers))
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from fake_openai import FakeOpenAI

    from layerlab.harness.live.runmanifest import INVOCATION

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-placeholder")
    out, cache = tmp_path / "k", tmp_path / "c"
    with FakeOpenAI() as srv:  # "slow": each prompt's first call waits SLOW_S seconds
        args = ["run", "live", "-m", "openai/slow", "--api-base", srv.base, "--tasks", TASKS,
                "--scenario", "clean", "--mitigation", "strict", "--no-progress",
                "--concurrency", "1", "--out", str(out), "--cache-dir", str(cache)]  # fmt: skip
        p = multiprocessing.get_context("fork").Process(target=_child, args=(args, "/dev/null"))
        p.start()
        deadline = time.time() + 60
        # the preflight's call and at least one record's answered, the next one held
        while not ((out / INVOCATION).exists() and srv.requests >= 3 and srv.held >= 1):
            assert p.is_alive() and time.time() < deadline, "the run never reached a held call"
            time.sleep(0.01)
        _kill(p)
        seen_killed = srv.requests
        assert (out / INVOCATION).exists(), "the invocation kept no count of its calls"
        res = runner.invoke(app, [*args, "--resume"])
        assert res.exit_code == 0, res.output
        seen = srv.requests
    calls = archive.read_manifest(out)["calls"]
    first, second = calls["invocations"]
    assert first["killed"] is True and "killed" not in second
    assert first["calls"] + second["calls"] == calls["made"]
    more = workers - 1  # calls in flight beside the held one: sent, perhaps not yet received
    assert seen_killed <= first["calls"] <= seen_killed + more
    assert seen <= calls["made"] <= seen + more  # every call the provider saw, the held one too
    # all but the held one (and with workers, one in flight per other worker) were answered
    assert seen - 1 - more <= calls["usage"]["openai/slow"]["calls"] <= seen - 1, calls
    assert seen_killed - 1 - more <= first["answered_calls"] <= seen_killed - 1
    assert not (out / INVOCATION).exists()  # counted in the manifest now


def test_a_call_killed_in_a_resumes_preflight_is_counted(tmp_path, monkeypatch) -> None:
    """Issue 46: a resume's preflight call was counted in memory only (the invocation's journal
    opened after it), so a kill while the provider held it lost that call from ``calls.made``."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2]))
    from fake_openai import FakeOpenAI

    from layerlab.harness.live.runmanifest import INVOCATION

    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-placeholder")
    out, cache = tmp_path / "k", tmp_path / "c"
    with FakeOpenAI() as srv:  # "slow": each prompt's first call waits SLOW_S seconds
        args = ["run", "live", "-m", "openai/slow", "--api-base", srv.base, "--tasks",
                "hr-01-q1,hr-02-q1", "--scenario", "clean", "--mitigation", "strict",
                "--no-progress", "--concurrency", "1", "--out", str(out), "--cache-dir",
                str(cache)]  # fmt: skip
        first = runner.invoke(app, [*args, "--budget", "0"])  # a run folder, no call made
        assert first.exit_code == 3 and "budget spent after 0 calls" in first.output, first.output
        p = multiprocessing.get_context("fork").Process(
            target=_child, args=([*args, "--resume"], "/dev/null")
        )
        p.start()
        deadline = time.time() + 60
        while not (srv.requests >= 1 and srv.held >= 1):  # the preflight's call, held
            assert p.is_alive() and time.time() < deadline, "the resume never reached its preflight"
            time.sleep(0.01)
        _kill(p)
        assert srv.requests == 1 and (out / INVOCATION).exists()
        res = runner.invoke(app, [*args, "--resume"])
        assert res.exit_code == 0, res.output
        seen = srv.requests
    calls = archive.read_manifest(out)["calls"]
    killed, last = calls["invocations"][-2:]
    assert killed["killed"] is True and killed["calls"] == 1 and killed["answered_calls"] == 0
    assert calls["made"] == seen == killed["calls"] + last["calls"]  # the killed call counted


# --- issue 34, item 9: leftovers of a killed `corpus import` and `cache repair` are swept ------

USER_CORPUS = Path(__file__).parents[2] / "fixtures" / "user_corpus.jsonl"


def _paused_child(args: list[str], marks: str, where: str) -> None:
    """``main(args)`` in its own session, pausing (marked in ``marks``) at ``where``: ``fill``
    (each file written into the new corpus folder), ``swap`` (the old corpus folder moved aside,
    the new one not yet in place) or ``repair`` (the rebuilt cache written, not yet renamed)."""
    os.setsid()

    def mark_and_wait() -> None:
        with open(marks, "a") as fh:
            fh.write("paused\n")
        time.sleep(30)

    if where == "fill":
        real_write = _io.atomic_write_bytes

        def slow(path, data, *args, **kwargs):
            real_write(path, data, *args, **kwargs)
            if Path(path).name == "answer_key.jsonl":
                mark_and_wait()

        _io.atomic_write_bytes = slow
    elif where == "swap":
        real_rename = Path.rename

        def rename(self, target):
            out = real_rename(self, target)
            if ".old." in str(target):
                mark_and_wait()
            return out

        Path.rename = rename  # type: ignore[method-assign]
    else:
        from layerlab.models import cachecheck

        real_aside = cachecheck.set_aside

        def aside(folder):
            mark_and_wait()
            return real_aside(folder)

        cachecheck.set_aside = aside
    from layerlab.cli import main

    try:
        main(args)
    except SystemExit:
        pass
    os._exit(0)


def _kill_when_paused(args: list[str], tmp: Path, where: str) -> None:
    marks = tmp / f"marks-{where}"
    p = multiprocessing.get_context("fork").Process(
        target=_paused_child, args=(args, str(marks), where)
    )
    p.start()
    deadline = time.time() + 60
    while _marks(marks) < 1 and p.is_alive() and time.time() < deadline:
        time.sleep(0.02)
    assert _marks(marks) == 1, f"{where}: never reached"
    _kill(p)


def _beside(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@pytest.mark.parametrize("where", ["fill", "swap"])
def test_a_killed_corpus_import_leaves_nothing_the_next_one_does_not_sweep(where, tmp_path):
    out = tmp_path / "mine"
    args = ["corpus", "import", str(USER_CORPUS), "--out", str(out)]
    if where == "swap":  # a corpus folder there already, being replaced
        assert runner.invoke(app, args).exit_code == 0
    _kill_when_paused(args, tmp_path, where)
    left = _beside(out)
    assert left, "the kill left no temporary (the pause came too late?)"
    if where == "fill":  # the half-written copy holds the answer key: it must not stay
        assert any((tmp_path / n / "answer_key.jsonl").exists() for n in left)
    else:
        assert not out.exists() and any(n.startswith(".mine.old.") for n in left)
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert _beside(out) == []
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("marks")) == ["mine"]
    from layerlab.corpus import build

    assert build.load(out).tasks and build.load_answer_key(out)  # a whole corpus folder
    assert [p for p in tmp_path.rglob("answer_key.jsonl")] == [out / "answer_key.jsonl"]


def _damaged_cache(folder: Path) -> Path:
    from layerlab.models.cache import CACHE_DB, ResponseCache

    folder.mkdir(mode=0o700)
    c = ResponseCache(folder)
    for i in range(400):
        c.put(f"k{i:04d}", "reply " * 40)
    c.close()
    db = folder / CACHE_DB
    db.chmod(0o600)
    with open(db, "r+b") as fh:  # random bytes over a page after the header
        fh.seek(4096 * 3)
        fh.write(random.Random(3).randbytes(4096))
    return db


@pytest.mark.parametrize("then", ["cache clear", "next run", "cache repair"])
def test_a_killed_cache_repair_leaves_an_owner_only_copy_the_next_command_sweeps(then, tmp_path):
    import stat

    from layerlab.models import cachecheck

    folder = tmp_path / "c"
    _damaged_cache(folder)
    _kill_when_paused(["cache", "repair", "--cache-dir", str(folder)], tmp_path, "repair")
    left = [p for p in folder.iterdir() if p.name.startswith(".replies.sqlite3.")]
    assert left and all(p.name.endswith(".tmp") for p in left), left
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in left), "readable by others"
    if then == "cache clear":
        res = runner.invoke(app, ["cache", "clear", "--yes", "--cache-dir", str(folder)])
        assert res.exit_code == 0, res.output
    elif then == "next run":
        cachecheck.open_cache(folder, lambda line: None).close()
    else:
        assert runner.invoke(app, ["cache", "repair", "--cache-dir", str(folder)]).exit_code == 0
    assert not [p for p in folder.iterdir() if p.name.startswith(".replies.sqlite3.")]

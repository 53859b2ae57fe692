"""``archive merge`` destroys nothing (issue 46, item 3; layerlab/archive/merge.py): ``--out``
must be new, empty or an earlier merge of the same runs (replaced whole); an input, another
run's folder or a folder holding the user's own files is refused and left byte for byte; shards
of runs made with different flags, and runs whose records overlap, are refused naming the
setting that differs; a merge killed with SIGKILL mid-write leaves its inputs intact and no
half-written ``--out``."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from layerlab.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
TASKS = "finance-01-q1,it_ops-01-q2,pto-01-q1"


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _run(tmp: Path, out: Path, *more: str) -> None:
    args = ["run", "live", "--target", "python:user_targets:extractive", "--tasks", TASKS,
            "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp / "cache"), *more]  # fmt: skip
    assert main(args) == 0


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("shards")
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(FIXTURES))
    try:
        out = [tmp / f"s{i}" for i in (1, 2, 3)]
        for i, s in enumerate(out, 1):
            _run(tmp, s, "--shard", f"{i}/3")
    finally:
        mp.undo()
    return out


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _one_line(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    capsys.readouterr()
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_out_an_input_or_someone_elses_folder_is_refused_and_untouched(
    shards: list[Path], tmp_path: Path, capsys: Any
) -> None:
    merge = ["archive", "merge", *map(str, shards), "--out"]
    before = {s: _tree(s) for s in shards}
    err = _one_line(capsys, [*merge, str(shards[0])])
    assert f"--out {shards[0]}: holds a live run folder" in err and "nothing changed" in err, err
    assert {s: _tree(s) for s in shards} == before  # every input byte for byte

    own = tmp_path / "mine"  # the user's own records.parquet, no manifest
    own.mkdir()
    (own / "records.parquet").write_bytes(b"my own data")
    err = _one_line(capsys, [*merge, str(own)])
    assert "not a merge (no manifest.json; holds 'records.parquet')" in err, err
    assert _tree(own) == {"records.parquet": b"my own data"}

    other = tmp_path / "other"  # another run's folder
    _run(tmp_path, other, "--scenario", "stale_index")
    kept = _tree(other)
    assert "holds a live run folder" in _one_line(capsys, [*merge, str(other)])
    assert _tree(other) == kept
    assert not list(tmp_path.glob(".mine.*")) and not list(tmp_path.glob(".other.*"))


def test_an_earlier_merge_of_the_same_runs_is_replaced_others_refused(
    shards: list[Path], tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "m"
    out.mkdir()  # an empty folder is fine
    assert main(["archive", "merge", *map(str, shards), "--out", str(out)]) == 0
    first = _tree(out)
    assert main(["archive", "merge", *map(str, shards[::-1]), "--out", str(out)]) == 0
    assert _tree(out) == first  # the same shards again: replaced, byte for byte
    err = _one_line(capsys, ["archive", "merge", *map(str, shards[:2]), "--out", str(out)])
    assert "an earlier merge of other runs" in err, err
    assert _tree(out) == first
    (out / "notes.txt").write_text("mine\n")  # a merge folder the user added to
    err = _one_line(capsys, ["archive", "merge", *map(str, shards), "--out", str(out)])
    assert "also holds 'notes.txt', which replacing it would delete" in err, err
    assert (out / "notes.txt").read_text() == "mine\n"


def test_shards_of_runs_with_different_flags_are_refused_naming_the_field(
    shards: list[Path], tmp_path: Path, capsys: Any
) -> None:
    odd = tmp_path / "odd"  # shard 3/3 run with another scenario list
    _run(tmp_path, odd, "--scenario", "stale_index", "--shard", "3/3")
    out = tmp_path / "m"
    err = _one_line(capsys, ["archive", "merge", str(shards[0]), str(shards[1]), str(odd),
                             "--out", str(out)])  # fmt: skip
    assert f"{odd}: not of the run of shard {shards[0]}" in err, err
    assert 'scenarios: ["clean"] vs ["clean","stale_index"]' in err and "(nothing written)" in err
    assert not out.exists()


def test_overlapping_runs_are_refused_naming_the_setting(
    shards: list[Path], tmp_path: Path, capsys: Any
) -> None:
    seeded = tmp_path / "seeded"  # the same target and tasks, another seed: the same record keys
    _run(tmp_path, seeded, "--seed", "7")
    out = tmp_path / "m"
    whole = tmp_path / "whole"
    _run(tmp_path, whole)
    err = _one_line(capsys, ["archive", "merge", str(whole), str(seeded), "--out", str(out)])
    assert f"{seeded}: holds record(s) {whole} holds too" in err, err
    assert "the runs differ in sampling.seed: null vs 7" in err, err
    assert not out.exists()


def _child(args: list[str], marks: str) -> None:
    """A merge whose archive write is slowed (and marked) so the parent's SIGKILL lands in it."""
    os.setsid()
    from layerlab.archive import io

    real = io.atomic_write_bytes

    def slow(path: Path, data: bytes, *a: Any, **kw: Any) -> None:
        with open(marks, "a") as fh:
            fh.write(f"{Path(path).name}\n")
        time.sleep(0.3)
        real(path, data, *a, **kw)
        time.sleep(5)

    io.atomic_write_bytes = slow  # type: ignore[assignment]
    try:
        main(args)
    finally:
        os._exit(0)


def test_kill_9_during_a_merge_leaves_inputs_and_no_half_written_out(
    shards: list[Path], tmp_path: Path
) -> None:
    before = {s: _tree(s) for s in shards}
    out, marks = tmp_path / "m", tmp_path / "marks"
    for kill_after in (0.1, 0.5):  # before the staged archive's rename, then after it
        args = ["archive", "merge", *map(str, shards), "--out", str(out)]
        p = multiprocessing.get_context("fork").Process(target=_child, args=(args, str(marks)))
        p.start()
        deadline = time.time() + 60
        while not (marks.exists() and marks.read_text()) and time.time() < deadline:
            time.sleep(0.01)
        assert marks.exists(), "the merge never reached its write"
        time.sleep(kill_after)
        os.killpg(p.pid, signal.SIGKILL)
        p.join(10)
        marks.unlink()
        assert not out.exists()  # nothing half-written under the name asked for
        assert {s: _tree(s) for s in shards} == before
    assert list(tmp_path.glob(".m.*"))  # the killed merges' temporaries, swept by the next one
    assert main(["archive", "merge", *map(str, shards), "--out", str(out)]) == 0
    assert not list(tmp_path.glob(".m.*")) and main(["archive", "check", str(out)]) == 0


def test_a_merge_missing_a_shard_names_it_and_check_says_how_to_finish(
    shards: list[Path], tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "part"
    assert main(["archive", "merge", str(shards[0]), str(shards[2]), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["archive", "check", str(out)]) == 3
    line = capsys.readouterr().out
    assert line.startswith(f"PARTIAL {out}:") and "(2/3 of live-" in line, line
    assert "make each missing shard with run live --shard I/N" in line, line
    assert "then merge again" in line and "--resume" not in line, line

"""Shards for CI (issue 31, item 6; layerlab/harness/live/shards.py, layerlab/archive/merge.py):
``run live --shard I/N`` runs a balanced slice of the tasks with all of a task's records, and
``archive merge`` of the N shard folders gives the unsharded run's archive files byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab.cli import main
from layerlab.harness.live.shards import parse_shard, shard_tasks

FIXTURES = Path(__file__).parents[2] / "fixtures"
TASKS = "finance-01-q1,it_ops-01-q2,pto-01-q1,hr-01-q1,legal-01-q1,security-01-q2,support-01-q1"
FILES = ("records.parquet", "target.parquet")


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _args(tmp: Path, out: Path, *more: str) -> list[str]:
    return ["run", "live", "--target", "python:user_targets:extractive", "--tasks", TASKS,
            "--scenario", "clean", "--scenario", "stale_index", "--out", str(out),
            "--no-progress", "--cache-dir", str(tmp / "cache"), *more]  # fmt: skip


def test_shards_are_balanced_slices_by_task() -> None:
    ids = [f"t{i}" for i in range(10)]
    parts = [shard_tasks(ids, (i, 3)) for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(ids) and [len(p) for p in parts] == [4, 3, 3]
    assert parts[1] == ["t1", "t4", "t7"] and shard_tasks(ids, None) == ids
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/4", "5/4", "2", "a/b", "2/0"):
        with pytest.raises(ValueError, match="expected I/N with 1 <= I <= N"):
            parse_shard(bad)


def test_merged_shards_equal_the_unsharded_run(tmp_path: Path, capsys: Any) -> None:
    whole = tmp_path / "whole"
    assert main(_args(tmp_path, whole)) == 0, capsys.readouterr().err
    shards = [tmp_path / f"shard-{i}" for i in (1, 2, 3)]
    for i, out in enumerate(shards, 1):
        assert main(_args(tmp_path, out, "--shard", f"{i}/3")) == 0, capsys.readouterr().err
    manifests = [json.loads((s / "manifest.json").read_text()) for s in shards]
    full = json.loads((whole / "manifest.json").read_text())
    assert {m["run_id"] for m in manifests} == {full["run_id"]}  # a shard's records are the run's
    assert [m["shard"] for m in manifests] == [{"index": i, "count": 3} for i in (1, 2, 3)]
    assert [m["n_tasks"] for m in manifests] == [3, 2, 2]
    assert all(m["provenance"] == full["provenance"] and m["complete"] for m in manifests)
    tasks = [set(pd.read_parquet(s / "records.parquet").task_id) for s in shards]
    assert sum(len(t) for t in tasks) == 7 and set.union(*tasks) == set(TASKS.split(","))
    for s in shards:  # every scenario and arm of a task in its shard: the pairs stay together
        recs = pd.read_parquet(s / "records.parquet")
        assert (recs.groupby("task_id").size() == 2 * 2).all()

    merged = tmp_path / "merged"
    capsys.readouterr()
    assert main(["archive", "merge", *map(str, shards[::-1]), "--out", str(merged)]) == 0, (
        capsys.readouterr().err
    )
    for name in FILES:
        assert (merged / name).read_bytes() == (whole / name).read_bytes(), name
    m = json.loads((merged / "manifest.json").read_text())
    assert m["complete"] is True and m["files"] == full["files"]
    assert m["target"]["table_sha256"] == full["target"]["table_sha256"]
    assert main(["archive", "check", str(merged)]) == 0
    assert main(["gate", str(merged), "--min", "S:clean=0.01"]) == 0

    # two of three shards: a merge that says it is incomplete
    part = tmp_path / "part"
    assert main(["archive", "merge", str(shards[0]), str(shards[1]), "--out", str(part)]) == 0
    m = json.loads((part / "manifest.json").read_text())
    assert m["complete"] is False and "not every shard" in m["note"]
    # a run given whole and in shards is refused, nothing written
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main(["archive", "merge", str(whole), str(shards[0]), "--out", str(bad)]) != 0
    assert "whole and in shards" in capsys.readouterr().err and not bad.exists()


def test_a_shard_resumes_only_as_itself(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "s"
    assert main(_args(tmp_path, out, "--shard", "1/2")) == 0, capsys.readouterr().err
    before = (out / "records.parquet").read_bytes()
    capsys.readouterr()
    assert main(_args(tmp_path, out, "--shard", "2/2", "--resume")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds shard 1/2 of run" in err and "not shard 2/2" in err, err
    assert (out / "records.parquet").read_bytes() == before
    assert main(_args(tmp_path, tmp_path / "x", "--shard", "3/2")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shard" in err and "expected I/N with 1 <= I <= N" in err, err
    assert main(_args(tmp_path, tmp_path / "y", "--shard", "1/8")) != 0
    assert "8 shards of 7 task(s) leave a shard empty" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()

"""``make bench``'s report: every benchmark against its goal, pass/fail, the load around it."""

from __future__ import annotations

import io
import json

import pytest

from layerlab import bench


def test_verdict_compares_against_the_goal() -> None:
    assert bench.verdict("x", 0.9, "s", "<=", 1.0)["ok"] is True
    assert bench.verdict("x", 1.1, "s", "<=", 1.0)["ok"] is False
    r = bench.verdict("y", 0.79, "of ideal", ">=", 0.8, repeat=3)
    assert r["ok"] is False and r["goal"] == ">= 0.8" and r["repeat"] == 3
    with pytest.raises(ValueError, match="op"):
        bench.verdict("z", 1, "s", "<", 1)


def test_table_marks_each_row_and_frames_it_with_the_load() -> None:
    rows = [
        bench.verdict("deterministic harness", 0.62, "s", "<=", 1.0, note="CPU 0.4 s"),
        bench.verdict("live harness, 200 ms", 0.5, "of ideal", ">=", 0.8),
        {"benchmark": "not yet in the shape", "records": 10},
    ]
    buf = io.StringIO()
    bench.print_table(rows, (1.5, 1.0, 0.5), (2.0, 1.5, 1.0), file=buf)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("load average at start: 1.50 1.00 0.50")
    assert lines[-1].startswith("load average at end:   2.00 1.50 1.00")
    det = next(x for x in lines if x.startswith("deterministic harness"))
    assert "0.62 s" in det and "<= 1 s" in det and "PASS" in det and "CPU 0.4 s" in det
    assert "FAIL" in next(x for x in lines if x.startswith("live harness"))
    assert next(x for x in lines if x.startswith("not yet")).split()[-1] == "?"


def test_main_runs_the_chosen_benchmarks_and_fails_on_a_missed_goal(monkeypatch, capsys) -> None:
    monkeypatch.setitem(bench.BENCHMARKS, "fast", lambda n: bench.verdict("fast", 1, "s", "<=", 2))
    monkeypatch.setitem(bench.BENCHMARKS, "slow", lambda n: bench.verdict("slow", 3, "s", "<=", 2))
    assert bench.main(["--only", "fast", "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert "load_average_start" in out[0] and "load_average_end" in out[-1]
    assert out[1]["benchmark"] == "fast" and out[1]["ok"] is True and out[1]["key"] == "fast"
    assert bench.main(["--only", "fast", "--only", "slow"]) == 1
    text = capsys.readouterr().out
    assert "PASS" in text and "FAIL" in text


def test_deterministic_entry_has_the_shape_and_counts_every_record(corpus) -> None:
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import deterministic as harness

    r = bench.bench_deterministic(1)
    n = len(corpus.tasks) * len(load_scenarios()) * len(harness.contract_arms())
    assert r["records"] == n and r["unit"] == "s" and r["goal"] == "<= 1"
    assert isinstance(r["ok"], bool) and r["measured"] == r["median_seconds"] > 0


def test_profile_splits_a_live_run_by_owner(capsys) -> None:
    """``python -m layerlab.bench --profile`` (here on one scenario): every profiled second
    lands in a named bucket, litellm's and layerlab's among them, and per-call shares print."""
    p = bench.profile_live(scenarios=("clean",))
    assert p["records"] == 240 * 2 and 0 < p["calls"] <= p["records"]
    b = p["buckets"]
    assert any(k.startswith("litellm") for k in b) and any(k.startswith("layerlab") for k in b)
    assert all(v >= 0 for v in b.values()) and sum(b.values()) > 0
    assert list(b.values()) == sorted(b.values(), reverse=True)
    bench.print_profile(p)
    out = capsys.readouterr().out.splitlines()
    assert "480 records" in out[0] and len(out) == 2 + len(b)
    assert abs(sum(float(x.split("%")[0].split()[-1]) for x in out[2:]) - 100) < 0.5

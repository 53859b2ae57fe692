"""``make bench``'s report: every benchmark against its goal, pass/fail, the load around it."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from bench import cpu_profile, report, run, suite  # noqa: E402


def test_verdict_compares_against_the_goal() -> None:
    assert report.verdict("x", 0.9, "s", "<=", 1.0)["ok"] is True
    assert report.verdict("x", 1.1, "s", "<=", 1.0)["ok"] is False
    r = report.verdict("y", 0.79, "of ideal", ">=", 0.8, repeat=3)
    assert r["ok"] is False and r["goal"] == ">= 0.8" and r["repeat"] == 3
    with pytest.raises(ValueError, match="op"):
        report.verdict("z", 1, "s", "<", 1)


def test_table_marks_each_row_and_frames_it_with_the_load() -> None:
    rows = [
        report.verdict("deterministic harness", 0.62, "s", "<=", 1.0, note="CPU 0.4 s"),
        report.verdict("live harness, 200 ms", 0.5, "of ideal", ">=", 0.8),
        {"benchmark": "not yet in the shape", "records": 10},
    ]
    buf = io.StringIO()
    report.print_table(rows, (1.5, 1.0, 0.5), (2.0, 1.5, 1.0), file=buf)
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("load average at start: 1.50 1.00 0.50")
    assert lines[-1].startswith("load average at end:   2.00 1.50 1.00")
    det = next(x for x in lines if x.startswith("deterministic harness"))
    assert "0.62 s" in det and "<= 1 s" in det and "PASS" in det and "CPU 0.4 s" in det
    assert "FAIL" in next(x for x in lines if x.startswith("live harness"))
    assert next(x for x in lines if x.startswith("not yet")).split()[-1] == "?"


def test_main_runs_the_chosen_benchmarks_and_fails_on_a_missed_goal(monkeypatch, capsys) -> None:
    monkeypatch.setitem(run.BENCHMARKS, "fast", lambda n: report.verdict("fast", 1, "s", "<=", 2))
    monkeypatch.setitem(run.BENCHMARKS, "slow", lambda n: report.verdict("slow", 3, "s", "<=", 2))
    assert run.main(["--only", "fast", "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert "load_average_start" in out[0] and "load_average_end" in out[-1]
    assert out[1]["benchmark"] == "fast" and out[1]["ok"] is True and out[1]["key"] == "fast"
    assert run.main(["--only", "fast", "--only", "slow"]) == 1
    text = capsys.readouterr().out
    assert "PASS" in text and "FAIL" in text


def test_deterministic_entry_has_the_shape_and_counts_every_record(corpus) -> None:
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import deterministic as harness

    r = suite.bench_deterministic(1)
    n = len(corpus.tasks) * len(load_scenarios()) * len(harness.contract_arms())
    assert r["records"] == n and r["unit"] == "s" and r["goal"] == "<= 1"
    assert isinstance(r["ok"], bool) and r["measured"] == r["median_seconds"] > 0


def test_profile_splits_a_live_run_by_owner(capsys) -> None:
    """``python -m tests.bench --profile`` (here on one scenario): every profiled second
    lands in a named bucket, litellm's and layerlab's among them, and per-call shares print."""
    p = cpu_profile.profile_live(scenarios=("clean",))
    assert p["records"] == 240 * 2 and 0 < p["calls"] <= p["records"]
    b = p["buckets"]
    assert any(k.startswith("litellm") for k in b) and any(k.startswith("layerlab") for k in b)
    assert all(v >= 0 for v in b.values()) and sum(b.values()) > 0
    assert list(b.values()) == sorted(b.values(), reverse=True)
    cpu_profile.print_profile(p)
    out = capsys.readouterr().out.splitlines()
    assert "480 records" in out[0] and len(out) == 2 + len(b)
    assert abs(sum(float(x.split("%")[0].split()[-1]) for x in out[2:]) - 100) < 0.5


def test_native_tool_call_verdicts_on_canned_replies() -> None:
    """The native tool-call measurement (tests/bench/native_tools.py) judges each reply by the
    tool box's own schema check, and reads a final reply by the reply contract."""
    from bench import native_tools as nt

    def call(name: str, args: str, kind: str = "function") -> dict:
        return {"id": "c0", "type": kind, "function": {"name": name, "arguments": args}}

    ok = nt.judge_calls(
        {"content": None, "tool_calls": [call("search", '{"query": "q", "top_k": 3}')]}
    )
    assert ok["syntax"] and ok["args"] and ok["first"] == "search" and ok["calls"] == 1
    wide = nt.judge_calls({"tool_calls": [call("search", '{"query": "q", "top_k": 10}')]})
    assert wide["syntax"] and not wide["args"] and "top_k" in wide["problem"]
    for bad in (call("browse", '{"url": "x"}'), call("search", "query=q"), call("search", "[]")):
        got = nt.judge_calls({"tool_calls": [bad]})
        assert not got["syntax"] and not got["args"], bad
    text = nt.judge_calls(
        {"content": '<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>'}
    )
    assert text["text_call"] and text["calls"] == 0 and not text["syntax"]
    reply = (
        '{"status": "answered", "answer": "$10,000", "citations": ["finance-01-a"], "reason": null}'
    )
    assert nt.judge_answer({"content": reply}, "$10,000") == {
        "final": True,
        "correct": True,
        "why": "answered",
    }
    assert nt.judge_answer({"content": reply}, "$5,000")["correct"] is False
    assert (
        nt.judge_answer({"content": "", "tool_calls": [call("search", "{}")]}, "x")["why"]
        == "tool call"
    )
    assert nt.judge_answer({"content": "{ not json"}, "x")["final"] is False
    rows = [{"kind": "first", "choice": "auto", "error": "", "seconds": 2.0, **ok},
            {"kind": "first", "choice": "auto", "error": "HTTP 500", "seconds": 0.0, **wide}]  # fmt: skip
    summary = nt.summarise(rows)["first/auto"]
    assert summary["n"] == 2 and summary["errors"] == 1 and summary["args"] == "1/2"


def test_the_runtime_bench_sends_the_committed_prompts_to_every_slot_and_counts_same_replies(
    tmp_path: Path,
) -> None:
    import subprocess
    import time
    import urllib.request

    from bench import runtimes

    bodies = runtimes.committed_prompts("qwen2.5-coder-1.5b", 3)
    assert len(bodies) == 3 and len({json.dumps(b["messages"]) for b in bodies}) == 3
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 600 for b in bodies)
    assert all(b["response_format"]["type"] == "json_object" and "seed" in b for b in bodies)
    assert not any("api_key" in b for b in bodies)
    fake = Path(__file__).parent / "fake_llama_server.py"
    ports = [runtimes_port() for _ in range(2)]
    procs = [subprocess.Popen([sys.executable, str(fake), "--port", str(p), "--die-after", "-1"],
                              stdout=subprocess.DEVNULL) for p in ports]  # fmt: skip
    try:
        bases = [f"http://127.0.0.1:{p}/v1" for p in ports]
        for b in bases:
            for _ in range(200):
                try:
                    urllib.request.urlopen(b + "/models", timeout=1).read()
                    break
                except OSError:
                    time.sleep(0.05)
        seen: list[str] = []

        def send(base: str, body: dict) -> dict:
            seen.append(base)
            return runtimes.post(base, body)

        wall, got = runtimes.drive([bases[0], bases[0], bases[1]], bodies, send)
        assert wall > 0 and len(got) == 3 and len(seen) == 3 and set(seen) <= set(bases)
        assert all(g["usage"]["prompt_tokens"] == 600 for g in got)
        again = runtimes.drive(bases, bodies)[1]
        assert runtimes.same(got, again) == {"identical": 3, "same_json": 3, "same_prompt_tokens": 3}
        other = [{**g, "content": "x"} for g in again[:1]] + again[1:]
        assert runtimes.same(got, other)["identical"] == 2
        spaced = [{**g, "content": json.dumps(json.loads(g["content"]), indent=2)} for g in again]
        assert runtimes.same(got, spaced) == {"identical": 0, "same_json": 3, "same_prompt_tokens": 3}
    finally:
        for p in procs:
            p.kill()
            p.wait()


def runtimes_port() -> int:
    from layerlab.models.local import free_port

    return free_port()

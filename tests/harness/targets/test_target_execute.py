"""Running targets (:mod:`layerlab.harness.targets.execute`): concurrently and byte-identical to
a serial run, async targets awaited, each record within its timeout, a target's exit reported
in one line, replies capped, and free text read in linear time."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import archive, paths
from layerlab.cli import main
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.live import agentlog
from layerlab.harness.targets import base, read_reply

FIXTURES = Path(__file__).parents[2] / "fixtures"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")
SHARED = ("records.parquet", agentlog.TARGET_TABLE, "results.json")


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _run(corpus, key, tmp: Path, target: Any, concurrency: int, **kw: Any) -> live.LiveResult:
    scen = load_scenarios()
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=target)
    return live.run_live(corpus, key, scen, cfg, tmp, scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                         cache_dir=tmp.parent / f"{tmp.name}-cache", concurrency=concurrency,
                         **kw)  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    ["python:user_targets:slow_extractive", "python:user_targets:async_extractive",
     "langchain:user_targets:lc_async_factory"],
)  # fmt: skip
def test_a_target_at_concurrency_8_gives_the_serial_runs_bytes(corpus, key, tmp_path, spec):
    import user_targets

    user_targets.SEEN.clear()
    serial = _run(corpus, key, tmp_path / "serial", spec, 1)
    t0 = time.perf_counter()
    user_targets.SEEN.clear()
    fast = _run(corpus, key, tmp_path / "fast", spec, 8)
    assert serial.complete and fast.complete
    assert fast.manifest["records"] == 9 * 2 * len(TASKS)
    for f in SHARED:
        assert (tmp_path / "serial" / f).read_bytes() == (tmp_path / "fast" / f).read_bytes(), f
    m1, m2 = (archive.read_manifest(tmp_path / d) for d in ("serial", "fast"))
    differ = sorted(k for k in m1.keys() | m2.keys() if m1.get(k) != m2.get(k))
    assert differ == [], (differ, {k: (m1.get(k), m2.get(k)) for k in differ})
    recs = pd.read_parquet(tmp_path / "fast" / "records.parquet")
    assert recs[recs.scenario == "clean"].success.all()  # the async target was awaited
    assert set(recs.diagnostic) - {"provider_error", "malformed_reply"} == set(recs.diagnostic)
    assert time.perf_counter() - t0 < 60


def test_a_target_that_is_not_concurrent_runs_serially_set_up_and_closed_once(
    corpus, key, tmp_path
):
    import user_targets

    user_targets.Serial.events.clear()
    user_targets.Serial.most = 0
    r = _run(corpus, key, tmp_path / "run", "python:user_targets:Serial", 8)
    assert r.complete and user_targets.Serial.most == 1
    assert user_targets.Serial.events == ["setup", "close"]


def test_a_record_past_its_timeout_is_a_labelled_provider_error_and_the_run_goes_on(
    tmp_path, capsys
):
    out, log = tmp_path / "run", tmp_path / "s.jsonl"
    args = ["run", "live", "--target", "python:user_targets:stuck_on_pto", "--target-setting",
            "timeout=0.5", "--tasks", ",".join(TASKS), "--scenario", "clean", "--out", str(out),
            "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--sample-log", str(log),
            "--max-error-rate", "0.5"]  # fmt: skip
    t0 = time.perf_counter()
    assert main(args) == 0, capsys.readouterr().err
    assert time.perf_counter() - t0 < 30
    assert "target: 2 record(s) timed out (no reply within 0.5 s)" in capsys.readouterr().out
    recs = pd.read_parquet(out / "records.parquet").set_index("task_id")
    assert (recs.loc["pto-01-q1"].diagnostic == "provider_error").all()
    assert recs.drop("pto-01-q1").success.all()
    entries = [json.loads(x) for x in log.read_text().splitlines()]
    errors = {e["target_error"] for e in entries if e.get("target_error")}
    assert errors == {"timeout: no reply within 0.5 s"}


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("exits", r"answer\(\) called sys\.exit\(0\) \(SystemExit\) on record "),
        ("hard_exit", r"answer\(\) called os\._exit\(0\) on record "),
        ("interrupts", r"answer\(\) raised KeyboardInterrupt on record "),
    ],
)
def test_a_target_that_exits_stops_the_run_in_one_line_and_keeps_a_partial_archive(
    name, says, tmp_path, capsys
):
    import re

    out = tmp_path / "run"
    args = ["run", "live", "--target", f"python:user_targets:{name}", "--tasks",
            ",".join(TASKS), "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--concurrency", "1"]  # fmt: skip
    code = main(args)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 1 and len(err) == 1 and re.search(says, err[0]), err
    assert "continue with --resume" in err[0]
    man = archive.read_manifest(out)
    assert man["complete"] is False and man["records"] == 2  # the two records before it


def test_replies_too_large_or_too_deep_are_labelled_records(tmp_path, capsys) -> None:
    out, log = tmp_path / "run", tmp_path / "s.jsonl"
    args = ["run", "live", "--target", "python:user_targets:odd_replies", "--tasks",
            ",".join(TASKS), "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--sample-log", str(log)]  # fmt: skip
    assert main(args) == 4, capsys.readouterr().err  # every reply malformed: measured nothing
    recs = pd.read_parquet(out / "records.parquet")
    assert set(recs.diagnostic) == {"malformed_reply"}
    said = {e["task_id"].split("-")[0]: e["target_error"]
            for e in map(json.loads, log.read_text().splitlines())}  # fmt: skip
    assert said == {
        "pto": "the reply is nested deeper than 64 levels (not read)",
        "finance": "the reply is larger than 1 MiB (not read)",
        "it_ops": "the reply is nested deeper than 64 levels (not read)",
    }


def test_replies_are_capped_in_size_and_depth() -> None:
    deep: Any = "x"
    for _ in range(100_000):
        deep = [deep]
    assert "nested deeper than 64" in (base.reply_problem(deep) or "")
    assert "larger than 1 MiB" in (base.reply_problem("a" * (2 << 20)) or "")
    assert base.reply_problem({"status": "answered", "answer": "12 months"}) is None
    # JSON text nested past the parser's limit: a record label, not a RecursionError
    text = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RecursionError):
        json.loads(text)
    assert base.reply_problem(text) is None  # 200 kB of text: read, and refused as nested


def test_free_text_is_read_in_linear_time_and_as_before() -> None:
    known = [f"doc-{i:04d}-a" for i in range(2000)] + ["finance-05-b", "finance-05-b~s-7ccff14a"]
    out = read_reply("It is 45 days (finance-05-b~s-7ccff14a; doc-0007-a).", known).out
    assert out.answer == "It is 45 days ." and out.citations == (
        "finance-05-b", "finance-05-b~s-7ccff14a", "doc-0007-a")  # fmt: skip
    text = "The answer is 12 months, see doc-0042-a. " * 25_000  # 1 MB
    t0 = time.perf_counter()
    big = read_reply(text, known).out
    assert time.perf_counter() - t0 < 5  # one scan per known id took ~10 s per MB
    assert big.citations == ("doc-0042-a",) and "doc-0042-a" not in big.answer


def _start(args: list[str], **env: str) -> Any:
    import os
    import subprocess
    import sys

    path = os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "layerlab", *args],
        env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": path, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def test_sigterm_ends_a_run_whose_target_blocks_forever_within_5_s_and_it_resumes(tmp_path):
    import signal

    from layerlab.cli.app import EXIT_SIGTERM

    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:stuck_after_two", "--tasks",
            ",".join(TASKS), "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--concurrency", "1"]  # fmt: skip
    p = _start(args)
    log, deadline = out / "records.jsonl", time.time() + 60
    while time.time() < deadline and (not log.exists() or log.read_bytes().count(b"\n") < 2):
        time.sleep(0.05)
    time.sleep(0.3)  # the third record is in flight, its target blocked for good
    t0 = time.perf_counter()
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=30)
    assert time.perf_counter() - t0 < 5, stderr
    assert p.returncode == EXIT_SIGTERM, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "interrupted (SIGTERM)" in lines[0], stderr
    assert "2 of 6 records saved" in lines[0] and lines[0].endswith("--resume"), lines[0]
    man = archive.read_manifest(out)
    assert man["complete"] is False and man["records"] == 2
    resumed = _start([*args, "--resume"], LAYERLAB_TEST_UNSTUCK="1")
    _, stderr = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, stderr
    assert archive.read_manifest(out)["complete"] is True


def test_a_target_that_leaves_a_thread_running_does_not_hold_the_process(tmp_path):
    out = tmp_path / "run"
    p = _start(["run", "live", "--target", "python:user_targets:leaves_a_thread", "--tasks",
                TASKS[0], "--scenario", "clean", "--out", str(out), "--no-progress",
                "--cache-dir", str(tmp_path / "cache")])  # fmt: skip
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 0, stderr
    assert "archive:" in stdout and archive.read_manifest(out)["complete"] is True


def test_a_module_that_exits_at_import_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "exits_at_import.py").write_text("import sys\nsys.exit(0)\n")
    out = tmp_path / "run"
    code = main(["run", "live", "--target", "python:exits_at_import:answer", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "importing 'exits_at_import' called sys.exit(0) (SystemExit)" in err
    assert not out.exists()

"""Interruptions: Ctrl-C and SIGTERM during a live run save what was scored, say so in one line
(the signal, the records saved, the exact command that resumes), exit 130 / 143 with no
traceback, and the printed command completes the run."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from layerlab.archive import read_records
from layerlab.cli import app
from layerlab.cli.app import EXIT_SIGINT, EXIT_SIGTERM, interrupted_line

ARGS = [
    "run", "live", "-m", "layerlab/extractive@100ms", "--limit", "4", "--concurrency", "1",
    "--no-progress",
]  # fmt: skip
LINE = re.compile(
    r"interrupted \((?P<how>Ctrl-C|SIGTERM)\): run (?P<run>live-[0-9a-f]+) stopped with "
    r"(?P<saved>\d+) of (?P<total>\d+) records saved in (?P<out>\S+) \(a partial archive\); "
    r"resume with: (?P<cmd>layerlab .+)$"
)


def _start(args: list[str], workers: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONHASHSEED": "0", "LAYERLAB_WORKERS": workers}
    return subprocess.Popen(
        [sys.executable, "-m", "layerlab", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives a command
    )


@pytest.mark.parametrize(
    "sig, code, how, workers",
    [
        # Ctrl-C in a terminal reaches the whole group: the forked workers too (they stay quiet)
        (signal.SIGINT, EXIT_SIGINT, "Ctrl-C", "2"),
        (signal.SIGTERM, EXIT_SIGTERM, "SIGTERM", "1"),  # `kill PID` of a run in process
    ],
)
def test_signal_saves_says_how_to_resume_and_the_resume_completes(
    tmp_path, sig, code, how, workers
) -> None:
    out = tmp_path / "run"
    args = [*ARGS, "--out", str(out), "--cache-dir", str(tmp_path / "cache")]
    p = _start(args, workers)
    log = out / "records.jsonl"
    deadline = time.time() + 90
    while time.time() < deadline and (not log.exists() or log.read_bytes().count(b"\n") < 3):
        time.sleep(0.05)
    if sig == signal.SIGINT:
        os.killpg(p.pid, sig)
    else:
        p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == code, stderr
    assert "Traceback" not in stderr and "Traceback" not in stdout
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    m = LINE.match(lines[0])
    assert m, lines[0]
    assert m["how"] == how and m["out"] == str(out)
    saved, total = int(m["saved"]), int(m["total"])
    assert 3 <= saved < total == 4 * 9 * 2
    # what the line says was saved is a partial archive of exactly those records
    assert len(read_records(out / "records.parquet")) == saved
    check = CliRunner().invoke(app, ["archive", "check", str(out)])
    assert check.exit_code == 3 and "PARTIAL" in check.output, check.output
    # the printed command, as printed, finishes the run
    cmd = shlex.split(m["cmd"])
    assert cmd[0] == "layerlab" and cmd[-1] == "--resume" and cmd[1:-1] == args
    r = _start(cmd[1:], workers)
    stdout, stderr = r.communicate(timeout=180)
    assert r.returncode == 0, stderr
    assert f"resuming {m['run']}: {saved} of {total} records done" in stderr
    assert f"complete: {total} records" in stdout
    assert len(read_records(out / "records.parquet")) == total


def test_other_commands_say_they_stopped_and_the_command_to_run_again() -> None:
    line = interrupted_line(["mitigation", "run", "--out", "a b"], KeyboardInterrupt(), True)
    assert line.startswith("interrupted (SIGTERM): mitigation run stopped before it finished; ")
    assert "no records saved (it writes its archive when done" in line
    assert line.endswith("run it again: layerlab mitigation run --out 'a b'")
    line = interrupted_line(["reproduce", "--jobs", "2"], None, False)
    assert line.startswith("interrupted (Ctrl-C): reproduce stopped before it finished; ")
    assert "the notebooks that finished have written" in line


def test_exit_codes_are_the_shells_and_the_docs_say_so() -> None:
    from layerlab import paths

    assert (EXIT_SIGINT, EXIT_SIGTERM) == (130, 143)
    cli_doc = (paths.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "130 interrupted (Ctrl-C), 143 (SIGTERM)" in cli_doc


def test_sigterm_during_a_command_gives_the_line_and_143_in_process(
    capsys, tmp_path, monkeypatch
) -> None:
    from layerlab.cli import main
    from layerlab.harness import deterministic

    def killed(*_a, **_k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
        raise AssertionError("SIGTERM did not interrupt the command")

    monkeypatch.setattr(deterministic, "run_mitigation_archive", killed)
    before = signal.getsignal(signal.SIGTERM)
    rc = main(["mitigation", "run", "--out", str(tmp_path / "m")])
    err = capsys.readouterr().err
    assert rc == EXIT_SIGTERM
    assert err.startswith("interrupted (SIGTERM): mitigation run stopped before it finished; ")
    assert "Traceback" not in err and not (tmp_path / "m").exists()
    assert signal.getsignal(signal.SIGTERM) == before  # main leaves the handler as it found it

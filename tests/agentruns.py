"""Agent runs for the viewer, archive and report tests: the reference agent (json_action) over
every scenario, and the fake OpenAI server's ``badtools`` (two invalid calls) and ``endless``
(the step limit) models, native, on the clean scenario — each with its private sample log."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from layerlab.cli import app

TASKS = "hr-05-q1,it_ops-09-q3"


def run(out: Path, model: str, *extra: str, env: dict[str, str] | None = None) -> str:
    """``run live --agent`` of ``model`` into ``out`` (sample log ``out``.jsonl); its output."""
    res = CliRunner().invoke(
        app,
        ["run", "live", "-m", model, "--agent", "--tasks", TASKS, "--out", str(out),
         "--cache-dir", str(out.parent / "cache"), "--sample-log", str(out.parent / f"{out.name}.jsonl"),
         "--no-progress", *extra],
        env=env,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return res.output


def make(root: Path) -> dict[str, str]:
    """The three agent runs under ``root`` (``ref``, ``badtools``, ``endless``) and a single-call
    run of the reference agent (``single``, clean only): each run's terminal output by name."""
    from fake_openai import FakeOpenAI

    outputs = {"ref": run(root / "ref", "layerlab/extractive", "--tool-protocol", "json_action")}
    res = CliRunner().invoke(
        app,
        ["run", "live", "-m", "layerlab/extractive", "--tasks", TASKS, "--scenario", "clean",
         "--out", str(root / "single"), "--cache-dir", str(root / "cache"),
         "--sample-log", str(root / "single.jsonl"), "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    outputs["single"] = res.output
    with FakeOpenAI() as fake:
        for model, extra in (("badtools", ()), ("endless", ("--max-steps", "2"))):
            outputs[model] = run(
                root / model, f"openai/{model}", "--api-base", fake.base, "--tool-protocol",
                "native", "--scenario", "clean", *extra, env={"OPENAI_API_KEY": "sk-test"},
            )  # fmt: skip
    return outputs

"""A real language model through the live harness: SmolLM2-135M-Instruct served by llama.cpp.

Needs the local runtime and the model (``make local models``; ``make test`` installs both and
sets ``LAYERLAB_REQUIRE_LOCAL=1`` so that a missing runtime fails instead of skipping).
One task × every scenario × both contract modes (18 records; the server answers one request at
a time, so each task costs about 45 s on 2 cores): the archive is complete and valid, every
reply that reached the model is parsed or labelled ``malformed_reply``, strict and repair are
shared under greedy decoding, and a rerun makes no call. Behind the ``slow`` marker (``make
test-slow`` fetches it), the model the committed archives use, Qwen2.5-Coder-1.5B, on a few
records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive
from layerlab.cli import app
from layerlab.models import local as models

runner = CliRunner()
MODEL = "smollm2-135m"
# the fetched model lives in the real user cache; tests get a private XDG cache each (conftest)
USER_CACHE = models.paths.user_cache()
TASKS = "finance-01-q1"


def _ready() -> str | None:
    try:
        models.runtime_version()
    except models.ModelError as exc:
        return str(exc)
    if not models.is_fetched(models.lookup(MODEL)):
        return f"{MODEL} is not fetched (layerlab models fetch {MODEL})"
    return None


_why = _ready()
if _why and os.environ.get("LAYERLAB_REQUIRE_LOCAL") == "1":
    raise RuntimeError(f"LAYERLAB_REQUIRE_LOCAL=1 but {_why}")
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    out = tmp_path_factory.mktemp("smollm2") / "run"
    cache = out.parent / "replies"
    args = [
        "run", "live", "-m", f"local/{MODEL}", "--out", str(out), "--tasks", TASKS,
        "--response-format", "json_schema", "--max-tokens", "120", "--no-progress",
        "--cache-dir", str(cache), "--local-servers", "1",
    ]  # fmt: skip
    env = {"LAYERLAB_CACHE": str(USER_CACHE)}
    first = runner.invoke(app, args, env=env)
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, [*args, "--resume"], env=env)
    return out, first.output, again.output


def test_archive_is_complete_and_every_reply_is_parsed_or_labelled(run) -> None:
    out, _, _ = run
    info = archive.check_path(out)
    assert info["complete"] is True
    recs = archive.read_records(out / archive.ARCHIVE)
    manifest = json.loads((out / archive.MANIFEST).read_text())
    n_scen, n_arms = len(manifest["scenarios"]), len(manifest["mitigations"])
    assert len(recs) == n_scen * n_arms and n_scen == 9
    assert {(r.provider, r.model) for r in recs} == {("local", MODEL)}
    read = [r for r in recs if r.reached_reader]
    assert read and all(r.prompt_hash for r in read)
    # a reply either parsed (answered or abstained) or is labelled malformed; no provider errors
    for r in read:
        assert r.answered or r.abstained or r.diagnostic == "malformed_reply", r
        assert r.diagnostic != "provider_error"


def test_greedy_by_default_identical_prompts_share_a_reply_and_a_rerun_makes_none(run) -> None:
    out, first, again = run
    manifest = json.loads((out / archive.MANIFEST).read_text())
    read = [r for r in archive.read_records(out / archive.ARCHIVE) if r.reached_reader]
    import re

    made = int(re.search(r"(\d+) provider calls", first).group(1))  # type: ignore[union-attr]
    prompts = {r.prompt_hash for r in read}
    assert len(prompts) < len(read)  # some strict and repair prompts coincide
    assert made == len(prompts)  # one call per distinct prompt (greedy: a reply is its prompt's)
    assert manifest["share_replies"] is True
    assert manifest["sampling"]["decoding"] == "greedy"
    assert manifest["sampling"]["temperature"] == 0.0 and manifest["settings"]["temperature"] == 0.0
    by_prompt: dict[str, set] = {}
    for r in read:
        by_prompt.setdefault(r.prompt_hash, set()).add((r.answered, r.abstained, r.exact_match))
    assert all(len(v) == 1 for v in by_prompt.values())  # byte-identical prompts, one reply
    assert "0 provider calls" in again
    local = manifest["local_models"][f"local/{MODEL}"]
    assert local["file_sha256"] == models.lookup(MODEL).file.sha256
    assert local["runtime"].startswith("llama-cpp-python ")
    assert local["server"]["n_ctx"] == 4096
    assert local["server_sampler_defaults"]["repeat_penalty"] > 0  # what the server applied unasked


def test_a_killed_parent_leaves_no_server_behind(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    code = (
        "from layerlab.models import local as models; import time, sys; "
        f"s = models.start(models.lookup({MODEL!r})); print(s.process.pid, flush=True); time.sleep(60)"
    )
    env = {**os.environ, "LAYERLAB_CACHE": str(USER_CACHE)}
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    pid = int(parent.stdout.readline())  # type: ignore[union-attr]
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError("the llama.cpp server outlived the process that started it")


QWEN = "qwen2.5-coder-1.5b"


@pytest.mark.slow
def test_qwen_answers_a_clean_task_and_repair_recovers_schema_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committed archives' model on one task: clean and schema drift, strict and repair
    (3 calls; about a minute on 2 cores). Qwen answers the clean question correctly under
    both arms (one shared reply: the prompts coincide), strict rejects the drifted payload
    before the model, and repair's normalised payload lets the model answer it."""
    monkeypatch.setenv("LAYERLAB_CACHE", str(USER_CACHE))  # the fetched model, not the test's cache
    if not models.is_fetched(models.lookup(QWEN)):
        pytest.fail(f"{QWEN} is not fetched (make test-slow fetches it: layerlab models fetch {QWEN})")
    out = tmp_path / "run"
    args = [
        "run", "live", "-m", f"local/{QWEN}", "--out", str(out), "--tasks", TASKS,
        "--scenario", "clean", "--scenario", "schema_drift", "--response-format", "json_schema",
        "--no-progress", "--cache-dir", str(tmp_path / "replies"),
    ]  # fmt: skip
    res = runner.invoke(app, args, env={"LAYERLAB_CACHE": str(USER_CACHE)})
    assert res.exit_code == 0, res.output
    recs = {(r.scenario, r.mitigation): r for r in archive.read_records(out / archive.ARCHIVE)}
    assert len(recs) == 4
    assert recs[("clean", "strict")].success and recs[("clean", "repair")].success
    assert not recs[("schema_drift", "strict")].reached_reader
    assert recs[("schema_drift", "repair")].success
    manifest = json.loads((out / archive.MANIFEST).read_text())
    assert manifest["sampling"]["decoding"] == "greedy"
    local = manifest["local_models"][f"local/{QWEN}"]
    assert local["file_sha256"] == models.lookup(QWEN).file.sha256 and local["kind"] == "instruct"

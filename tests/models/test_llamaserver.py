"""llama-server as the local runtime (issue 43 item 5): which runtime a run uses, the binary's
folder and build record, its command line, and a run served by it end to end (the server is
``tests/fake_llama_server.py`` behind a fake binary: no build or model needed)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive
from layerlab.cli import app
from layerlab.harness.live import LiveConfig
from layerlab.harness.live.engine import reply_key
from layerlab.models import llamaserver, runtime
from layerlab.models import local as models

runner = CliRunner()
FAKE = Path(__file__).parents[1] / "fake_llama_server.py"
HASWELL = frozenset("fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2".split())


def test_the_runtime_is_llama_cpp_python_unless_the_environment_names_another() -> None:
    assert llamaserver.selected({}) == "llama-cpp-python" == llamaserver.DEFAULT
    assert llamaserver.selected({llamaserver.ENV: "llama-server"}) == "llama-server"
    with pytest.raises(llamaserver.ServerRuntimeError) as exc:
        llamaserver.selected({llamaserver.ENV: "vllm"})
    assert str(exc.value) == (
        "environment variable LAYERLAB_LOCAL_RUNTIME='vllm': expected one of "
        "llama-cpp-python, llama-server"
    )


def test_the_binary_folder_is_keyed_like_the_wheel(tmp_path: Path) -> None:
    args = runtime.PORTABLE_ARGS
    where = llamaserver.folder("0.3.36", args, tmp_path)
    assert where.parent == tmp_path / "llama-server"
    assert where.name.startswith("0.3.36-") and where.name.endswith(runtime.wheel_key(args))
    assert llamaserver.folder("0.3.37", args, tmp_path) != where


def test_the_makefile_builds_llama_server_only_when_asked() -> None:
    import subprocess

    root = Path(__file__).parents[2]
    make = ["make", "-s", "-n", "-B", f"LLAMA_CMAKE_ARGS={runtime.PORTABLE_ARGS}"]
    opt_in = subprocess.run([*make, "local-server"], capture_output=True, text=True, cwd=root,
                            check=True).stdout  # fmt: skip
    assert f"-{runtime.wheel_key(runtime.PORTABLE_ARGS)}/build.json" in opt_in
    assert "llamaserver.py build" in opt_in and "--require-hashes" in opt_in
    assert "LAYERLAB_LOCAL_RUNTIME=llama-server" in opt_in and "models check" in opt_in
    for default in ("local", "test"):
        out = subprocess.run([*make, default], capture_output=True, text=True, cwd=root,
                             check=True).stdout  # fmt: skip
        assert "llamaserver.py build" not in out, default


def test_the_command_serves_every_slot_a_whole_context_with_llama_cpp_pythons_sampler() -> None:
    sampler = {"top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.1, "seed": 3}
    cmd = llamaserver.command("/x/llama-server", "/m.gguf", "qwen", 8123, n_ctx=4096, threads=2,
                              slots=2, sampler=sampler, speculative="ngram-simple")  # fmt: skip
    line = " ".join(cmd)
    assert cmd[0] == "/x/llama-server" and "--host 127.0.0.1 --port 8123" in line
    assert "--ctx-size 8192 --parallel 2" in line and "--threads 2 --threads-batch 2" in line
    assert "--repeat-penalty 1.1" in line and "--top-k 40" in line and "--min-p 0.05" in line
    assert "--jinja" in cmd and "--spec-type ngram-simple" in line
    assert "--seed 0" in line and "3" not in cmd  # a key that is no sampler flag is not sent
    with pytest.raises(llamaserver.ServerRuntimeError, match="expected one of ngram-simple"):
        llamaserver.command("x", "m", "a", 1, n_ctx=512, threads=1, speculative="eagle")
    with pytest.raises(llamaserver.ServerRuntimeError, match="slots must be >= 1"):
        llamaserver.command("x", "m", "a", 1, n_ctx=512, threads=1, slots=0)
    with pytest.raises(llamaserver.ServerRuntimeError, match="llama-cpp-python's"):
        llamaserver.command("x", "m", "a", 1, n_ctx=512, threads=1, chat_format="gemma")


def test_a_run_on_llama_server_uses_one_server_of_every_thread_and_slot() -> None:
    assert llamaserver.layout(2) == (1, 2, llamaserver.SLOTS)
    assert llamaserver.layout(1, 4) == (1, 4, llamaserver.SLOTS)


def _fake_build(where: Path, needs: list[str]) -> Path:
    where.mkdir(parents=True)
    exe = where / llamaserver.BINARY
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" --die-after -1 "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    record = {
        "schema": llamaserver.SCHEMA, "llama_cpp_python": "0.3.36", "llama_cpp": "b1-abc",
        "cmake_args": runtime.PORTABLE_ARGS, "server_args": llamaserver.SERVER_ARGS,
        "needs": needs, "built_on": {"cpu": "Test CPU"},
    }  # fmt: skip
    (where / runtime.BUILD_RECORD).write_text(json.dumps(record))
    return exe


def test_a_missing_or_foreign_binary_is_refused_with_what_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(llamaserver.ServerRuntimeError, match="run `make local-server`"):
        llamaserver.binary(tmp_path / "none")
    _fake_build(tmp_path / "b", ["avx2", "avx512f"])
    monkeypatch.setattr(runtime, "cpu_flags", lambda *_a: HASWELL)
    with pytest.raises(llamaserver.ServerRuntimeError, match=r"lacks: avx512f; run `make local-server"):
        llamaserver.binary(tmp_path / "b")
    assert llamaserver._main(["verify", str(tmp_path / "b" / "build.json")]) == 2
    assert llamaserver._main(["verify", str(tmp_path / "none" / "build.json")]) == 2


def test_a_llama_server_runs_replies_are_keyed_apart_from_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = LiveConfig(models=("local/smollm2-135m",), scenarios=("clean",))
    ident = ("local/smollm2-135m", "clean", "strict", "t", 0)
    monkeypatch.delenv(llamaserver.ENV, raising=False)
    default = reply_key(cfg, "local/smollm2-135m", "p" * 64, ident)
    monkeypatch.setenv(llamaserver.ENV, "llama-cpp-python")
    assert reply_key(cfg, "local/smollm2-135m", "p" * 64, ident) == default
    monkeypatch.setenv(llamaserver.ENV, "llama-server")
    assert reply_key(cfg, "local/smollm2-135m", "p" * 64, ident) != default
    assert reply_key(cfg, "openai/x", "p" * 64, ident) == reply_key(
        cfg, "openai/x", "p" * 64, ident
    )


@pytest.fixture()
def fake_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """llama-server is the fake binary (it serves like the extractive agent); the model is
    taken as fetched."""
    exe = _fake_build(tmp_path / "llama-server", ["avx2"])
    monkeypatch.setattr(runtime, "cpu_flags", lambda *_a: HASWELL)
    monkeypatch.setattr(llamaserver, "installed_folder", lambda: exe.parent)
    monkeypatch.setattr(models, "runtime_version", lambda: "0.3.36")
    monkeypatch.setattr(models, "is_fetched", lambda _spec: True)
    monkeypatch.setattr(models, "fetch", lambda spec, **_k: models.model_path(spec))
    monkeypatch.setenv(llamaserver.ENV, "llama-server")
    return exe


def test_a_run_served_by_llama_server_says_so_in_its_manifest(fake_server: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = runner.invoke(app, [
        "run", "live", "-m", "local/smollm2-135m", "--out", str(out), "--scenario", "clean",
        "--tasks", "finance-01-q1,finance-02-q1,finance-03-q1", "--no-progress",
        "--cache-dir", str(tmp_path / "cache"), "--local-servers", "2",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    local = archive.read_manifest(out)["local_models"]["local/smollm2-135m"]
    assert local["runtime"] == "llama-server b1-abc (llama.cpp vendored by llama-cpp-python 0.3.36)"
    assert local["servers"] == 1 and local["server"]["slots"] == llamaserver.SLOTS
    assert local["server"]["runtime"] == "llama-server" and local["server"]["n_threads"] == 2
    assert local["runtime_build"]["server_args"] == llamaserver.SERVER_ARGS
    assert len(archive.read_records(out / archive.ARCHIVE)) == 6


def test_models_serve_starts_the_binary_with_its_slots(fake_server: Path) -> None:
    server = models.start(models.lookup("smollm2-135m"), runtime_name="llama-server", slots=3,
                          n_threads=2)  # fmt: skip
    try:
        args = [str(a) for a in server.process.args]
        assert args[0] == str(fake_server) and "--parallel" in args
        assert args[args.index("--parallel") + 1] == "3"
        for key, value in models.sampler_defaults().items():  # llama-cpp-python's, if installed
            flag = llamaserver.SAMPLER_FLAGS[key]
            assert args[args.index(flag) + 1] == str(value), flag
        assert models.answers(server.api_base)
    finally:
        server.stop()


def test_a_llama_server_run_sends_llama_cpp_pythons_grammar_for_the_reply_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from layerlab.harness.live import routes_for

    cfg = LiveConfig(models=("local/smollm2-135m",), scenarios=("clean",),
                     response_format="json_schema")  # fmt: skip
    msgs = [{"role": "user", "content": "q"}]
    local = {"local/smollm2-135m": ["http://127.0.0.1:1/v1"]}
    monkeypatch.delenv(llamaserver.ENV, raising=False)
    default = routes_for(cfg, 1, local)["local/smollm2-135m"].request(msgs, 7)
    assert default["response_format"]["type"] == "json_object" and "extra_body" not in default
    monkeypatch.setenv(llamaserver.ENV, "llama-server")
    got = routes_for(cfg, 1, local)["local/smollm2-135m"].request(msgs, 7)
    assert "response_format" not in got and got["seed"] == 7
    grammar = got["extra_body"]["grammar"]
    assert grammar == llamaserver.grammar_for(default["response_format"])
    assert grammar.startswith("answer ::=") and 'root ::= "{"' in grammar

"""The local model runtime: its build (flags, the CPU features it needs, the wheel cache key) and
a local server that dies, reported as a dying server in one line, before and during a run and
by ``layerlab models serve``. The dying server is ``tests/fake_llama_server.py`` (no runtime or
model needed): it kills itself by SIGSEGV on a chosen completion, as llama.cpp's AMX kernels did
on a CPU that lists AMX."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive
from layerlab.cli import app
from layerlab.models import local as models
from layerlab.models import runtime

runner = CliRunner()
FAKE = Path(__file__).parents[1] / "fake_llama_server.py"
MODEL = "smollm2-135m"
SPR = frozenset(  # a CPU that lists AVX-512 and AMX (Sapphire Rapids), as /proc/cpuinfo says
    "fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2 avx512f avx512cd "
    "avx512bw avx512dq avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_int8 amx_bf16".split()
)
HASWELL = frozenset(
    "fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt avx avx2 fma f16c bmi1 bmi2".split()
)
NATIVE_NO_AMX = (
    "-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DLLAVA_BUILD=OFF"
)


# --- the build -------------------------------------------------------------------------------


def test_a_process_end_is_named_by_its_signal_or_exit_code() -> None:
    assert runtime.describe_exit(-11) == "was killed by SIGSEGV (signal 11)"
    assert runtime.describe_exit(-4) == "was killed by SIGILL (signal 4)"
    assert runtime.describe_exit(3) == "exited with code 3"
    crash = runtime.advice(-11, {"cmake_args": "-DGGML_NATIVE=ON"})
    assert 'LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON"' in crash and runtime.PORTABLE_ARGS in crash
    assert "memory" in runtime.advice(-9)
    # a portable build that crashes too is sent further down: no AVX2
    again = runtime.advice(-4, {"cmake_args": f"{runtime.PORTABLE_ARGS} -DLLAVA_BUILD=OFF"})
    assert runtime.MINIMAL_ARGS in again and "without AVX2" in again


def test_the_wheel_key_follows_the_flags_and_a_native_builds_cpu() -> None:
    portable = runtime.PORTABLE_ARGS
    assert runtime.wheel_key(portable, SPR) == runtime.wheel_key(portable, HASWELL)
    assert runtime.wheel_key(NATIVE_NO_AMX, SPR) != runtime.wheel_key(NATIVE_NO_AMX, HASWELL)
    assert runtime.wheel_key(NATIVE_NO_AMX, SPR) != runtime.wheel_key(portable, SPR)
    # the same flags however they are spaced or quoted
    assert runtime.wheel_key(portable.replace(" ", "  "), SPR) == runtime.wheel_key(portable, SPR)


def test_a_native_build_needs_the_build_cpus_instruction_sets_but_what_it_switched_off() -> None:
    assert runtime.is_native(NATIVE_NO_AMX) and not runtime.is_native(runtime.PORTABLE_ARGS)
    assert runtime.disabled(NATIVE_NO_AMX) == {"amx_tile", "amx_int8", "amx_bf16"}
    built_on = runtime.isa(SPR)
    native = runtime.needs(NATIVE_NO_AMX, ["AVX2", "AVX512", "AVX512_VNNI"], built_on)
    assert "avx512_fp16" in native and "avx512f" in native
    assert not {"amx_tile", "amx_int8", "amx_bf16"} & set(native)
    portable = runtime.needs(
        runtime.PORTABLE_ARGS, ["SSE3", "AVX", "AVX2", "FMA", "F16C"], built_on
    )
    assert portable == ["pni", "avx", "avx2", "fma", "f16c"]
    assert runtime.missing_features({"needs": portable}, HASWELL) == []
    assert runtime.missing_features({"needs": native}, HASWELL) == [
        f for f in native if f not in HASWELL
    ]


def test_a_runtime_built_for_another_cpu_is_refused_before_it_is_served(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    record = {
        "schema": runtime.BUILD_SCHEMA, "cmake_args": NATIVE_NO_AMX, "needs": ["avx2", "avx512f"],
        "built_on": {"cpu": "Intel(R) Xeon(R) Platinum 8480+"},
    }  # fmt: skip
    path = tmp_path / runtime.BUILD_RECORD
    path.write_text(json.dumps(record))
    monkeypatch.setattr(runtime, "cpu_flags", lambda *_a: HASWELL)
    assert runtime._main(["verify", str(path)]) == 2
    monkeypatch.setattr(runtime, "installed", lambda: record)
    with pytest.raises(models.ModelError, match=r"needs CPU feature\(s\) .* lacks: avx512f"):
        models.check_build()
    record["needs"] = ["avx2"]
    path.write_text(json.dumps(record))
    assert runtime._main(["verify", str(path)]) == 0
    models.check_build()


def test_the_makefile_keys_its_wheel_folder_by_the_runtime_key() -> None:
    import subprocess

    args = runtime.PORTABLE_ARGS
    out = subprocess.run(
        ["make", "-s", "-n", "-B", "local", f"LLAMA_CMAKE_ARGS={args}"],
        capture_output=True, text=True, cwd=Path(__file__).parents[2], check=True,
    ).stdout  # fmt: skip
    assert f"-{runtime.wheel_key(args)}/build.json" in out
    assert "--no-cache-dir" in out  # pip's own wheel cache ignores CMAKE_ARGS
    assert "layerlab models check" in out


# --- a server that dies ----------------------------------------------------------------------


@pytest.fixture()
def dying(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Local servers are the fake: ``dying(k)`` makes the next ones answer k completions, then
    die by SIGSEGV (k = -1: never)."""
    die_after = [0]

    def command(spec: models.ModelSpec, port: int, settings: models.ServerSettings) -> list[str]:
        return [sys.executable, str(FAKE), "--port", str(port), "--die-after", str(die_after[0])]

    monkeypatch.setattr(models, "server_command", command)
    monkeypatch.setattr(models, "runtime_version", lambda: "0.3.36")
    monkeypatch.setattr(models, "is_fetched", lambda _spec: True)
    monkeypatch.setattr(models, "fetch", lambda spec, **_k: models.model_path(spec))
    monkeypatch.setattr(models, "check_build", lambda: None)

    def set_(k: int) -> None:
        die_after[0] = k

    return set_


def _run_args(out: Path, cache: Path) -> list[str]:
    return [
        "run", "live", "-m", f"local/{MODEL}", "--out", str(out),
        "--tasks", "finance-01-q1,finance-02-q1,finance-03-q1", "--scenario", "clean",
        "--no-progress", "--cache-dir", str(cache), "--local-servers", "1",
    ]  # fmt: skip


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


def test_a_server_that_dies_on_its_first_prompt_is_named_with_its_signal(
    dying, tmp_path: Path
) -> None:
    dying(0)
    out = tmp_path / "run"
    res = runner.invoke(app, _run_args(out, tmp_path / "cache"))
    assert res.exit_code == 1, res.output
    line = _error_line(res.output)
    assert f"local/{MODEL}: its llama.cpp server" in line
    assert "was killed by SIGSEGV (signal 11)" in line
    assert "fake llama server: dying by SIGSEGV" in line  # the last lines of its log
    assert "log: " in line and "make local LLAMA_CMAKE_ARGS=" in line
    assert "nothing written" in line and "Connection error" not in line
    assert not out.exists()


def test_a_server_that_dies_mid_run_leaves_a_resumable_partial_archive(
    dying, tmp_path: Path
) -> None:
    dying(2)
    out, cache = tmp_path / "run", tmp_path / "cache"
    res = runner.invoke(app, _run_args(out, cache))
    assert res.exit_code == 1, res.output
    line = _error_line(res.output)
    assert "was killed by SIGSEGV" in line and "partial archive" in line and "--resume" in line
    info = archive.check_path(out)
    recs = archive.read_records(out / archive.ARCHIVE)
    assert info["partial"] is True and 0 < len(recs) < 6, len(recs)
    assert not any(r.diagnostic == "provider_error" for r in recs)  # the death is no record
    dying(-1)
    again = runner.invoke(app, [*_run_args(out, cache), "--resume"])
    assert again.exit_code == 0, again.output
    done = archive.read_records(out / archive.ARCHIVE)
    assert len(done) == 6 and archive.check_path(out)["complete"] is True
    assert {(r.scenario, r.mitigation) for r in recs} <= {(r.scenario, r.mitigation) for r in done}


def test_models_serve_exits_non_zero_when_its_server_dies(dying, tmp_path: Path) -> None:
    dying(0)
    port = models.free_port()
    base = f"http://127.0.0.1:{port}/v1"

    def ask() -> None:  # one completion once the server answers, as a client would send
        for _ in range(400):
            try:
                urllib.request.urlopen(base + "/models", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
        req = urllib.request.Request(
            base + "/chat/completions", body.encode(), {"Content-Type": "application/json"}
        )
        try:
            urllib.request.urlopen(req, timeout=10).read()
        except OSError:
            pass  # the server died under the request

    client = threading.Thread(target=ask, daemon=True)
    client.start()
    old = signal.getsignal(signal.SIGTERM)
    try:
        res = runner.invoke(app, ["models", "serve", MODEL, "--port", str(port)])
    finally:
        signal.signal(signal.SIGTERM, old)
    client.join(10)
    assert res.exit_code == 1, res.output
    line = _error_line(res.output)
    assert "was killed by SIGSEGV (signal 11)" in line and "log: " in line
    assert "stopped" not in res.output

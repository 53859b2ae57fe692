"""llama.cpp's own server (``llama-server``) as a second local model runtime, beside
llama-cpp-python's server (the default): its build, the command that serves a model, and which
runtime a run uses.

The binary is compiled from the llama.cpp source that llama-cpp-python's sdist vendors (the same
sdist, pinned by sha256 in ``requirements-llama.lock``), with the same ``LLAMA_CMAKE_ARGS`` as
the wheel plus the server's own switches (:data:`SERVER_ARGS`: static, no network, no web UI).
It is kept in the user cache in a folder keyed like the wheel's
(``llama-server/<version>-<machine>-<key>``, :func:`runtime.wheel_key`), with a build record
(``build.json``) that is checked against the CPU before the binary is served, and ``make
local-server`` ends with one real completion through it (``layerlab models check --runtime
llama-server``). It is opt-in: ``make local`` and the tests never build it.

A run picks the runtime with ``LAYERLAB_LOCAL_RUNTIME`` (:func:`selected`); a llama-server
serves ``slots`` requests at once (``--parallel``) and may decode speculatively from the prompt
(``--spec-type ngram-simple``). It is sent llama-cpp-python's sampler defaults as its own
(:func:`command`), so a request that leaves them out is sampled alike by both runtimes.

Used by the Makefile as a script with the standard library only::

    python layerlab/models/llamaserver.py build SDIST DIR CMAKE_ARGS   # compile into DIR
    python layerlab/models/llamaserver.py verify DIR/build.json        # exit 2 if unusable here
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script by the Makefile: runtime.py sits beside it
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import runtime  # type: ignore[import-not-found,no-redef]
else:
    from layerlab.models import runtime

ENV = "LAYERLAB_LOCAL_RUNTIME"
DEFAULT = "llama-cpp-python"
RUNTIMES = (DEFAULT, "llama-server")
BINARY = "llama-server"
SCHEMA = "layerlab.llama-server-build/1"
SPECULATIVE = ("ngram-simple",)
"""The speculative decoding a llama-server may be started with: prompt lookup (drafts copied
from the prompt's own n-grams; no second model)."""

SERVER_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "
    "-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TOOLS=ON "
    "-DLLAMA_BUILD_SERVER=ON"
)
"""Added after the wheel's flags: one static binary, built offline (no curl, no TLS, no web UI
fetched from a hub)."""

SAMPLER_FLAGS = {
    "top_k": "--top-k",
    "top_p": "--top-p",
    "min_p": "--min-p",
    "repeat_penalty": "--repeat-penalty",
    "presence_penalty": "--presence-penalty",
    "frequency_penalty": "--frequency-penalty",
}
"""llama-server's flags for the sampler settings a request may leave out (their defaults differ
from llama-cpp-python's: repeat penalty 1.0 against 1.1, which acts even at temperature 0)."""


class ServerRuntimeError(RuntimeError):
    """A llama-server that is not built, or cannot run here (message says what to do)."""


def selected(environ: Mapping[str, str] | None = None) -> str:
    """The local runtime a run uses: ``$LAYERLAB_LOCAL_RUNTIME``, else llama-cpp-python."""
    env = os.environ if environ is None else environ
    value = (env.get(ENV) or DEFAULT).strip()
    if value not in RUNTIMES:
        raise ServerRuntimeError(
            f"environment variable {ENV}={value!r}: expected one of {', '.join(RUNTIMES)}"
        )
    return value


SLOTS = 4
"""The slots of a run's llama-server (measured: see :func:`layout`)."""


def layout(n_servers: int, threads: int = 1) -> tuple[int, int, int]:
    """(servers, threads each, slots each) of a run's llama-server where llama-cpp-python would
    run ``n_servers`` servers of ``threads`` threads: one server with all their threads and
    :data:`SLOTS` slots (it batches the slots' tokens in one pass over the weights, which
    separate single-slot servers cannot; docs/local-models.md has the measurements)."""
    return 1, max(1, n_servers * threads), SLOTS


# --- where the binary is ---------------------------------------------------------------------


def folder(version: str, cmake_args: str, cache: Path) -> Path:
    """The binary's folder: ``<cache>/llama-server/<version>-<machine>-<key>``, the key the
    wheel's (:func:`runtime.wheel_key`: the flags and, for a native build, this CPU)."""
    key = runtime.wheel_key(cmake_args)
    return cache / "llama-server" / f"{version}-{platform.machine()}-{key}"


def installed_folder() -> Path:
    """The folder of the llama-server built like the installed llama-cpp-python wheel (its
    version and ``LLAMA_CMAKE_ARGS``, from the wheel's build record)."""
    from importlib.metadata import PackageNotFoundError, version

    from layerlab import paths

    build = runtime.installed()
    try:
        v = version("llama_cpp_python")
    except PackageNotFoundError:
        build = None
    if build is None:
        raise ServerRuntimeError(
            "llama-server is built like the installed llama-cpp-python wheel, and none was "
            "installed by `make local`; run `make local-server`"
        )
    return folder(v, build["cmake_args"], paths.user_cache())


def binary(where: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """The built binary and its build record, checked against this CPU; else
    :class:`ServerRuntimeError` saying what to run."""
    where = where or installed_folder()
    record = read_record(where / runtime.BUILD_RECORD)
    exe = where / BINARY
    if record is None or not exe.is_file():
        raise ServerRuntimeError(
            f"{where}: no llama-server built there; run `make local-server` (it compiles "
            "llama.cpp's server once: docs/local-models.md says how long that takes)"
        )
    missing = runtime.missing_features(record)
    if missing:
        raise ServerRuntimeError(
            runtime.refusal(record, missing, str(where)).replace("make local", "make local-server")
        )
    return exe, record


def read_record(path: Path | str) -> dict[str, Any] | None:
    """A llama-server build record, or None if the file is absent or not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


# --- serving ---------------------------------------------------------------------------------


def command(
    exe: Path | str,
    model: Path | str,
    alias: str,
    port: int,
    *,
    n_ctx: int,
    threads: int,
    slots: int = 1,
    seed: int = 0,
    sampler: Mapping[str, Any] | None = None,
    speculative: str | None = None,
    jinja: bool = True,
    chat_format: str | None = None,
) -> list[str]:
    """The command that serves ``model`` on 127.0.0.1:``port``: ``slots`` requests at once,
    each with the whole ``n_ctx`` (the context is split among slots, so it is multiplied),
    ``threads`` threads, the GGUF's own chat template rendered by Jinja (as llama-cpp-python
    renders it; ``--no-jinja`` takes llama.cpp's built-in one), and ``sampler`` (llama-cpp-python's
    request defaults) as the server's defaults."""
    if slots < 1:
        raise ServerRuntimeError(f"slots must be >= 1, got {slots}")
    if speculative is not None and speculative not in SPECULATIVE:
        raise ServerRuntimeError(
            f"speculative decoding {speculative!r}: expected one of {', '.join(SPECULATIVE)}"
        )
    if chat_format is not None:
        raise ServerRuntimeError(
            f"chat_format {chat_format!r} is llama-cpp-python's; llama-server renders the GGUF's "
            "own template: serve this model with llama-cpp-python"
        )
    cmd = [
        str(exe), "--model", str(model), "--alias", alias, "--host", "127.0.0.1",
        "--port", str(port), "--ctx-size", str(n_ctx * slots), "--parallel", str(slots),
        "--threads", str(threads), "--threads-batch", str(threads), "--seed", str(seed),
        "--jinja" if jinja else "--no-jinja", "--no-webui", "--no-warmup",
    ]  # fmt: skip
    for key, value in (sampler or {}).items():
        if key in SAMPLER_FLAGS and value is not None:
            cmd += [SAMPLER_FLAGS[key], str(value)]
    if speculative:
        cmd += ["--spec-type", speculative]
    return cmd


def grammar_for(response_format: Mapping[str, Any]) -> str:
    """llama-cpp-python's grammar for a local ``response_format``'s schema, which a run sends
    llama-server (``grammar``) in its place: llama-server's own grammar for the schema lets the
    reply be laid out over lines, so no greedy reply matched llama-cpp-python's (with this one,
    9 of 12 did; docs/local-models.md)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return str(json_schema_to_gbnf(json.dumps(response_format["schema"])))


def describe(record: Mapping[str, Any]) -> str:
    """How a manifest names this runtime: ``llama-server <its --version> (llama.cpp vendored
    by llama-cpp-python <version>)``."""
    return (
        f"llama-server {record.get('llama_cpp') or 'unknown build'} (llama.cpp vendored by "
        f"llama-cpp-python {record.get('llama_cpp_python')})"
    )


def provenance(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a run manifest records of the binary's build and of the CPU it ran on."""
    return {
        "cmake_args": record.get("cmake_args"),
        "server_args": record.get("server_args"),
        "needs": record.get("needs"),
        "built_on": (record.get("built_on") or {}).get("cpu"),
        "cpu": runtime.cpu_model(),
        "cpu_isa": runtime.isa(),
    }


# --- the build -------------------------------------------------------------------------------


def _flag_features(cmake_args: str) -> list[str]:
    """llama.cpp's CPU paths the flags switch on (``-DGGML_AVX2=ON`` -> ``AVX2``)."""
    d = runtime._defines(cmake_args)
    on = {"ON", "1", "TRUE", "YES"}
    return [n for n in runtime.SYSTEM_INFO_FEATURES if d.get(f"GGML_{n}", "").upper() in on]


def _sdist_version(sdist: Path) -> str:
    stem = sdist.name.removesuffix(".tar.gz")
    return stem.split("-", 1)[1] if "-" in stem else "unknown"


def build(sdist: Path, dest: Path, cmake_args: str, jobs: int | None = None) -> dict[str, Any]:
    """Compile llama-server from the llama.cpp that ``sdist`` vendors into ``dest`` (built in
    ``dest.part``, moved only when it runs): the binary and its build record."""
    began = time.monotonic()
    part = dest.with_name(dest.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="llama-server-", dir=part) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        src = top / "vendor" / "llama.cpp"
        if not (src / "tools" / "server").is_dir():
            raise ServerRuntimeError(f"{sdist}: no vendor/llama.cpp/tools/server in it")
        out = Path(tmp) / "build"
        args = shlex.split(cmake_args) + shlex.split(SERVER_ARGS)
        for step in (
            ["cmake", "-S", str(src), "-B", str(out), *args],
            ["cmake", "--build", str(out), "--target", BINARY, "-j", str(jobs or os.cpu_count() or 1)],
        ):  # fmt: skip
            proc = subprocess.run(step, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
                raise ServerRuntimeError(f"{' '.join(step[:2])} failed: {tail}")
        shutil.copy2(out / "bin" / BINARY, part / BINARY)
    seconds = time.monotonic() - began
    record = _record(part / BINARY, cmake_args, _sdist_version(sdist), seconds)
    (part / runtime.BUILD_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    part.rename(dest)
    return record


def _record(exe: Path, cmake_args: str, version: str, seconds: float) -> dict[str, Any]:
    """The build record of a binary just built: it must run here (``--version``)."""
    proc = subprocess.run(
        [str(exe), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise ServerRuntimeError(
            f"{exe} --version {runtime.describe_exit(proc.returncode)}: "
            f"{(proc.stderr or proc.stdout).strip()[-300:]}"
        )
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("version:")]
    build = said[0].removeprefix("version:").strip() if said else None  # 0.5.0-dev (build 1, ...)
    compiled = _flag_features(cmake_args)
    here = runtime.isa()
    return {
        "schema": SCHEMA,
        "llama_cpp_python": version,
        "llama_cpp": build,
        "cmake_args": cmake_args.strip(),
        "server_args": SERVER_ARGS,
        "native": runtime.is_native(cmake_args),
        "compiled": compiled,
        "needs": runtime.needs(cmake_args, compiled, here),
        "built_on": {"cpu": runtime.cpu_model(), "machine": platform.machine(), "isa": here},
        "build_seconds": round(seconds),
    }


def _main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "build":
        try:
            rec = build(Path(argv[1]), Path(argv[2]), argv[3])
        except (ServerRuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"error: building llama-server: {exc}", file=sys.stderr)
            return 1
        print(
            f"built {describe(rec)} with LLAMA_CMAKE_ARGS=\"{rec['cmake_args']}\" in "
            f"{rec['build_seconds']} s; needs {len(rec['needs'])} CPU feature(s) ({argv[2]})"
        )
        return 0
    if len(argv) >= 2 and argv[0] == "verify":
        try:
            binary(Path(argv[1]).parent)
        except ServerRuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    print(__doc__.split("::", 1)[1].rstrip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

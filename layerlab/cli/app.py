"""The ``layerlab`` command line.

Exit codes: 0 done; 1 an error (one line on stderr naming the file or flag and what was
expected; nothing written); 2 a usage error; 3 an incomplete run or a partial archive;
4 a run whose provider-error rate exceeded --max-error-rate (its archive is written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab.corpus.spec import SpecError
from layerlab.registry import PluginError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.corpus.build import AnswerKey, Corpus
    from layerlab.faults.scenario import Scenario

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_enable=False
)
EXIT_INCOMPLETE = 3
EXIT_ERROR_RATE = 4


def _version(value: bool) -> None:
    if value:
        from layerlab import __version__

        typer.echo(f"layerlab {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """LayerRAG-Bench: layered fault injection for retrieval-augmented agents."""


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _check_out(out: Path, flag: str = "--out") -> None:
    """Refuse an output folder that cannot be written, before any work is done."""
    from layerlab._io import writable_folder_problem

    problem = writable_folder_problem(out)
    if problem:
        raise _fail(f"{flag} {out}: {problem}")


def _check_out_file(out: Path, flag: str = "--out") -> None:
    """Refuse an output file path that cannot be written (a folder, under a file, read-only)."""
    from layerlab._io import writable_file_problem

    problem = writable_file_problem(out)
    if problem:
        raise _fail(f"{flag} {out}: {problem} (nothing written)")


def main(argv: list[str] | None = None) -> int:
    """Entry point: every error becomes one line on stderr and an exit code, never a traceback
    (set LAYERLAB_DEBUG=1 to see the traceback of an unexpected error)."""

    try:  # typer >= 0.20 vendors click; older typer raises click's own exceptions
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover
        from click import exceptions as click  # type: ignore[no-redef]

    try:
        rv = app(args=argv, prog_name="layerlab", standalone_mode=False)
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.format_message())
        return 2
    except click.UsageError as exc:
        msg = " ".join(exc.format_message().split())
        cmd = exc.ctx.command_path if exc.ctx is not None else "layerlab"
        typer.echo(f"error: {cmd}: {msg} (see --help)", err=True)
        return 2
    except click.ClickException as exc:
        typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("error: interrupted", err=True)
        return 130
    except OSError as exc:
        if os.environ.get("LAYERLAB_DEBUG"):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        typer.echo(f"error: {where}{exc.strerror or exc}", err=True)
        return 1
    except PluginError as exc:  # an installed plug-in is broken: not a bug of layerlab's
        if os.environ.get("LAYERLAB_DEBUG"):
            raise
        typer.echo(f"error: {exc}", err=True)
        return 1
    except Exception as exc:  # the last guard: a bug, reported in one line
        if os.environ.get("LAYERLAB_DEBUG"):
            raise
        first = (str(exc).splitlines() or [""])[0][:200]
        typer.echo(
            f"error: unexpected {type(exc).__name__}: {first} (a bug: please report it; "
            "LAYERLAB_DEBUG=1 shows the traceback)",
            err=True,
        )
        return 1
    return rv if isinstance(rv, int) else 0


def _spec_fail(exc: SpecError, what: str) -> typer.Exit:
    """Print one line per spec problem (one problem: that line alone); return the exit to raise."""
    if len(exc.problems) == 1:
        return _fail(str(exc.problems[0]))
    for problem in exc.problems:
        typer.echo(str(problem), err=True)
    return _fail(f"{len(exc.problems)} {what}")


def _group(name: str, help: str) -> typer.Typer:
    """A command group, registered on :data:`app` (``--help`` lists groups in this order)."""
    group = typer.Typer(no_args_is_help=True, help=help)
    app.add_typer(group, name=name)
    return group


spec_app = _group("spec", "Validate specification DSL files.")
corpus_app = _group("corpus", "Build the corpus from its specs.")
audit_app = _group("audit", "Audits that need no model.")
run_app = _group("run", "Run the benchmark harnesses.")
scenario_app = _group("scenario", "The fault-scenario DSL.")
mitigation_app = _group("mitigation", "Mitigations and the specificity matrix.")
archive_app = _group("archive", "Check, migrate and merge record archives.")
study_app = _group("study", "Focused studies.")
models_app = _group(
    "models",
    "Local open-weight models (data/specs/models.yaml): list, fetch into the user cache, serve.",
)


def _load_corpus(folder: Path) -> tuple[Corpus, AnswerKey]:
    from layerlab.corpus import build as corpus_mod

    try:
        return corpus_mod.load(folder), corpus_mod.load_answer_key(folder)
    except (corpus_mod.CorpusError, OSError, ValueError) as exc:
        raise _fail(str(exc)) from None


def _load_scenarios(path: Path) -> dict[str, Scenario]:
    from layerlab.faults.scenario import load_scenarios

    try:
        return dict(load_scenarios(path))
    except SpecError as exc:
        raise _spec_fail(exc, "scenario spec problem(s)") from None


def _load_mitigations(path: Path) -> Any:
    from layerlab.mitigations import load_mitigations

    try:
        return load_mitigations(path)
    except SpecError as exc:
        raise _spec_fail(exc, "mitigation spec problem(s)") from None

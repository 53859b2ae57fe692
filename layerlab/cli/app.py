"""The ``layerlab`` command line.

Exit codes: 0 done; 1 an error (one line on stderr naming the file or flag and what was
expected; nothing written); 2 a usage error; 3 an incomplete run or a partial archive;
4 a run whose provider-error rate exceeded --max-error-rate (its archive is written);
130 interrupted by Ctrl-C, 143 by SIGTERM (128 + the signal, as shells expect; one line says
what was saved and the command that resumes).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from layerlab.cli.help import Typer
from layerlab.corpus.spec import SpecError
from layerlab.registry import PluginError

if TYPE_CHECKING:  # the CLI imports heavy modules lazily, inside each command
    from layerlab.corpus.build import AnswerKey, Corpus
    from layerlab.faults.scenario import Scenario

app = Typer(  # plain help that fits the terminal, options in panels (layerlab.cli.help)
    no_args_is_help=True, add_completion=False, help=__doc__, pretty_exceptions_enable=False
)
EXIT_INCOMPLETE = 3
EXIT_ERROR_RATE = 4
SHORT_FLAGS = {"-m": "--model", "-o": "--out", "-y": "--yes"}
"""Every short flag of the command line and the one long flag it stands for, in every command
(a mitigation is always ``--mitigation``); ``tests/cli/test_flags.py`` holds the CLI to it."""
EXIT_SIGINT = 128 + signal.SIGINT  # 130: a shell reads it as "stopped by Ctrl-C"
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


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


def _shard_flag(value: str | None) -> str | None:
    """``--shard I/N`` checked where it is parsed (a usage error, exit 2)."""
    from layerlab.harness.live.shards import parse_shard

    if value is not None:
        try:
            parse_shard(value)
        except ValueError:
            raise typer.BadParameter(f"expected I/N with 1 <= I <= N, e.g. 2/4 (got {value!r})") from None
    return value


def _retriever_flag(value: str | None) -> str | None:
    """``--retriever`` checked where it is parsed (a usage error, exit 2, before any run folder
    exists): a registered name or an importable ``python:``/``langchain:`` factory."""
    from layerlab.system import retrieval

    if value is not None:
        try:
            retrieval.check(value)
        except retrieval.RetrieverError as exc:
            raise _usage(str(exc)) from None
    return value


def _usage(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


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


def _not_installed(exc: Exception, args: list[str]) -> str | None:
    """The one line for a command that needs an extra that is not installed, or the repository."""
    from layerlab import extras, paths

    if isinstance(exc, paths.NotInRepo):
        return str(exc)
    words = [a for a in args[:2] if not a.startswith("-")]
    return extras.missing_line(exc, " ".join(["layerlab", *words]))


def main(argv: list[str] | None = None) -> int:
    """Entry point: every error becomes one line on stderr and an exit code, never a traceback
    (set LAYERLAB_DEBUG=1 to see the traceback of an unexpected error). A thread a target left
    running does not keep the process alive (:func:`~layerlab.harness.targets.execute.exit_past_leftovers`)."""
    code = _main(argv)
    execute = sys.modules.get("layerlab.harness.targets.execute")  # imported by target runs only
    return execute.exit_past_leftovers(code) if execute is not None else code


def _main(argv: list[str] | None) -> int:

    try:  # typer >= 0.20 vendors click; older typer raises click's own exceptions
        from typer._click import exceptions as click
    except ImportError:  # pragma: no cover
        from click import exceptions as click  # type: ignore[no-redef]

    args = list(sys.argv[1:] if argv is None else argv)
    term: list[bool] = []
    old_term = _on_sigterm(term)
    try:
        # typer's own main turns Ctrl-C into a silent exit 130: invoke the command directly
        cmd = typer.main.get_command(app)
        with cmd.make_context("layerlab", args) as ctx:
            rv = cmd.invoke(ctx)
    except typer.Exit as exc:
        return exc.exit_code
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.format_message())
        return 2
    except click.UsageError as exc:
        msg = " ".join(exc.format_message().split())
        for short, long in SHORT_FLAGS.items():
            if msg.startswith(f"No such option: {short}") and msg[len(short) + 16 :][:1] in "( ":
                also = "; a mitigation is --mitigation" if long == "--model" else ""
                msg += f" ({short} is {long} wherever a command has one{also})"
        where = exc.ctx.command_path if exc.ctx is not None else "layerlab"
        typer.echo(f"error: {where}: {msg} (see --help)", err=True)
        return 2
    except click.ClickException as exc:
        typer.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt) as exc:  # click turns Ctrl-C into Abort
        cause = exc.__cause__ if isinstance(exc, typer.Abort) else exc
        typer.echo(interrupted_line(args, cause, bool(term)), err=True)
        return EXIT_SIGTERM if term else EXIT_SIGINT
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
        refused = _not_installed(exc, args)
        if refused:
            typer.echo(f"error: {refused}", err=True)
            return 2
        from layerlab._secrets import redact

        first = redact((str(exc).splitlines() or [""])[0])[:200]
        typer.echo(
            f"error: unexpected {type(exc).__name__}: {first} (a bug: please report it; "
            "LAYERLAB_DEBUG=1 shows the traceback)",
            err=True,
        )
        return 1
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
    return rv if isinstance(rv, int) else 0


def _on_sigterm(term: list[bool]) -> Any:
    """Deliver SIGTERM as Ctrl-C is delivered (a long command then saves what it has and says
    so), noting it in ``term``; the previous handler, or None outside the main thread."""

    def handler(signum: int, frame: Any) -> None:
        term.append(True)
        on_int = signal.getsignal(signal.SIGINT)
        if callable(on_int):  # Python's (raises KeyboardInterrupt) or asyncio's (cancels)
            on_int(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding caller): leave signals alone
        return None


def interrupted_line(args: list[str], exc: BaseException | None, term: bool) -> str:
    """The one line printed when a command is interrupted: which signal, what was saved, and
    the exact command that continues (``run live``: the same flags plus ``--resume``)."""
    import shlex

    how = "SIGTERM" if term else "Ctrl-C"
    command = "layerlab " + shlex.join(args)
    saved = getattr(exc, "records", None)
    if saved is not None:  # a live run (harness.live.RunInterrupted) saved its records
        again = command if "--resume" in args else command + " --resume"
        return (
            f"interrupted ({how}): run {exc.run_id} stopped with {saved} of "  # type: ignore[union-attr]
            f"{exc.expected} records saved in {exc.out} (a partial archive); "  # type: ignore[union-attr]
            f"resume with: {again}"
        )
    what = " ".join(a for a in args[:2] if not a.startswith("-")) or "layerlab"
    kept = _KEPT.get(what, "what it completed is kept, nothing half-written")
    return (
        f"interrupted ({how}): {what} stopped before it finished; {kept}; run it again: {command}"
    )


_WRITES_AT_END = "no records saved (it writes its archive when done, so nothing is half-written)"
_KEPT = {  # what an interrupted long command leaves behind
    "run deterministic": _WRITES_AT_END,
    "mitigation run": _WRITES_AT_END,
    "study langchain": _WRITES_AT_END,
    "reproduce": "the notebooks that finished have written their tables and figures",
}


def _spec_fail(exc: SpecError, what: str) -> typer.Exit:
    """Print one line per spec problem (one problem: that line alone), at most
    :data:`~layerlab._io.MAX_PROBLEM_LINES` and then a count; return the exit to raise."""
    from layerlab._io import capped_lines

    # a run configuration's gate: section that `layerlab gate` would refuse as bad input (exit 2)
    # is refused the same way before the run
    done = _usage if all(p.field.startswith("gate") for p in exc.problems) else _fail
    if len(exc.problems) == 1:
        return done(str(exc.problems[0]))
    for line in capped_lines([str(p) for p in exc.problems], "problem(s)"):
        typer.echo(line, err=True)
    return done(f"{len(exc.problems):,} {what}")


def _group(name: str, help: str) -> typer.Typer:
    """A command group, registered on :data:`app` (``--help`` lists groups in this order)."""
    group = Typer(no_args_is_help=True, help=help)
    app.add_typer(group, name=name)
    return group


spec_app = _group("spec", "Validate specification DSL files.")
corpus_app = _group(
    "corpus", "Build the corpus from its specs, or import your own documents (corpus import)."
)
conversations_app = _group(
    "conversations",
    "Multi-turn conversations over the corpus: build them from their specs, show one.",
)
audit_app = _group("audit", "Audits that need no model.")
run_app = _group("run", "Run the benchmark harnesses.")
scenario_app = _group("scenario", "The fault-scenario DSL.")
mitigation_app = _group("mitigation", "Mitigations and the specificity matrix.")
archive_app = _group("archive", "Check, migrate and merge record archives.")
study_app = _group("study", "Focused studies.")
cache_app = _group("cache", "The reply cache: check its health, repair a damaged one, clear it.")
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

"""``layerlab serve mcp``: a scenario's faulted tools as an MCP server, for interactive use."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import typer

from layerlab import paths
from layerlab.cli.app import EXIT_SIGTERM, _fail, _group, _load_scenarios, _usage

serve_app = _group("serve", "Serve the faulted tools to an agent of your own (MCP).")


def _corpus(folder: Path) -> Any:
    """The public corpus only (documents and questions): the answer key is never read here."""
    from layerlab.corpus import build as corpus_mod

    try:
        return corpus_mod.load(folder)
    except (corpus_mod.CorpusError, OSError, ValueError) as exc:
        raise _fail(str(exc)) from None


@serve_app.command("mcp")
def serve_mcp(
    scenario: str = typer.Option(..., "--scenario", help="The fault scenario (e.g. stale_index)."),
    mitigation: str = typer.Option(
        "strict", "--mitigation", help="The arm: its contract and mitigations (strict, repair...)."
    ),
    task: str | None = typer.Option(
        None, "--task", help="A task id: every MCP session is a record of it (the server's "
        "instructions give its question); default: the client picks one per address "
        "(?task=<task_id>), its question the resource layerlab://question and the prompt "
        "'question'."
    ),  # fmt: skip
    stdio: bool = typer.Option(
        False, "--stdio", help="Serve over stdin/stdout (what desktop clients launch); needs --task."
    ),
    port: int = typer.Option(0, "--port", help="Port on 127.0.0.1 (0: a free one)."),
    corpus_dir: Path = typer.Option(paths.CORPUS_DIR, "--corpus", help="Built corpus folder."),
    scenarios_path: Path = typer.Option(
        paths.SCENARIO_SPEC, "--scenarios", help="Scenario DSL file."
    ),
) -> None:
    """Serve the scenario's faulted search and open_document over MCP (streamable HTTP on
    127.0.0.1, at an address with a fresh unguessable token) until Ctrl-C: faults come back as
    MCP tool errors carrying {code, message}, exactly as in a target run."""
    from layerlab import mitigations
    from layerlab.harness.prepare import prepare
    from layerlab.harness.targets import mcp

    if not mcp.available():
        from layerlab.extras import install_hint

        raise _usage(f"layerlab serve mcp needs the MCP SDK: {install_hint('mcp')}")
    if stdio and task is None:
        raise _usage("--stdio needs --task (a stdio client cannot pick one on the address)")
    if stdio and port:
        raise _usage(f"--port {port}: not with --stdio (it serves over stdin/stdout, no port)")
    if not 0 <= port <= 65535:
        raise _usage(f"--port {port}: expected 0-65535")
    scen = _load_scenarios(scenarios_path)
    if scenario not in scen:
        raise _usage(f"--scenario {scenario!r}: not in {scenarios_path} (known: "
                     f"{', '.join(scen)})")  # fmt: skip
    try:
        arm = mitigations.arm(mitigation)
    except (KeyError, ValueError) as exc:
        raise _usage(f"--mitigation {mitigation!r}: {exc.args[0] if exc.args else exc}") from None
    corpus = _corpus(corpus_dir)
    tasks = {t.task_id: t for t in corpus.tasks}
    if task is not None and task not in tasks:
        raise _usage(f"--task {task!r}: no such task in {corpus_dir} (e.g. {next(iter(tasks))})")
    tools = mcp.Interactive(corpus.tasks, prepare(corpus, scen[scenario]), arm,
                            tasks[task] if task else None)  # fmt: skip
    if stdio:
        tools.serve_stdio()
        return
    term: list[bool] = []
    previous = _stop_on_sigterm(term)
    try:
        tools.serve_http(port, typer.echo)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how it stops (exit 0); SIGTERM too, with its exit status
    except OSError as exc:
        raise _fail(f"--port {port}: {exc.strerror or exc}") from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    typer.echo(f"stopped{' (SIGTERM)' if term else ''}: {tools.summary()}", err=True)
    if term:
        raise typer.Exit(EXIT_SIGTERM)


def _stop_on_sigterm(term: list[bool]) -> Any:
    """SIGTERM stops the server as Ctrl-C does, noted in ``term`` (the command then exits 143,
    as every command does on SIGTERM); the previous handler, None outside the main thread."""

    def handler(signum: int, frame: Any) -> None:
        term.append(True)
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return None

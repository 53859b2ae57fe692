"""``layerlab export inspect``: a finished run as another tool's log (Inspect AI's ``.eval``)."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import _check_out_file, _fail, _group, _usage

export_app = _group("export", "Export a finished run into another tool's format (Inspect AI).")


@export_app.command("inspect")
def export_inspect(
    run: Path = typer.Argument(..., metavar="RUN", help="A finished run folder."),
    out: Path | None = typer.Option(
        None, "--out", "-o", metavar="FILE",
        help="The .eval file to write (default: $INSPECT_LOG_DIR or ./logs, named after RUN).",
    ),  # fmt: skip
    model: str | None = typer.Option(
        None, "--model", "-m", help="The model to export, when RUN holds several (provider/model)."
    ),
    corpus: Path | None = typer.Option(
        None, "--corpus", help="The built corpus the run used (default: the committed one)."
    ),
) -> None:
    """The run's records as an Inspect AI log (.eval), written with Inspect's own writer: one
    sample per scenario, arm and task (epochs: the run's replicates), its public question, and
    the scorer's labels as its Score (S, E, R, G, V, safe resolution, GF). Archives keep no
    replies or answers, so neither does the log. Open it with `inspect view`."""
    import importlib.util

    if importlib.util.find_spec("inspect_ai") is None:
        from layerlab.extras import install_hint

        raise _usage(f"layerlab export inspect needs Inspect AI: {install_hint('inspect_ai')}")
    from layerlab.integrations.inspect import export

    target = out or export.default_out(run)
    if target.suffix != ".eval":
        raise _usage(f"--out {target}: expected a file name ending in .eval (Inspect's log format)")
    _check_out_file(target)
    try:
        log = export.write(run, target, corpus, model)
    except export.ExportError as exc:
        raise _fail(f"{exc} (nothing written)") from None
    typer.echo(f"wrote {target}: {len(log.samples)} samples of {log.eval.model} "
               f"({log.eval.dataset.samples} scenario x arm x task cells, "
               f"{log.eval.config.epochs} epoch(s)); open it with: inspect view --log-dir "
               f"{target.parent}")  # fmt: skip

"""``layerlab export inspect`` and ``export otel``: a finished run as another tool's log
(Inspect AI's ``.eval``) or as OpenTelemetry traces."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import _check_out_file, _fail, _group, _usage

export_app = _group(
    "export", "Export a finished run into another tool's format (Inspect AI, OpenTelemetry)."
)


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

OTEL_HELP = ("After the run, send its records as OpenTelemetry traces to this OTLP/HTTP collector "
             "(labels and keys only; `layerlab export otel --sample-log` sends the details).")


def otel_url(url: str | None) -> str | None:
    """``--otel-endpoint``/``--endpoint``: checked before anything runs (a usage error)."""
    if url is None:
        return None
    from layerlab.integrations.otel.export import ExportError, endpoint_url

    try:
        endpoint_url(url)
    except ExportError as exc:
        raise _usage(str(exc)) from None
    return url


@export_app.command("otel")
def export_otel(
    run: Path = typer.Argument(..., metavar="RUN", help="A run folder (a partial one: its records so far)."),
    endpoint: str = typer.Option(
        ..., "--endpoint", metavar="URL", callback=otel_url,
        help="An OTLP/HTTP collector (e.g. Phoenix: http://127.0.0.1:6006/v1/traces; a bare "
        "http://host:4318 gets /v1/traces).",
    ),  # fmt: skip
    sample_log: Path | None = typer.Option(
        None, "--sample-log", metavar="PATH",
        help="The run's private sample log: send the questions, replies, evidence ids, reasons "
        "and your pipeline's own spans too (only to a collector you control).",
    ),  # fmt: skip
    project: str | None = typer.Option(
        None, "--project", help="The project the traces are filed under (default: the run id)."
    ),
) -> None:
    """The run's records as OpenTelemetry traces, one per record: GenAI-convention spans
    (invoke_agent, retrieval, execute_tool, chat) carrying the fault (layerlab.fault.*) and the
    mitigation arm, and a gen_ai.evaluation.result event per score (S, E, R, G, V, GF, safe
    resolution). Without --sample-log only what the archive keeps is sent (labels and keys)."""
    say = send_otel(run, endpoint, sample_log, project)
    typer.echo(say)


def send_otel(
    run: Path, endpoint: str, sample_log: Path | None = None, project: str | None = None
) -> str:
    """Send a run to an OTLP/HTTP endpoint (``export otel``, ``run live --otel-endpoint``): the
    line to print; a one-line failure (exit 1) when it cannot be sent."""
    import importlib.util

    if importlib.util.find_spec("opentelemetry.exporter") is None:
        from layerlab.extras import install_hint

        raise _usage(f"exporting traces needs OpenTelemetry: {install_hint('opentelemetry')}")
    from layerlab.integrations.otel import export

    try:
        sent = export.send(run, endpoint, sample_log, project)
    except export.ExportError as exc:
        raise _fail(f"{exc} (nothing more sent)") from None
    what = "with the private sample log's details" if sent.private else "labels and keys only"
    return (f"sent {sent.records} records as traces ({sent.spans} spans, {what}) to "
            f"{export.endpoint_url(endpoint)}, project {sent.project}")  # fmt: skip

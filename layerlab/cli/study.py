"""``layerlab study langchain``: the focused LangChain study (Table 7)."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import _fail, study_app


@study_app.command("langchain")
def study_langchain(
    out: Path = typer.Option(..., help="Output folder (study.parquet, manifest.json)."),
    model: str = typer.Option(
        "layerlab/extractive",
        "--model",
        "-m",
        help="litellm model string (offline: a local reference agent).",
    ),
    seed: int = typer.Option(7, help="Seed of the task-selection rule."),
) -> None:
    """Table 7: 8 tasks x 9 conditions x 2 arms (uncontrolled vs LayerRAG controls) through LangChain."""
    try:
        from layerlab.harness import study
        from layerlab.reporting.format import terminal as report
    except ImportError as exc:
        raise _fail(str(exc)) from None
    try:
        m = study.run_to(out, model=model, seed=seed)
    except ImportError as exc:
        raise _fail(str(exc)) from None
    from layerlab.archive import read_study
    from layerlab.reporting.paper import tables

    report.print_frame(
        tables.table7(read_study(out)), f"Focused LangChain study ({m['records']} cells, {model})"
    )
    typer.echo(f"wrote {out / 'study.parquet'} and {out / 'manifest.json'}")

"""``layerlab surface``: a swept run's reliability surface — each layer's S, safe resolution and
pass^k over the fault's intensity λ, and how far along λ a threshold holds
(:mod:`layerlab.analysis.surface`; its table and lines are :mod:`layerlab.reporting.format.cells`'s,
its figure :func:`layerlab.reporting.paper.figures.reliability_surface`)."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import app

EXIT_BAD_INPUT = 2

_HELP = """Each layer's S, safe resolution and pass^k over the fault's intensity λ.

RUN is a run folder or archive swept over intensities (run live --intensity
0,0.1,0.25,0.5,1). Printed per model and arm: one row per layer and λ with
the rates' 95% intervals (Clopper-Pearson clustered by task, as results.json)
and pass^k of safe resolution for k = 2, 4, 8 up to the run's epochs; then per
layer how far along λ the metric stays >= --threshold: by the estimates, and
decided when every 95% lower bound up to that λ is >= it too (an
intersection-union test: error <= 2.5%); else inconclusive. --figure DIR
writes surface.png and surface.pdf (one panel per layer).
"""


@app.command("surface", help=_HELP)
def surface_cmd(
    run: Path = typer.Argument(..., metavar="RUN", help="A swept run folder or archive."),
    threshold: float = typer.Option(
        0.9, "--threshold", min=0.0, max=1.0, help="The share the metric must stay at or above."
    ),
    metric: str = typer.Option("safe", "--metric", help="safe (safe resolution) or S."),
    figure: Path = typer.Option(
        None, "--figure", metavar="DIR", help="Write surface.png and surface.pdf here."
    ),
) -> None:
    from layerlab.analysis import compare, surface
    from layerlab.reporting.format import cells, terminal

    if metric not in surface.METRICS:
        typer.echo(
            f"error: --metric {metric}: expected one of {', '.join(surface.METRICS)}", err=True
        )
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        curves = surface.surface(compare.load(run).df)
    except (compare.CompareError, surface.SurfaceError) as exc:
        typer.echo(f"error: RUN {run}: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    terminal.print_frame(cells.surface_table(curves), f"Reliability surface of {run}")
    for c in curves:
        if c.scenario != surface.CLEAN:
            typer.echo(cells.tolerance_line(surface.tolerance(c, threshold, metric)))
    if figure is not None:
        from layerlab.reporting.paper import figures

        fig = figures.reliability_surface(curves, f"Reliability surface of {run.name}")
        written = figures.save(fig, "surface", figure)
        typer.echo("figure: " + ", ".join(str(figure / f) for f in written))

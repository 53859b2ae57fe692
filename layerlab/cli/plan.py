"""``layerlab plan``: how many tasks x epochs a run needs for a conclusive verdict on a guard,
from a pilot run's own per-task rates (:mod:`layerlab.analysis.planning`)."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import app

EXIT_BAD_INPUT = 2

_HELP = """How many tasks x epochs a run needs for the verdict asked on MITIGATION.

From RUN (a pilot: a run folder or archive holding the mitigation arm beside its
baseline), each design of --tasks x --epochs is simulated --sims times: tasks drawn
with replacement from the pilot's (whole policies when question variants share
them), each record a draw at its task's per-arm rate, judged by the very rule of
Table 10 and the gate. Printed per design: the probability of each verdict, and
the smallest design whose probability of the verdict asked reaches 0.8. The
pilot's effects are taken as the truth; a pilot of one epoch makes a sampled
system look deterministic (its epochs are then left out): pilot it with --epochs 2.
"""


@app.command("plan", help=_HELP)
def plan_cmd(
    run: Path = typer.Argument(..., metavar="RUN", help="The pilot run folder or archive."),
    specific: str = typer.Option(
        ..., "--specific", metavar="MITIGATION", help="The mitigation arm to plan for."
    ),
    tasks: list[int] = typer.Option(
        None, "--tasks", min=2, help="Task counts to try (repeatable; default 16 25 40 ... 240)."
    ),
    epochs: list[int] = typer.Option(
        None, "--epochs", min=1, help="Epochs per record to try (repeatable; default 1 and 3)."
    ),
    conclusive: bool = typer.Option(
        False, "--conclusive", help="Ask for any conclusive verdict instead of specific."
    ),
    sims: int = typer.Option(200, "--sims", min=20, help="Simulated runs per design."),
    delta: float = typer.Option(
        None, "--delta", min=0.0, max=1.0, help="Equivalence margin (default: roles.yaml's)."
    ),
    seed: int = typer.Option(0, help="Seed of the simulation."),
) -> None:
    from layerlab.analysis import compare, planning
    from layerlab.archive.manifest import book_for
    from layerlab.mitigations import book
    from layerlab.reporting.format import terminal

    asked = "conclusive" if conclusive else "specific"
    try:
        df = compare.load(run).df
        spec = book_for([run], sorted(set(df["mitigation"])))
        tables = planning.plan_records(
            df, spec, specific, tasks or planning.SIZES, epochs or (1, 3), sims, seed, delta, asked
        )
    except (compare.CompareError, book.UnknownArmError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    for block, t in tables.items():
        shown = t.assign(
            **{c: t[c].map(lambda v: f"{v:.2f}") for c in (*_SHARES, "asked")},
            decides=t["decides"].map({True: "yes", False: "-"}),
        ).rename(columns={"asked": f"P({asked})"})
        terminal.print_wide(shown, f"Plan for {specific} from {run} ({block})")
        typer.echo(planning.advice(t, specific, asked))
    typer.echo(
        f"({sims} simulated runs per design; Monte Carlo s.e. of a probability at most "
        f"{50 / sims ** 0.5:.1f} pp; the pilot's effects taken as true)"
    )


_SHARES = ("specific", "over-broad", "ineffective", "inconclusive")

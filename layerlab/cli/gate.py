"""``layerlab gate``: CI gates on a run's rates and Table 10's verdicts (exit 0 pass, 1 fail,
2 bad input). The checks are :mod:`layerlab.analysis.gate`'s, their lines
:mod:`layerlab.reporting.format.gatetext`'s; this module reads the flags."""

from __future__ import annotations

from pathlib import Path

import typer

from layerlab.cli.app import app
from layerlab.cli.help import panelled

EXIT_FAILED, EXIT_BAD_INPUT = 1, 2

_HELP = """Fail (exit 1) when a rate crosses a threshold or a mitigation's Table 10
verdict is not what CI expects; exit 0 when every check passes, 2 on bad input
(one line naming the flag).

\b
A threshold is MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE:
  MEASURE   S strict success, SR (or safe) safe resolution, GF grounded
            false positive, GF_cited, E exact match, R retrieval,
            G citation, V schema, malformed, provider_error (shares);
            pass^K (on S) or safe^K (on SR) over the run's epochs
  :SCENARIO one scenario (at an intensity: stale_index@0.25); :* each on
            its own; none: over all scenarios
  @ARM      one mitigation arm (strict, repair, ...); none: each arm
  /MODEL    provider/model or the model's name; none: each unit
  VALUE     a share (0.6) or a percentage (60%)
Examples: --min S:clean=0.6  --min SR:permission_denied@strict=90%
          --max GF:*=0.1  --min S:clean@repair/local/qwen2.5-coder-1.5b=0.5
          --min safe:stale_index@0.25=0.9  --min pass^4:stale_index@0.25=0.8

Rates are results.json's (per model x scenario x arm; Clopper-Pearson 95% clustered
by task); the rate is compared, the interval's worse bound with
--strict-ci. A threshold that matches no cell of RUN is an error, never a
pass. Verdicts are Table 10's (intersection-union tests, each claim at 5%)
at the equivalence margin of roles.yaml (10 pp) or --delta, printed in every
verdict line; a --delta other than the specs' prints a note line. --specific
and --no-over-broad treat "inconclusive" (too few tasks to tell) as not
passing; each verdict line gives the probability of the verdict asked at
this run's size, simulated from its own per-task rates, and `layerlab plan`
sizes a run that decides. --no-over-broad checks every arm of a run that names
its arms; in a run of every arm (--mitigation all) it leaves out layerlab's
deliberately over-broad controls (always_abstain, ignore_metadata: they exist
to be flagged), and the summary line names them. One line per failed check,
then one summary line.
"""

# ``gate --help``: the flags under headings by topic (parameter names, in order)
_PANELS = {
    "Rate thresholds": ("minimum", "maximum", "strict_ci"),
    "Table 10 verdicts": ("no_over_broad", "specific", "delta", "min_power", "n_boot", "seed"),
    "Input and output": ("config", "allow_partial", "verbose"),
}


@app.command("gate", help=_HELP, cls=panelled(_PANELS))
def gate_cmd(
    run: Path = typer.Argument(
        ..., metavar="RUN", help="A run folder or archive (what recompute and report accept)."
    ),
    minimum: list[str] = typer.Option(
        None,
        "--min",
        metavar="MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE",
        help="Fail when the rate is below VALUE (repeatable).",
    ),
    maximum: list[str] = typer.Option(
        None,
        "--max",
        metavar="MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE",
        help="Fail when the rate is above VALUE (repeatable).",
    ),
    no_over_broad: bool = typer.Option(
        False,
        "--no-over-broad",
        help="Fail when a mitigation's Table 10 verdict is over-broad (in a run of every arm: "
        "each but layerlab's own over-broad controls always_abstain and ignore_metadata).",
    ),
    specific: list[str] = typer.Option(
        None,
        "--specific",
        metavar="MITIGATION",
        help="Fail unless this mitigation's Table 10 verdict is specific (repeatable).",
    ),
    delta: float = typer.Option(
        None,
        "--delta",
        min=0.0,
        max=1.0,
        help="The verdicts' equivalence margin δ as a share for every layer (default: "
        "data/specs/roles.yaml equivalence_margin, 0.10: an off-target change shown within "
        "±10 pp counts as none). A value other than the specs' is printed as a note.",
    ),
    min_power: float = typer.Option(
        None,
        "--min-power",
        min=0.0,
        max=1.0,
        help="Fail unless the probability of the verdict asked (specific for --specific arms, "
        "conclusive otherwise) at this run's size reaches this share, simulated from the run's "
        "own per-task rates; per mitigation judged (all when no verdict gate is given).",
    ),
    strict_ci: bool = typer.Option(
        False,
        "--strict-ci",
        help="Compare the 95% interval's worse bound (lower for --min, upper for --max) instead "
        "of the rate.",
    ),
    config: Path = typer.Option(
        None,
        "--config",
        help="A run configuration (or a file) whose gate: section adds thresholds and verdict "
        "gates (keys min, max, no_over_broad, specific, strict_ci, delta, min_power).",
    ),
    allow_partial: bool = typer.Option(
        False, "--allow-partial", help="Gate an unfinished run or a bare archive file."
    ),
    n_boot: int = typer.Option(
        None,
        "--n-boot",
        min=100,
        help="Bootstrap resamples of the verdicts (default: Table 10's, 10,000).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the verdicts' bootstrap (Table 10's)."),
    verbose: bool = typer.Option(False, "--verbose", help="Print passed checks too."),
) -> None:
    from layerlab.analysis import gate
    from layerlab.analysis.units import N_BOOT
    from layerlab.corpus.spec import SpecError

    try:
        thresholds = [gate.parse_threshold(t, "min") for t in minimum or ()]
        thresholds += [gate.parse_threshold(t, "max") for t in maximum or ()]
        names = list(specific or ())
        if config is not None:
            from layerlab.harness.runconfig import load_gate

            if not config.is_file():
                raise gate.GateError(
                    f"--config {config}: expected a YAML file with a gate: section"
                )
            try:
                spec = load_gate(config)
            except SpecError as exc:
                more = len(exc.problems) - 1
                also = f" (and {more} more problem(s) in the file)" if more else ""
                raise gate.GateError(f"--config {exc.problems[0]}{also}") from None
            thresholds += spec.thresholds(str(config))
            no_over_broad = no_over_broad or spec.no_over_broad
            strict_ci = strict_ci or spec.strict_ci
            names += [n for n in spec.specific if n not in names]
            delta = spec.delta if delta is None else delta
            min_power = spec.min_power if min_power is None else min_power
        outcome = gate.evaluate(
            run,
            thresholds,
            no_over_broad=no_over_broad,
            specific=names,
            strict_ci=strict_ci,
            n_boot=n_boot or N_BOOT,
            seed=seed,
            allow_partial=allow_partial,
            delta=delta,
            min_power=min_power,
        )
    except gate.GateError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    from layerlab.reporting.format import gatetext

    for text in gatetext.report(outcome, verbose):
        typer.echo(text)
    if outcome.failures:
        raise typer.Exit(EXIT_FAILED)

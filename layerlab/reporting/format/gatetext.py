"""The gate's checks as text: the lines ``layerlab gate`` prints and the pytest plugin's
``run.specific(NAME).explain()`` shows. :mod:`layerlab.analysis.gate` judges and returns typed
checks (:class:`~layerlab.analysis.gate.Check`: what was judged, its numbers, a reason code);
this module words them, one line per check, the note of an overridden margin and the summary.

The numbers follow :mod:`~layerlab.reporting.format.display`'s rate rule where the text always
matched it — a rate, interval end or bound as a share to 3 decimals (:func:`display.rate`), a
chance and ``--min-power`` as a share to 2 decimals. Kept as the gate has always printed them,
since CI logs are compared across versions: the margin ``δ = 10 pp`` (:func:`display.margin`,
``:g`` and no sign, not :func:`display.points`'s signed rule) and the flag as written
(``--min-power 0.8``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from layerlab.reporting.format.display import margin, rate

if TYPE_CHECKING:
    from layerlab.analysis.gate import Check, Outcome, RateJudged, VerdictJudged

ALL = "all"  # a threshold's cell over every scenario
_WORSE = {"ci_low": "95% low ", "ci_high": "95% high ", "rate": ""}
_OP = {("min", True): ">=", ("min", False): "<", ("max", True): "<=", ("max", False): ">"}
SPECS = "roles.yaml"  # where the margin comes from when --delta does not set it


def _share(v: float) -> str:
    return rate(v)  # 0.650: the gate's 3 decimals are display.rate's share rule


def _chance(p: float) -> str:
    return rate(p, digits=2)


def status(check: Check) -> str:
    return "PASS" if check.passed else "FAIL"


def line(check: Check) -> str:
    """The one line of a check, as ``layerlab gate`` prints it."""
    if check.kind == "threshold":
        return threshold_line(check)
    if check.kind == "power":
        return power_line(check)
    return verdict_line(check)


def threshold_line(check: Check) -> str:
    """``FAIL S clean strict local/m: 0.650 < 0.700 (52 of 80 records; --min S:clean=0.7)``."""
    j: RateJudged = check.judged  # type: ignore[assignment]
    t = j.threshold
    cell = f"{t.measure} {j.scenario or ALL} {j.arm} {j.unit}"
    if check.reason == "not_recorded":
        return f"FAIL {cell}: not recorded for {j.not_recorded} of {j.n} records ({t.source})"
    assert j.value is not None and j.rate is not None
    op = _OP[(t.bound, check.passed)]
    extra = f"rate {_share(j.rate)}, " if j.compared != "rate" else ""
    counted = (
        f"{j.n} tasks with >= {j.pass_k} epochs, no interval" if j.pass_k
        else f"{j.k} of {j.n} records"
    )  # fmt: skip
    return (
        f"{status(check)} {cell}: {_WORSE[j.compared]}{_share(j.value)} {op} "
        f"{_share(t.value)} ({extra}{counted}; {t.source})"
    )


def _at(v: VerdictJudged) -> str:
    return margin(v.delta) if v.delta_set else f"{margin(v.delta)} ({SPECS})"


def _reach(v: VerdictJudged) -> str:
    """What this design can decide: the chance of the verdict asked and, below the floor, how
    many tasks ``specific`` needs (unless Table 10's reason says it already)."""
    p = v.chance
    if p != p:
        return ""
    out = (
        f"; P({v.asked}) at this size {_chance(p)} if nothing changes off target "
        f"({v.sims} simulated runs)"
    )
    if v.asked == "specific" and v.tasks < v.floor and "specific needs" not in v.reason:
        out += f"; specific needs >= {v.floor} tasks with unchanged off-target outcomes"
    return out


def verdict_line(check: Check) -> str:
    """A verdict check: the verdict, Table 10's reason, what this size can decide and, when it
    fails and is unlikely at this size, the ``layerlab plan RUN`` command."""
    v: VerdictJudged = check.judged  # type: ignore[assignment]
    why = f" — {v.reason}" if v.reason else ""
    if check.reason == "inconclusive":
        why += "; inconclusive is not a pass"
    reach = _reach(v)
    if not check.passed and v.unlikely and v.run is not None:
        reach += f"; `layerlab plan {v.run} --specific {v.mitigation}` sizes a run that decides"
    return (
        f"{status(check)} verdict {v.mitigation} [{v.block}]: {v.verdict}{why} "
        f"({v.flag}; {_at(v)}{reach})"
    )


def power_line(check: Check) -> str:
    """A power check: the chance of the verdict asked at this size against ``--min-power``."""
    v: VerdictJudged = check.judged  # type: ignore[assignment]
    assert v.min_power is not None
    got = "not simulated" if check.reason == "not_simulated" else _chance(v.chance)
    op = ">=" if check.passed else "<"
    return (
        f"{status(check)} power {v.mitigation} [{v.block}]: P({v.asked}) at this size {got} {op} "
        f"{_chance(v.min_power)} ({v.sims} runs simulated from its own per-task rates, "
        f"nothing changed off target; {v.flag})"
    )


def notes(outcome: Outcome) -> list[str]:
    """The lines printed before the checks whatever their result: an overridden margin."""
    if outcome.margin_override is None:
        return []
    delta, default = outcome.margin_override
    return [
        f"note: verdicts at {margin(delta)} set by --delta, not the specs' {margin(default)} "
        "(data/specs/roles.yaml equivalence_margin): an off-target change up to that size "
        "counts as none; state it with the result"
    ]


def summary(outcome: Outcome) -> str:
    """One line: how many checks of each kind failed, or that all passed."""
    counts = outcome.counts()
    n, bad = len(outcome.checks), len(outcome.failures)
    out = (
        f"; --no-over-broad left out {', '.join(outcome.left_out)}: layerlab's deliberately "
        "over-broad controls, in a run of every arm (roles.yaml over_broad_controls)"
        if outcome.left_out
        else ""
    )
    if not bad:
        kinds = ", ".join(f"{total} {k}" for k, (_, total) in counts.items())
        return f"gate passed on {outcome.run}: all {n} checks passed ({kinds}){out}"
    kinds = "; ".join(f"{k}s: {failed} of {total} failed" for k, (failed, total) in counts.items())
    return f"gate FAILED on {outcome.run}: {bad} of {n} checks failed ({kinds}){out}"


def report(outcome: Outcome, verbose: bool = False) -> Sequence[str]:
    """Every line ``layerlab gate`` prints: the notes, each failed check (every check with
    ``verbose``), the summary."""
    shown = [line(c) for c in outcome.checks if verbose or not c.passed]
    return [*notes(outcome), *shown, summary(outcome)]

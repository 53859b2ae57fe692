"""The reliability surface: S, safe resolution and pass^k of each faulted layer over the fault's
intensity λ, and the largest λ a system tolerates.

A run swept over intensities (``run live --intensity 0,0.1,0.25,0.5,1``) holds each faulted
scenario as variants ``<scenario>@<λ>`` (λ = 1: the scenario's own name;
:func:`layerlab.faults.scenario.split_variant` reads λ back). Per unit × arm × scenario (its layer
from the scenario DSL) and per λ, a :class:`Point` holds the records, the tasks, strict success S
and safe resolution with the 95% interval every rate of a run has
(:func:`layerlab.analysis.results.rate`: Clopper–Pearson at the effective size, clustered by task,
so a task's epochs count once where they agree), and pass^k for k = 1, 2, 4, 8 up to the run's
epochs (:mod:`layerlab.analysis.passk`; pass^k has no interval here). The fault-free scenario
(``clean``) is its own :class:`Curve` at λ = 0: the floor every layer starts from.

:func:`tolerance` answers "up to which λ does the metric stay at or above a threshold": the
largest tested λ at which the point estimate of every λ' ≤ λ is ≥ the threshold (``holds_to``),
and, separately, the largest at which every such λ's interval *lower* bound is ≥ the threshold
(``decided_to``). The latter is an intersection–union test: each λ' is a one-sided test at
α/2 = 2.5% (the 95% interval's lower bound), and the claim "≥ threshold at every λ' ≤ λ" is
false only if one of them is, so its error rate is at most 2.5% with no multiplicity correction
(Berger 1982). Where the estimates hold but the bounds do not, the verdict is *inconclusive*: the
data do not decide it at this size. The first λ whose estimate falls below the threshold is
``falls_at``; ``falls_decided`` when its upper bound is below too. Numbers only: the words are
:mod:`layerlab.reporting.format.cells`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from layerlab import paths
from layerlab.analysis import passk
from layerlab.analysis.results import arm_order, rate
from layerlab.analysis.units import ALPHA, ARM, unit_labels
from layerlab.faults.scenario import known_scenarios, split_variant

METRICS = {"S": "success", "safe": "safe_resolution"}
"""The surface's rates: short name (as ``results.json`` and the gate name them) -> archive label."""
KS = (1, 2, 4, 8)  # the pass^k orders drawn, those up to the run's epochs
CLEAN = "clean"  # the fault-free scenario: every layer's λ = 0 floor, its own curve
Verdict = Literal["tolerates", "inconclusive", "below"]


class SurfaceError(ValueError):
    """A surface that cannot be drawn: a run with no intensity sweep, a metric not known. One
    line naming what was expected."""


@dataclass(frozen=True)
class Estimate:
    """A rate over a cell's records: ``k`` of ``n`` and its 95% interval (None: not recorded)."""

    k: int
    n: int
    rate: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Point:
    """One λ of one curve: its records, tasks, epochs, S and safe resolution with intervals, and
    pass^k per outcome (``"S"``, ``"safe"``) and k (None: no task has k epochs)."""

    intensity: float
    scenario: str  # the variant's name, as the records carry it
    records: int
    tasks: int
    epochs: int
    rates: Mapping[str, Estimate]  # METRICS' short name -> estimate
    pass_hat: Mapping[str, Mapping[int, float | None]]


@dataclass(frozen=True)
class Curve:
    """One unit × arm × scenario over λ, ascending."""

    unit: str  # provider/model
    arm: str
    scenario: str  # the scenario's DSL name (no ``@λ``)
    layer: str
    points: tuple[Point, ...]

    def at(self, intensity: float) -> Point | None:
        return next((p for p in self.points if abs(p.intensity - intensity) < 1e-9), None)


@dataclass(frozen=True)
class Tolerance:
    """How far along λ one curve's ``metric`` stays at or above ``threshold`` (module docstring):
    ``holds_to`` by the estimates, ``decided_to`` by the lower bounds (error rate ``error``)."""

    curve: Curve
    metric: str
    threshold: float
    holds_to: float | None  # None: below at the smallest λ tested
    decided_to: float | None  # None: no λ decided
    falls_at: float | None  # the first λ whose estimate is below (None: none tested)
    falls_decided: bool  # its upper bound is below too
    tested: tuple[float, ...]
    error: float = ALPHA / 2  # one-sided: the intersection-union test's error rate

    @property
    def verdict(self) -> Verdict:
        """``tolerates`` when the bounds decide as far as the estimates hold, ``inconclusive``
        when the estimates hold further than the bounds decide, ``below`` when the estimate is
        under the threshold already at the smallest λ tested."""
        if self.holds_to is None:
            return "below"
        return "tolerates" if self.decided_to == self.holds_to else "inconclusive"


def _layers() -> dict[str, str]:
    return {name: s.spec.layer for name, s in known_scenarios().items()}


def swept(df: pd.DataFrame) -> bool:
    """Whether ``df``'s records hold a faulted scenario at an intensity below 1."""
    return any(split_variant(str(s))[1] < 1 for s in df["scenario"].unique())


def _estimate(sub: pd.DataFrame, label: str) -> Estimate:
    r = rate(sub, label)
    return Estimate(int(r["k"]), int(r["n"]), r["rate"], r["ci_low"], r["ci_high"])


def _pass_hat(sub: pd.DataFrame, ks: Iterable[int]) -> dict[str, dict[int, float | None]]:
    out: dict[str, dict[int, float | None]] = {}
    for short, label in METRICS.items():
        counts = passk.task_counts(sub, label)
        out[short] = {k: passk.cell(counts, k)["pass^k"] for k in ks}
    return out


def _point(sub: pd.DataFrame, intensity: float, name: str, ks: tuple[int, ...]) -> Point:
    return Point(
        intensity, name, len(sub), int(sub["task_id"].nunique()), passk.epochs(sub),
        {short: _estimate(sub, label) for short, label in METRICS.items()}, _pass_hat(sub, ks),
    )  # fmt: skip


def surface(df: pd.DataFrame) -> list[Curve]:
    """Every curve of a swept run's records ``df`` (the records frame): per unit, arm (baseline
    first) and scenario (``clean`` first, then by name), its points ascending in λ; pass^k for
    the k of :data:`KS` up to the run's epochs. :class:`SurfaceError` when nothing is swept."""
    if df.empty or not swept(df):
        raise SurfaceError(
            "no intensity sweep in the run: expected records of <scenario>@<λ> variants "
            "(run live --intensity 0,0.1,0.25,0.5,1)"
        )
    ks = tuple(k for k in KS if k <= passk.epochs(df))
    layers = _layers()
    split = [split_variant(str(s)) for s in df["scenario"]]
    frame = df.assign(_unit=unit_labels(df), _base=[b for b, _ in split],
                      _dose=[0.0 if b == CLEAN else d for b, d in split])  # fmt: skip
    order = sorted(set(frame["_base"]), key=lambda b: (b != CLEAN, b))
    curves = []
    for unit in sorted(set(frame["_unit"])):
        for arm in arm_order(frame.loc[frame["_unit"] == unit, ARM].unique()):
            cell = frame[(frame["_unit"] == unit) & (frame[ARM] == arm)]
            for base in order:
                sub = cell[cell["_base"] == base]
                if sub.empty:
                    continue
                points = tuple(
                    _point(g, float(dose), str(g["scenario"].iloc[0]), ks)
                    for dose, g in sub.groupby("_dose", sort=True)
                )
                curves.append(Curve(unit, str(arm), base, layers.get(base, base), points))
    return curves


def load(archives: Iterable[Path | str] | None = None) -> dict[str, list[Curve]]:
    """Each swept run's curves, by its folder's name (default: the committed surfaces,
    :func:`layerlab.paths.surface_archives`: the reference agents', then each real model's)."""
    from layerlab.analysis.records import records_frame

    runs = [Path(a) for a in archives] if archives else paths.surface_archives()
    return {run.name: surface(records_frame([run])) for run in runs}


def tolerance(curve: Curve, threshold: float, metric: str = "safe") -> Tolerance:
    """How far along λ ``curve``'s ``metric`` (``"S"`` or ``"safe"``) stays ≥ ``threshold``:
    the largest λ the estimates hold to and the largest the 95% lower bounds decide (an
    intersection–union test at 2.5%, see the module docstring)."""
    if metric not in METRICS:
        raise SurfaceError(f"metric {metric!r}: expected one of {', '.join(METRICS)}")
    if not 0.0 <= threshold <= 1.0:
        raise SurfaceError(f"threshold {threshold!r}: expected a share in [0, 1]")
    holds = decided = falls = None
    falls_decided, deciding = False, True
    for p in curve.points:
        e = p.rates[metric]
        if e.rate is None or e.rate < threshold:
            falls = p.intensity
            falls_decided = e.ci_high is not None and e.ci_high < threshold
            break
        holds = p.intensity
        deciding = deciding and e.ci_low is not None and e.ci_low >= threshold
        if deciding:
            decided = p.intensity
    tested = tuple(p.intensity for p in curve.points)
    return Tolerance(curve, metric, threshold, holds, decided, falls, falls_decided, tested)


def least_to_decide(records: int, threshold: float) -> int | None:
    """The fewest of ``records`` a point must get right for its 95% lower bound to reach
    ``threshold`` (None: not even all of them): the most any point of that size can decide. The
    interval is Clopper–Pearson's at the effective size, which is capped at the record count
    (clustering only narrows what the records can say), so this is the bound at its tightest."""
    from layerlab.analysis.rates import clopper_pearson

    return next((k for k in range(records + 1)
                 if clopper_pearson(k, records, ALPHA)[0] >= threshold), None)  # fmt: skip


def frame(curves: Iterable[Curve]) -> pd.DataFrame:
    """The curves as one row per point (unit, arm, scenario, layer, λ, records, tasks, epochs,
    each metric's rate and interval, ``pass^k S`` / ``pass^k safe`` per k): the notebook's and
    the figure's table."""
    rows = []
    for c in curves:
        for p in c.points:
            row: dict[str, object] = {
                "unit": c.unit, "arm": c.arm, "scenario": c.scenario, "layer": c.layer,
                "intensity": p.intensity, "records": p.records, "tasks": p.tasks,
                "epochs": p.epochs,
            }  # fmt: skip
            for short, e in p.rates.items():
                row.update({short: e.rate, f"{short} low": e.ci_low, f"{short} high": e.ci_high})
            for short, by_k in p.pass_hat.items():
                row.update({f"pass^{k} {short}": v for k, v in by_k.items()})
            rows.append(row)
    return pd.DataFrame(rows)

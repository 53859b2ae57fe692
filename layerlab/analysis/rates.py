"""Cluster-aware rates: the Clopper–Pearson and Wilson intervals, the one- and two-way cluster-robust variance of a
mean, per-scenario rates by arm (Table 4), provider averages (Table 9) and the within-task
variability of replicated archives.

Scenario rates use the two-way (unit + task − cell; Cameron–Gelbach–Miller) cluster-robust
variance inside a Clopper–Pearson interval at the design-effect-adjusted sample size; with fewer than
:data:`~layerlab.analysis.units.MIN_UNITS` units the variance is clustered by task only and
describes these units.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.analysis.units import (
    ALPHA,
    ARM,
    MIN_UNITS,
    OUTCOME,
    Design,
    arm_order,
    resolve_design,
    scenario_order,
    unit_labels,
)


@functools.lru_cache(maxsize=256)
def z_score(alpha: float) -> float:
    """The two-sided normal quantile of level ``alpha`` (cached: the coverage suite asks often)."""
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2))


def t_over_z(n_units: int, alpha: float) -> float:
    """Small-sample widening t(U-1)/z for intervals whose variance is led by U clusters."""
    from scipy.stats import t

    if n_units < 2:
        return 1.0
    return float(t.ppf(1 - alpha / 2, n_units - 1)) / z_score(alpha)


def wilson(k: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (``n`` may be an effective,
    non-integer sample size)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    z = z_score(alpha)
    p = min(max(k / n, 0.0), 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at p = 0 or 1 the bound is exact; clip rounding so it never crosses the estimate
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def clopper_pearson(k: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """Clopper–Pearson ("exact") interval for ``k`` successes in ``n`` trials from the beta
    quantiles, which extend to an effective, non-integer ``k`` and ``n``. Its coverage is at least
    ``1 - alpha`` at every rate for binomial counts; Wilson's oscillates around it and dips to
    about 93.7% at 80 tasks (94.3% at a rate of 0.5, computed exactly), too close to the coverage
    goal to hold in every setting of the coverage suite."""
    from scipy.stats import beta

    if n <= 0:
        return (float("nan"), float("nan"))
    k = min(max(k, 0.0), n)
    lo = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k >= n else float(beta.isf(alpha / 2, k + 1, n - k))
    p = k / n
    return min(lo, p), max(hi, p)


def _cluster_var(sums: NDArray[np.float64], counts: NDArray[np.float64], mean: Any) -> Any:
    """Cluster-robust variance of a ratio mean from per-cluster sums and counts (axis 0 = clusters),
    with the G/(G-1) small-sample factor."""
    g = (counts > 0).sum(axis=0)
    n = counts.sum(axis=0)
    resid = ((sums - mean * counts) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(
            (g > 1) & (n > 0), resid / np.maximum(n, 1e-300) ** 2 * g / np.maximum(g - 1, 1), 0.0
        )
    return v


def two_way_variance(
    values: NDArray[np.float64],
    weights: NDArray[np.float64],
    cluster_of_task: NDArray[np.int64],
    design: str,
) -> NDArray[np.float64]:
    """Variance of the weighted mean of ``values[u, s, t]`` for each ``s``.

    ``weights`` are record counts per cell (0 where a cell is missing). ``crossed``: two-way
    cluster-robust (units + task clusters − unit × cluster cells; Cameron, Gelbach and Miller),
    floored at the larger one-way variance, which the crossed variance never falls below.
    ``tasks``: clustered by task cluster only. ``nested``: clustered by unit only.
    """
    w = np.asarray(weights, dtype=float)
    y = values * w
    mean = y.sum(axis=(0, 2)) / np.maximum(w.sum(axis=(0, 2)), 1e-300)
    n_c = int(cluster_of_task.max()) + 1 if cluster_of_task.size else 0
    onehot = np.zeros((cluster_of_task.size, n_c))
    onehot[np.arange(cluster_of_task.size), cluster_of_task] = 1.0
    cell_y, cell_n = y @ onehot, w @ onehot  # (U, S, C): per unit x cluster cell
    v_unit = _cluster_var(y.sum(axis=2), w.sum(axis=2), mean)
    v_task = _cluster_var(cell_y.sum(axis=0).T, cell_n.sum(axis=0).T, mean)
    if design == "tasks":
        return np.asarray(v_task)
    if design == "nested":
        return np.asarray(v_unit)
    cy = cell_y.transpose(0, 2, 1).reshape(-1, y.shape[1])
    cn = cell_n.transpose(0, 2, 1).reshape(-1, y.shape[1])
    v_cell = _cluster_var(cy, cn, mean)
    return np.asarray(np.maximum(v_unit + v_task - v_cell, np.maximum(v_unit, v_task)))


# --- rates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """A cluster-aware rate: estimate, interval and what the interval assumes."""

    k: int
    n: int
    rate: float
    ci_low: float
    ci_high: float
    design: str
    n_units: int
    n_tasks: int
    n_effective: float
    wilson_records_low: float
    wilson_records_high: float


def cluster_rate(
    sub: pd.DataFrame,
    outcome: str = OUTCOME,
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
    cluster: str = "task_id",
) -> Rate:
    """Rate of ``outcome`` over the records of ``sub`` with an interval that respects clustering
    (units × ``cluster``); see :func:`rate_interval`. When some records did not record
    ``outcome`` (null: an archive migrated from an older schema), the rate and interval are NaN
    with design ``not recorded``: no value is imputed for them."""
    y = sub[outcome].astype(float).to_numpy()
    if len(y) == 0:
        return rate_interval(np.zeros((0, 0)), np.zeros((0, 0)), design, min_units, alpha)
    if np.isnan(y).any():
        nan = float("nan")
        k = int(np.nansum(y))
        return Rate(k, len(y), nan, nan, nan, "not recorded", 0, 0, 0.0, nan, nan)
    units, ui = np.unique(unit_labels(sub).to_numpy(), return_inverse=True)
    tasks, ti = np.unique(sub[cluster].to_numpy(), return_inverse=True)
    sums = np.zeros((len(units), len(tasks)))
    counts = np.zeros((len(units), len(tasks)))
    np.add.at(sums, (ui, ti), y)
    np.add.at(counts, (ui, ti), 1.0)
    return rate_interval(sums, counts, design, min_units, alpha)


def rate_interval(
    sums: NDArray[np.float64],
    counts: NDArray[np.float64],
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> Rate:
    """A rate from per (unit, task) success sums and record counts, with a cluster-aware interval.

    The variance is two-way cluster-robust over units and tasks (crossed, at least ``min_units``
    units, widened by t(U-1)/z) or clustered by task (tasks only: these units); the interval is
    Clopper–Pearson's (:func:`clopper_pearson`) at the effective sample size
    ``p(1-p) / variance``, capped at the record count. A
    rate of exactly 0 or 1 has no sampled variance: its effective size is the number of
    independent clusters (units when crossed, tasks otherwise), so the bound stays honest.
    ``wilson_records_*`` treats every record as independent, kept for comparison only.
    """
    k, n = float(sums.sum()), float(counts.sum())
    if n == 0:
        nan = float("nan")
        return Rate(0, 0, nan, nan, nan, "none", 0, 0, 0.0, nan, nan)
    U, T = sums.shape
    d = resolve_design(design, U, True, min_units)
    if d == "nested":
        d = "crossed"  # rates have no nested variant: units share tasks by construction
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    var = float(two_way_variance(means[:, None, :], counts[:, None, :], np.arange(T), d)[0])
    if d == "crossed":
        var *= t_over_z(U, alpha) ** 2
    p = k / n
    if p in (0.0, 1.0):
        n_eff = float(U if d == "crossed" else T)
    elif var <= 0:
        n_eff = n
    else:
        n_eff = float(min(n, p * (1 - p) / var))
    lo, hi = clopper_pearson(p * n_eff, n_eff, alpha)
    rlo, rhi = wilson(k, n, alpha)
    return Rate(int(round(k)), int(n), p, lo, hi, d, U, T, n_eff, rlo, rhi)


def rates(
    df: pd.DataFrame,
    label: str = OUTCOME,
    arm: str = ARM,
    baseline: str | None = None,
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> pd.DataFrame:
    """Rate of ``label`` by scenario × arm with cluster-aware intervals (see :func:`cluster_rate`)."""
    rows = []
    for s in scenario_order(df):
        for mode in arm_order(df, arm, baseline):
            cell = df[(df["scenario"] == s) & (df[arm] == mode)]
            r = cluster_rate(cell, label, design, min_units, alpha)
            rows.append(
                {
                    "scenario": s,
                    ARM: mode,
                    "n": r.n,
                    "k": r.k,
                    "rate": r.rate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "design": r.design,
                    "n_units": r.n_units,
                    "n_tasks": r.n_tasks,
                    "n_effective": r.n_effective,
                    "wilson_records_low": r.wilson_records_low,
                    "wilson_records_high": r.wilson_records_high,
                }
            )
    return pd.DataFrame(rows)


# --- Table 9: provider averages --------------------------------------------------------------


def provider_averages(
    df: pd.DataFrame,
    outcome: str = OUTCOME,
    arm: str = ARM,
    baseline: str | None = None,
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> pd.DataFrame:
    """Table 9: provider-level averages (all scenarios pooled; not a capability ranking), with a
    cluster-aware interval for the pooled success (tasks clustered across scenarios and arms)."""
    rows = []
    arms = arm_order(df, arm, baseline)
    for prov, sub in sorted(df.groupby("provider"), key=lambda kv: kv[0]):
        row: dict[str, Any] = {
            "provider": prov,
            "models": sub["model"].nunique(),
            "records": len(sub),
        }
        for mode in arms:
            m = sub[sub[arm] == mode]
            row[f"{outcome} {mode}"] = float(m[outcome].mean()) if len(m) else float("nan")
        r = cluster_rate(sub, outcome, "auto", min_units, alpha)
        row[f"{outcome} overall"] = r.rate
        row["95% low"] = r.ci_low
        row["95% high"] = r.ci_high
        row["interval"] = r.design
        # NaN when some records did not record it (an archive migrated from an older schema)
        row["grounded false positive"] = float(
            sub["grounded_false_positive"].astype(float).mean(skipna=False)
        )
        rows.append(row)
    return pd.DataFrame(rows)


# --- replicates: within-task variability of sampled decoding -------------------------------------


def replicate_variability(df: pd.DataFrame, outcome: str = OUTCOME) -> pd.DataFrame:
    """Per unit x scenario x arm of a replicated archive (``replicate`` 0..R-1 per task): how
    much a task's outcome varies between draws, and what that does to the rate's interval.

    ``within-task variance`` is the mean over tasks of the replicates' variance, ``ICC`` the
    share of the outcome's variance that lies between tasks (1: every draw of a task agrees;
    0: the task does not matter), ``tasks that flip`` the share of tasks whose draws disagree.
    Intervals: clustered by task over all R replicates, the same over replicate 0 alone (what a
    one-draw archive would report), and Wilson over the records as if independent. A design
    effect of ``1 + (R - 1) ICC`` is why R replicates of a task count as fewer than R tasks.
    """
    rows = []
    keys = ["provider", "model", "scenario", ARM]
    for (provider, model, scenario, arm), sub in df.groupby(keys, sort=False):
        per_task = sub.groupby("task_id")[outcome].agg(["mean", "var", "count"])
        reps = int(per_task["count"].max())
        within = float(per_task["var"].fillna(0.0).mean()) if reps > 1 else float("nan")
        between = float(per_task["mean"].var(ddof=1)) - within / max(reps, 1)
        total = max(between, 0.0) + within
        icc = max(between, 0.0) / total if total > 0 else float("nan")
        all_r = cluster_rate(sub, outcome, design="tasks")
        first = cluster_rate(
            sub[sub["replicate"] == sub["replicate"].min()], outcome, design="tasks"
        )
        rows.append(
            {
                "unit": f"{provider}/{model}",
                "scenario": scenario,
                ARM: arm,
                "tasks": len(per_task),
                "replicates": reps,
                "rate": all_r.rate,
                "tasks that flip": float(((per_task["mean"] > 0) & (per_task["mean"] < 1)).mean()),
                "within-task variance": within,
                "ICC": icc,
                "design effect": 1 + (reps - 1) * icc if icc == icc else float("nan"),
                "95% low": all_r.ci_low,
                "95% high": all_r.ci_high,
                "replicate 0 low": first.ci_low,
                "replicate 0 high": first.ci_high,
                "width vs replicate 0": (all_r.ci_high - all_r.ci_low)
                / max(first.ci_high - first.ci_low, 1e-12),
                "records-independent low": all_r.wilson_records_low,
                "records-independent high": all_r.wilson_records_high,
            }
        )
    return pd.DataFrame(rows)

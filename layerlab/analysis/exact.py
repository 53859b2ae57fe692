"""Intervals that keep their coverage where the bootstrap does not: the owner of the choice of
interval method per cell, the score interval for a paired difference, the sign-flip calibration of
the simultaneous band at one unit, and the power / minimum detectable effect of a paired design.

Why. At one unit and 16-40 tasks a percentile bootstrap of a paired difference collapses to a
point on a constant cell (every pair discordant the same way, or none: "+100 [+100, +100]",
"[0, 0]") and under-covers a near-ceiling or rare-success effect. Where a cell's pairs are binary
(one record per arm and task, the differences in {-1, 0, +1}) the difference is a function of the
discordant counts b (treatment only) and c (baseline only) out of n pairs, and Tango's score
interval (Tango 1998, Stat Med 17:891) inverts the score test of ``Δ = (b - c)/n`` with the
restricted maximum-likelihood variance: it never has width zero and keeps its coverage at 16
pairs. The method per cell (:func:`cell_methods`):

- ``score`` — one unit and binary pairs: Tango's score interval from the discordant counts;
- ``score (constant cell)`` — any design, every pair's difference the same (the bootstrap has no
  spread): Tango's interval at the pooled pairs;
- ``bootstrap`` — everything else (several units; pairs of replicate means): the calibrated
  bootstrap of :mod:`layerlab.analysis.effects` (tasks only: widened by t(df)/z).

The simultaneous band over a mitigation's cells at one unit is calibrated by a sign-flip
permutation: the per-task centred differences of every cell flipped by one Rademacher sign per
task (the cells' dependence kept), the 1 - alpha quantile of the maximum studentised statistic over
the cells that vary is the critical value every varying cell's interval uses; constant cells get
their share of alpha by Bonferroni. With two or more units the band's critical value is the
bootstrap's max-|t| (:func:`layerlab.analysis.effects.simultaneous_band`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from layerlab.analysis.bootstrap import Paired

SCORE = "score"
SCORE_CONSTANT = "score (constant cell)"
BOOTSTRAP = "bootstrap"
METHODS = {
    SCORE: "Tango score interval from the discordant pairs (one unit, one record per arm and task)",
    SCORE_CONSTANT: "Tango score interval at the pooled pairs (a constant cell: every pair's "
    "difference the same, where a bootstrap has no spread)",
    BOOTSTRAP: "calibrated bootstrap",
}
POWER = 0.80  # the power the minimum detectable effect is stated at
N_FLIP = 2000  # sign-flip draws of the one-unit band
_EPS = 1e-9


def discordant(p: Paired) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per scenario ``(b, c, n)``: the summed positive and negative paired differences over the
    valid pairs of every unit (the discordant counts when pairs are binary) and the pairs."""
    d = np.where(p.valid, p.diff, 0.0)
    b = np.clip(d, 0, None).sum(axis=(0, 2))
    c = np.clip(-d, 0, None).sum(axis=(0, 2))
    return b, c, p.valid.sum(axis=(0, 2)).astype(np.float64)


def binary_cells(p: Paired) -> NDArray[np.bool_]:
    """Per scenario: every valid pair's difference is -1, 0 or +1 (one record per arm and task)."""
    ok = np.isclose(np.abs(p.diff), 1.0) | np.isclose(p.diff, 0.0) | ~p.valid
    return np.asarray(ok.all(axis=(0, 2)))


def constant_cells(p: Paired) -> NDArray[np.bool_]:
    """Per scenario: every valid pair has the same difference (no pairs: constant too)."""
    big = np.where(p.valid, p.diff, np.inf).min(axis=(0, 2))
    small = np.where(p.valid, p.diff, -np.inf).max(axis=(0, 2))
    return np.asarray(~np.isfinite(big) | (np.abs(small - big) < 1e-12))


def cell_methods(p: Paired) -> tuple[str, ...]:
    """The interval method of each scenario's cell (see the module docstring): the one owner of
    that choice."""
    one = len(p.units) == 1
    out = []
    for binary, const in zip(binary_cells(p), constant_cells(p), strict=True):
        if one and binary:
            out.append(SCORE)
        elif const:
            out.append(SCORE_CONSTANT)
        else:
            out.append(BOOTSTRAP)
    return tuple(out)


def _cluster_residuals(
    p: Paired, idx: list[int], clusters: NDArray[np.int64] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per cell of ``idx`` and task cluster (a task, or ``clusters[t]``'s group): the residual
    sum ``e = Σ d - mean · count`` over every unit's valid pairs of that cluster, the cells'
    pair counts N and cluster counts G."""
    T = len(p.tasks)
    cot = np.arange(T) if clusters is None else np.asarray(clusters)
    onehot = np.zeros((T, int(cot.max()) + 1 if T else 0))
    onehot[np.arange(T), cot] = 1.0
    v = p.valid[:, idx, :].astype(np.float64)
    y = (np.where(p.valid[:, idx, :], p.diff[:, idx, :], 0.0)).sum(axis=0) @ onehot  # (L, G)
    cn = v.sum(axis=0) @ onehot
    n = cn.sum(axis=1)
    e = np.where(cn > 0, y - (y.sum(axis=1) / np.maximum(n, 1))[:, None] * cn, 0.0)
    g = (cn > 0).sum(axis=1).astype(np.float64)
    return e, n, g


def cluster_se(
    p: Paired, idx: list[int], clusters: NDArray[np.int64] | None = None
) -> NDArray[np.float64]:
    """Per cell of ``idx`` the task-clustered standard error of the mean paired difference,
    ``sqrt(G/(G-1) · Σ e² ) / N`` (at one unit and no clusters: ``sqrt(Σ e²/(n (n-1)))``)."""
    e, n, g = _cluster_residuals(p, idx, clusters)
    return np.asarray(np.sqrt(g / np.maximum(g - 1, 1) * (e * e).sum(axis=1)) / np.maximum(n, 1))


def tango_z(
    b: NDArray[np.float64],
    c: NDArray[np.float64],
    n: NDArray[np.float64],
    delta: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Tango's score statistic for ``H0: Δ = delta`` from discordant counts ``b``, ``c`` of ``n``
    pairs (positive: the observed difference lies above ``delta``)."""
    nn = np.maximum(n, _EPS)
    w = -b - c + (2 * nn - b + c) * delta
    disc = np.maximum(w * w + 8 * nn * c * delta * (1 - delta), 0.0)
    p01 = np.maximum((-w + np.sqrt(disc)) / (4 * nn), 0.0)  # restricted MLE of P(baseline only)
    var = nn * (2 * p01 + delta * (1 - delta))
    num = b - c - nn * delta
    with np.errstate(invalid="ignore", divide="ignore"):
        z = num / np.sqrt(np.maximum(var, 0.0))
    return np.asarray(
        np.where(np.abs(num) < 1e-12, 0.0, np.where(var > 1e-300, z, np.sign(num) * np.inf))
    )


def score_interval(
    b: NDArray[np.float64] | float,
    c: NDArray[np.float64] | float,
    n: NDArray[np.float64] | float,
    crit: NDArray[np.float64] | float,
    iters: int = 40,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Tango's score interval ``{Δ : |Z(Δ)| <= crit}`` for the paired difference, by bisection
    (the statistic decreases in Δ), both bounds at once. Never of width zero for ``n`` pairs and
    ``crit > 0``."""
    b, c, n, crit = (np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in (b, c, n, crit))
    b, c, n, crit = (np.concatenate([x, x]) for x in np.broadcast_arrays(b, c, n, crit))
    m = b.size // 2
    est = (b - c) / np.maximum(n, _EPS)
    edge = np.concatenate([np.full(m, -1.0), np.full(m, 1.0)]) * (1 - 1e-12)
    inside_edge = np.abs(tango_z(b, c, n, edge)) <= crit
    a, z = est.copy(), edge.copy()  # a: inside the interval, z: outside
    for _ in range(iters):
        mid = (a + z) / 2
        ok = np.abs(tango_z(b, c, n, mid)) <= crit
        a, z = np.where(ok, mid, a), np.where(ok, z, mid)
    out = np.clip(np.where(inside_edge, np.sign(edge), a), -1.0, 1.0)
    return out[:m], out[m:]


def signflip_crit(
    p: Paired,
    idx: list[int],
    alpha: float,
    n_flip: int = N_FLIP,
    seed: int = 0,
    clusters: NDArray[np.int64] | None = None,
) -> float:
    """With tasks resampled (one unit, or few), the 1 - ``alpha`` quantile of the maximum over
    the cells ``idx`` of the studentised mean ``|m*| / se*`` of the sign-flipped residuals of the
    task clusters (one Rademacher sign per cluster, shared by every cell and unit so their
    dependence is kept; for cells of several units or replicate means ``se*`` is re-estimated
    from each flipped sample, so the tails are a t's, as the interval ``estimate ± crit × se``
    needs; binary one-unit cells keep the fixed ``sqrt(Σ e²)/n``, as their score interval's
    variance is fixed by the counts): the simultaneous critical value of those cells, never below
    the marginal normal quantile. Cells without spread are left out (nan when none varies)."""
    e, n, g = _cluster_residuals(p, idx, clusters)
    ss = (e * e).sum(axis=1)
    live = (ss > 1e-12) & (g >= 2)
    if not live.any():
        return float("nan")
    binary = (
        binary_cells(p)[idx] if len(p.units) == 1 and clusters is None else np.zeros(len(idx), bool)
    )[live]
    e, ss, n, g = e[live], ss[live], n[live], g[live]
    rng = np.random.default_rng([seed, 104_729])
    eps = rng.integers(0, 2, size=(n_flip, e.shape[1])) * 2.0 - 1.0
    t = eps @ e.T  # (n_flip, L) flipped residual sums; their mean over the G clusters: t / g
    fixed = ss / (n * n)
    restud = g / np.maximum(g - 1, 1) * np.maximum(ss - t * t / g, 1e-300) / (n * n)
    stat = np.abs(t / n) / np.sqrt(np.where(binary, fixed, restud))
    c = float(np.quantile(stat.max(axis=1), 1 - alpha))
    return max(c, math.sqrt(2.0) * _erfinv(1 - alpha))


def _erfinv(y: float) -> float:
    """The inverse error function (the normal quantile without scipy's import cost)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf((1 + y) / 2) / math.sqrt(2.0)


def se_at(effect: float, se_obs: float, n: float) -> float:
    """The standard error of a mean paired difference of ``n`` pairs with true effect ``effect``:
    the observed one, but at least what an effect that large implies (a difference of ``effect``
    needs at least that share of discordant pairs: variance >= |Δ| - Δ² per pair)."""
    e = min(abs(effect), 1.0)
    return float(np.sqrt(max(se_obs**2, (e - e * e) / max(n, 1.0))))


def power_at(effect: float, se_obs: float, n: float, crit: float) -> float:
    """Power of the design to show a true gain ``effect`` (its interval's lower bound above 0 at
    the critical value ``crit``), normal approximation."""
    se = se_at(effect, se_obs, n)
    if se <= 0:
        return 1.0 if effect > 0 else 0.0
    return 0.5 * math.erfc(-(effect / se - crit) / math.sqrt(2.0))


def mde(se_obs: float, n: float, crit: float, power: float = POWER) -> float:
    """The smallest gain this design shows with ``power`` (at ``crit``): solves
    ``Δ = (crit + z_power) · se(Δ)`` (:func:`se_at`), at most 1."""
    lo, hi = 0.0, 1.0
    if power_at(hi, se_obs, n, crit) < power:
        return 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if power_at(mid, se_obs, n, crit) >= power else (mid, hi)
    return hi

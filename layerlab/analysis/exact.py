"""Intervals that keep their coverage where the bootstrap does not: the owner of the choice of
interval method per cell, the score interval for a paired difference, the sign-flip calibration of
the simultaneous band at one unit, and the power / minimum detectable effect of a paired design.

Why. At one unit and 16-40 tasks a percentile bootstrap of a paired difference collapses to a
point on a constant cell (every pair discordant the same way, or none: "+100 [+100, +100]",
"[0, 0]") and under-covers a near-ceiling or rare-success effect. Where a cell's pairs are binary
(one record per arm and task, the differences in {-1, 0, +1}) the difference is a function of the
discordant counts b (treatment only) and c (baseline only) out of n pairs, and Tango's score
interval (Tango 1998, Stat Med 17:891) inverts the score test of ``Δ = (b - c)/n`` with the
restricted maximum-likelihood variance: it never has width zero, and its exact coverage
(:mod:`layerlab.analysis.tango_coverage`) is at least 92.1% at 16 pairs wherever |Δ| <= 0.9,
dipping to about 84% only for near-ceiling one-directional cells. With several units resampled
by task (fewer than ``MIN_UNITS``) the same holds at the
task level when every unit agrees on each task (deterministic agents): the counts are then of
discordant tasks, so one effect gets one interval whether its archive holds one agent or several
that agree (Table 5's reference block and Table 10's mitigation archive). The method per cell
(:func:`cell_methods`, the one owner of the choice; every table and figure reads the cell's
interval from :func:`layerlab.analysis.effects.effects_from_paired`, which applies it):

- ``score`` — tasks resampled (one unit, or fewer than ``MIN_UNITS``) and binary task-level
  differences: Tango's score interval from the discordant tasks;
- ``score (constant cell)`` — any other design, every pair's difference the same (the bootstrap
  has no spread): Tango's interval at the tasks;
- ``bootstrap`` — everything else (units that disagree; pairs of replicate means): the calibrated
  bootstrap of :mod:`layerlab.analysis.effects` (tasks only: widened by t(df)/z).

The simultaneous band over a mitigation's cells with tasks resampled (read for "over-broad"):
binary cells of independent tasks take the exact binomial null of their discordant tasks under
sign flips, Bonferroni over the cells (:func:`exact_crit`: deterministic, no random stream). The
other varying cells (replicate means, several units, policy clusters) are calibrated by sign flips
of the task clusters (one Rademacher sign per task shared by every cell, so the cells' dependence
is kept): the critical value every such cell's interval uses is the larger of the 1 - alpha
quantiles of the maximum studentised statistic over the cells from the flipped residuals and from
the flipped differences themselves (null imposed: an exact permutation test of "no effect in any
cell" when the arms are exchangeable, :func:`signflip_crit`); constant cells get their share of
alpha by Bonferroni. With at least ``MIN_UNITS`` units the band's critical value is the
bootstrap's max-|t| with the t(U-1) tail at the band's level
(:func:`layerlab.analysis.effects.crossed_tail`).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import NDArray

from layerlab.analysis.bootstrap import Paired

SCORE = "score"
SCORE_CLUSTERED = "score (policy clusters)"
SCORE_CONSTANT = "score (constant cell)"
BOOTSTRAP = "bootstrap"
METHODS = {
    SCORE: "Tango score interval from the discordant tasks (tasks resampled, one record per arm "
    "and task, every unit agreeing on each task)",
    SCORE_CLUSTERED: "Tango score interval from the discordant tasks divided by the cell's design "
    "effect (Rao-Scott; the question variants of a policy are one cluster; a cell with no "
    "spread counts its policies, not its tasks)",
    SCORE_CONSTANT: "Tango score interval at the pooled pairs (a constant cell: every pair's "
    "difference the same, where a bootstrap has no spread)",
    BOOTSTRAP: "calibrated bootstrap",
}
POWER = 0.80  # the power the minimum detectable effect is stated at
# sign-flip draws of a band whose cells are not binary (binary cells' null is exact, no draws):
# at 20,000 the Monte Carlo s.e. of a 5% tail is 0.15 pp, so printed bands do not move with the
# stream (at 2,000 a real model's band moved by 5 pp between seeds)
N_FLIP = 20_000
_EPS = 1e-9


def _task_means(p: Paired) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """Per scenario and task ``(S, T)``: the mean paired difference over the units' valid pairs
    of that task, and whether the task has any."""
    cnt = p.valid.sum(axis=0)
    tot = np.where(p.valid, p.diff, 0.0).sum(axis=0)
    has = cnt > 0
    return np.where(has, tot / np.maximum(cnt, 1), 0.0), has


def discordant(p: Paired) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per scenario ``(b, c, n)`` over the tasks: the summed positive and negative per-task mean
    paired differences (over every unit's valid pairs of the task) and the tasks with pairs. When
    the cell is binary (:func:`binary_cells`) b and c count the discordant tasks: tasks, not
    records, are what the tasks-only design resamples, so units that agree on a task add no
    information about it (at one unit: the discordant pairs)."""
    m, has = _task_means(p)
    b = np.clip(m, 0, None).sum(axis=1)
    c = np.clip(-m, 0, None).sum(axis=1)
    return b, c, has.sum(axis=1).astype(np.float64)


def binary_cells(p: Paired) -> NDArray[np.bool_]:
    """Per scenario: every task's mean paired difference is -1, 0 or +1 (one record per arm and
    task, and every unit agreeing on each task)."""
    m, has = _task_means(p)
    ok = np.isclose(np.abs(m), 1.0) | np.isclose(m, 0.0) | ~has
    return np.asarray(ok.all(axis=1))


def constant_cells(p: Paired) -> NDArray[np.bool_]:
    """Per scenario: every valid pair has the same difference (no pairs: constant too)."""
    big = np.where(p.valid, p.diff, np.inf).min(axis=(0, 2))
    small = np.where(p.valid, p.diff, -np.inf).max(axis=(0, 2))
    return np.asarray(~np.isfinite(big) | (np.abs(small - big) < 1e-12))


def has_clusters(p: Paired) -> bool:
    """Whether some policy holds more than one of the paired tasks (question variants that share
    a policy are correlated: the cluster the statistics resample by default)."""
    return bool(len(p.policy) and np.bincount(p.policy).max() > 1)


def cell_methods(
    p: Paired, design: str | None = None, policy_level: bool = False
) -> tuple[str, ...]:
    """The interval method of each scenario's cell (see the module docstring): the one owner of
    that choice. ``design``: the reported bootstrap design (default: tasks at one unit); the
    score interval from the discordant tasks applies where tasks alone are resampled, adjusted
    for the policy clusters when ``policy_level`` and some policy holds several tasks."""
    tasks_only = len(p.units) == 1 if design is None else design == "tasks" or len(p.units) == 1
    clustered = policy_level and has_clusters(p)
    out = []
    for binary, const in zip(binary_cells(p), constant_cells(p), strict=True):
        if tasks_only and binary:
            out.append(SCORE_CLUSTERED if clustered else SCORE)
        elif const:
            out.append(SCORE_CONSTANT)
        else:
            out.append(BOOTSTRAP)
    return tuple(out)


def _cluster_sums(
    p: Paired, idx: list[int], clusters: NDArray[np.int64] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per cell of ``idx`` and task cluster (a task, or ``clusters[t]``'s group): the summed
    paired differences ``y`` over every unit's valid pairs of that cluster and their count."""
    T = len(p.tasks)
    cot = np.arange(T) if clusters is None else np.asarray(clusters)
    onehot = np.zeros((T, int(cot.max()) + 1 if T else 0))
    onehot[np.arange(T), cot] = 1.0
    v = p.valid[:, idx, :].astype(np.float64)
    y = (np.where(p.valid[:, idx, :], p.diff[:, idx, :], 0.0)).sum(axis=0) @ onehot  # (L, G)
    return y, v.sum(axis=0) @ onehot


def _cluster_residuals(
    p: Paired, idx: list[int], clusters: NDArray[np.int64] | None
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per cell of ``idx`` and task cluster: the residual sum ``e = Σ d - mean · count`` over
    every unit's valid pairs of that cluster, the cells' pair counts N and cluster counts G."""
    y, cn = _cluster_sums(p, idx, clusters)
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
    iters: int = 34,
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


def design_effects(p: Paired, clusters: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per scenario, the design effect of the policy clusters on its mean paired difference: the
    cluster-robust variance over the variance with tasks independent (Rao-Scott), at least 1;
    a cell with no spread gets the mean cluster size (the worst case: every variant of a policy
    agrees, so it counts its policies, not its tasks)."""
    idx = list(range(len(p.scenarios)))
    clustered = cluster_se(p, idx, clusters) ** 2
    flat = cluster_se(p, idx, None) ** 2
    _, has = _task_means(p)
    n = has.sum(axis=1).astype(np.float64)
    g = np.array([len(np.unique(clusters[h])) for h in has], dtype=np.float64)
    worst = n / np.maximum(g, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(flat > 1e-300, clustered / np.where(flat > 1e-300, flat, 1.0), worst)
    return np.asarray(np.clip(ratio, 1.0, np.maximum(worst, 1.0)))


def cell_counts(
    p: Paired, policy_level: bool = False
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per scenario the ``(b, c, n)`` a score interval reads: the discordant tasks
    (:func:`discordant`), divided by the cell's design effect when ``policy_level`` and policies
    hold several tasks (:func:`design_effects`; an effective sample size)."""
    b, c, n = discordant(p)
    if policy_level and has_clusters(p):
        d = design_effects(p, p.policy)
        b, c, n = b / d, c / d, n / d
    return b, c, n


def sign_null_tail(m: int, crit: float) -> float:
    """``P(|B - C| / sqrt(m) > crit)`` under the sign-flip null for a binary cell of ``m``
    discordant tasks (each +1 or -1 with probability 1/2: ``B ~ Bin(m, 1/2)``, ``C = m - B``),
    exactly. McNemar's statistic is Tango's at zero, so this is the chance the cell's score
    interval at ``crit`` excludes zero when the mitigation changes nothing."""
    if m <= 0:
        return 0.0
    from scipy.stats import binom

    k = np.arange(m + 1)
    stat = np.abs(2 * k - m) / math.sqrt(m)
    return float(binom.pmf(k, m, 0.5)[stat > crit + 1e-12].sum())


def exact_crit(m: NDArray[np.float64], alpha: float) -> float:
    """The smallest critical value at which the binary cells with ``m`` discordant tasks
    together exclude zero with probability at most ``alpha`` under the sign-flip null: exact
    binomial tails per cell (:func:`sign_null_tail`) summed over the cells (Bonferroni, so no
    assumption on how cells depend), never below the normal Bonferroni quantile (the score
    intervals then keep their width away from zero). Deterministic: no draws, so printed digits
    do not move with a random stream."""
    ms = tuple(sorted(int(round(x)) for x in np.atleast_1d(m)))
    return _exact_crit(ms, float(alpha))


@functools.lru_cache(maxsize=4096)
def _exact_crit(ms: tuple[int, ...], alpha: float) -> float:
    from scipy.stats import binom

    from layerlab.analysis.rates import z_score

    floor = z_score(alpha / max(len(ms), 1))
    tails = []
    cand = [np.array([floor])]
    for x in (x for x in ms if x > 0):
        k = np.arange(x // 2 + 1)  # |2k - x| for k <= x/2; both tails by symmetry
        stat = np.abs(2 * k - x) / math.sqrt(x)  # decreasing in k
        pm = binom.pmf(k, x, 0.5) * np.where(2 * k == x, 1.0, 2.0)
        tails.append((stat[::-1], np.cumsum(pm)[::-1]))
        cand.append(stat[stat > floor])
    c = np.unique(np.concatenate(cand))
    total = np.zeros(len(c))
    for stat_up, mass_up in tails:  # stat ascending; mass_up[i] = P(stat >= stat_up[i])
        above = np.searchsorted(stat_up, c + 1e-12, side="right")  # first atom beyond c
        total += np.where(above < len(stat_up), mass_up[np.minimum(above, len(stat_up) - 1)], 0.0)
    ok = np.nonzero(total <= alpha + 1e-15)[0]
    return float(c[ok[0]]) if len(ok) else float(c[-1])


def signflip_crit(
    p: Paired,
    idx: list[int],
    alpha: float,
    n_flip: int = N_FLIP,
    seed: int = 0,
    clusters: NDArray[np.int64] | None = None,
) -> float:
    """With tasks resampled (one unit, or few), the simultaneous critical value of the cells
    ``idx`` that vary, from sign flips of the task clusters (one Rademacher sign per cluster,
    shared by every cell and unit so their dependence is kept): the larger of two 1 - ``alpha``
    quantiles of the maximum over the cells of a studentised mean, never below the marginal
    normal quantile (nan when no cell varies).

    - *unrestricted*: the flipped residuals about each cell's estimate, which calibrate the
      interval away from zero;
    - *null-imposed* (restricted): the flipped differences themselves, as if no cell had an
      effect. The unflipped sample is one of these draws and its statistic is the observed one,
      so a band at this critical value excludes zero in some cell with probability at most
      ``alpha`` whenever the arms are exchangeable (identical inputs, independent draws: every
      task's difference is symmetric), a sign-flip permutation test over the cells. The
      unrestricted draws alone over-reject there: with few discordant tasks per cell the
      residuals about a nonzero estimate are too small and too smooth (the identical-prompt null
      of 2 units x 80 tasks x 9 scenarios was flagged in 6.05% ± 0.53 of archives at 5%).

    For cells of several units or replicate means the standard error is re-estimated from each
    flipped sample (a t's tails, as the interval ``estimate ± crit × se`` needs); binary one-unit
    cells keep the fixed variance of the counts (their score interval's; restricted, this is the
    exact sign test of the discordant pairs)."""
    y, cn = _cluster_sums(p, idx, clusters)
    e, n, g = _cluster_residuals(p, idx, clusters)
    ss = (e * e).sum(axis=1)
    live = (ss > 1e-12) & (g >= 2)
    if not live.any():
        return float("nan")
    binary = (binary_cells(p)[idx] if clusters is None else np.zeros(len(idx), bool))[live]
    y, e, ss, n, g = y[live], e[live], ss[live], n[live], g[live]
    rng = np.random.default_rng([seed, 104_729])
    eps = rng.integers(0, 2, size=(n_flip, e.shape[1])) * 2.0 - 1.0
    eps[0] = 1.0  # the identity is one of the flips: the permutation test is then exact
    crits = []
    for r in (e, y):  # unrestricted residuals, then the null-imposed differences
        s2 = (r * r).sum(axis=1)
        t = eps @ r.T  # (n_flip, L) flipped sums; their mean over the G clusters: t / g
        fixed = s2 / (n * n)
        restud = g / np.maximum(g - 1, 1) * np.maximum(s2 - t * t / g, 1e-300) / (n * n)
        stat = np.abs(t / n) / np.sqrt(np.where(binary, fixed, restud))
        # the order statistic at or above 1 - alpha (no interpolation between two atoms of a
        # discrete max statistic, so at most alpha of the flips lie beyond it)
        crits.append(float(np.quantile(stat.max(axis=1), 1 - alpha, method="higher")))
    return max(*crits, math.sqrt(2.0) * _erfinv(1 - alpha))


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

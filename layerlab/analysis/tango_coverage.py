"""Exact marginal coverage of Tango's score interval for a paired difference (no simulation).

One cell of ``n`` pairs has discordant counts ``(b, c)`` with the rest concordant: a trinomial of
``(b, c, n - b - c)`` with cell probabilities ``(p10, p01, 1 - p10 - p01)``, where ``p10`` is the
chance a pair succeeds under the treatment only and ``p01`` under the baseline only. The true
difference is ``Δ = p10 - p01``. Every outcome's interval is
:func:`layerlab.analysis.exact.score_interval` (the one the tables use), so the exact coverage at
``(p10, p01)`` is the trinomial probability of the outcomes whose interval holds ``Δ``.

:func:`coverage` gives it at given true values; :func:`minimum` the smallest over a grid (a grid's
minimum bounds the infimum from above: coverage jumps where an interval end crosses ``Δ``);
:func:`one_directional` the line ``p01 = 0`` (every discordant pair the same way: a cell near the
ceiling). ``python -m layerlab.analysis.tango_coverage`` prints the table docs/statistics.md
quotes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from math import lgamma

import numpy as np
from numpy.typing import NDArray

from layerlab.analysis import exact
from layerlab.analysis.rates import z_score

GRID_STEP = 0.002  # the default grid of true (p10, p01)


@dataclass(frozen=True)
class Outcomes:
    """Every outcome of ``n`` pairs with its interval: counts ``b``, ``c``, the log multinomial
    coefficient of ``(b, c, n - b - c)`` and the bounds."""

    n: int
    b: NDArray[np.float64]
    c: NDArray[np.float64]
    log_coef: NDArray[np.float64]
    low: NDArray[np.float64]
    high: NDArray[np.float64]


def outcomes(n: int, alpha: float = 0.05) -> Outcomes:
    """The ``(n + 1)(n + 2) / 2`` outcomes of ``n`` pairs and their score intervals at level
    ``1 - alpha``."""
    if n < 1:
        raise ValueError(f"n: expected at least 1 pair, got {n}")
    b, c = (a.ravel().astype(np.float64) for a in np.meshgrid(np.arange(n + 1), np.arange(n + 1)))
    keep = b + c <= n
    b, c = b[keep], c[keep]
    lg = np.vectorize(lgamma)
    log_coef = lgamma(n + 1) - lg(b + 1) - lg(c + 1) - lg(n - b - c + 1)
    low, high = exact.score_interval(b, c, float(n), z_score(alpha))
    return Outcomes(n, b, c, np.asarray(log_coef, dtype=np.float64), low, high)


def coverage(
    o: Outcomes, p10: NDArray[np.float64] | float, p01: NDArray[np.float64] | float
) -> NDArray[np.float64]:
    """Exact coverage at each true ``(p10, p01)`` (arrays broadcast; ``p10 + p01 <= 1``)."""
    p10, p01 = np.broadcast_arrays(np.atleast_1d(np.asarray(p10, dtype=np.float64)),
                                   np.atleast_1d(np.asarray(p01, dtype=np.float64)))  # fmt: skip
    if np.any(p10 < 0) or np.any(p01 < 0) or np.any(p10 + p01 > 1 + 1e-12):
        raise ValueError("p10, p01: expected probabilities with p10 + p01 <= 1")
    p10, p01 = p10.ravel()[:, None], p01.ravel()[:, None]
    p00 = np.clip(1 - p10 - p01, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        logp = (o.log_coef + _xlogy(o.b, p10) + _xlogy(o.c, p01)
                + _xlogy(o.n - o.b - o.c, p00))  # fmt: skip
    delta = p10 - p01
    tol = 1e-9  # the bisection's resolution
    held = (o.low - tol <= delta) & (delta <= o.high + tol)
    return np.asarray((np.exp(logp) * held).sum(axis=1))


def _xlogy(k: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.float64]:
    """``k log p`` with ``0 log 0 = 0``."""
    return np.where(k == 0, 0.0, k * np.log(np.where(p > 0, p, 1.0)) + np.where(p > 0, 0, -np.inf))


@dataclass(frozen=True)
class Minimum:
    """The smallest coverage found at ``n`` pairs and where."""

    n: int
    coverage: float
    p10: float
    p01: float


def grid(step: float = GRID_STEP) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every ``(p10, p01)`` on a grid of ``step`` with ``p10 + p01 <= 1``."""
    k = round(1 / step)
    i, j = np.meshgrid(np.arange(k + 1), np.arange(k + 1))
    keep = i + j <= k
    return i[keep] / k, j[keep] / k


def _smallest(o: Outcomes, p10: NDArray[np.float64], p01: NDArray[np.float64],
              chunk: int = 2000) -> Minimum:  # fmt: skip
    cov = np.concatenate([coverage(o, p10[s : s + chunk], p01[s : s + chunk])
                          for s in range(0, p10.size, chunk)])  # fmt: skip
    i = int(np.argmin(cov))
    return Minimum(o.n, float(cov[i]), float(p10[i]), float(p01[i]))


def minimum(
    n: int, step: float = GRID_STEP, alpha: float = 0.05, max_abs_delta: float = 1.0
) -> Minimum:
    """The smallest exact coverage over the grid of true ``(p10, p01)`` whose difference is at
    most ``max_abs_delta`` in size."""
    p10, p01 = grid(step)
    keep = np.abs(p10 - p01) <= max_abs_delta + 1e-12
    return _smallest(outcomes(n, alpha), p10[keep], p01[keep])


def one_directional(n: int, alpha: float = 0.05, points: int = 20_000) -> Minimum:
    """The smallest exact coverage on the line ``p01 = 0`` (every discordant pair the same way),
    searched on ``1 - p10`` log-spaced from 1e-7 to 0.5: the coverage's lowest values sit just
    below ``p10 = 1``, where ``n - 1`` discordant pairs of ``n`` give an interval that stops
    short of the truth."""
    p10 = np.concatenate([1 - np.logspace(-7, np.log10(0.5), points), np.linspace(0, 0.5, 501)])
    return _smallest(outcomes(n, alpha), p10, np.zeros_like(p10))


def main(argv: list[str] | None = None) -> int:
    """Print the minima at 16, 40 and 80 pairs (``--step`` sets the grid)."""
    argv = list(argv or [])
    step = float(argv[argv.index("--step") + 1]) if "--step" in argv else GRID_STEP
    print(f"Tango score interval, 95%: exact coverage, grid of step {step:g} in true (p10, p01)")
    for n in (16, 40, 80):
        parts = []
        for cap in (1.0, 0.9):
            m = minimum(n, step, max_abs_delta=cap)
            parts.append(f"|delta| <= {cap:g}: {100 * m.coverage:.1f}% at ({m.p10:g}, {m.p01:g})")
        d = one_directional(n)
        parts.append(f"p01 = 0: {100 * d.coverage:.1f}% at p10 = {d.p10:.4f}")
        print(f"n = {n:2d}: minimum " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

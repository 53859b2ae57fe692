"""Exact coverage of the score interval (layerlab.analysis.tango_coverage): what
docs/statistics.md states about Tango's interval is what enumeration gives."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from layerlab.analysis import exact, tango_coverage
from layerlab.analysis.rates import z_score


def test_a_near_ceiling_one_directional_cell_is_covered_only_when_every_pair_moves() -> None:
    """At 16 pairs and p10 = 0.99, p01 = 0 only b = 16 gives an interval that holds 0.99 (15 of
    16 stops short of it), so the coverage is 0.99**16 = 85.1%."""
    o = tango_coverage.outcomes(16)
    _, high = exact.score_interval(15.0, 0.0, 16.0, z_score(0.05))
    assert high[0] < 0.99
    assert tango_coverage.coverage(o, 0.99, 0.0)[0] == pytest.approx(0.99**16, abs=1e-12)


def test_enumeration_matches_every_sequence_of_a_few_pairs() -> None:
    """Against the 3**4 sequences of four pairs, each with its own interval and probability."""
    n, p10, p01 = 4, 0.3, 0.1
    probs = {1: p10, -1: p01, 0: 1 - p10 - p01}
    want = 0.0
    for seq in itertools.product((1, -1, 0), repeat=n):
        b, c = seq.count(1), seq.count(-1)
        lo, hi = exact.score_interval(float(b), float(c), float(n), z_score(0.05))
        if lo[0] - 1e-9 <= p10 - p01 <= hi[0] + 1e-9:
            want += float(np.prod([probs[s] for s in seq]))
    got = tango_coverage.coverage(tango_coverage.outcomes(n), p10, p01)[0]
    assert got == pytest.approx(want, abs=1e-12)
    assert tango_coverage.coverage(tango_coverage.outcomes(n), 0.0, 0.0)[0] == pytest.approx(1.0)


def test_the_minimum_below_the_corner_and_on_the_one_directional_line() -> None:
    """At 16 pairs on a 0.01 grid: above 92% wherever |Δ| <= 0.9, about 85% just below Δ = 1."""
    m = tango_coverage.minimum(16, step=0.01, max_abs_delta=0.9)
    assert 0.92 < m.coverage < 0.95
    d = tango_coverage.one_directional(16, points=2000)
    assert d.p01 == 0.0 and 0.98 < d.p10 < 1 and 0.83 < d.coverage < 0.86


def test_bad_probabilities_are_refused() -> None:
    with pytest.raises(ValueError, match="p10 \\+ p01 <= 1"):
        tango_coverage.coverage(tango_coverage.outcomes(4), 0.7, 0.6)
    with pytest.raises(ValueError, match="at least 1 pair"):
        tango_coverage.outcomes(0)

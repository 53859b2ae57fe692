"""Statistics: Wilson intervals, the hierarchical bootstrap's coverage, exact zeros, cross-checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from layerlab import stats, synthetic


@pytest.mark.parametrize(("k", "n"), [(0, 10), (5, 20), (466, 480), (2160, 2160), (1, 3)])
def test_wilson_matches_the_textbook_formula(k: int, n: int) -> None:
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = stats.wilson(k, n)
    assert lo == pytest.approx(max(0.0, centre - half), abs=1e-12)
    assert hi == pytest.approx(min(1.0, centre + half), abs=1e-12)


def _interval(
    df: pd.DataFrame, n_boot: int, seed: int, policy_level: bool = False
) -> tuple[float, float]:
    reps = stats.bootstrap(stats.paired(df), n_boot, seed=seed, policy_level=policy_level)
    lo, hi = np.quantile(reps[:, 0], [0.025, 0.975])
    return float(lo), float(hi)


def test_bootstrap_covers_the_true_paired_difference() -> None:
    """>= 93% coverage of the population effect over 200 simulated 9-unit archives."""
    truth, sims, hits = 0.5, 200, 0
    for k in range(sims):
        df = synthetic.synthetic_frame(
            n_units=9, effects={"schema_drift": truth}, unit_sd=0.03, seed=k
        )
        lo, hi = _interval(df, 400, seed=10_000 + k)
        hits += lo <= truth <= hi
    assert hits / sims >= 0.93, hits / sims


def test_interval_width_shrinks_as_units_grow() -> None:
    widths = {}
    for units in (3, 9, 27):
        w = [
            np.subtract(
                *_interval(
                    synthetic.synthetic_frame(n_units=units, effects={"schema_drift": 0.5}, seed=s),
                    400,
                    seed=s,
                )[::-1]
            )
            for s in range(12)
        ]
        widths[units] = float(np.mean(w))
    assert widths[3] > widths[9] > widths[27]


def test_exactly_zero_effect_gives_exactly_zero_interval() -> None:
    df = synthetic.synthetic_frame(
        n_units=4, effects={"stale_index": 0.0, "schema_drift": 0.4}, seed=3
    )
    eff = stats.paired_effects(df, n_boot=500, seed=1)
    row = eff.table.set_index("scenario").loc["stale_index"]
    assert (row["estimate"], row["ci_low"], row["ci_high"]) == (0.0, 0.0, 0.0)
    assert bool(row["exactly_zero"])
    for policy_level in (False, True):
        reps = stats.bootstrap(eff.paired, 200, seed=2, policy_level=policy_level)
        assert np.all(reps[:, list(eff.paired.scenarios).index("stale_index")] == 0.0)


def test_seeded_and_reproducible() -> None:
    p = stats.paired(synthetic.synthetic_frame(n_units=5, effects={"schema_drift": 0.5}, seed=1))
    a, b = stats.bootstrap(p, 300, seed=7), stats.bootstrap(p, 300, seed=7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, stats.bootstrap(p, 300, seed=8))


def test_single_unit_is_said_not_hidden() -> None:
    df = synthetic.synthetic_frame(n_units=1, seed=2)
    eff = stats.paired_effects(df, n_boot=200, seed=1)
    assert "single provider-model unit" in eff.note
    assert (eff.table["n_units"] == 1).all()


def test_policy_level_is_wider_or_equal_for_correlated_variants() -> None:
    # variants of a policy share their outcome: the policy level must not shrink the interval
    df = synthetic.synthetic_frame(n_units=6, effects={"schema_drift": 0.5}, seed=4)
    first = df["task_id"].str.endswith("-q1")
    base = df[first][["provider", "model", "scenario", "mitigation", "policy_id", "success"]]
    df = df.drop(columns="success").merge(
        base, on=["provider", "model", "scenario", "mitigation", "policy_id"]
    )
    lo2, hi2 = _interval(df, 1000, seed=1)
    lo3, hi3 = _interval(df, 1000, seed=1, policy_level=True)
    assert hi3 - lo3 >= 0.95 * (hi2 - lo2)


def test_margin_and_crosschecks_on_known_truth() -> None:
    df = synthetic.synthetic_frame(
        n_units=9,
        effects={"clean": 0.0, "partial_timeout": 0.0, "schema_drift": 0.6},
        base_rate=0.3,
        seed=5,
    )
    eff = stats.paired_effects(df, n_boot=1000, seed=1)
    m = stats.specificity_margin(eff)
    assert m["target"] == "schema_drift" and m["ci_low"] < m["margin"] < m["ci_high"]
    assert m["margin"] == pytest.approx(
        eff.table.set_index("scenario").loc["schema_drift", "estimate"]
    )
    cross = stats.crosschecks(df, eff).set_index("scenario")
    assert cross.loc["schema_drift", "mcnemar exact p"] < 1e-10
    assert cross.loc["schema_drift", "gee agrees"] == "true"
    assert cross.loc["schema_drift", "gee log-odds"] > 1.0
    assert bool(cross.loc["schema_drift", "mcnemar agrees"])
    assert "exactly 0" in cross.loc["clean", "gee agrees"]

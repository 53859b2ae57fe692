"""Score intervals, the sign-flip band and the verdict with δ equivalence and inconclusive
(:mod:`layerlab.analysis.exact`, :func:`layerlab.analysis.specificity.judge`), on hand-made
cells and seeded synthetic archives."""

from __future__ import annotations

import numpy as np
import pytest

from layerlab.analysis import coverage, exact, specificity, synthetic
from layerlab.analysis.bootstrap import Paired
from layerlab.analysis.effects import band, effects_from_paired


def _one_unit(cells: dict[str, list[int]], n_tasks: int) -> Paired:
    """One unit's binary paired differences: per scenario a list of +1/-1/0 per task (padded
    with 0 to ``n_tasks``)."""
    scen = tuple(cells)
    diff = np.zeros((1, len(scen), n_tasks))
    for i, s in enumerate(scen):
        diff[0, i, : len(cells[s])] = cells[s]
    tasks = tuple(f"d-{t:03d}-q1" for t in range(n_tasks))
    return Paired(
        ("prov/model",),
        scen,
        tasks,
        diff,
        np.ones(diff.shape, dtype=bool),
        np.arange(n_tasks, dtype=np.int64),
        "freshness_guard",
        "strict",
    )


def test_tango_statistic_matches_the_restricted_likelihood_by_brute_force() -> None:
    b, c, n, d = 5.0, 2.0, 16.0, 0.1
    grid = np.linspace(1e-6, (1 - d) / 2 - 1e-6, 200_001)  # P(baseline only) under Δ = d
    ll = b * np.log(grid + d) + c * np.log(grid) + (n - b - c) * np.log(1 - 2 * grid - d)
    p01 = grid[ll.argmax()]
    z = (b - c - n * d) / np.sqrt(n * (2 * p01 + d * (1 - d)))
    assert float(
        exact.tango_z(np.array(b), np.array(c), np.array(n), np.array(d))
    ) == pytest.approx(z, abs=1e-4)


def test_the_score_interval_is_never_zero_width_on_a_constant_cell() -> None:
    """No pair discordant, or every pair discordant the same way: a percentile bootstrap prints
    [0, 0] or [+100, +100]; the score interval keeps a width and stays in [-1, 1]."""
    lo, hi = exact.score_interval([0, 16, 0], [0, 0, 16], [16, 16, 16], 1.96)
    assert lo[0] < 0 < hi[0] and lo[0] == pytest.approx(-hi[0])
    assert hi[0] == pytest.approx(1.96**2 / (16 + 1.96**2), abs=1e-6)  # Wilson's bound at 0/16
    assert 0.5 < lo[1] < 1.0 and hi[1] == 1.0
    assert lo[2] == -1.0 and -1.0 < hi[2] < -0.5
    p = _one_unit({"clean": [], "stale_index": [1] * 16}, 16)
    eff = effects_from_paired(p, n_boot=200)
    t = eff.table.set_index("scenario")
    assert set(t["method"]) == {exact.SCORE}
    assert (t["ci_high"] - t["ci_low"] > 0.1).all(), t
    assert "Tango score interval" in eff.describe()
    assert "exact binomial null of each binary cell's discordant tasks" in eff.describe()


def test_constant_cells_of_several_units_use_the_score_interval_at_the_pooled_pairs() -> None:
    df = synthetic.synthetic_frame(n_units=6, seed=3, effects={"clean": 0.0, "schema_drift": 0.5})
    from layerlab.analysis.effects import paired_effects

    eff = paired_effects(df, n_boot=300)
    t = eff.table.set_index("scenario")
    assert t.loc["clean", "method"] == exact.SCORE_CONSTANT  # exact zeros: copies of the baseline
    assert t.loc["schema_drift", "method"] == exact.BOOTSTRAP
    assert t.loc["clean", "ci_low"] < 0 < t.loc["clean", "ci_high"]


def test_the_sign_flip_band_covers_every_cell_together() -> None:
    """One unit x 40 tasks, nine null cells of Beta(2,2) tasks: the band covers all nine at
    once about 95% of the time; marginal intervals alone would miss one far more often."""
    setting = next(
        s for s in coverage.one_unit_settings() if s.name == "1 unit x 40 tasks, Beta(2,2) null"
    )
    joint = marginal = 0
    sims = 150
    for i in range(sims):
        p = synthetic.simulate(setting, 500 + i, truth_draws=1_000).paired()
        eff = effects_from_paired(p, n_boot=200, seed=i)
        bd = band(eff, list(p.scenarios))
        assert (bd.crit >= 1.959).all() and (bd.high - bd.low > 0).all()
        joint += bool(((bd.low <= 0) & (bd.high >= 0)).all())
        t = eff.table
        marginal += bool(((t["ci_low"] <= 0) & (t["ci_high"] >= 0)).all())
    assert joint / sims >= 0.9, joint / sims
    assert marginal / sims < joint / sims


def test_the_sign_flip_test_counts_the_observed_sample_among_its_flips() -> None:
    """The identity is one of the flips and the critical value an order statistic of them, so
    the permutation test is exact: with the identity as the only flip no cell can be shown (the
    critical value is the observed statistic itself), and with many flips a cell of 10 tasks
    up and 1 down is shown (exact sign test: p = 24/2048)."""
    cells = {"stale_index": [1] * 10 + [-1], "clean": [1, -1] * 3}
    p = _one_unit(cells, 12)
    observed = 9 / np.sqrt(11)  # the stale cell's McNemar statistic |b - c| / sqrt(b + c)
    assert exact.signflip_crit(p, [0, 1], 0.05, n_flip=1) == pytest.approx(observed)
    assert exact.signflip_crit(p, [0, 1], 0.05, n_flip=4096) < observed


def _judge(cells: dict[str, list[int]], n_tasks: int) -> specificity.Judgement:
    p = _one_unit(cells, n_tasks)
    eff = effects_from_paired(p, n_boot=300)
    return specificity.judge(eff, ["stale_index"], [s for s in cells if s != "stale_index"])


def test_each_of_the_four_verdicts_is_reachable_with_hand_made_cells() -> None:
    gain = [1] * 60  # +75 pp of 80 tasks
    spec = _judge({"stale_index": gain, "clean": [], "schema_drift": []}, 80)
    assert spec.verdict == specificity.SPECIFIC and spec.reason == ""
    assert spec.target_low > 0
    assert all(abs(x) < specificity.DELTA for s in ("clean", "schema_drift") for x in spec.tost[s])
    broad = _judge({"stale_index": gain, "clean": [1] * 40, "schema_drift": []}, 80)
    assert broad.verdict == f"{specificity.OVER_BROAD} ({specificity.GAIN})" and broad.gain == (
        "clean",
    )
    # the line that says over-broad names the off-target cell and its band
    lo, hi = broad.band["clean"]
    assert broad.reason == f"off-target clean gain: band [{100 * lo:+.1f}, {100 * hi:+.1f}] pp excludes 0"
    harm = _judge({"stale_index": gain, "clean": [-1] * 40, "schema_drift": []}, 80)
    assert harm.verdict == f"{specificity.OVER_BROAD} ({specificity.HARM})"
    assert "off-target clean harm: band [" in harm.reason
    none = _judge({"stale_index": [], "clean": [], "schema_drift": []}, 80)
    assert none.verdict == specificity.INEFFECTIVE and none.target_high < specificity.DELTA
    assert "upper bound" in none.reason
    few = _judge({"stale_index": [1, 1, 1, 1, -1, -1], "clean": [], "schema_drift": []}, 16)
    assert few.verdict == specificity.INCONCLUSIVE
    assert "target stale_index 95% interval" in few.reason
    # a clear target gain at 16 tasks is still inconclusive: an unchanged cell's 90% interval
    # is ±z²/(n + z²) = ±14.5 pp, and the reason says how many tasks specific needs
    wide = _judge({"stale_index": [1] * 14, "clean": [], "schema_drift": []}, 16)
    assert wide.verdict == specificity.INCONCLUSIVE and wide.target_low > 0
    assert "off-target clean, schema_drift not shown within ±10 pp" in wide.reason
    assert "specific needs at least 25 tasks with unchanged off-target outcomes" in wide.reason
    # a wider margin decides it: δ is a setting
    p = _one_unit({"stale_index": [1] * 14, "clean": [], "schema_drift": []}, 16)
    eff = effects_from_paired(p, n_boot=300)
    assert specificity.judge(
        eff, ["stale_index"], ["clean", "schema_drift"], delta=0.4
    ).verdict == (specificity.SPECIFIC)


def test_specific_is_reachable_from_the_floor_of_tasks_not_from_seventy() -> None:
    """Specific is a conjunction, tested by intersection-union: the off-target cells' 90%
    intervals (TOST) need no multiplicity correction, so an unchanged cell fits ±10 pp from
    n > z²(1 - δ)/δ = 24.4 tasks (the simultaneous band at z(0.05/9) needed 70)."""
    assert specificity.specific_floor() == 25
    assert specificity.specific_floor(delta=0.05) == 52
    for n, want in ((24, specificity.INCONCLUSIVE), (25, specificity.SPECIFIC),
                    (40, specificity.SPECIFIC)):  # fmt: skip
        cells = {"stale_index": [1] * (n - 2), **{s: [] for s in ("clean", "schema_drift")}}
        assert _judge(cells, n).verdict == want, n


def test_policy_clusters_are_the_default_when_variants_share_a_policy() -> None:
    """Three question variants per policy: intervals count the design effect of the policy
    (Rao-Scott), and an unchanged cell counts policies, not tasks; one variant per policy or
    policy_level=False keeps tasks."""
    p = _one_unit({"stale_index": [1] * 60, "clean": [1, 1, 1, -1, -1, -1], "drift": []}, 81)
    p3 = Paired(p.units, p.scenarios, p.tasks, p.diff, p.valid, np.arange(81) // 3,
                p.treatment, p.baseline)  # fmt: skip
    eff = effects_from_paired(p3, n_boot=200)
    assert eff.policy_level and set(eff.methods) == {exact.SCORE_CLUSTERED}
    flat = effects_from_paired(p3, n_boot=200, policy_level=False)
    assert not flat.policy_level and set(flat.methods) == {exact.SCORE}
    assert not effects_from_paired(p, n_boot=200).policy_level
    t, f = eff.table.set_index("scenario"), flat.table.set_index("scenario")
    # clean's 3 up and 3 down fall in one policy each: the cluster variance is 3x the flat one
    assert t.loc["clean", "ci_high"] - t.loc["clean", "ci_low"] > 1.4 * (
        f.loc["clean", "ci_high"] - f.loc["clean", "ci_low"]
    )
    zero_lo, zero_hi = t.loc["drift", ["ci_low", "ci_high"]]
    z2 = 1.959964**2
    assert zero_hi == pytest.approx(z2 / (27 + z2), abs=1e-4)  # 27 policies, not 81 tasks
    assert specificity.judge(eff, ["stale_index"], ["clean", "drift"]).verdict == (
        specificity.INCONCLUSIVE
    )


def test_the_exact_critical_value_holds_the_level_by_enumeration() -> None:
    """Binary cells' band: the exact binomial null per cell, Bonferroni over cells. Enumerating
    every sign pattern of 12 discordant tasks shared by three cells shows the chance that some
    cell's interval excludes zero stays at or below alpha, and the value is deterministic."""
    rng = np.random.default_rng(4)
    pattern = rng.choice([-1, 0, 1], size=(3, 12), p=[0.3, 0.3, 0.4])
    m = np.abs(pattern).sum(axis=1).astype(float)
    crit = exact.exact_crit(m, 0.05)
    assert crit == exact.exact_crit(m[::-1], 0.05) and crit >= 2.39  # z(0.05/3)
    signs = np.array(np.meshgrid(*[[-1, 1]] * 12)).reshape(12, -1)  # every flip of the tasks
    stat = np.abs(pattern @ signs) / np.sqrt(np.maximum(m, 1))[:, None]
    assert (stat > crit + 1e-12).any(axis=0).mean() <= 0.05
    # McNemar's normal quantile alone would over-reject a small cell: 8 of 8 one way
    from layerlab.analysis.rates import z_score

    assert exact.exact_crit(np.array([8.0]), 0.05 / 9) == pytest.approx(8 / np.sqrt(8))
    assert z_score(0.05 / 9) < 8 / np.sqrt(8)  # 2/256 = 0.0078 > 0.05/9 at McNemar's quantile


def test_verdict_labels_follow_the_rule() -> None:
    d = specificity.DELTA
    assert specificity.verdict_label(0.1, [], [], 0.5) == specificity.SPECIFIC
    assert specificity.verdict_label(0.1, [], [], 0.5, wide=["clean"]) == specificity.INCONCLUSIVE
    assert specificity.verdict_label(-0.05, [], [], d / 2) == specificity.INEFFECTIVE
    assert specificity.verdict_label(-0.05, [], [], 0.3) == specificity.INCONCLUSIVE
    assert specificity.verdict_label(float("nan"), [], []) == specificity.INEFFECTIVE
    assert specificity.verdict_label(float("nan"), [], [], wide=["a"]) == specificity.INCONCLUSIVE
    assert specificity.verdict_label(0.5, ["clean"], []) == "over-broad (harm)"
    assert specificity.verdict_label(0.5, [], ["clean"]) == "over-broad (gain)"
    assert specificity.verdict_label(-0.5, ["a"], ["b"]) == "over-broad (harm, gain)"
    assert set(specificity.VERDICTS) >= {specificity.SPECIFIC, specificity.INCONCLUSIVE}


def test_power_and_mde_of_the_paired_design() -> None:
    # more tasks, smaller MDE; the MDE is where the power reaches 80%
    m16, m80 = exact.mde(0.0, 16, 2.5), exact.mde(0.0, 80, 2.5)
    assert m80 < m16 <= 1.0
    assert exact.power_at(m80, 0.0, 80, 2.5) == pytest.approx(0.8, abs=1e-3)
    assert exact.power_at(0.2, 0.05, 40, 2.5) < exact.power_at(0.4, 0.05, 40, 2.5)


def test_a_quick_one_unit_coverage_setting() -> None:
    setting = next(
        s for s in coverage.one_unit_settings() if s.name == "1 unit x 16 tasks, Beta(2,2) null"
    )
    table = coverage.run([setting], coverage.Size(sims=40, n_boot=200, seed=5))
    v = table[(table["quantity"] == coverage.VERDICT) & (table["status"] == "reported")].iloc[0]
    assert v["estimand"] == specificity.INEFFECTIVE
    assert sum(v[k] for k in coverage.VERDICT_SHARES) == pytest.approx(1.0, abs=1e-3)
    assert v["inconclusive"] > 0.5  # 16 tasks cannot show an effect below 10 pp
    assert v["false flag"] <= 0.15
    rep = table[(table["status"] == "reported") & (table["quantity"] != coverage.VERDICT)]
    assert coverage.BAND in set(rep["quantity"]) and rep["coverage"].min() >= 0.8

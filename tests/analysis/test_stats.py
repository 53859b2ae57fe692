"""Statistics: the crossed bootstrap against its plain loop, the design rules, cluster-aware rates,
the covering margin, cross-checks, Tables 8/9, and the coverage suite (reduced here)."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pandas as pd
import pytest

from layerlab.analysis import coverage, coverage_settings, stats, synthetic
from layerlab.reporting.paper import tables


@pytest.mark.parametrize(("k", "n"), [(0, 10), (5, 20), (466, 480), (2160, 2160), (1, 3)])
def test_wilson_matches_statsmodels(k: int, n: int) -> None:
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = stats.wilson(k, n)
    elo, ehi = proportion_confint(k, n, method="wilson")
    assert (lo, hi) == pytest.approx((elo, ehi), abs=1e-12)


def _sample(n_units: int = 5, seed: int = 1, **kw: object) -> synthetic.Sample:
    return synthetic.simulate(synthetic.Setting(n_units=n_units, **kw), seed, truth_draws=2_000)  # type: ignore[arg-type]


@pytest.mark.parametrize("design", ["crossed", "nested", "tasks"])
@pytest.mark.parametrize("policy_level", [False, True])
@pytest.mark.parametrize("balanced", [True, False])
def test_vectorised_bootstrap_equals_the_plain_loop(
    design: str, policy_level: bool, balanced: bool
) -> None:
    p = _sample().paired()
    if not balanced:  # one unit misses some tasks in every scenario, another in one scenario
        valid = p.valid.copy()
        valid[0, :, :50] = False
        valid[2, 1, 100:130] = False
        p = dataclasses.replace(p, diff=p.diff * valid, valid=valid)
    a = stats.bootstrap(p, 90, seed=3, policy_level=policy_level, design=design, chunk=40)
    b = stats.plain_loop_bootstrap(
        p, 90, seed=3, policy_level=policy_level, design=design, chunk=40
    )
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert np.isfinite(a).all() and a.std(axis=0).min() > 0


def test_frame_and_arrays_give_the_same_layout_and_the_arm_column_is_a_parameter() -> None:
    s = _sample(n_units=3)
    direct, via = s.paired(), stats.paired(s.frame())
    assert direct.units == via.units and direct.tasks == via.tasks
    assert direct.scenarios == via.scenarios
    np.testing.assert_array_equal(direct.diff, via.diff)
    np.testing.assert_array_equal(direct.policy, via.policy)
    # schema v2 renames the arm column: everything takes it as a parameter
    renamed = stats.paired(s.frame(arm="mitigation"), arm="mitigation")
    np.testing.assert_array_equal(renamed.diff, direct.diff)
    eff = stats.arm_effects(
        s.frame(arm="mitigation"), stats.TREATMENT, stats.BASELINE, n_boot=200, arm="mitigation"
    )
    assert eff.design == "tasks" and len(eff.table) == len(s.scenarios)


def test_replicates_are_averaged_per_cell_before_differencing() -> None:
    df = _sample(n_units=2).frame()
    rep = df.copy()
    rep["replicate"] = 1
    rep["success"] = ~rep["success"]  # a second replicate with every outcome flipped
    both = pd.concat([df.assign(replicate=0), rep], ignore_index=True)
    p = stats.paired(both)
    # mean over replicates of (y, 1 - y) is 0.5 for both arms: every difference is 0
    assert np.all(p.diff[p.valid] == 0.0)


def test_design_rules_crossed_by_default_tasks_only_below_min_units() -> None:
    eff9 = stats.effects_from_paired(_sample(n_units=9).paired(), 300, seed=1)
    assert eff9.design == "crossed" and not eff9.note
    assert (eff9.table["design"] == "crossed").all()
    assert "crossed" in eff9.describe() and "t(8)/z" in eff9.describe()
    eff3 = stats.effects_from_paired(_sample(n_units=3).paired(), 300, seed=1)
    assert eff3.design == "tasks" and "describe these units" in eff3.note
    assert "these units" in eff3.estimand
    nested = stats.effects_from_paired(_sample(n_units=9).paired(), 300, seed=1, design="nested")
    assert "paper's scheme" in nested.describe() and "under-covers" in nested.describe()
    single = stats.effects_from_paired(_sample(n_units=1).paired(), 200, seed=1)
    assert "single provider-model unit" in single.note


def test_crossed_interval_is_wider_than_nested_when_task_effects_are_shared() -> None:
    widths: dict[str, list[float]] = {"crossed": [], "nested": []}
    for seed in range(4):
        p = _sample(n_units=9, seed=seed, task_sd=0.15, task_effect_sd=0.2).paired()
        for d in widths:
            t = stats.effects_from_paired(p, 400, seed=seed, design=d).table  # type: ignore[arg-type]
            ti = list(p.scenarios).index(stats.TARGET)
            widths[d].append(float(t["ci_high"][ti] - t["ci_low"][ti]))
    assert np.mean(widths["crossed"]) > 1.15 * np.mean(widths["nested"])


def test_interval_width_shrinks_as_units_grow() -> None:
    widths = {}
    for units in (5, 9, 27):
        w = []
        for seed in range(4):
            t = stats.effects_from_paired(
                _sample(n_units=units, seed=seed, unit_effect_sd=0.1).paired(), 300, seed=seed
            ).table.set_index("scenario")
            w.append(float(t.loc[stats.TARGET, "ci_high"] - t.loc[stats.TARGET, "ci_low"]))
        widths[units] = float(np.mean(w))
    assert widths[5] > widths[9] > widths[27]


def test_exactly_zero_effect_gives_exactly_zero_interval() -> None:
    df = synthetic.synthetic_frame(
        n_units=6, effects={"stale_index": 0.0, "schema_drift": 0.4}, seed=3
    )
    eff = stats.paired_effects(df, n_boot=500, seed=1)
    row = eff.table.set_index("scenario").loc["stale_index"]
    # the estimate is exactly zero; its interval is the score interval of the concordant pairs
    # (issue 33: a constant cell never prints a zero-width interval), the replicates stay zero
    assert row["estimate"] == 0.0 and row["ci_low"] < 0.0 < row["ci_high"]
    assert bool(row["exactly_zero"])
    for design in ("crossed", "nested", "tasks"):
        for policy_level in (False, True):
            reps = stats.bootstrap(eff.paired, 100, 2, policy_level, design=design)
            assert np.all(reps[:, list(eff.paired.scenarios).index("stale_index")] == 0.0)


def test_seeded_and_reproducible() -> None:
    p = _sample().paired()
    a, b = stats.bootstrap(p, 300, seed=7), stats.bootstrap(p, 300, seed=7)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, stats.bootstrap(p, 300, seed=8))


# --- the margin --------------------------------------------------------------------------------


def test_margin_with_exact_zero_off_target_and_ties_named() -> None:
    df = synthetic.synthetic_frame(
        n_units=6,
        effects={"clean": 0.0, "partial_timeout": 0.0, "schema_drift": 0.6},
        seed=5,
    )
    eff = stats.paired_effects(df, n_boot=800, seed=1)
    m = stats.specificity_margin(eff)
    gain = eff.table.set_index("scenario").loc["schema_drift"]
    assert m["margin"] == m["margin_plugin"] == pytest.approx(gain["estimate"])
    assert m["largest_off_target"] == "clean, partial_timeout"  # a tie names every scenario
    assert m["ci_low"] <= m["margin"] <= m["ci_high"]
    assert m["off_target_distinguishable"] == "-"


def test_margin_is_unbiased_when_off_target_effects_are_zero_but_noisy() -> None:
    """The plug-in gain − max|change| is pulled down by the noise of the maximum; the reported
    margin counts only distinguishable changes and its interval covers the truth."""
    errs_plugin, errs, covered = [], [], 0
    for seed in range(12):
        s = _sample(n_units=9, seed=seed)
        eff = stats.effects_from_paired(s.paired(), 300, seed=seed)
        m = stats.specificity_margin(eff)
        scen = list(s.scenarios)
        off = [i for i, name in enumerate(scen) if name != stats.TARGET]
        truth = s.true_effect[scen.index(stats.TARGET)] - np.abs(s.true_effect[off]).max()
        errs_plugin.append(m["margin_plugin"] - truth)
        errs.append(m["margin"] - truth)
        covered += m["ci_low"] <= truth <= m["ci_high"]
        assert m["ci_low"] <= m["margin_plugin"] <= m["margin"] <= m["ci_high"]
    assert np.mean(errs_plugin) < -0.01  # the known bias of the plug-in
    assert abs(np.mean(errs)) < abs(np.mean(errs_plugin)) / 2
    assert covered == 12


def test_margin_is_generic_over_targets_and_off_targets() -> None:
    eff = stats.effects_from_paired(_sample(n_units=9).paired(), 300, seed=1)
    both = stats.specificity_margin(
        eff, target=["schema_drift", "clean"], off_target=["stale_index"]
    )
    assert both["target"] == "schema_drift, clean"
    est = eff.table.set_index("scenario")["estimate"]
    assert both["target_gain"] == pytest.approx(min(est["schema_drift"], est["clean"]))
    assert both["largest_off_target"] == "stale_index"
    with pytest.raises(ValueError, match="not in archives"):
        stats.specificity_margin(eff, target="nope")
    with pytest.raises(ValueError, match="off-target scenarios"):
        stats.specificity_margin(eff, off_target=["nope"])


# --- rates ---------------------------------------------------------------------------------------


def test_cluster_aware_rate_widens_under_heterogeneity_and_is_honest_at_zero() -> None:
    s = _sample(n_units=9, unit_sd=0.15, task_sd=0.15)
    sums = s.baseline[:, 0, :].astype(float)
    r = stats.rate_interval(sums, np.ones_like(sums))
    assert r.design == "crossed" and r.n_effective < r.n / 5
    assert (r.ci_high - r.ci_low) > 2 * (r.wilson_records_high - r.wilson_records_low)
    zero = stats.rate_interval(np.zeros((9, 240)), np.ones((9, 240)))
    assert zero.rate == 0.0 and zero.n_effective == 9  # units, not 2,160 records
    assert zero.ci_high == pytest.approx(stats.clopper_pearson(0, 9)[1])  # 1 - 0.025^(1/9)
    assert zero.ci_high == pytest.approx(1 - 0.025 ** (1 / 9))
    few = stats.rate_interval(np.zeros((2, 240)), np.ones((2, 240)))
    assert few.design == "tasks" and few.n_effective == 240


@pytest.mark.parametrize("k,n", [(0, 16), (3, 16), (8, 16), (40, 80), (79, 80), (80, 80)])
def test_clopper_pearson_matches_statsmodels(k: int, n: int) -> None:
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = stats.clopper_pearson(k, n)
    elo, ehi = proportion_confint(k, n, method="beta")
    assert lo == pytest.approx(elo, abs=1e-9) and hi == pytest.approx(ehi, abs=1e-9)


def test_clopper_pearson_covers_at_least_nominal_where_wilson_dips() -> None:
    """The reason rates use it: at 80 tasks Wilson's exact coverage of a rate of 0.5 is 94.3%
    (within the Monte Carlo error of the 93% goal at 500 simulations); Clopper-Pearson's, at the
    effective size n - 1 a rate's task-clustered variance gives, is at least 95% at every rate."""
    from scipy.stats import binom

    n = 80
    ks = np.arange(n + 1)
    for p in (0.05, 0.15, 0.3, 0.5):
        pk = binom.pmf(ks, n, p)
        cp = sum(
            w
            for k, w in zip(ks, pk, strict=True)
            if _covers(stats.rate_interval(_one(k, n), np.ones((1, n))), p)
        )
        old = [
            stats.wilson(k / n * (n - 1), n - 1) if 0 < k < n else stats.wilson(k, n) for k in ks
        ]
        wi = sum(w for w, (lo, hi) in zip(pk, old, strict=True) if lo <= p <= hi)
        assert cp >= 0.95, (p, cp)
        if p == 0.5:
            assert wi == pytest.approx(0.9433, abs=5e-4)


def _one(k: int, n: int) -> np.ndarray:
    s = np.zeros((1, n))
    s[0, :k] = 1.0
    return s


def _covers(r: stats.Rate, p: float) -> bool:
    return bool(r.ci_low <= p <= r.ci_high)


def test_identical_units_count_as_one_sample_of_tasks() -> None:
    rng = np.random.default_rng(0)
    row = (rng.random(240) < 0.4).astype(float)
    r = stats.rate_interval(np.vstack([row, row]), np.ones((2, 240)))
    assert r.design == "tasks" and r.n_effective == pytest.approx(240, rel=0.01)


def test_table4_caption_states_design_and_units(tmp_path: object) -> None:
    df = synthetic.synthetic_frame(n_units=6, seed=2, effects={"clean": 0.0, "schema_drift": 0.5})
    t4 = tables.table4(df)
    cap, notes = t4.attrs["caption"], str(t4.attrs["notes"])
    assert "(5760 records, 240 tasks)" in cap  # the caption keeps the units: all six, by name
    assert all(f"prov{i % 3}/model{i}" in cap for i in range(6))
    assert "crossed" in notes and "not treated as independent" in notes  # the notes, the design
    assert set(t4["interval"]) == {"crossed"} and (t4["units"] == 6).all()
    small = tables.table4(df[df["model"].isin(["model0", "model1"])])
    assert "describes these units, not a population of models" in str(small.attrs["notes"])


# --- cross-checks, Tables 8 and 9 ---------------------------------------------------------------


def test_mcnemar_p_values_are_exact_and_printed_as_bounds_when_they_underflow() -> None:
    from statsmodels.stats.contingency_tables import mcnemar

    for n01, n10 in ((3, 9), (0, 40), (12, 13)):
        want = mcnemar([[5, n10], [n01, 5]], exact=True).pvalue
        assert 10 ** stats.mcnemar_exact_log10(n01, n10) == pytest.approx(want, rel=1e-9)
    lp = stats.mcnemar_exact_log10(0, 2000)
    assert lp == pytest.approx(math.log10(2) - 2000 * math.log10(2), rel=1e-9)
    assert stats.format_p(lp) == "< 1e-601" and stats.format_p(math.log10(0.0123)) == "0.0123"


def test_crosschecks_gee_by_unit_estimable_when_strict_is_zero() -> None:
    s = _sample(n_units=9, seed=4, base_rate=0.0, unit_sd=0.0, task_sd=0.0)
    df = s.frame()
    assert df.loc[df[stats.ARM] == "strict", "success"].sum() == 0
    eff = stats.paired_effects(df, n_boot=300, seed=1)
    cross = stats.crosschecks(df, eff).set_index("scenario")
    row = cross.loc[stats.TARGET]
    assert row["gee clustered by"] == "unit" and row["gee clusters"] == 9
    est = eff.table.set_index("scenario").loc[stats.TARGET, "estimate"]
    assert row["gee risk difference"] == pytest.approx(est, abs=1e-9)
    assert row["gee agrees"] == "true" and bool(row["mcnemar agrees"])
    few = stats.crosschecks(df[df["model"].isin(["model0", "model1"])], eff)
    assert set(few["gee clustered by"]) == {"task"}


def test_table8_lists_only_positive_gains_and_keeps_ties() -> None:
    df = synthetic.synthetic_frame(
        n_units=4, effects={"clean": 0.0, "schema_drift": 0.5, "stale_index": 0.0}, seed=1
    )
    t8 = tables.table8(df, top=2)
    assert (t8["gain"] > 0).all() and set(t8["scenario"]) == {"schema_drift"}
    # force a tie at the cut-off: every tied row is kept
    tied = df.copy()
    sd = (tied["scenario"] == "schema_drift") & (tied[stats.ARM] == "repair")
    tied.loc[sd, "success"] = True
    tied.loc[
        (tied["scenario"] == "schema_drift") & (tied[stats.ARM] == "strict"), "success"
    ] = False
    t8 = tables.table8(tied, top=2)
    assert len(t8) == 4 and (t8["gain"] == 1.0).all()
    assert "only gains above zero" in t8.attrs["caption"]


def test_table9_pooled_interval_is_cluster_aware() -> None:
    df = synthetic.synthetic_frame(n_units=6, seed=2, effects={"clean": 0.0, "schema_drift": 0.5})
    t9 = tables.table9(df)
    assert set(t9["interval"]) == {"tasks"}  # at most 2 models per provider
    assert (t9["95% low"] <= t9["success overall"]).all()
    assert (t9["success overall"] <= t9["95% high"]).all()


# --- coverage ------------------------------------------------------------------------------------


def test_reduced_coverage_suite_runs_every_setting_and_interval() -> None:
    size = coverage.Size(sims=10, n_boot=200, seed=11)
    table = coverage.run(size=size)
    assert set(table["units"]) == {1, 2, 3, 9, 27}
    assert {"reported", "labelled", "not reported"} <= set(table["status"])
    # intervals only: a verdict row's "coverage" is the share not given a wrong claim, judged
    # against the population's effects, which units with effects of their own may rightly defy
    rep = table[(table["status"] == "reported") & (table["quantity"] != coverage.VERDICT)]
    assert rep["coverage"].min() >= 0.7, rep.sort_values("coverage").head()
    pooled = (rep["coverage"] * rep["checks"]).sum() / rep["checks"].sum()
    assert pooled >= 0.92
    assert set(rep.loc[rep["units"] < stats.MIN_UNITS, "estimand"]) <= {"these units"}
    verdict = table[table["quantity"] == coverage.VERDICT]
    assert set(verdict["setting"]) == {s.name for s in coverage.all_settings()}
    assert verdict["false flag"].notna().all() and table["false flag"].isna().sum() == len(
        table
    ) - len(verdict)
    null = verdict[verdict["status"] == "reported"]
    assert set(null.loc[null["estimand"] == "ineffective", "setting"]) == {
        s.name for s in coverage.all_settings() if coverage.is_null(s)
    }


def test_committed_coverage_table_meets_the_requirement() -> None:
    table = coverage.load()
    assert table["simulations"].min() >= min(coverage.FULL.sims, coverage.FULL.one_unit_sims)
    assert set(table["units"]) == {1, 2, 3, 9, 27}
    # the shapes users run: one unit x 16, 40 and 80 tasks, every kind of setting
    one = set(table.loc[table["units"] == 1, "setting"])
    shapes = {s.name for s in (*coverage.one_unit_settings(), *coverage.team_settings())}
    assert one == shapes and len(one) == 30
    # every goal is met but the documented shortfalls (open work, issue 33): a new miss or a fix
    # is noticed
    missed = {(r.setting, r.quantity) for r in coverage.failures(table).itertuples()}
    assert missed == set(coverage.SHORTFALLS), coverage.failures(table)
    # the findings the rules rest on are in the table, not just asserted in prose
    rows = table.set_index(["setting", "quantity", "interval"])["coverage"]
    shared = ("9 units, shared task effect", "effect, zero off-target")
    assert rows[(*shared, "nested (paper)")] < 0.93 <= rows[(*shared, "reported")]
    strong = ("9 units, strong heterogeneity", "effect, target")
    assert rows[(*strong, "nested (paper)")] < 0.93 <= rows[(*strong, "reported")]
    assert (
        rows["9 units, strong heterogeneity", "rate, strict", "Wilson, records independent"] < 0.93
    )
    assert (
        rows["2 units", "effect, target", "crossed below min units"] >= 0.0
    )  # shown, not reported
    # the verdict under the null: each claim of the reported rule at most 5% in every null
    # setting (their sum, some false claim, at most 2.5% + 5%), the old rule more
    assert "power" in table, "coverage.csv predates the δ verdict rows: run `make coverage`"
    null = "identical prompts, 2 units x 80 tasks x 9 scenarios"
    by = table.set_index(["setting", "quantity", "interval"])
    reported = by.loc[(null, coverage.VERDICT, "reported (simultaneous band, δ equivalence)")]
    assert reported["specific"] <= coverage.MAX_FALSE_FLAG / 2
    assert reported["over-broad"] <= coverage.MAX_FALSE_FLAG and not coverage.SHORTFALLS
    assert reported["false flag"] <= 1.5 * coverage.MAX_FALSE_FLAG
    flags = by["false flag"]
    replaced = flags[(null, coverage.VERDICT, "one-sided marginal, harm only (replaced)")]
    assert replaced > reported["false flag"]
    ff = coverage.false_flags(table)
    assert len(ff) == 9
    assert max(v for f in ff.values() for v in f.values()) <= coverage.MAX_FALSE_FLAG
    assert table.loc[table["setting"] == null, "simulations"].min() >= coverage.FULL.null_sims
    # the three former shortfalls meet their goals (issue 33)
    band = table.set_index(["setting", "quantity"])["coverage"]
    assert band[("9 units, strong heterogeneity", coverage.BAND)] >= coverage.REQUIRED
    rate = (
        "1 unit x 80 tasks, +25 pp off-target gain (clean)",
        "rate, strict",
        coverage.RATE_INTERVAL,
    )
    assert rows[rate] >= coverage.REQUIRED
    # power is reported for +20 pp on the target at each one-unit size
    pw = coverage.powers(table)
    assert {f"1 unit x {n} tasks, +20 pp target" for n in coverage.ONE_UNIT_TASKS} <= set(pw)
    # the simultaneous band is scored as an interval of its own
    assert (table["quantity"] == coverage.BAND).sum() == len(coverage.all_settings())
    skewed = ("2 units x 80 tasks, skewed difficulty", "effect, zero off-target", "reported")
    assert rows[skewed] >= coverage.REQUIRED


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("LAYERLAB_FULL_COVERAGE"),
    reason="full coverage run: LAYERLAB_FULL_COVERAGE=1",
)
def test_full_coverage_suite_reproduces_the_committed_table() -> None:
    table = coverage.run(size=coverage.FULL)
    assert coverage.to_csv(table) == coverage.COVERAGE_CSV.read_text(encoding="utf-8")


def test_simultaneous_band_never_leaves_the_scale_of_a_rate_difference() -> None:
    """A band around an effect near +100 pp stays within [-100, +100] pp (it used to reach
    +100.4 in Table 10), and so does the margin interval projected from it."""
    rng = np.random.default_rng(3)
    rows = []
    for t in range(60):
        for arm in (stats.BASELINE, stats.TREATMENT):
            for s in ("clean", "schema_drift"):
                ok = arm == stats.TREATMENT and s == "schema_drift" and rng.random() > 0.01
                rows.append(
                    {"provider": "p", "model": "m", "scenario": s, "mitigation": arm,
                     "task_id": f"t{t}", "policy_id": f"p{t}", "replicate": 0, "success": ok}
                )
    eff = stats.paired_effects(pd.DataFrame(rows), n_boot=500, seed=0)
    lo, hi = stats.simultaneous_band(eff, ["schema_drift", "clean"])
    assert (hi <= 1.0).all() and (lo >= -1.0).all()
    m = stats.specificity_margin(eff)
    assert -1.0 <= m["ci_low"] <= m["ci_high"] <= 1.0


def test_tasks_only_intervals_get_a_small_sample_widening() -> None:
    """2 units x 80 tasks (tasks only): the percentile deviations are rescaled to the
    task-clustered variance (G/(G-1)) and widened by t(df)/z, df <= G-1; the raw percentile
    interval over such an archive covered 93.8%."""
    from scipy.stats import norm
    from scipy.stats import t as t_dist

    setting = next(s for s in coverage.all_settings() if s.name.startswith("2 units x 80 tasks"))
    p = synthetic.simulate(setting, 5, truth_draws=1_000).paired()
    eff = stats.effects_from_paired(p, 2000, seed=0)
    assert eff.design == "tasks" and len(p.tasks) == 80
    g = len(p.tasks)
    factor = stats.small_sample_factor(p, "tasks", policy_level=False)
    floor = float(t_dist.ppf(0.975, g - 1) / norm.ppf(0.975))
    assert (factor >= floor - 1e-12).all() and floor > 1.01
    live = eff.scale != 1.0
    assert live.all()
    # the rest of the scale is the G/(G-1) variance factor (up to the bootstrap's own noise)
    assert np.allclose(eff.scale / factor, math.sqrt(g / (g - 1)), rtol=0.08)
    raw = stats.bootstrap(p, 2000, seed=0, design="tasks")
    rlo, rhi = np.nanquantile(raw, [0.025, 0.975], axis=0)
    t = eff.table
    assert ((t["ci_high"] - t["ci_low"]).to_numpy() > (rhi - rlo)).all()
    assert "widened by t(df)/z, df at most 79" in eff.describe()
    # crossed keeps t(U-1)/z over the units; nested stays raw
    assert np.allclose(stats.small_sample_factor(p, "crossed", False), stats.t_over_z(2, 0.05))
    assert np.allclose(stats.small_sample_factor(p, "nested", False), 1.0)


def test_tasks_only_degrees_of_freedom_fall_when_few_tasks_carry_the_variance() -> None:
    """One discordant task among 80: the variance rests on that task alone (df about 2, the
    interval about twice as wide as t(79) would make it); evenly spread differences keep G-1."""
    s = synthetic.simulate(
        synthetic.Setting(n_units=1, n_policies=80, variants=1, effects={"clean": 0.0}), 0, 1000
    )
    p = s.paired()
    diff = np.zeros_like(p.diff)
    diff[0, 0, 7] = 1.0
    one = dataclasses.replace(p, diff=diff)
    df = stats.cluster_df(one, np.arange(80))
    assert 1.5 < df[0] < 3
    assert stats.small_sample_factor(one, "tasks", False)[0] > 2
    spread = dataclasses.replace(p, diff=np.where(np.arange(80) % 2 == 0, 1.0, -1.0)[None, None, :])
    assert stats.cluster_df(spread, np.arange(80))[0] == 79


def test_committed_coverage_rows_of_a_teams_designs_keep_each_claims_error_rate() -> None:
    """The designs a team's verdict rests on (issue 41), measured at the full size: every claim
    the truth contradicts is given at most 5% of the time (+ 2 Monte Carlo s.e.) — specific at an
    off-target change of exactly ±δ, either claim under the policy-clustered and sampled nulls —
    and the sampled system can be called specific at 240 tasks x 3 epochs."""
    table = coverage.load()
    fc = coverage.false_claims(table).set_index("setting")
    team = [s.name for s in coverage.team_settings()]
    assert set(team) <= set(fc.index)
    for name in team:
        row = fc.loc[name]
        for claim in coverage.CLAIMS:
            share = row[claim]
            if share == share:  # NaN where the truth calls for the claim
                se = (share * (1 - share) / row["simulations"]) ** 0.5
                assert share <= coverage.MAX_FALSE_FLAG + 2 * se, (name, claim, share)
    edge = [s for s in coverage.team_settings() if coverage_settings.on_boundary(s)]
    assert len(edge) == 4
    assert all(fc.loc[s.name, "simulations"] >= coverage.FULL.null_sims for s in edge)
    # the policy-clustered null judged by policy (reported) and by task (shown, not reported)
    rows = table.set_index(["setting", "interval"])
    clustered = [s.name for s in coverage.team_settings() if s.policy_effect]
    assert len(clustered) == 2
    for name in clustered:
        assert rows.loc[(name, coverage.TASK_LEVEL), "status"] == "not reported"
    pw = coverage.powers(table)
    assert pw["1 unit x 240 tasks x 3 epochs, sampled, +40 pp target"] >= 0.8



def test_an_intensity_sweep_s_variants_sit_beside_their_scenario_by_intensity() -> None:
    from layerlab.analysis.units import scenario_order

    names = ["stale_index", "clean", "my_own", "stale_index@0.5", "stale_index@0",
             "wrong_session@0.1", "a_user_one", "wrong_session", "schema_drift"]  # fmt: skip
    assert scenario_order(pd.DataFrame({"scenario": names})) == [
        "clean", "stale_index@0", "stale_index@0.5", "stale_index", "schema_drift",
        "wrong_session@0.1", "wrong_session", "a_user_one", "my_own"]  # fmt: skip

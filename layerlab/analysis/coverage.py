"""Coverage suite: how often each interval the package reports covers the truth it claims to.

Synthetic archives (:mod:`layerlab.analysis.synthetic`) with between-unit heterogeneity, task effects
shared across units, noisy zero-effect off-target scenarios and 2, 3, 9 and 27 units are drawn
with known truth; every interval type is computed on each and scored for coverage and width.

Interval types and what they are judged against:

- ``reported`` — what the tables show: crossed bootstrap with at least ``MIN_UNITS`` units
  (population truth), tasks only below (truth of *these* units, as the tables say);
- ``nested (paper)`` — the paper's scheme, raw percentile, judged against the population;
- ``crossed below min units`` — what a crossed interval would claim about the population of
  models from too few units (not reported; shown to justify the rule);
- ``margin plug-in percentile`` — the percentile interval of ``gain − max|change|`` (replaced);
- ``reported (cluster-aware Clopper-Pearson)`` — the rates' interval (Tables 4 and 9, results.json);
- ``Wilson, records independent`` — the old Table 4 interval, judged against the population;
- ``reported (simultaneous band)`` — the band Table 10's verdict reads, scored as one interval:
  covered when it covers every cell of the mitigation at once.

The settings (:mod:`layerlab.analysis.coverage_settings`) include the shapes users run: one unit x
16, 40 and 80 tasks (a Beta(2,2) null, near-ceiling and rare-success targets, replicates with ICC
0.2, +20 pp on the target, a +25 pp off-target gain), and the designs a team's verdict rests on
(an off-target effect of exactly ±δ, three question variants per policy sharing an effect, a
sampled system of three epochs, a +15 pp side effect). Every setting also scores Table 10's
verdict (:func:`layerlab.analysis.specificity.judge`) against the verdict its truth calls for
(:func:`~layerlab.analysis.coverage_settings.expected_verdict`): ``false flag`` is the share given
a claim the truth contradicts; ``inconclusive`` is no claim; ``power`` the share given the verdict
the truth calls for. Each claim is a test with its own error rate (:func:`false_claims`): in
every null setting and every one-unit setting, each claim the truth contradicts (specific,
over-broad, ineffective) is given at most :data:`MAX_FALSE_FLAG` of the time (up to two Monte
Carlo standard errors of the share measured). With no effect
anywhere a mitigation can be given either of two claims, so its chance of some false claim is
bounded by 2.5% (specific: the target's interval is one-sided) + 5% (over-broad). Beside it in
null settings, not reported: the old rule (one-sided, per-cell marginal intervals), "some
off-target marginal interval excludes zero" and, where question variants share a policy's effect,
the verdict judged with variants as independent tasks.

``python -m layerlab.analysis.coverage --full`` runs the full size and writes
``data/coverage/coverage.csv`` (committed; notebook 10 shows it), settings in parallel over
``--workers`` processes (default 2); the test suite runs a reduced size.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerlab import paths
from layerlab.analysis import synthetic
from layerlab.analysis.bootstrap import Paired, bootstrap
from layerlab.analysis.coverage_settings import (  # the settings, re-exported for callers
    FULL,
    ONE_UNIT_TASKS,
    REDUCED,
    Size,
    all_settings,
    expected_verdict,
    is_null,
    one_unit_settings,
    team_settings,
)
from layerlab.analysis.effects import Effects, effects_from_paired, specificity_margin
from layerlab.analysis.rates import rate_interval
from layerlab.analysis.units import ALPHA, MIN_UNITS, contract_arms

COVERAGE_DIR = paths.DATA / "coverage"
COVERAGE_CSV = COVERAGE_DIR / "coverage.csv"
NOMINAL = 0.95
REQUIRED = 0.93  # every reported interval type must reach this in every setting
MAX_FALSE_FLAG = 0.05  # each claim of Table 10's verdict, where the truth contradicts it, at most
# Rows of the committed table that miss a goal, each with its measured value and Monte Carlo
# error (open work, shown by notebook 10 beside the table; the committed-table test requires
# exactly these, so a new miss or a fix is noticed). None now (issue 33): the crossed band's t
# tail at its own level (effects.crossed_tail), Clopper-Pearson rates at the effective size
# (rates.clopper_pearson) and an exact sign-flip test (exact.signflip_crit: null-imposed flips,
# the identity among them, an order-statistic critical value). The identical-prompt 2-unit null,
# 5.55% +- 0.51 at 2,000 archives, is 4.68% at 10,000 (null settings now get 10,000 archives).
SHORTFALLS: dict[tuple[str, str], str] = {}
# specific or over-broad (inconclusive is no claim; ineffective is right)
VERDICT = "verdict"  # the quantity of the verdict rows
RATE_INTERVAL = "reported (cluster-aware Clopper-Pearson)"  # the rates' interval rows
BAND = "effect, every cell together"  # the simultaneous band's rows: all cells covered at once
VERDICT_SHARES = ("specific", "over-broad", "ineffective", "inconclusive")
CLAIMS = VERDICT_SHARES[:3]  # inconclusive is no claim
# the verdict of a design whose question variants share a policy, judged with variants as
# independent tasks (``--task-level``; the library judges by policy there)
TASK_LEVEL = "simultaneous band, δ equivalence, variants as independent tasks"


def _covers(lo: float, hi: float, truth: float) -> bool:
    return bool(lo - 1e-12 <= truth <= hi + 1e-12)


def _percentile(reps: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


def _row(
    quantity: str,
    interval: str,
    design: str,
    estimand: str,
    status: str,
    lo: float,
    hi: float,
    truth: float,
) -> dict[str, Any]:
    """One interval scored: whether it covers ``truth``, and its width."""
    return {
        "quantity": quantity,
        "interval": interval,
        "design": design,
        "estimand": estimand,
        "status": status,
        "covered": _covers(lo, hi, truth),
        "width": hi - lo,
    }


@dataclass(frozen=True)
class _Archive:
    """One simulated archive and what its intervals are judged on: the paired outcomes, the
    target's index ``ti`` and the zero-effect off-target indices ``zero``."""

    setting: synthetic.Setting
    sample: synthetic.Sample
    p: Paired  # its paired outcomes
    scen: list[str]
    ti: int
    zero: list[int]
    seed: int
    n_boot: int


def one_simulation(setting: synthetic.Setting, seed: int, n_boot: int) -> list[dict[str, Any]]:
    """Every interval type on one simulated archive: rows of (quantity, interval, covered, width):
    the reported effects, verdict and margin (:func:`_reported_rows`), the paper's nested
    bootstrap and the crossed one below the minimum of units (:func:`_nested_rows`), and the
    rates (:func:`_rate_rows`)."""
    sample = synthetic.simulate(setting, seed, truth_draws=50_000)
    p = sample.paired()
    scen = list(p.scenarios)
    ti = scen.index(setting.target)
    zero = [i for i, s in enumerate(scen) if setting.effects[s] == 0 and i != ti]
    a = _Archive(setting, sample, p, scen, ti, zero, seed, n_boot)
    rows, pop = _reported_rows(a)
    return rows + _nested_rows(a, pop) + _rate_rows(a)


def _reported_rows(a: _Archive) -> tuple[list[dict[str, Any]], bool]:
    """The reported effect intervals (target, zero off-target), Table 10's verdict (and, where
    variants share a policy, what ``--task-level`` would claim) and the specificity margin beside
    its replaced plug-in percentile; and whether the design's estimand is the population."""
    setting, ti, zero, scen = a.setting, a.ti, a.zero, a.scen
    eff = effects_from_paired(a.p, a.n_boot, seed=a.seed + 1)
    pop = eff.design != "tasks"
    true_eff = a.sample.true_effect if pop else a.sample.true_effect_units
    est_name = "population" if pop else "these units"
    t = eff.table

    def reported(quantity: str, lo: float, hi: float, truth: float) -> dict[str, Any]:
        return _row(quantity, "reported", eff.design, est_name, "reported", lo, hi, truth)

    rows = [reported("effect, target", t["ci_low"][ti], t["ci_high"][ti], true_eff[ti])]
    rows += [
        reported("effect, zero off-target", t["ci_low"][i], t["ci_high"][i], true_eff[i])
        for i in zero
    ]
    off_all = [s for i, s in enumerate(scen) if i != ti]
    rows += _verdict_rows(eff, setting.target, off_all, expected_verdict(setting), true_eff)
    if setting.policy_effect and setting.variants > 1:  # what --task-level would claim
        by_task = effects_from_paired(a.p, a.n_boot, seed=a.seed + 1, policy_level=False)
        row = _verdict_rows(by_task, setting.target, off_all, expected_verdict(setting))[0]
        rows.append({**row, "interval": TASK_LEVEL, "status": "not reported"})
    m = specificity_margin(eff, setting.target, [scen[i] for i in zero])
    true_margin = true_eff[ti] - np.abs(true_eff[zero]).max()
    rows.append(reported("specificity margin", m["ci_low"], m["ci_high"], true_margin))
    cal = eff.calibrated()
    plug = cal[:, ti] - np.abs(cal[:, zero]).max(axis=1)
    lo, hi = np.nanquantile(plug, [ALPHA / 2, 1 - ALPHA / 2])
    rows.append(
        _row("specificity margin", "plug-in percentile (replaced)", eff.design, est_name,
             "not reported", lo, hi, true_margin)
    )  # fmt: skip
    return rows, pop


def _nested_rows(a: _Archive, pop: bool) -> list[dict[str, Any]]:
    """The paper's nested bootstrap (raw percentile, judged against the population) and, below
    the minimum of units, what a crossed interval would claim about the population."""
    ti, truth = a.ti, a.sample.true_effect
    nested = bootstrap(a.p, a.n_boot, a.seed + 2, design="nested")
    nlo, nhi = _percentile(nested, ALPHA)

    def paper(quantity: str, i: int) -> dict[str, Any]:
        return _row(quantity, "nested (paper)", "nested", "population", "labelled", nlo[i],
                    nhi[i], truth[i])  # fmt: skip

    rows = [paper("effect, target", ti), *(paper("effect, zero off-target", i) for i in a.zero)]
    if not pop and a.setting.n_units >= 2:
        cr = effects_from_paired(a.p, a.n_boot, seed=a.seed + 3, design="crossed")
        rows.append(
            _row("effect, target", "crossed below min units", "crossed", "population",
                 "not reported", cr.table["ci_low"][ti], cr.table["ci_high"][ti], truth[ti])
        )  # fmt: skip
    return rows


def _rate_rows(a: _Archive) -> list[dict[str, Any]]:
    """Each contract arm's rate on the target: the reported cluster-aware Clopper-Pearson
    interval and the old Wilson interval with records independent."""
    s, ti = a.sample, a.ti
    baseline, treatment = contract_arms()
    rows = []
    for arm, data, truth_pop, truth_units in (
        (baseline, s.baseline, s.true_rate, s.true_rate_units),
        (treatment, s.treatment, s.true_rate + s.true_effect,
         s.true_rate_units + s.true_effect_units),
    ):  # fmt: skip
        reps = float(max(a.setting.replicates, 1))
        sums = data[:, ti, :].astype(float) * reps
        r = rate_interval(sums, np.full_like(sums, reps))
        rpop = r.design != "tasks"
        rows.append(
            _row(f"rate, {arm}", RATE_INTERVAL, r.design, "population" if rpop else "these units",
                 "reported", r.ci_low, r.ci_high, (truth_pop if rpop else truth_units)[ti])
        )  # fmt: skip
        rows.append(
            _row(f"rate, {arm}", "Wilson, records independent", "records", "population",
                 "not reported", r.wilson_records_low, r.wilson_records_high, truth_pop[ti])
        )  # fmt: skip
    return rows


def _verdict_rows(
    eff: Effects,
    target: str,
    off_target: list[str],
    expected: str | None = None,
    truth: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """Table 10's verdict on one archive against the verdict its truth calls for (``expected``,
    default ineffective: no effect anywhere): ``covered`` unless the verdict is another claim
    (inconclusive is no claim), ``verdict`` the verdict itself; with ``truth`` (per scenario) the
    simultaneous band's joint coverage; with no effect anywhere also the rules it replaced."""
    from layerlab.analysis import specificity

    expected = specificity.INEFFECTIVE if expected is None else expected
    t = eff.table.set_index("scenario")
    j = specificity.judge(eff, [target], off_target)
    base = {
        "quantity": VERDICT,
        "design": eff.design,
        "estimand": expected,
        "width": float("nan"),
    }
    out = [
        {
            **base,
            "interval": "reported (simultaneous band, δ equivalence)",
            "status": "reported",
            "covered": j.verdict in (expected, specificity.INCONCLUSIVE),
            "verdict": j.verdict,
            "called": j.verdict == expected,
        }
    ]
    if truth is not None:
        scen = list(eff.paired.scenarios)
        ok = all(_covers(*j.band[s], float(truth[scen.index(s)])) for s in [target, *off_target])
        widths = [j.band[s][1] - j.band[s][0] for s in [target, *off_target]]
        out.append(
            {
                "quantity": BAND,
                "interval": "reported (simultaneous band)",
                "design": eff.design,
                "estimand": "population" if eff.design != "tasks" else "these units",
                "status": "reported",
                "covered": ok,
                "width": float(np.mean(widths)),
            }
        )
    if expected == specificity.INEFFECTIVE:
        lo, hi = t.loc[off_target, "ci_low"], t.loc[off_target, "ci_high"]
        old_flag = bool((hi < 0).any()) or float(t.loc[target, "ci_low"]) > 0
        any_marginal = bool(((lo > 0) | (hi < 0)).any())
        out += [
            {
                **base,
                "interval": "one-sided marginal, harm only (replaced)",
                "status": "not reported",
                "covered": not old_flag,
            },
            {
                **base,
                "interval": "some off-target marginal interval excludes 0",
                "status": "not reported",
                "covered": not any_marginal,
            },
        ]
    return out


def _verdict_shares(frame: pd.DataFrame) -> pd.DataFrame:
    """Per verdict row group, the share of each verdict (specific, over-broad, ineffective,
    inconclusive) and ``power``: the share given the verdict the truth calls for."""
    v = frame[frame["verdict"].notna()]
    keys = ["quantity", "interval", "design", "estimand", "status"]
    if v.empty:
        return pd.DataFrame(columns=[*keys, *VERDICT_SHARES, "power"])
    word = v["verdict"].astype(str).str.split(" ").str[0]
    shares = pd.crosstab([v[k] for k in keys], word, normalize="index").reindex(
        columns=list(VERDICT_SHARES), fill_value=0.0
    )
    shares["power"] = v.groupby(keys, sort=False)["called"].mean()
    return shares.reset_index()


__all__ = [
    "FULL",
    "ONE_UNIT_TASKS",
    "REDUCED",
    "Size",
    "all_settings",
    "expected_verdict",
    "is_null",
    "one_unit_settings",
    "run",
    "team_settings",
]


def _setting_rows(job: tuple[synthetic.Setting, int, int, int]) -> pd.DataFrame:
    """Every simulation of one setting, aggregated (one job of :func:`run`)."""
    from threadpoolctl import threadpool_limits

    setting, sims, seed0, n_boot = job
    rows: list[dict[str, Any]] = []
    # one BLAS thread: settings already run one per core, and small matrices gain nothing from
    # more (measured: 11-16 s instead of 30-61 s per clustered or sampled setting on 2 cores)
    with threadpool_limits(limits=1):
        for i in range(sims):
            rows += one_simulation(setting, seed0 + 7 * i, n_boot)
    frame = pd.DataFrame(rows)
    if "verdict" not in frame:
        frame["verdict"], frame["called"] = None, None
    keys = ["quantity", "interval", "design", "estimand", "status"]
    agg = (
        frame.groupby(keys, sort=False)
        .agg(covered=("covered", "mean"), width=("width", "mean"), checks=("covered", "size"))
        .reset_index()
    )
    agg = agg.merge(_verdict_shares(frame), on=keys, how="left")
    agg.insert(0, "units", setting.n_units)
    agg.insert(0, "setting", setting.name)
    agg["simulations"] = sims
    return agg


def run(
    settings: Sequence[synthetic.Setting] | None = None,
    size: Size = REDUCED,
    workers: int = 1,
) -> pd.DataFrame:
    """The coverage table: setting × quantity × interval → coverage, mean width (pp), checks
    (default: every setting of :func:`all_settings`)."""
    settings = all_settings() if settings is None else settings
    jobs = [
        (st, size.sims_for(st), size.seed + 1_000_003 * k, size.n_boot)
        for k, st in enumerate(settings)
    ]
    if workers > 1:  # settings in parallel; each one's seeds fixed, so the table is the same
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            out = list(pool.map(_setting_rows, jobs))
    else:
        out = [_setting_rows(j) for j in jobs]
    table = pd.concat(out, ignore_index=True)
    table["coverage"] = table.pop("covered").round(4)
    # the verdict rows' coverage is the share not given a wrong claim: the rest are false flags
    # (under no effect anywhere: called specific or over-broad)
    table["false flag"] = (1 - table["coverage"]).where(table["quantity"] == VERDICT).round(4)
    for c in (*VERDICT_SHARES, "power"):
        table[c] = table.pop(c).astype(float).round(4)
    # binomial Monte Carlo standard error per simulation (checks within one are not independent)
    table["mc s.e."] = np.sqrt(
        table["coverage"] * (1 - table["coverage"]) / table["simulations"]
    ).round(4)
    table["mean width (pp)"] = (100 * table.pop("width")).round(2)
    table["simulations"] = table.pop("simulations")
    table["resamples"] = size.n_boot
    return table


def null_rows(table: pd.DataFrame) -> pd.Series:
    """The reported verdict rows of settings with no effect anywhere."""
    return (
        (table["quantity"] == VERDICT)
        & (table["status"] == "reported")
        & (table["estimand"] == "ineffective")
    )


def false_claims(table: pd.DataFrame) -> pd.DataFrame:
    """Per reported verdict row whose truth is known where it is judged (a null setting, or one
    unit), the share of archives given each claim the truth contradicts (specific, over-broad,
    ineffective; NaN where the truth calls for the claim). Each claim is a test of its own
    stated at 5%: specific an intersection-union test (its null: the target gained nothing or
    some off-target cell moved by δ or more), over-broad the simultaneous band (its null: nothing
    moved off target), ineffective the target's upper bound (its null: a gain of δ or more). A
    mitigation with no effect anywhere can be given either of the first two, so its chance of
    some false claim is bounded by their sum (specific's share is at most 2.5% there: its
    target interval is one-sided)."""
    v = table[
        (table["quantity"] == VERDICT)
        & (table["status"] == "reported")
        & (null_rows(table) | (table["units"] == 1))
    ]
    out = v[["setting", "estimand", "simulations"]].copy()
    called_for = v["estimand"].astype(str).str.split(" ").str[0]
    for c in CLAIMS:
        out[c] = v[c].astype(float).where(called_for != c)
    return out.reset_index(drop=True)


def failures(
    table: pd.DataFrame, required: float = REQUIRED, max_false_flag: float = MAX_FALSE_FLAG
) -> pd.DataFrame:
    """Reported interval types below the required coverage, and reported verdicts that give a
    claim the truth contradicts (:func:`false_claims`) detectably more often than
    ``max_false_flag``: by more than two binomial Monte Carlo standard errors of the share
    measured (0.2 pp at 10,000 archives, 1 pp at 500), so a setting measured with few archives
    is not failed by its own noise (should be empty)."""
    rep = table["status"] == "reported"
    verdict = table["quantity"] == VERDICT
    low = ~verdict & (table["coverage"] < required)
    fc = false_claims(table)
    shares = fc[list(CLAIMS)]
    mc_se = np.sqrt(shares * (1 - shares)).div(np.sqrt(fc["simulations"]), axis=0)
    over = fc.loc[(shares > max_false_flag + 2 * mc_se).any(axis=1), "setting"]
    flags = verdict & table["setting"].isin(set(over))
    return table[rep & (low | flags)]


def false_flags(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per null setting, the share of null mitigations Table 10's verdict calls specific and the
    share it calls over-broad (each claim's error rate: at most :data:`MAX_FALSE_FLAG`)."""
    v = table[null_rows(table)]
    return {
        str(r["setting"]): {c: float(r[c]) for c in ("specific", "over-broad")}
        for _, r in v.iterrows()
    }


def powers(table: pd.DataFrame) -> dict[str, float]:
    """Per setting with an effect, the share of archives given the verdict its truth calls for."""
    v = table[(table["quantity"] == VERDICT) & (table["status"] == "reported") & ~null_rows(table)]
    return {str(r["setting"]): float(r["power"]) for _, r in v.iterrows()}


def to_csv(table: pd.DataFrame) -> str:
    """The coverage table as deterministic CSV text."""
    return table.to_csv(index=False, float_format="%.4f", lineterminator="\n")


def write(table: pd.DataFrame, path: Path = COVERAGE_CSV) -> Path:
    """Write the coverage table (the committed input of notebook 09)."""
    from layerlab._io import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, to_csv(table))
    return path


def load(path: Path | str | None = None) -> pd.DataFrame:
    """The committed coverage table (default :data:`COVERAGE_CSV`)."""
    path = Path(path) if path else COVERAGE_CSV
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: no coverage table (run: python -m layerlab.analysis.coverage --full)"
        )
    return pd.read_csv(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Coverage suite of the package's intervals.")
    ap.add_argument(
        "--full",
        action="store_true",
        help=f"full size ({FULL.sims} simulations per setting, {FULL.small_sims} below "
        f"{MIN_UNITS} units and {FULL.null_sims} for null settings)",
    )
    ap.add_argument("--write", action="store_true", help=f"write {COVERAGE_CSV}")
    ap.add_argument(
        "--workers", type=int, default=2, help="processes (settings run in parallel; default 2)"
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    table = run(size=FULL if args.full else REDUCED, workers=max(args.workers, 1))
    if args.write:
        write(table)
    bad = failures(table)
    print(
        json.dumps(
            {
                "benchmark": "coverage_suite",
                "size": "full" if args.full else "reduced",
                "rows": len(table),
                "min_reported_coverage": float(
                    table.loc[
                        (table["status"] == "reported") & (table["quantity"] != VERDICT), "coverage"
                    ].min()
                ),
                "reported_below_required": len(bad),
                "verdict_false_flag": false_flags(table),
                "verdict_power": powers(table),
                "max_false_flag": MAX_FALSE_FLAG,
                "seconds": round(time.perf_counter() - t0, 1),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()

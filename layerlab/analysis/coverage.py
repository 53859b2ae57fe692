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
- ``Wilson, records independent`` — the old Table 4 interval, judged against the population.

Settings with no effect anywhere (``identical prompts``: both arms independent draws from the same
per-task success probabilities, as two calls of one prompt to a sampled model) also score Table
10's verdict (:func:`layerlab.analysis.specificity.judge`) on each archive: the truth is ``ineffective``, so
``coverage`` is the share of null mitigations called ineffective and ``false flag`` the share
called anything else (at most :data:`MAX_FALSE_FLAG`). Beside it, not reported: the old rule
(one-sided, per-cell marginal intervals) and "some off-target marginal interval excludes zero".

``python -m layerlab.analysis.coverage --full`` runs the full size and writes
``data/coverage/coverage.csv`` (committed; notebook 09 shows it); the test suite runs a reduced
size.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerlab import paths
from layerlab.analysis import synthetic
from layerlab.analysis.bootstrap import bootstrap
from layerlab.analysis.effects import Effects, effects_from_paired, specificity_margin
from layerlab.analysis.rates import rate_interval
from layerlab.analysis.units import ALPHA, MIN_UNITS, contract_arms

COVERAGE_DIR = paths.DATA / "coverage"
COVERAGE_CSV = COVERAGE_DIR / "coverage.csv"
NOMINAL = 0.95
REQUIRED = 0.93  # every reported interval type must reach this in every setting
MAX_FALSE_FLAG = 0.07  # Table 10's verdict may call at most this share of null mitigations
VERDICT = "verdict, null mitigation"  # the quantity of the verdict rows


def _null(setting: synthetic.Setting) -> synthetic.Setting:
    """``setting`` with identical prompts in both arms over the nine DSL scenarios: no effect,
    no effect heterogeneity, independent draws (truth exactly zero everywhere)."""
    from layerlab.faults.scenario import load_scenarios

    return replace(
        setting,
        effects=dict.fromkeys(load_scenarios(), 0.0),
        unit_effect_sd=0.0,
        task_effect_sd=0.0,
        zero_effect="noisy",
    )


@functools.cache
def all_settings() -> tuple[synthetic.Setting, ...]:
    """The coverage settings, in table order (built on first use: the null settings span the
    DSL's scenarios)."""
    base = synthetic.Setting()
    # the real archives' design: 2 small models x one question variant of 80 policies, most tasks
    # near the floor and a few much easier (skewed difficulty)
    small = replace(
        base,
        n_units=2,
        n_policies=80,
        variants=1,
        task_dist="skewed",
        base_rate=0.15,
        task_sd=0.3,
    )
    return (
        replace(base, name="9 units, moderate heterogeneity"),
        replace(base, name="9 units, shared task effect", task_sd=0.15, task_effect_sd=0.25),
        replace(base, name="9 units, strong heterogeneity", unit_sd=0.1, unit_effect_sd=0.15),
        replace(
            base,
            name="9 units, no heterogeneity",
            unit_sd=0.0,
            unit_effect_sd=0.0,
            task_sd=0.0,
            task_effect_sd=0.0,
        ),
        replace(base, name="2 units", n_units=2),
        replace(base, name="3 units", n_units=3),
        replace(base, name="27 units", n_units=27),
        replace(small, name="2 units x 80 tasks, skewed difficulty"),
        replace(_null(small), name="identical prompts, 2 units x 80 tasks x 9 scenarios"),
        replace(
            _null(replace(base, n_policies=80, variants=1)),
            name="identical prompts, 9 units x 80 tasks x 9 scenarios",
        ),
    )


@dataclass(frozen=True)
class Size:
    """How big a coverage run is. Settings with fewer than ``MIN_UNITS`` units are cheap
    and their tasks-only intervals sit closest to the requirement, so they get ``small_sims``
    simulations (a smaller Monte Carlo error) when it is set; null settings (no effect anywhere,
    where the verdict's false-flag rate is measured) get ``null_sims`` when it is set."""

    sims: int
    n_boot: int
    seed: int = 0
    small_sims: int | None = None
    null_sims: int | None = None

    def sims_for(self, setting: synthetic.Setting) -> int:
        if self.null_sims is not None and is_null(setting):
            return self.null_sims
        if self.small_sims is not None and setting.n_units < MIN_UNITS:
            return self.small_sims
        return self.sims


FULL = Size(sims=500, n_boot=1000, small_sims=2000, null_sims=2000)
REDUCED = Size(sims=24, n_boot=300, null_sims=200)


def is_null(setting: synthetic.Setting) -> bool:
    """Whether ``setting`` has no effect in any scenario (the verdict's truth is ineffective)."""
    return all(v == 0 for v in setting.effects.values())


def _covers(lo: float, hi: float, truth: float) -> bool:
    return bool(lo - 1e-12 <= truth <= hi + 1e-12)


def _percentile(reps: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


def one_simulation(setting: synthetic.Setting, seed: int, n_boot: int) -> list[dict[str, Any]]:
    """Every interval type on one simulated archive: rows of (quantity, interval, covered, width)."""
    alpha = ALPHA
    sample = synthetic.simulate(setting, seed, truth_draws=50_000)
    p = sample.paired()
    scen = list(p.scenarios)
    ti = scen.index(setting.target)
    zero = [i for i, s in enumerate(scen) if setting.effects[s] == 0 and i != ti]
    U = setting.n_units
    rows: list[dict[str, Any]] = []

    def add(
        quantity: str,
        interval: str,
        design: str,
        estimand: str,
        status: str,
        lo: float,
        hi: float,
        truth: float,
    ) -> None:
        rows.append(
            {
                "quantity": quantity,
                "interval": interval,
                "design": design,
                "estimand": estimand,
                "status": status,
                "covered": _covers(lo, hi, truth),
                "width": hi - lo,
            }
        )

    eff = effects_from_paired(p, n_boot, seed=seed + 1)
    pop = eff.design != "tasks"
    true_eff = sample.true_effect if pop else sample.true_effect_units
    est_name = "population" if pop else "these units"
    t = eff.table
    add(
        "effect, target",
        "reported",
        eff.design,
        est_name,
        "reported",
        t["ci_low"][ti],
        t["ci_high"][ti],
        true_eff[ti],
    )
    for i in zero:
        add(
            "effect, zero off-target",
            "reported",
            eff.design,
            est_name,
            "reported",
            t["ci_low"][i],
            t["ci_high"][i],
            true_eff[i],
        )
    if is_null(setting):
        rows += _verdict_rows(eff, setting.target, [scen[i] for i in zero])
    m = specificity_margin(eff, setting.target, [scen[i] for i in zero])
    true_margin = true_eff[ti] - np.abs(true_eff[zero]).max()
    add(
        "specificity margin",
        "reported",
        eff.design,
        est_name,
        "reported",
        m["ci_low"],
        m["ci_high"],
        true_margin,
    )
    cal = eff.calibrated()
    plug = cal[:, ti] - np.abs(cal[:, zero]).max(axis=1)
    lo, hi = np.nanquantile(plug, [alpha / 2, 1 - alpha / 2])
    add(
        "specificity margin",
        "plug-in percentile (replaced)",
        eff.design,
        est_name,
        "not reported",
        lo,
        hi,
        true_margin,
    )

    nested = bootstrap(p, n_boot, seed + 2, design="nested")
    nlo, nhi = _percentile(nested, alpha)
    add(
        "effect, target",
        "nested (paper)",
        "nested",
        "population",
        "labelled",
        nlo[ti],
        nhi[ti],
        sample.true_effect[ti],
    )
    for i in zero:
        add(
            "effect, zero off-target",
            "nested (paper)",
            "nested",
            "population",
            "labelled",
            nlo[i],
            nhi[i],
            sample.true_effect[i],
        )
    if not pop and U >= 2:
        cr = effects_from_paired(p, n_boot, seed=seed + 3, design="crossed")
        add(
            "effect, target",
            "crossed below min units",
            "crossed",
            "population",
            "not reported",
            cr.table["ci_low"][ti],
            cr.table["ci_high"][ti],
            sample.true_effect[ti],
        )

    baseline, treatment = contract_arms()
    for arm, data, truth_pop, truth_units in (
        (baseline, sample.baseline, sample.true_rate, sample.true_rate_units),
        (
            treatment,
            sample.treatment,
            sample.true_rate + sample.true_effect,
            sample.true_rate_units + sample.true_effect_units,
        ),
    ):
        sums = data[:, ti, :].astype(float)
        r = rate_interval(sums, np.ones_like(sums))
        rpop = r.design != "tasks"
        add(
            f"rate, {arm}",
            "reported (cluster-aware Wilson)",
            r.design,
            "population" if rpop else "these units",
            "reported",
            r.ci_low,
            r.ci_high,
            (truth_pop if rpop else truth_units)[ti],
        )
        add(
            f"rate, {arm}",
            "Wilson, records independent",
            "records",
            "population",
            "not reported",
            r.wilson_records_low,
            r.wilson_records_high,
            truth_pop[ti],
        )
    return rows


def _verdict_rows(
    eff: Effects, target: str, off_target: list[str]
) -> list[dict[str, Any]]:
    """Table 10's verdict on a null archive (truth: ineffective), beside the rules it replaced."""
    from layerlab.analysis import specificity

    t = eff.table.set_index("scenario")
    j = specificity.judge(eff, [target], off_target)
    lo, hi = t.loc[off_target, "ci_low"], t.loc[off_target, "ci_high"]
    old_flag = bool((hi < 0).any()) or float(t.loc[target, "ci_low"]) > 0
    any_marginal = bool(((lo > 0) | (hi < 0)).any())
    base = {
        "quantity": VERDICT,
        "design": eff.design,
        "estimand": "ineffective (no effect anywhere)",
        "width": float("nan"),
    }
    return [
        {
            **base,
            "interval": "reported (simultaneous band, both directions)",
            "status": "reported",
            "covered": j.verdict == specificity.INEFFECTIVE,
        },
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


def run(
    settings: Sequence[synthetic.Setting] | None = None,
    size: Size = REDUCED,
) -> pd.DataFrame:
    """The coverage table: setting × quantity × interval → coverage, mean width (pp), checks
    (default: every setting of :func:`all_settings`)."""
    settings = all_settings() if settings is None else settings
    out = []
    for k, setting in enumerate(settings):
        sims = size.sims_for(setting)
        rows: list[dict[str, Any]] = []
        for i in range(sims):
            rows += one_simulation(setting, size.seed + 1_000_003 * k + 7 * i, size.n_boot)
        frame = pd.DataFrame(rows)
        agg = (
            frame.groupby(["quantity", "interval", "design", "estimand", "status"], sort=False)
            .agg(covered=("covered", "mean"), width=("width", "mean"), checks=("covered", "size"))
            .reset_index()
        )
        agg.insert(0, "units", setting.n_units)
        agg.insert(0, "setting", setting.name)
        agg["simulations"] = sims
        out.append(agg)
    table = pd.concat(out, ignore_index=True)
    table["coverage"] = table.pop("covered").round(4)
    # the verdict rows' coverage is the share called ineffective: the rest are false flags
    table["false flag"] = (1 - table["coverage"]).where(table["quantity"] == VERDICT).round(4)
    # binomial Monte Carlo standard error per simulation (checks within one are not independent)
    table["mc s.e."] = np.sqrt(
        table["coverage"] * (1 - table["coverage"]) / table["simulations"]
    ).round(4)
    table["mean width (pp)"] = (100 * table.pop("width")).round(2)
    table["simulations"] = table.pop("simulations")
    table["resamples"] = size.n_boot
    return table


def failures(
    table: pd.DataFrame, required: float = REQUIRED, max_false_flag: float = MAX_FALSE_FLAG
) -> pd.DataFrame:
    """Reported interval types below the required coverage, and reported verdicts that call more
    than ``max_false_flag`` of null mitigations anything but ineffective (should be empty)."""
    rep = table["status"] == "reported"
    verdict = table["quantity"] == VERDICT
    low = ~verdict & (table["coverage"] < required)
    flags = verdict & (table.get("false flag", 1 - table["coverage"]) > max_false_flag)
    return table[rep & (low | flags)]


def false_flags(table: pd.DataFrame) -> dict[str, float]:
    """Per null setting, the share of null mitigations Table 10's verdict does not call
    ineffective."""
    v = table[(table["quantity"] == VERDICT) & (table["status"] == "reported")]
    return {str(r["setting"]): float(r["false flag"]) for _, r in v.iterrows()}


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
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    table = run(size=FULL if args.full else REDUCED)
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
                "max_false_flag": MAX_FALSE_FLAG,
                "seconds": round(time.perf_counter() - t0, 1),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()

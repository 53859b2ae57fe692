"""Coverage suite: how often each interval the package reports covers the truth it claims to.

Synthetic archives (:mod:`layerlab.synthetic`) with between-unit heterogeneity, task effects
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

``python -m layerlab.coverage --full`` runs the full size and writes
``data/coverage/coverage.csv`` (committed; notebook 09 shows it); the test suite runs a reduced
size.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerlab import paths, stats, synthetic

COVERAGE_DIR = paths.DATA / "coverage"
COVERAGE_CSV = COVERAGE_DIR / "coverage.csv"
NOMINAL = 0.95
REQUIRED = 0.93  # every reported interval type must reach this in every setting

_BASE = synthetic.Setting()
SETTINGS: tuple[synthetic.Setting, ...] = (
    replace(_BASE, name="9 units, moderate heterogeneity"),
    replace(_BASE, name="9 units, shared task effect", task_sd=0.15, task_effect_sd=0.25),
    replace(_BASE, name="9 units, strong heterogeneity", unit_sd=0.1, unit_effect_sd=0.15),
    replace(
        _BASE,
        name="9 units, no heterogeneity",
        unit_sd=0.0,
        unit_effect_sd=0.0,
        task_sd=0.0,
        task_effect_sd=0.0,
    ),
    replace(_BASE, name="2 units", n_units=2),
    replace(_BASE, name="3 units", n_units=3),
    replace(_BASE, name="27 units", n_units=27),
)


@dataclass(frozen=True)
class Size:
    """How big a coverage run is. Settings with fewer than ``stats.MIN_UNITS`` units are cheap
    and their tasks-only intervals sit closest to the requirement, so they get ``small_sims``
    simulations (a smaller Monte Carlo error) when it is set."""

    sims: int
    n_boot: int
    seed: int = 0
    small_sims: int | None = None

    def sims_for(self, setting: synthetic.Setting) -> int:
        if self.small_sims is not None and setting.n_units < stats.MIN_UNITS:
            return self.small_sims
        return self.sims


FULL = Size(sims=500, n_boot=1000, small_sims=2000)
REDUCED = Size(sims=24, n_boot=300)


def _covers(lo: float, hi: float, truth: float) -> bool:
    return bool(lo - 1e-12 <= truth <= hi + 1e-12)


def _percentile(reps: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


def one_simulation(setting: synthetic.Setting, seed: int, n_boot: int) -> list[dict[str, Any]]:
    """Every interval type on one simulated archive: rows of (quantity, interval, covered, width)."""
    alpha = stats.ALPHA
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

    eff = stats.effects_from_paired(p, n_boot, seed=seed + 1)
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
    m = stats.specificity_margin(eff, setting.target, [scen[i] for i in zero])
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

    nested = stats.bootstrap(p, n_boot, seed + 2, design="nested")
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
        cr = stats.effects_from_paired(p, n_boot, seed=seed + 3, design="crossed")
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

    for arm, data, truth_pop, truth_units in (
        (stats.BASELINE, sample.baseline, sample.true_rate, sample.true_rate_units),
        (
            stats.TREATMENT,
            sample.treatment,
            sample.true_rate + sample.true_effect,
            sample.true_rate_units + sample.true_effect_units,
        ),
    ):
        sums = data[:, ti, :].astype(float)
        r = stats.rate_interval(sums, np.ones_like(sums))
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


def run(
    settings: Sequence[synthetic.Setting] = SETTINGS,
    size: Size = REDUCED,
) -> pd.DataFrame:
    """The coverage table: setting × quantity × interval → coverage, mean width (pp), checks."""
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
    # binomial Monte Carlo standard error per simulation (checks within one are not independent)
    table["mc s.e."] = np.sqrt(
        table["coverage"] * (1 - table["coverage"]) / table["simulations"]
    ).round(4)
    table["mean width (pp)"] = (100 * table.pop("width")).round(2)
    table["simulations"] = table.pop("simulations")
    table["resamples"] = size.n_boot
    return table


def failures(table: pd.DataFrame, required: float = REQUIRED) -> pd.DataFrame:
    """Reported interval types below the required coverage (should be empty)."""
    return table[(table["status"] == "reported") & (table["coverage"] < required)]


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
            f"{path}: no coverage table (run: python -m layerlab.coverage --full)"
        )
    return pd.read_csv(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Coverage suite of the package's intervals.")
    ap.add_argument(
        "--full",
        action="store_true",
        help=f"full size ({FULL.sims} simulations per setting, {FULL.small_sims} below "
        f"{stats.MIN_UNITS} units)",
    )
    ap.add_argument("--write", action="store_true", help=f"write {COVERAGE_CSV}")
    args = ap.parse_args(argv)
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
                    table.loc[table["status"] == "reported", "coverage"].min()
                ),
                "reported_below_required": len(bad),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()

"""Tables on how far the intervals can be trusted: within-task variability of sampled replicates,
the exchangeability of identical-prompt arms, and the coverage of the package's intervals on
synthetic archives with known truth."""

from __future__ import annotations

import pandas as pd

from layerlab.analysis import stats
from layerlab.reporting.paper.tables.captions import CAPTIONS, units_phrase


def replicates_table(df: pd.DataFrame, outcome: str = "safe_resolution") -> pd.DataFrame:
    """Within-task variability of replicated real-model records (:func:`layerlab.analysis.stats.
    replicate_variability`) on ``outcome``, with the caption naming the decoding settings."""
    t = stats.replicate_variability(df, outcome)
    t.attrs["caption"] = (
        f"{CAPTIONS['replicates_models']} Outcome: {outcome.replace('_', ' ')}. "
        f"Units: {units_phrase(df)}."
    )
    return t


def exchangeability_table(df: pd.DataFrame, outcome: str = "safe_resolution") -> pd.DataFrame:
    """:func:`layerlab.analysis.stats.identical_prompt_discordance` with its caption."""
    t = stats.identical_prompt_discordance(df, outcome)
    t.attrs["caption"] = (
        f"{CAPTIONS['exchangeability_models']} Outcome: {outcome.replace('_', ' ')}. "
        f"Units: {units_phrase(df)}."
    )
    return t


def coverage_table(table: pd.DataFrame) -> pd.DataFrame:
    """The coverage suite's table (:mod:`layerlab.analysis.coverage`) for publication, caption in ``attrs``."""
    from layerlab.analysis import coverage, coverage_settings
    from layerlab.analysis.specificity import DELTA
    from layerlab.reporting.format.display import margin

    t = table.copy()
    null_names = {
        s.name
        for s in coverage.all_settings()
        if coverage.is_null(s) or coverage_settings.on_boundary(s)
    } & set(t["setting"])
    null = t["setting"].isin(null_names)
    small = t["units"] < stats.MIN_UNITS

    def counts(rows: pd.Series) -> str:
        return "/".join(map(str, sorted(set(t.loc[rows, "simulations"])))) or "-"

    sims, sims_small = counts(~small & ~null), counts(small & ~null)
    sims_null = (
        f"; {counts(null)} in the null settings and at an off-target effect of exactly ±δ"
        if null.any()
        else ""
    )
    boots = "/".join(map(str, sorted(set(t["resamples"]))))
    t = t.drop(columns=["simulations", "resamples"])
    t.attrs["caption"] = (
        f"{CAPTIONS['coverage']} {sims} simulated archives per setting ({sims_small} below "
        f"{stats.MIN_UNITS} units{sims_null}), {boots} resamples each; 'checks' counts interval-truth comparisons "
        "(one per simulation, or per zero-effect scenario). Reported intervals must reach "
        f"{coverage.REQUIRED:.0%}; 'labelled' and 'not reported' rows show why the package does "
        "not rely on them (nested: the paper's scheme; records-independent Wilson: the old Table 4 "
        f"interval; crossed with fewer than {stats.MIN_UNITS} units: a population claim from too "
        "few models, covering only by being nearly as wide as the scale). 'mc s.e.' is the "
        "binomial Monte Carlo standard error of the coverage. One-unit settings (1 unit x 16, "
        "40 and 80 tasks: a Beta(2,2) null, near-ceiling and rare-success targets, replicates "
        "with ICC 0.2, +20 pp on the target, a +25 pp off-target gain) are the shapes users run; "
        "beside them the designs a team's verdict rests on (an off-target effect of exactly ±δ "
        "beside a +50 pp target; 3 question variants per policy sharing an effect of ±15 pp, "
        "judged by policy; a sampled system of 3 epochs per task with per-task rates "
        "Beta(0.3, 0.3); a +15 pp side effect). "
        f"Rows '{coverage.BAND}' score the simultaneous band the verdict reads: all of a "
        f"mitigation's cells covered at once. Rows '{coverage.VERDICT}' score Table 10's verdict "
        f"(equivalence margin {margin(DELTA)}) against the verdict the setting's truth calls for "
        "('estimand'): 'false flag' is the share given a claim the truth contradicts; each claim "
        "is a test of its own (specific: target above 0 and every off-target cell within ±δ; "
        "over-broad: the band excludes 0 off target; ineffective: the target's gain below δ), "
        f"each given at most {coverage.MAX_FALSE_FLAG:.0%} of the time where the truth contradicts "
        "it, up to two Monte Carlo s.e. of the share (a null mitigation can get either of the "
        "first two, so some false claim at most 2.5% + 5%); 'inconclusive' the share the "
        "design could not decide, 'power' the share given the verdict the truth calls for (for "
        "+20 pp on the target: called specific); 'specific', 'over-broad', 'ineffective' and "
        "'inconclusive' are the shares of each verdict. Beside the null rows, the one-sided "
        "per-cell rule the verdict replaced and how often some off-target marginal interval "
        "excludes zero."
    )
    return t

"""Tables of paired effects from :func:`layerlab.analysis.stats.analyse`, one block per kind of
unit: groundedness false positives and repair-minus-strict effects (Table 5), the same on safe
resolution, the statsmodels cross-checks, the bootstrap designs side by side and the specificity
margin."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.analysis import stats
from layerlab.reporting.format.display import points
from layerlab.reporting.paper.tables.captions import (
    block_notes,
    effects_design,
    failure_notes,
    failure_rates,
    rate_design,
    stack,
    units_sentence,
)

IDENTICAL = "identical inputs"
"""The column of arm pairs that saw byte-identical inputs (:func:`stats.identical_inputs`)."""


def _pp(v: float) -> str:
    """A caption's points: a share difference, a sign only when negative (``12.5``)."""
    return points(v, share=True, sign="minus")


def table5(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5: GF rates with cluster-aware intervals and paired effects, one block per kind of
    unit (:func:`layerlab.analysis.stats.analyse`), never pooled (caption in ``attrs``)."""
    return stack({b: table5_block(a.df, a.eff) for b, a in analysis.items()}, "table5")


def table5_block(df: pd.DataFrame, eff: stats.Effects) -> pd.DataFrame:
    gf = stats.rates(df, "grounded_false_positive")
    same_inputs = stats.identical_inputs(df, eff.paired.baseline, eff.paired.treatment)
    out = []
    for _, e in eff.table.iterrows():
        s = e["scenario"]
        row: dict[str, Any] = {"scenario": s}
        for mode in (eff.paired.baseline, eff.paired.treatment):
            m = gf[(gf["scenario"] == s) & (gf[stats.ARM] == mode)]
            row[f"GF {mode}"] = float(m["rate"].iloc[0])
            row[f"GF {mode} 95% low"] = float(m["ci_low"].iloc[0])
            row[f"GF {mode} 95% high"] = float(m["ci_high"].iloc[0])
        row.update(
            {
                f"{eff.paired.treatment}-{eff.paired.baseline} (pp)": 100 * float(e["estimate"]),
                "95% low (pp)": 100 * float(e["ci_low"]),
                "95% high (pp)": 100 * float(e["ci_high"]),
                "exactly zero": bool(e["exactly_zero"]),
                "design": str(e["design"]),
            }
        )
        row[IDENTICAL] = str(same_inputs.get(s, stats.SameInputs(0, 0)))
        sub = df[(df["scenario"] == s) & df["mitigation"].isin([stats.BASELINE, stats.TREATMENT])]
        row.update(failure_rates(sub))
        out.append(row)
    t = pd.DataFrame(out)
    t.attrs["detail"] = units_sentence(df)
    t.attrs["notes"] = [rate_design(gf, "GF intervals"), effects_design(eff), *failure_notes(df)]
    return t


def safe_effects_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5 on safe resolution: the paired effects per scenario and block, with each block's
    specificity margin on that outcome in the caption (``analysis`` from
    :func:`layerlab.analysis.stats.analyse` with ``outcome="safe_resolution"``)."""
    parts = {}
    for b, a in analysis.items():
        e = a.eff
        same = stats.identical_inputs(a.df, e.paired.baseline, e.paired.treatment)
        t = pd.DataFrame(
            {
                "scenario": e.table["scenario"],
                "repair-strict (pp)": 100 * e.table["estimate"],
                "95% low (pp)": 100 * e.table["ci_low"],
                "95% high (pp)": 100 * e.table["ci_high"],
                "exactly zero": e.table["exactly_zero"].astype(bool),
                IDENTICAL: [
                    str(same.get(str(x), stats.SameInputs(0, 0))) for x in e.table["scenario"]
                ],
                "design": e.table["design"],
            }
        )
        m = a.margin
        t.attrs["detail"] = (
            f"{units_sentence(a.df)} Margin {_pp(m['margin'])} pp [{_pp(m['ci_low'])}, "
            f"{_pp(m['ci_high'])}]: target gain {_pp(m['target_gain'])} pp, largest "
            f"off-target change {_pp(m['largest_off_target_change'])} pp "
            f"({m['largest_off_target']}); off-target changes whose band excludes 0: "
            f"{m['off_target_distinguishable']}."
        )
        t.attrs["notes"] = [effects_design(e)]
        parts[b] = t
    return stack(parts, "table5_safe")


def crosscheck_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5 cross-checks (:func:`layerlab.analysis.stats.crosschecks`) per block, caption in ``attrs``."""
    return stack(
        {b: _crosscheck_block(a.df, a.eff) for b, a in analysis.items()}, "table5_crosscheck"
    )


def _crosscheck_block(df: pd.DataFrame, eff: stats.Effects) -> pd.DataFrame:
    t = stats.crosschecks(df, eff)
    by = sorted(set(t["gee clustered by"]))
    n_cl = int(t["gee clusters"].max()) if len(t) else 0
    t.attrs["detail"] = f"GEE clustered by {'/'.join(by)} ({n_cl} clusters)."
    t.attrs["notes"] = [
        f"GEE: by unit needs at least {stats.MIN_UNITS} units; bias-reduced robust covariance, p "
        "from t(clusters - 1); p-values that underflow are printed as bounds.",
        f"Table 5's intervals: {eff.describe()}.",
    ]
    return t


def design_comparison(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Each scenario's paired-effect interval under every bootstrap design, side by side (pp),
    per block."""
    return pd.concat(
        [_design_block(a.designs).assign(block=b) for b, a in analysis.items()], ignore_index=True
    ).pipe(lambda t: t[["block", *[c for c in t.columns if c != "block"]]])


def _design_block(designs: Mapping[str, stats.Effects]) -> pd.DataFrame:
    rows = []
    for d, e in designs.items():
        for _, r in e.table.iterrows():
            rows.append(
                {
                    "scenario": r["scenario"],
                    "design": d,
                    "estimate (pp)": 100 * float(r["estimate"]),
                    "95% low (pp)": 100 * float(r["ci_low"]),
                    "95% high (pp)": 100 * float(r["ci_high"]),
                    "width (pp)": 100 * float(r["ci_high"] - r["ci_low"]),
                    "estimand": e.estimand,
                }
            )
    order = {s: i for i, s in enumerate(next(iter(designs.values())).paired.scenarios)}
    t = pd.DataFrame(rows)
    t = t.sort_values(
        ["scenario", "design"], key=lambda c: c.map(order) if c.name == "scenario" else c
    )
    return t.reset_index(drop=True)


def margin_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """The specificity margin, one row per block (percentage points), caption in ``attrs``."""
    parts = {b: _margin_row(a.margin) for b, a in analysis.items()}
    t = stack(parts, "specificity_margin")
    boots = block_notes({b: [f"Intervals: {a.eff.describe()}."] for b, a in analysis.items()})
    t.attrs["notes"] = (
        "The margin counts an off-target change only when its simultaneous band excludes zero "
        "(the plug-in gain - max|change| is biased low when off-target effects are zero but "
        "noisy). The 95% interval projects the simultaneous band over all scenarios (its "
        "calibration below): it covers the true margin whenever the band covers every effect. "
        + boots
    )
    return t


def _margin_row(margin: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "target": margin["target"],
                "target gain (pp)": 100 * margin["target_gain"],
                "largest off-target": margin["largest_off_target"],
                "off-target change (pp)": 100 * margin["largest_off_target_change"],
                "off-target distinguishable from 0": margin["off_target_distinguishable"],
                "margin (pp)": 100 * margin["margin"],
                "plug-in margin (pp)": 100 * margin["margin_plugin"],
                "95% low (pp)": 100 * margin["ci_low"],
                "95% high (pp)": 100 * margin["ci_high"],
            }
        ]
    )

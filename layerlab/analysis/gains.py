"""Table 8: the largest treatment - baseline gains by model x scenario (per unit, not paired
intervals: which cells moved most)."""

from __future__ import annotations

import pandas as pd

from layerlab.analysis.units import ARM, OUTCOME, UNIT_COLUMNS, contract_arms


def model_gains(
    df: pd.DataFrame,
    top: int = 10,
    outcome: str = OUTCOME,
    treatment: str | None = None,
    baseline: str | None = None,
    arm: str = ARM,
) -> pd.DataFrame:
    """Table 8: the largest positive treatment − baseline gains by model × scenario.

    Only gains above zero are listed (no padding with zero rows); a tie at the cut-off keeps
    every tied row, so the table may hold more than ``top`` rows. The arms default to the
    contract pair.
    """
    baseline, treatment = contract_arms(baseline, treatment)
    g = df.groupby([*UNIT_COLUMNS, "scenario", arm])[outcome].mean().unstack(arm)
    cols = [*UNIT_COLUMNS, "scenario", baseline, treatment, "gain"]
    if baseline not in g or treatment not in g:
        return pd.DataFrame(columns=cols)
    g = g.dropna(subset=[baseline, treatment]).reset_index()
    g["gain"] = g[treatment] - g[baseline]
    g = g[g["gain"] > 1e-12].sort_values(
        ["gain", *UNIT_COLUMNS, "scenario"], ascending=[False, *[True] * (len(UNIT_COLUMNS) + 1)]
    )
    if len(g) > top:
        cut = g["gain"].iloc[top - 1]
        g = g[g["gain"] >= cut - 1e-12]
    return g[cols].reset_index(drop=True)

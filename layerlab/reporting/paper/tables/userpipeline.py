"""The worked example's tables: a team's own pipeline as a target, its Table 4, 5 and 10 rows
computed by the paper's builders on its own records (notebook 13), and its Table 10 rows again
from a larger run of fewer arms (``user_table10_sized``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.reporting.paper.tables import effects, rates, specificity
from layerlab.reporting.paper.tables.captions import CAPTIONS


def _named(t: pd.DataFrame, name: str) -> pd.DataFrame:
    t.attrs["caption"] = f"{CAPTIONS[name]} {t.attrs.get('caption', '')}".strip()
    return t


def user_table4(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4's rows of the user pipeline (its contract arms)."""
    return _named(rates.table4(df), "user_table4")


def user_table5(analysis: Mapping[str, Any]) -> pd.DataFrame:
    """Table 5's rows of the user pipeline."""
    return _named(effects.table5(analysis), "user_table5")


def user_table10(matrix: Any, records: Any) -> pd.DataFrame:
    """Table 10's rows of the user pipeline: every mitigation on the pipeline's own records."""
    return _named(specificity.table10(matrix, records), "user_table10")


def user_table10_sized(matrix: Any, records: Any) -> pd.DataFrame:
    """Table 10's rows of the user pipeline at the size its guards' verdicts need: the baseline
    and the guards the committed example could not call (issue 33), on more tasks."""
    return _named(specificity.table10(matrix, records), "user_table10_sized")


def sized_task_split(
    sized: pd.DataFrame,
    first: pd.DataFrame,
    treatment: str = "validity_resolution",
    scenario: str = "clean",
    n_boot: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """The larger run's paired change of ``treatment`` on ``scenario`` (the matrix's judged
    outcome, against the baseline), on all its tasks, on the tasks the first run ``first`` also
    asked (``make user-pipeline-sized`` takes the stratified task list's first 48, which hold the
    first run's 16: the run that motivated it) and on the new tasks alone: tasks, discordant
    counts (``up``: a success under the treatment only; ``down``: under the baseline only), the
    change, its 95% interval and the interval's method
    (:data:`layerlab.analysis.exact.METHODS`, the cell's own, as in the matrix)."""
    from layerlab.analysis import exact, stats
    from layerlab.analysis.specificity import OUTCOME
    from layerlab.mitigations import load_mitigations

    baseline = load_mitigations().baseline
    shared = set(first["task_id"]) & set(sized["task_id"])
    rows = []
    for label, keep in (
        ("all tasks", lambda t: True),
        ("tasks of the first run", lambda t: t in shared),
        ("new tasks only", lambda t: t not in shared),
    ):
        sub = sized[sized["task_id"].map(keep) & (sized["scenario"] == scenario)]
        eff = stats.paired_effects(sub, n_boot, seed, outcome=OUTCOME, treatment=treatment,
                                   baseline=baseline, scenarios=[scenario])  # fmt: skip
        b, c, n = exact.discordant(eff.paired)
        e = eff.table.iloc[0]
        rows.append({
            "tasks": label, "n": int(n[0]), "scenario": scenario, "mitigation": treatment,
            "up": int(round(b[0])), "down": int(round(c[0])),
            "change (pp)": round(100 * float(e["estimate"]), 1),
            "95% low (pp)": round(100 * float(e["ci_low"]), 1),
            "95% high (pp)": round(100 * float(e["ci_high"]), 1),
            "interval": exact.METHODS[str(e["method"])],
        })  # fmt: skip
    return pd.DataFrame(rows)

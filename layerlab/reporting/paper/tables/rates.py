"""Rate tables over archive records, one block per kind of unit (never pooled): success with
cluster-aware intervals (Table 4), the largest gains (Table 8), provider averages (Table 9), safe
resolution per real model and the supplementary answer-quality table."""

from __future__ import annotations

from typing import Any

import pandas as pd

from layerlab.analysis import stats
from layerlab.reporting.paper.tables.captions import (
    CAPTIONS,
    failure_notes,
    failure_rates,
    rate_design,
    stack,
    units_note,
    units_sentence,
)


def table4(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4: success by scenario x arm with cluster-aware intervals, one block per kind of
    unit (real models, reference agents), never pooled (caption in ``attrs``)."""
    return stack({b: table4_block(sub) for b, sub in stats.blocks(df).items()}, "table4")


def table4_by_unit(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4 for each unit on its own (the ``block`` column names the unit): the per-model
    view behind the pooled real-model block."""
    units = stats.unit_labels(df)
    return stack({u: table4_block(df[units == u]) for u in sorted(set(units))}, "table4")


def table4_block(df: pd.DataFrame) -> pd.DataFrame:
    r = stats.rates(df, stats.OUTCOME)
    arms = stats.arm_order(df)
    out = []
    for s in stats.scenario_order(df):
        row: dict[str, Any] = {"scenario": s}
        for mode in arms:
            m = r[(r["scenario"] == s) & (r[stats.ARM] == mode)]
            if len(m):
                row.update(
                    {
                        mode: float(m["rate"].iloc[0]),
                        f"{mode} 95% low": float(m["ci_low"].iloc[0]),
                        f"{mode} 95% high": float(m["ci_high"].iloc[0]),
                    }
                )
        sub = r[r["scenario"] == s]
        row["n per mode"] = int(sub["n"].max())
        row["units"] = int(sub["n_units"].max())
        row["interval"] = "/".join(sorted(set(sub["design"])))
        row.update(failure_rates(df[(df["scenario"] == s) & df[stats.ARM].isin(arms)]))
        out.append(row)
    t = pd.DataFrame(out)
    t.attrs["detail"] = units_sentence(df)
    t.attrs["notes"] = [rate_design(r), *failure_notes(df)]
    return t


def table8(df: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Largest strict→repair gains by model × scenario, the top of each block (caption in
    ``attrs``)."""
    parts = {}
    for b, sub in stats.blocks(df).items():
        t = stats.model_gains(sub, top)
        t.attrs["detail"] = (
            f"{units_sentence(sub)} Per-unit rates, no intervals (one unit per row); only gains above "
            f"zero are listed ({len(t)} row(s)), ties at the cut-off of {top} are all kept."
        )
        parts[b] = t
    return stack(parts, "table8")


def table9(df: pd.DataFrame) -> pd.DataFrame:
    """Provider-level averages per block, with the shares of malformed replies and provider
    errors (caption in ``attrs``)."""
    return stack({b: _table9_block(sub) for b, sub in stats.blocks(df).items()}, "table9")


def _table9_block(df: pd.DataFrame) -> pd.DataFrame:
    t = stats.provider_averages(df)
    fail = pd.DataFrame([failure_rates(df[df["provider"] == p]) for p in t["provider"]])
    designs = sorted(set(t["interval"]))
    t = pd.concat([t, fail], axis=1)
    what = {
        "crossed": "two-way cluster-robust over models and tasks (crossed), widened by t(models - 1)/z",
        "tasks": f"clustered by task (fewer than {stats.MIN_UNITS} models: these models only)",
    }
    t.attrs["detail"] = units_sentence(df)
    t.attrs["notes"] = [
        "Pooled success interval: Clopper-Pearson at the design-effect-adjusted sample size, variance "
        f"{'; '.join(what[d] for d in designs if d in what)}; a task's records across scenarios "
        "and arms form one cluster.",
        *failure_notes(df),
    ]
    return t


def safe_resolution_by_unit(df: pd.DataFrame, arm: str | None = None) -> pd.DataFrame:
    """Safe resolution per unit x scenario on one arm (default: the baseline), with the reader's
    failure shares."""
    arm = stats.BASELINE if arm is None else arm
    sub = df[df[stats.ARM] == arm]
    rows = []
    for (provider, model), u in sub.groupby(["provider", "model"], sort=True):
        for s in stats.scenario_order(sub):
            c = u[u["scenario"] == s]
            rows.append(
                {
                    "unit": f"{provider}/{model}",
                    "scenario": s,
                    "n": len(c),
                    "safe resolution": float(c["safe_resolution"].mean()),
                    "answered": float(c["answered"].mean()),
                    "abstained": float(c["abstained"].mean()),
                    **failure_rates(c),
                }
            )
    t = pd.DataFrame(rows)
    t.attrs["caption"] = CAPTIONS["safe_resolution_models"] + units_note(sub)
    return t


def table_answer_quality(df: pd.DataFrame) -> pd.DataFrame:
    """Supplementary table: per scenario x arm, over the answered records, the shares of exact
    match E, containment and "right value, extra words", and the mean token F1
    (:func:`layerlab.analysis.results.answer_quality`), one block per kind of unit, never pooled. Values
    an archive migrated from an older schema did not record are NaN, and counted."""
    return stack(
        {b: _answer_quality_block(sub) for b, sub in stats.blocks(df).items()}, "answer_quality"
    )


def _answer_quality_block(df: pd.DataFrame) -> pd.DataFrame:
    from layerlab.analysis.results import answer_quality

    nan = float("nan")
    rows = []
    for s in stats.scenario_order(df):
        for arm in stats.arm_order(df):
            cell = df[(df["scenario"] == s) & (df[stats.ARM] == arm)]
            if cell.empty:
                continue
            q = answer_quality(cell)
            share = {k: q[k]["share"] for k in ("exact_match", "contained", "extra_words")}
            rows.append(
                {
                    "scenario": s,
                    stats.ARM: arm,
                    "records": len(cell),
                    "answered": q["answered"],
                    "E": nan if share["exact_match"] is None else share["exact_match"],
                    "contained": nan if share["contained"] is None else share["contained"],
                    "extra words": nan if share["extra_words"] is None else share["extra_words"],
                    "mean token F1": nan if q["token_f1"] is None else q["token_f1"],
                    "not recorded": q.get("not_recorded", 0),
                }
            )
    t = pd.DataFrame(rows)
    missing = int(t["not recorded"].sum()) if len(t) else 0
    t.attrs["detail"] = units_sentence(df) + (
        f" {missing} answered records of an archive migrated from an older schema did not "
        "record containment or F1 (archives hold no reply text): those cells are NaN."
        if missing
        else ""
    )
    return t

"""Agent mode beside single-call mode: the same model, tasks, scenarios and contract arms,
paired by task.

In single-call mode the harness searches once and the model reads the results; in agent mode
the model calls the faulted tools itself (:mod:`layerlab.harness.agent`). Agent records name
their model ``<name>+agent`` (another unit, never pooled); here the two modes of one model are
set side by side on the cells both hold, and the difference agent − single call of each
scenario's judged outcome (strict success where answerable, safe resolution elsewhere: the
``safe_resolution`` label is both) gets the paired, task-clustered bootstrap interval of
Tables 5 and 8 (:func:`layerlab.analysis.effects.paired_effects`, arm column ``mode``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from layerlab.analysis.effects import paired_effects
from layerlab.analysis.units import N_BOOT, arm_order, scenario_order
from layerlab.models.agents import AGENT_SUFFIX

SINGLE, AGENT = "single_call", "agent"
KEY = ["provider", "model", "scenario", "mitigation", "task_id", "replicate"]
OUTCOME = "safe_resolution"


def pair_modes(single: pd.DataFrame, agent: pd.DataFrame) -> pd.DataFrame:
    """Both modes' records on the cells the agent archive holds, one frame with a ``mode``
    column; the agent's model is named as in single-call mode so the two pair by unit. Raises
    ValueError when an agent cell has no single-call record (not the same tasks or arms)."""
    if agent.empty:
        raise ValueError("no agent records")
    if not agent["model"].str.endswith(AGENT_SUFFIX).all():
        raise ValueError(f"agent records name their model <name>{AGENT_SUFFIX}; these do not")
    a = agent.assign(model=agent["model"].str.removesuffix(AGENT_SUFFIX), mode=AGENT)
    cells = a[KEY].drop_duplicates()
    s = single.merge(cells, on=KEY, how="inner").assign(mode=SINGLE)
    if len(s) != len(cells):
        have = s[KEY].drop_duplicates()
        lost = cells.merge(have, on=KEY, how="left", indicator=True)
        first = lost[lost["_merge"] == "left_only"].iloc[0]
        raise ValueError(
            f"{len(cells) - len(have)} agent cells have no single-call record, e.g. "
            f"{first['model']} {first['scenario']} {first['mitigation']} {first['task_id']}: "
            "compare archives of the same model, tasks, scenarios and arms"
        )
    return pd.concat([s[a.columns.drop("mode").tolist() + ["mode"]], a], ignore_index=True)


def step_stats(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (arm, scenario) of an agent archive's ``agent.parquet`` rows: mean steps and tool
    calls per record, the share of tool calls that broke the tool's schema, mean retries after
    a fault, and the share of records that used every tool-calling turn."""
    df = pd.DataFrame(list(rows))
    g = df.groupby(["mitigation", "scenario"], sort=False)
    out = pd.DataFrame(
        {
            "steps": g["steps"].mean(),
            "tool_calls": g["tool_calls"].mean(),
            "invalid_share": g["invalid_calls"].sum() / g["tool_calls"].sum().clip(lower=1),
            "retries_after_fault": g["retries_after_fault"].mean(),
            "step_limit_share": g["step_limit"].mean(),
        }
    )
    return out.reset_index()


def compare_modes(
    single: pd.DataFrame,
    agent: pd.DataFrame,
    rows: Sequence[Mapping[str, Any]] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """Per contract arm and scenario: both modes' judged-outcome rate, the paired difference
    agent − single call with its interval, and (with the agent table's ``rows``) the agent's
    step statistics. ``attrs['design']`` describes the interval."""
    both = pair_modes(single, agent)
    scen = scenario_order(both)
    parts, design = [], ""
    for arm in arm_order(both, arm="mitigation"):
        sub = both[both["mitigation"] == arm]
        eff = paired_effects(
            sub, n_boot=n_boot, seed=seed, outcome=OUTCOME, treatment=AGENT, baseline=SINGLE,
            arm="mode", scenarios=[s for s in scen if s in set(sub["scenario"])],
        )  # fmt: skip
        design = eff.describe()
        rates = sub.groupby(["scenario", "mode"])[OUTCOME].mean().unstack("mode")
        gf = sub.groupby(["scenario", "mode"])["grounded_false_positive"].mean().unstack("mode")
        judged = sub.groupby("scenario")["answerable"].first()
        t = eff.table.set_index("scenario")
        for s in t.index:
            parts.append(
                {
                    "mitigation": arm,
                    "scenario": s,
                    "judged_by": "S" if judged[s] else "safe resolution",
                    "single_call": rates.loc[s, SINGLE],
                    "agent": rates.loc[s, AGENT],
                    "difference": t.loc[s, "estimate"],
                    "ci_low": t.loc[s, "ci_low"],
                    "ci_high": t.loc[s, "ci_high"],
                    "tasks": int(t.loc[s, "n_pairs"]),
                    "gf_single_call": gf.loc[s, SINGLE],
                    "gf_agent": gf.loc[s, AGENT],
                }
            )
    out = pd.DataFrame(parts)
    if rows is not None:
        out = out.merge(step_stats(rows), on=["mitigation", "scenario"], how="left")
    out.attrs["design"] = design
    out.attrs["units"] = sorted(set(both["provider"] + "/" + both["model"]))
    return out


def call_sequences(rows: Sequence[Mapping[str, Any]], top: int = 8) -> pd.DataFrame:
    """The agent's tool-call sequences (tool names only), most frequent first: ``records`` per
    sequence over an agent table's rows."""
    seqs = [" > ".join(c["tool"] for c in r["calls"]) or "(no tool call)" for r in rows]
    counts = pd.Series(seqs).value_counts().rename("records").rename_axis("tool calls")
    return counts.reset_index().head(top)

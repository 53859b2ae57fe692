"""Agent mode beside single-call mode: one model, its two modes, paired by task
(:mod:`layerlab.analysis.agentmode`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from layerlab.analysis import agentmode
from layerlab.reporting.paper.tables.captions import CAPTIONS, units_phrase


def agent_vs_single(
    single: pd.DataFrame,
    agent: pd.DataFrame,
    rows: Sequence[Mapping[str, Any]],
    n_boot: int = agentmode.N_BOOT,
    seed: int = 0,
) -> pd.DataFrame:
    """Per contract arm and scenario: the judged outcome in single-call and agent mode, the
    paired difference with its interval, grounded false positives and the agent's steps."""
    t = agentmode.compare_modes(single, agent, rows, n_boot=n_boot, seed=seed)
    both = agentmode.pair_modes(single, agent)
    out = pd.DataFrame(
        {
            "arm": t["mitigation"],
            "scenario": t["scenario"],
            "judged by": t["judged_by"],
            "single call": t["single_call"].round(3),
            "agent": t["agent"].round(3),
            "agent - single [95% CI]": [
                f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                for d, lo, hi in zip(t["difference"], t["ci_low"], t["ci_high"], strict=True)
            ],
            "tasks": t["tasks"],
            "GF single": t["gf_single_call"].round(3),
            "GF agent": t["gf_agent"].round(3),
            "steps": t["steps"].round(2),
            "tool calls": t["tool_calls"].round(2),
            "invalid calls": t["invalid_share"].round(3),
            "retries after fault": t["retries_after_fault"].round(2),
            "step limit": t["step_limit_share"].round(3),
        }
    )
    single_units = units_phrase(both[both["mode"] == agentmode.SINGLE])
    agent_units = units_phrase(agent)
    out.attrs["caption"] = (
        f"{CAPTIONS['agent_vs_single']} Single call: {single_units}. Agent: {agent_units}. "
        f"Intervals: {t.attrs['design']}."
    )
    return out

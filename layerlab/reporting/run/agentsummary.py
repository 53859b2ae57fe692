"""What an agent run did, step-wise: its mode and, per model and scenario, its steps and calls.

An agent run (``run live --agent``) keeps ``agent.parquet`` beside its records (one row per
record: :mod:`layerlab.harness.live.agentlog`). :func:`step_table` condenses it per model and
scenario (arms pooled): records, mean steps, mean tool calls, the share of tool calls that were
invalid, mean retries after a fault and the share of records that reached the step limit.
``layerlab report`` shows it in its *Agent mode* section and ``run live --agent`` prints it after
its results; a single-call run has no such table and its output is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import archive

COLUMNS = (
    "model",
    "scenario",
    "records",
    "steps (mean)",
    "tool calls (mean)",
    "invalid calls (share of calls)",
    "retries after a fault (mean)",
    "step limit (share of records)",
)


def agent_mode(folder: Path) -> dict[str, Any] | None:
    """A run folder's manifest ``agent`` key (None: not an agent run, or not a folder)."""
    folder = Path(folder)
    if not folder.is_dir() or not (folder / archive.MANIFEST).exists():
        return None
    agent = archive.read_manifest(folder).get("agent")
    return agent if isinstance(agent, dict) else None


def describe(agent: dict[str, Any]) -> str:
    """One sentence: the run's agent mode (protocol, step limit, versions)."""
    how = {
        "native": "native tool calls (the provider's tools/tool_calls)",
        "json_action": "JSON actions (one schema-constrained action per reply)",
    }.get(str(agent.get("protocol")), str(agent.get("protocol")))
    return (
        f"agent mode: the model calls the faulted tools itself through {how}, up to "
        f"{agent.get('max_steps')} tool-calling turns then its final reply "
        f"(tools {agent.get('tools')}, agent prompt {agent.get('agent_prompt')})"
    )


def _share(num: float, den: float) -> str:
    return "-" if den == 0 else f"{num / den:.1%} ({int(num)})"


def step_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Per model and scenario (arms pooled; scenarios in the DSL's order): the step fields of
    an agent run's rows (``agentlog.read_table``)."""
    from layerlab.analysis.units import scenario_order

    if not rows:
        return pd.DataFrame(columns=list(COLUMNS))
    df = pd.DataFrame(rows)
    df["unit"] = df["provider"] + "/" + df["model"]
    order = {s: i for i, s in enumerate(scenario_order(df))}
    out = []
    for (unit, scen), g in sorted(
        df.groupby(["unit", "scenario"]), key=lambda kv: (kv[0][0], order[kv[0][1]])
    ):
        calls = int(g["tool_calls"].sum())
        out.append(
            {
                "model": unit,
                "scenario": scen,
                "records": len(g),
                "steps (mean)": f"{g['steps'].mean():.2f}",
                "tool calls (mean)": f"{g['tool_calls'].mean():.2f}",
                "invalid calls (share of calls)": _share(int(g["invalid_calls"].sum()), calls),
                "retries after a fault (mean)": f"{g['retries_after_fault'].mean():.2f}",
                "step limit (share of records)": _share(int(g["step_limit"].sum()), len(g)),
            }
        )
    return pd.DataFrame(out, columns=list(COLUMNS))


def of_folder(folder: Path) -> tuple[dict[str, Any], pd.DataFrame] | None:
    """An agent run folder's mode and step table (None for any other folder or file; no rows
    for an unfinished run that has not written its table yet)."""
    agent = agent_mode(folder)
    if agent is None:
        return None
    from layerlab.harness.live.agentlog import read_table

    if agent.get("table_sha256") is None:  # archive.check_path allows it only with no records
        return agent, step_table([])
    return agent, step_table(read_table(Path(folder)))


def print_for(folder: Path, echo: Callable[[str], None]) -> None:
    """An agent run's mode and per-scenario steps on the terminal (nothing for a single-call
    run; a step table that cannot be read is said in one line)."""
    from layerlab.reporting.format import terminal

    try:
        got = of_folder(folder)
    except ValueError as exc:
        echo(f"agent steps: {exc}")
        return
    if got is not None:
        echo(describe(got[0]))
        terminal.print_wide(got[1], "Agent steps by model and scenario (arms pooled)")

"""A conversational run's statistics as lines of text: S by turn index, the cross-session leak
with its exact interval, and a finding naming the turn where a system breaks
(:func:`layerlab.analysis.conversations.summarise` gives the numbers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layerlab.reporting.format.display import rate


def by_turn_lines(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One table per system: a row per scenario, S at each turn index (``-``: no turn there),
    then the conversation success rate and pass^k at k = the run's epochs."""
    out: list[str] = []
    for model, cells in summary.items():
        turns = sorted({t["turn"] for c in cells.values() for t in c["by_turn"]})
        width = max(len(s) for s in cells) + 2
        head = "".join(f"{'t' + str(t):>7}" for t in turns)
        k = str(min(c["epochs"] for c in cells.values()))
        out.append(f"{model}: S by turn index; a conversation's S (every turn), pass^{k} over "
                   f"{k} epoch(s)")  # fmt: skip
        out.append(f"{'scenario':<{width}}{head}{'conv S':>9}{'pass^' + k:>9}")
        for scen, c in cells.items():
            at = {t["turn"]: t["S"] for t in c["by_turn"]}
            row = "".join(f"{rate(at.get(t), missing='-'):>7}" for t in turns)
            out.append(f"{scen:<{width}}{row}{rate(c['conversation_success']):>9}"
                       f"{rate(c['pass_hat_k'][k]):>9}")  # fmt: skip
    return out


def leak_line(model: str, scenario: str, cell: Mapping[str, Any]) -> str:
    """The cross-session leak of one cell, turns and conversations, with exact intervals."""
    t, c = cell["leak_turns"], cell["leak_conversations"]
    return (f"{model} {scenario}: cross-session leak {rate(t['rate'], t['interval'])} of turns "
            f"({t['k']}/{t['n']}), {rate(c['rate'], c['interval'])} of conversations "
            f"({c['k']}/{c['n']}; exact 95% intervals)")  # fmt: skip


def finding(model: str, scenario: str, cell: Mapping[str, Any]) -> str:
    """Where the system breaks in one cell: the turn index with the lowest S, what failed most
    there; and the first turn that leaked, if any."""
    b = cell["break"]
    if b["failed"] == 0:
        text = f"{model} under {scenario}: no turn index below S {rate(b['S'])}"
    else:
        text = (f"{model} under {scenario}: breaks at turn {b['turn']} (S {rate(b['S_turn0'])} "
                f"at turn 0, {rate(b['S'])} there; {b['kind_failed']} of its {b['failed']} "
                f"failed turns are {b['kind']} turns, most often {b['diagnostic']})")  # fmt: skip
    if cell["first_leak_turn"] is not None:
        text += f"; leaks another user's conversation from turn {cell['first_leak_turn']}"
    return text


def lines(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Everything ``layerlab run conversations`` prints: S by turn, the leaks, the findings."""
    out = by_turn_lines(summary)
    out += [leak_line(m, s, c) for m, cells in summary.items() for s, c in cells.items()]
    out += [finding(m, s, c) for m, cells in summary.items() for s, c in cells.items()]
    return out


__all__ = ["by_turn_lines", "finding", "leak_line", "lines"]

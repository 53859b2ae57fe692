"""A conversational run's statistics as lines of text: S by turn index, the cross-session leak
with its exact interval, a finding naming the turn where a system breaks
(:func:`layerlab.analysis.conversations.summarise` gives the numbers), each per system and arm;
the same as tables of text for a page (:func:`by_turn_table`, :func:`cells_table`); and the
session mitigations' specificity matrix (:func:`matrix_lines`, :mod:`layerlab.analysis.convmatrix`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.reporting.format.display import points, rate


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
    there (the commonest kind of turn and diagnosis among its failed turns, each with its
    count); the first turn that leaked, if any; and, for a faulted layer with words in
    ``roles.yaml`` (``conversation_findings``, :func:`layer_finding`), what the system did there,
    what it does not check and the session mitigation that guards it."""
    b = cell["break"]
    if b["failed"] == 0:
        text = f"{model} under {scenario}: no turn index below S {rate(b['S'])}"
    else:
        text = (f"{model} under {scenario}: breaks at turn {b['turn']} (S {rate(b['S_turn0'])} "
                f"at turn 0, {rate(b['S'])} there; {b['kind_failed']} of its {b['failed']} "
                f"failed turns are {b['kind']} turns, {b.get('diagnostic_failed', '?')} "
                f"diagnosed {b['diagnostic']})")  # fmt: skip
    if cell["first_leak_turn"] is not None:
        text += f"; leaks another user's conversation from turn {cell['first_leak_turn']}"
    arm = model.rpartition(" [")[2][:-1] if model.endswith("]") else None
    words = layer_finding(scenario, cell, arm)
    return f"{text}; {words}" if words else text


def layer_finding(scenario: str, cell: Mapping[str, Any], arm: str | None = None) -> str | None:
    """``roles.yaml``'s words for the scenario's layer in a conversation: "<did> in K of N struck
    turns (<lacks>; guard: <session mitigation>)", K the struck turns answered and not safely
    resolved (those diagnosed as the entry's ``diagnosed``, when given), N the struck turns; when
    the cell's ``arm`` is that guard, "... struck turns with its guard <name> on". None for the
    clean scenario, a layer without words, or a cell where K is 0."""
    from layerlab.faults.roles import load_roles
    from layerlab.faults.scenario import conversation_scenarios, split_variant

    known = conversation_scenarios()
    base = split_variant(scenario)[0]
    if base not in known:
        return None
    found = load_roles().conversation_findings
    bad: Mapping[str, int] = cell.get("struck_unsafe_answers", {})
    for layer in known[base].spec.layer.split("+"):
        f = found.get(layer)
        if f is None:
            continue
        k = sum(n for d, n in bad.items() if not f.diagnosed or d in f.diagnosed)
        if k and arm == f.guard:
            return f"{f.did} in {k} of {cell['struck']} struck turns with its guard {f.guard} on"
        if k:
            return (f"{f.did} in {k} of {cell['struck']} struck turns ({f.lacks}; guard: "
                    f"{f.guard})")  # fmt: skip
    return None


def lines(summary: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Everything ``layerlab run conversations`` prints: S by turn, the leaks, the findings."""
    out = by_turn_lines(summary)
    out += [leak_line(m, s, c) for m, cells in summary.items() for s, c in cells.items()]
    out += [finding(m, s, c) for m, cells in summary.items() for s, c in cells.items()]
    return out


def by_turn_table(cells: Mapping[str, Any]) -> pd.DataFrame:
    """One system's S by turn index: a row per scenario, a column per turn index (the turns
    counted in the header; ``-``: no turn there), then its conversation success and pass^k."""
    turns = sorted({t["turn"] for c in cells.values() for t in c["by_turn"]})
    ns = {t["turn"]: t["n"] for c in cells.values() for t in c["by_turn"]}
    k = str(min(c["epochs"] for c in cells.values()))
    rows = []
    for scen, c in cells.items():
        at = {t["turn"]: t["S"] for t in c["by_turn"]}
        rows.append({"scenario": scen,
                     **{f"t{t} (n={ns[t]})": rate(at.get(t), missing="-") for t in turns},
                     "conversation S": rate(c["conversation_success"]),
                     f"pass^{k}": rate(c["pass_hat_k"][k])})  # fmt: skip
    return pd.DataFrame(rows)


def cells_table(summary: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Every system and scenario: its turns, S, safe resolution and GF over the turns, the turns
    a fault struck, and the cross-session leak over turns and conversations with exact 95%
    intervals and counts, and the first turn that leaked."""
    rows = []
    for model, cells in summary.items():
        for scen, c in cells.items():
            t, v = c["leak_turns"], c["leak_conversations"]
            rows.append({"system": model, "scenario": scen, "turns": c["turns"],
                         "S": rate(c["S"]), "safe resolution": rate(c["safe"]), "GF": rate(c["GF"]),
                         "struck": c["struck"],
                         "leak: turns [95% CI]": f"{rate(t['rate'], t['interval'])} ({t['k']}/{t['n']})",
                         "leak: conversations [95% CI]":
                             f"{rate(v['rate'], v['interval'])} ({v['k']}/{v['n']})",
                         "first leak": "-" if c["first_leak_turn"] is None
                         else f"t{c['first_leak_turn']}"})  # fmt: skip
    return pd.DataFrame(rows)




def matrix_lines(matrices: Mapping[str, Any], outcome: str, unit: str = "turn") -> list[str]:
    """Per system, the session mitigations' specificity matrix: a row per arm with the change of
    each scenario's ``outcome`` per ``unit`` (a turn, or a conversation's every turn) against
    the baseline arm (pp; ``*`` marks the arm's target cells), then each arm's verdict with its
    target gain's 95% interval and, when it is not specific, why."""
    out: list[str] = []
    for model, mx in matrices.items():
        cells = mx.cells
        scen = list(dict.fromkeys(cells["scenario"]))
        arms = list(dict.fromkeys(cells["mitigation"]))
        w = max(len(a) for a in arms) + 2
        cw = max(9, *(len(s) + 2 for s in scen))
        what = ("turns' {o}, paired by conversation and turn index, clustered by conversation"
                if unit == "turn" else "conversations' {o} (every turn), paired by conversation")
        out.append(f"{model}: specificity of the session mitigations, change in "
                   f"{what.format(o=outcome)}, against arm {mx.baseline!r}; pp, * the arm's "
                   "target")  # fmt: skip
        out.append(f"{'arm':<{w}}" + "".join(f"{s:>{cw}}" for s in scen))
        for a in arms:
            row = cells[cells["mitigation"] == a].set_index("scenario")
            out.append(f"{a:<{w}}" + "".join(
                f"{points(row.loc[s, 'estimate'], share=True, sign='always') + ('*' if row.loc[s, 'target'] else ' '):>{cw}}"
                for s in scen))  # fmt: skip
        for r in mx.summary.to_dict("records"):
            gain = points(r["target gain"], share=True, sign="always", missing="-",
                          interval=(r["target gain low"], r["target gain high"]))  # fmt: skip
            why = f" ({r['reason']})" if r["reason"] else ""
            out.append(f"  {r['mitigation']} [{r['layers']}]: {r['verdict']}; target gain {gain} "
                       f"pp on {r['targets']}{why}")  # fmt: skip
    return out


__all__ = [
    "by_turn_lines",
    "by_turn_table",
    "cells_table",
    "finding",
    "layer_finding",
    "leak_line",
    "lines",
    "matrix_lines",
]

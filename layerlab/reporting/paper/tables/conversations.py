"""The conversations' tables: each system's S by turn index under each conversational scenario,
its conversation success, the cross-session leak with its exact interval and the turn where it
breaks (:mod:`layerlab.analysis.conversations`; the baseline arm), and the session mitigations'
specificity matrix over the archives that ran them (:mod:`layerlab.analysis.convmatrix`), one
block per kind of system, never pooled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from layerlab.analysis.conversations import baseline, summarise
from layerlab.reporting.format.display import REFERENCE_AGENT, points, unit_kind
from layerlab.reporting.paper.tables.captions import CAPTIONS

BLOCKS = ("reference agents (deterministic baselines)", "real models")


def _block(model: str) -> str:
    return BLOCKS[0] if unit_kind(model.split("/", 1)[0]) == REFERENCE_AGENT else BLOCKS[1]


def conversations_table(runs: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Per system and scenario (the reference readers first, then each real model's run), the
    baseline arm's records (a run's session mitigations are :func:`conversations_matrix`'s): S
    at each turn index (``-``: no turn there), the share of conversations every turn of which
    succeeded, the leak over turns as ``rate [95% CI]`` and ``k/n`` and the turn with the lowest S."""
    cells = [(model, scen, c) for recs in runs.values()
             for model, by in summarise(baseline(recs)).items() for scen, c in by.items()]  # fmt: skip
    cells.sort(key=lambda x: BLOCKS.index(_block(x[0])))  # stable: each run's order within
    turns = sorted({t["turn"] for _, _, c in cells for t in c["by_turn"]})
    rows = []
    for model, scen, c in cells:
        at = {t["turn"]: t["S"] for t in c["by_turn"]}
        leak = c["leak_turns"]
        lo, hi = leak["interval"]
        rows.append({"block": _block(model), "system": model, "scenario": scen,
                     **{f"S t{t}": f"{at[t]:.3f}" if t in at else "-" for t in turns},
                     "conv. S": f"{c['conversation_success']:.3f}",
                     "leak [95% CI]": f"{leak['rate']:.3f} [{lo:.3f}, {hi:.3f}]",
                     "leaked turns": f"{leak['k']}/{leak['n']}",
                     "breaks at": f"t{c['break']['turn']}"})  # fmt: skip
    out = pd.DataFrame(rows)
    n_conv = sorted({c["conversations"] for _, _, c in cells})
    n_turns = sorted({c["turns"] for _, _, c in cells})
    epochs = sorted({c["epochs"] for _, _, c in cells})
    out.attrs["caption"] = (
        f"{CAPTIONS['conversations']} Conversations per system and scenario: "
        f"{', '.join(map(str, n_conv))} ({', '.join(map(str, n_turns))} turns), "
        f"epochs: {', '.join(map(str, epochs))}."
    )
    return out


def _pp(v: float, lo: float | None = None, hi: float | None = None) -> str:
    return points(v, share=True, sign="always", missing="-",
                  interval=None if lo is None else (lo, hi))  # fmt: skip


def conversations_matrix(runs: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """The session mitigations' specificity matrix of every archive that ran them (a baseline
    and another arm): per system and arm, the change in turn-level safe resolution against the
    baseline under each scenario (pp, its 95% interval; ``*`` the arm's targets, turns paired by
    conversation and turn index and clustered by conversation), the target gain with its 95%
    interval and the verdict by the single-turn matrix's rule. One block per system, never
    pooled; an archive without arms has no rows."""
    from layerlab.analysis.convmatrix import matrices
    from layerlab.mitigations.session import load_session_mitigations

    book = load_session_mitigations().book()
    rows = []
    for recs in runs.values():
        if len({getattr(r, "mitigation", book.baseline) for r in recs}) < 2:
            continue
        for model, mx in matrices(recs, book).items():
            cells, summary = mx.cells, mx.summary.set_index("mitigation")
            for arm, sub in cells.groupby("mitigation", sort=False):
                row: dict[str, Any] = {"block": _block(model), "system": model, "arm": arm,
                                       "layer(s)": summary.loc[arm, "layers"]}  # fmt: skip
                for _, e in sub.iterrows():
                    row[str(e["scenario"])] = ("*" if e["target"] else "") + _pp(
                        e["estimate"], e["ci_low"], e["ci_high"])
                g = summary.loc[arm]
                row["target gain, pp [95% CI]"] = _pp(g["target gain"], g["target gain low"],
                                              g["target gain high"])  # fmt: skip
                row["verdict"] = g["verdict"]
                rows.append(row)
    out = pd.DataFrame(rows)
    out.attrs["caption"] = CAPTIONS["conversations_matrix"]
    return out

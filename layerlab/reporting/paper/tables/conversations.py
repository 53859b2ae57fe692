"""The conversations' table: each system's S by turn index under each conversational scenario,
its conversation success, the cross-session leak with its exact interval and the turn where it
breaks (:mod:`layerlab.analysis.conversations`), one block per kind of system, never pooled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from layerlab.analysis.conversations import summarise
from layerlab.reporting.format.display import REFERENCE_AGENT, unit_kind
from layerlab.reporting.paper.tables.captions import CAPTIONS

BLOCKS = ("reference agents (deterministic baselines)", "real models")


def _block(model: str) -> str:
    return BLOCKS[0] if unit_kind(model.split("/", 1)[0]) == REFERENCE_AGENT else BLOCKS[1]


def conversations_table(runs: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
    """Per system and scenario (the reference readers first, then each real model's run): S at
    each turn index (``-``: no turn there), the share of conversations every turn of which
    succeeded, the leak over turns as ``rate [95% CI]`` and ``k/n`` and the turn with the lowest S."""
    cells = [(model, scen, c) for recs in runs.values() for model, by in summarise(recs).items()
             for scen, c in by.items()]  # fmt: skip
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

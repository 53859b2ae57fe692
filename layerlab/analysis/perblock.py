"""Each block of units analysed on its own (Tables 5 and 9): paired effects under every design,
the design a table reports and the specificity margin; real models and reference agents are
never pooled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from layerlab.analysis.effects import (
    Effects,
    effects_by_design,
    pick_design,
    specificity_margin,
)
from layerlab.analysis.units import N_BOOT, OUTCOME, Design, blocks, unit_labels


@dataclass(frozen=True)
class Block:
    """One kind of unit's records and their paired-effect analysis (see :func:`analyse`)."""

    name: str
    df: pd.DataFrame
    designs: dict[str, Effects]
    eff: Effects
    margin: dict[str, Any]

    @property
    def units(self) -> list[str]:
        return sorted(set(unit_labels(self.df)))


def effects_long(analysis: Mapping[str, Block]) -> pd.DataFrame:
    """Every block's reported paired effects, one under the other with a ``block`` column."""
    return pd.concat([a.eff.table.assign(block=b) for b, a in analysis.items()], ignore_index=True)


def analyse(
    df: pd.DataFrame,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool | None = None,
    design: Design = "auto",
    outcome: str = OUTCOME,
) -> dict[str, Block]:
    """Paired effects (every design), the reported design and the specificity margin, computed
    for each block of :func:`blocks` on its own: real models and reference agents are never
    pooled. Every block uses the same seed. ``outcome``: the binary column compared (strict
    success S by default; ``safe_resolution`` asks whether repair changes safe behaviour)."""
    out = {}
    for name, sub in blocks(df).items():
        designs = effects_by_design(
            sub, n_boot=n_boot, seed=seed, policy_level=policy_level, outcome=outcome
        )
        eff = pick_design(designs, design)
        out[name] = Block(name, sub, designs, eff, specificity_margin(eff))
    return out

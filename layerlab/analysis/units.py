"""The analysis's vocabulary: the constant block (arm column, outcome, unit key, blocks, the
small-sample rule, bootstrap designs), the contract arms and their target named by the specs,
and how records are laid out by unit, scenario, arm and block.

Every statistic takes the arm column, baseline and treatment arms, outcome and scenarios as
parameters; today's values are the defaults here (schema v2). The arms and the target come from
the specs on first use (:func:`contract_arms`, :func:`contract_target`), never at import.
"""

from __future__ import annotations

import functools
from typing import Literal

import pandas as pd

from layerlab.faults.roles import load_roles
from layerlab.mitigations import contract_pair
from layerlab.models.agents import is_reference, is_target

# --- the one constant block: arm column, outcome, unit key, blocks, small-sample rule -----------
ARM = "mitigation"  # the arm column (archive schema v2)
OUTCOME = "success"  # binary outcome column
UNIT_COLUMNS = ("provider", "model")  # one provider–model unit
# The two kinds of unit, in table order; statistics are computed per block, never pooled.
BLOCK_MODELS = "real models"
BLOCK_REFERENCE = "reference agents (deterministic baselines)"
BLOCK_TARGETS = "targets (systems under test)"  # a user's own pipeline: ``run live --target``
MIN_UNITS = 5  # fewer units: tasks-only intervals about these units, said so
ALPHA = 0.05
N_BOOT = 10_000

Design = Literal["auto", "crossed", "nested", "tasks"]
DESIGN_LABELS = {
    "crossed": "crossed: units and tasks resampled jointly (two-way)",
    "nested": "nested (paper's scheme): units, then tasks independently within each unit",
    "tasks": "tasks only: these units, not a sample of models",
}
ESTIMANDS = {
    "crossed": "population of units and tasks",
    "nested": "population of units (tasks assumed independent across units)",
    "tasks": "these units' mean over the task population",
}


# --- the contract arms and their target, named by the specs ------------------------------------


def contract_arms(baseline: str | None = None, treatment: str | None = None) -> tuple[str, str]:
    """``(baseline, treatment)``; each left ``None`` is the mitigations spec's contract arm (the
    baseline, no mitigation, and the schema-repair treatment compared with it)."""
    if baseline is None or treatment is None:
        base, treat = contract_pair()
        return (base if baseline is None else baseline, treat if treatment is None else treatment)
    return baseline, treatment


def contract_target() -> str:
    """The scenario the contract treatment targets (the specificity margin's target), from
    ``data/specs/roles.yaml``."""
    return load_roles().contract_target


# --- layout: scenarios, arms, units, blocks, designs -------------------------------------------


@functools.cache
def _dsl_order() -> tuple[str, ...]:
    from layerlab.faults.scenario import load_scenarios

    return tuple(load_scenarios())


def scenario_order(df: pd.DataFrame) -> list[str]:
    """Scenarios present in ``df``: DSL order first, then any others sorted; an intensity
    sweep's variants (``stale_index@0.25``) beside their scenario, λ ascending (its own name,
    λ = 1, last)."""
    from layerlab.faults.scenario import split_variant

    rank = {s: i for i, s in enumerate(_dsl_order())}

    def key(name: str) -> tuple[int, str, float]:
        try:
            base, dose = split_variant(name)
        except ValueError:  # not a variant's name: ordered as any other
            base, dose = name, 1.0
        return (rank.get(base, len(rank)), "" if base in rank else base, dose)

    return sorted(dict.fromkeys(df["scenario"]), key=key)


def arm_order(df: pd.DataFrame, arm: str = ARM, baseline: str | None = None) -> list[str]:
    """Arms present in ``df``: the baseline (default: the contract baseline) first, then the
    others sorted."""
    base = contract_arms(baseline)[0]
    return sorted(df[arm].unique(), key=lambda m: (m != base, m))


def unit_labels(df: pd.DataFrame) -> pd.Series:
    """``provider/model`` per record (the unit key)."""
    out = df[UNIT_COLUMNS[0]].astype(str)
    for c in UNIT_COLUMNS[1:]:
        out = out + "/" + df[c].astype(str)
    return out


def blocks(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The records split by kind of unit: real models first, then reference agents, then
    targets (users' own systems).

    Every table and figure that counts both computes each block on its own (the reference
    agents are deterministic baselines; pooling them with models would misstate both).
    Empty blocks are left out.
    """
    ref = df["provider"].astype(str).map(is_reference).astype(bool)
    target = df["provider"].astype(str).map(is_target).astype(bool)
    out = {}
    if (~ref & ~target).any():
        out[BLOCK_MODELS] = df[~ref & ~target]
    if ref.any():
        out[BLOCK_REFERENCE] = df[ref]
    if target.any():  # a user's system is never pooled with models
        out[BLOCK_TARGETS] = df[target]
    return out


def resolve_design(design: Design, n_units: int, shares_tasks: bool, min_units: int) -> str:
    """``auto``: crossed when units share tasks, nested when they do not; tasks only below
    ``min_units`` units. An explicit design is honoured."""
    if design != "auto":
        return design
    if n_units < min_units:
        return "tasks"
    return "crossed" if shares_tasks else "nested"

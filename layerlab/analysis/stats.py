"""Statistics from archives, one name space: cluster-aware rates, paired effects with a crossed
(two-way) bootstrap, the specificity margin and statsmodels cross-checks.

The public face of the modules that own them (notebooks and tables call ``stats.X``; modules
inside the package import from the owners):

- :mod:`~layerlab.analysis.units` — the constant block, the contract arms and their target (from
  the specs), scenario/arm/unit order, blocks and the bootstrap design rule;
- :mod:`~layerlab.analysis.records` — archives as a DataFrame (the one way) and their runs'
  settings;
- :mod:`~layerlab.analysis.rates` — Clopper–Pearson and cluster-robust rates (Tables 4 and 9);
- :mod:`~layerlab.analysis.bootstrap` — the paired layout and the vectorised bootstrap;
- :mod:`~layerlab.analysis.effects` — calibrated paired effects, the margin, Tables 5 and 8;
- :mod:`~layerlab.analysis.crosschecks` — McNemar, GEE and identical-prompt checks.

``BASELINE``, ``TREATMENT`` (the contract arms of the mitigations spec) and ``TARGET`` (the
contract treatment's target scenario, ``data/specs/roles.yaml``) are read from the specs on
first use, never at import.
"""

from __future__ import annotations

from layerlab.analysis.bootstrap import (
    Paired,
    bootstrap,
    paired,
    plain_loop_bootstrap,
    point_estimates,
)
from layerlab.analysis.crosschecks import (
    SameInputs,
    arm_pairs,
    crosschecks,
    format_p,
    identical_inputs,
    identical_prompt_discordance,
    mcnemar_exact_log10,
)
from layerlab.analysis.effects import (
    Effects,
    arm_effects,
    cluster_df,
    effects_by_design,
    effects_from_paired,
    paired_effects,
    pick_design,
    simultaneous_band,
    small_sample_factor,
    specificity_margin,
)
from layerlab.analysis.gains import model_gains
from layerlab.analysis.perblock import Block, analyse, effects_long
from layerlab.analysis.rates import (
    Rate,
    clopper_pearson,
    cluster_rate,
    provider_averages,
    rate_interval,
    rates,
    replicate_variability,
    t_over_z,
    two_way_variance,
    wilson,
    z_score,
)
from layerlab.analysis.records import records_frame, run_settings, sampling_phrase
from layerlab.analysis.units import (
    ALPHA,
    ARM,
    BLOCK_MODELS,
    BLOCK_REFERENCE,
    BLOCK_TARGETS,
    DESIGN_LABELS,
    ESTIMANDS,
    MIN_UNITS,
    N_BOOT,
    OUTCOME,
    UNIT_COLUMNS,
    Design,
    arm_order,
    blocks,
    contract_arms,
    contract_target,
    resolve_design,
    scenario_order,
    unit_labels,
)
from layerlab.models.agents import is_reference

_FROM_SPECS = {
    "BASELINE": lambda: contract_arms()[0],
    "TREATMENT": lambda: contract_arms()[1],
    "TARGET": contract_target,
}


def __getattr__(name: str) -> str:
    """``BASELINE``, ``TREATMENT`` and ``TARGET``, read from the specs when first asked for."""
    if name in _FROM_SPECS:
        return _FROM_SPECS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ALPHA",
    "ARM",
    "BLOCK_MODELS",
    "BLOCK_REFERENCE",
    "BLOCK_TARGETS",
    "DESIGN_LABELS",
    "ESTIMANDS",
    "MIN_UNITS",
    "N_BOOT",
    "OUTCOME",
    "UNIT_COLUMNS",
    "Block",
    "Design",
    "Effects",
    "Paired",
    "Rate",
    "analyse",
    "arm_effects",
    "arm_order",
    "arm_pairs",
    "blocks",
    "bootstrap",
    "clopper_pearson",
    "cluster_df",
    "cluster_rate",
    "contract_arms",
    "contract_target",
    "crosschecks",
    "effects_by_design",
    "effects_from_paired",
    "effects_long",
    "format_p",
    "SameInputs",
    "identical_inputs",
    "identical_prompt_discordance",
    "is_reference",
    "mcnemar_exact_log10",
    "model_gains",
    "paired",
    "paired_effects",
    "pick_design",
    "plain_loop_bootstrap",
    "point_estimates",
    "provider_averages",
    "rate_interval",
    "rates",
    "records_frame",
    "replicate_variability",
    "resolve_design",
    "run_settings",
    "sampling_phrase",
    "scenario_order",
    "simultaneous_band",
    "small_sample_factor",
    "specificity_margin",
    "t_over_z",
    "two_way_variance",
    "unit_labels",
    "wilson",
    "z_score",
]

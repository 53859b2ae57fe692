"""Paper tables: one builder per table, by family, and the registry that says for each generated
table its caption, builder, inputs, file stem and place in the paper (:mod:`.registry`).

Families: the benchmark's design and model-free runs (:mod:`.benchmark`: Tables 1-3), rates over
archive records (:mod:`.rates`: Tables 4, 8, 9), paired effects (:mod:`.effects`: Table 5 and its
companions), representative cases (:mod:`.cases`: Table 6), the LangChain study (:mod:`.study`:
Table 7), the specificity matrix (:mod:`.specificity`: Table 10), interval trust
(:mod:`.variability`), the real models' reliability surface (:mod:`.surface`), the
conversations (:mod:`.conversations`) and the paper's figures beside ours (:mod:`.comparison`);
captions and the caption sentences built from the data live in :mod:`.captions`.

A notebook writes a table by naming its registry entry: ``tables.publish("table4", df)``.

The names below are imported from their family module on first use, so a command that needs one
table (``layerlab scenario list``: Table 1) does not import every family.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from layerlab.reporting.paper.tables.agentmode import agent_vs_single
    from layerlab.reporting.paper.tables.benchmark import (
        audit_notes,
        diagnostics,
        table1,
        table2,
        table3,
    )
    from layerlab.reporting.paper.tables.cases import table6, table6_archive
    from layerlab.reporting.paper.tables.comparison import paper_comparison
    from layerlab.reporting.paper.tables.conversations import conversations_table
    from layerlab.reporting.paper.tables.effects import (
        crosscheck_table,
        design_comparison,
        margin_table,
        safe_effects_table,
        table5,
    )
    from layerlab.reporting.paper.tables.rates import (
        safe_resolution_by_unit,
        table4,
        table4_by_unit,
        table8,
        table9,
        table_answer_quality,
    )
    from layerlab.reporting.paper.tables.registry import (
        INPUTS,
        RECOMPUTED,
        REGISTRY,
        TABLES,
        Table,
        publish,
    )
    from layerlab.reporting.paper.tables.specificity import table10, table10_cells
    from layerlab.reporting.paper.tables.study import table7, table7_by_condition
    from layerlab.reporting.paper.tables.surface import surface_models
    from layerlab.reporting.paper.tables.userpipeline import (
        sized_task_split,
        user_table4,
        user_table5,
        user_table10,
        user_table10_sized,
    )
    from layerlab.reporting.paper.tables.variability import (
        coverage_table,
        exchangeability_table,
        replicates_table,
    )

_OWNER = {
    "INPUTS": "registry",
    "RECOMPUTED": "registry",
    "REGISTRY": "registry",
    "TABLES": "registry",
    "Table": "registry",
    "agent_vs_single": "agentmode",
    "conversations_table": "conversations",
    "audit_notes": "benchmark",
    "coverage_table": "variability",
    "crosscheck_table": "effects",
    "design_comparison": "effects",
    "diagnostics": "benchmark",
    "exchangeability_table": "variability",
    "margin_table": "effects",
    "paper_comparison": "comparison",
    "publish": "registry",
    "replicates_table": "variability",
    "safe_effects_table": "effects",
    "safe_resolution_by_unit": "rates",
    "table1": "benchmark",
    "table10": "specificity",
    "table10_cells": "specificity",
    "table2": "benchmark",
    "table3": "benchmark",
    "table4": "rates",
    "table4_by_unit": "rates",
    "table5": "effects",
    "table6": "cases",
    "table6_archive": "cases",
    "table7": "study",
    "table7_by_condition": "study",
    "table8": "rates",
    "table9": "rates",
    "table_answer_quality": "rates",
    "user_table4": "userpipeline",
    "user_table5": "userpipeline",
    "user_table10": "userpipeline",
    "user_table10_sized": "userpipeline",
    "sized_task_split": "userpipeline",
    "surface_models": "surface",
}

__all__ = [
    "INPUTS",
    "RECOMPUTED",
    "REGISTRY",
    "TABLES",
    "Table",
    "agent_vs_single",
    "audit_notes",
    "conversations_table",
    "coverage_table",
    "crosscheck_table",
    "design_comparison",
    "diagnostics",
    "exchangeability_table",
    "margin_table",
    "paper_comparison",
    "publish",
    "replicates_table",
    "safe_effects_table",
    "safe_resolution_by_unit",
    "sized_task_split",
    "surface_models",
    "table1",
    "table10",
    "table10_cells",
    "table2",
    "table3",
    "table4",
    "table4_by_unit",
    "table5",
    "table6",
    "table6_archive",
    "table7",
    "table7_by_condition",
    "table8",
    "table9",
    "table_answer_quality",
    "user_table10",
    "user_table10_sized",
    "user_table4",
    "user_table5",
]


def __getattr__(name: str) -> Any:
    """PEP 562: a table name's family module, imported on first use."""
    try:
        module = _OWNER[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_OWNER})

"""The table registry: every generated table once, in the order the paper shows it.

An entry (:class:`Table`) names the table (its id is also its file stem under ``paper/tables``
and its LaTeX label ``tab:<id>``), its builder, the inputs the builder takes (:data:`INPUTS`
says which archive or data each one is read from), whether it sits in the paper's appendix, and
whether ``layerlab recompute`` rebuilds it from archives alone. Its caption comes from
:data:`~layerlab.reporting.paper.tables.captions.CAPTIONS`, completed by the builder from the data
(``attrs['caption']``); Table 10's builder writes its whole caption, from the matrix and its
records. The paper number follows from the order: Tables 1, 2, ... in the body, A1, A2, ... in the
appendix (``paper/main.tex`` inputs the tables in this order; ``tests/reporting/paper/test_tables.py`` checks it).
Notebooks write a table with :func:`publish`, naming the entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import paths
from layerlab.reporting.paper import export
from layerlab.reporting.paper.tables import (
    agentmode,
    benchmark,
    cases,
    comparison,
    conversations,
    effects,
    rates,
    specificity,
    study,
    surface,
    userpipeline,
    variability,
)
from layerlab.reporting.paper.tables.captions import CAPTIONS

INPUTS = {
    "scenarios": "the scenarios of the scenario DSL (data/specs/scenarios.yaml)",
    "summary": "the deterministic harness's summary over the committed corpus "
    "(harness.deterministic.summarize)",
    "audit": "the retriever audit of the committed corpus, no model (scoring.audit.audit)",
    "records": "records of the live archives: the reference agents (data/archives/reference_agents) "
    "and every real model (data/archives/local_models); recompute: the archives it is given",
    "analysis": "analysis.stats.analyse of those records on strict success",
    "safe_analysis": "analysis.stats.analyse of those records on safe resolution",
    "cases": "Table 6's cases, chosen by rule from the reference-agent archive "
    "(reporting.explore.representative_cases)",
    "model_records": "records of the real-model archives (data/archives/local_models)",
    "replicates": "records of the sampled replicate archives (data/archives/local_model_replicates)",
    "study": "the cells of the LangChain study (data/archives/langchain_study)",
    "matrix": "the specificity matrix (analysis.specificity.matrix) of the mitigation archives "
    "(data/archives/mitigations, local_model_mitigations): one, or one per block of units",
    "matrix_records": "the records of those mitigation archives: one frame, or one per block",
    "coverage": "the coverage suite's table (data/coverage/coverage.csv)",
    "agent_single": "the single-call records of the agent archive's model, tasks, scenarios and "
    "contract arms (data/archives/local_model_mitigations)",
    "agent_records": "the records of the agent-mode archive (data/archives/local_model_agent)",
    "agent_rows": "that archive's per-record step table (agent.parquet)",
    "user_records": "the contract arms' records of the user-pipeline archive (data/archives/"
    "user_pipelines): a team's own LangChain chain over BM25 and a local model, as a target",
    "user_analysis": "analysis.stats.analyse of those records on strict success",
    "user_matrix": "the specificity matrix of the user-pipeline archive (every matrix arm)",
    "user_matrix_records": "that archive's records, as the matrix reads them",
    "user_sized_matrix": "the specificity matrix of the larger user-pipeline archive (data/archives/"
    "user_pipelines/my-rag-chain-48: the baseline and validity resolution on 48 tasks)",
    "user_sized_matrix_records": "that archive's records, as the matrix reads them",
    "conversation_runs": "the turn records of the conversational archives: the reference readers' "
    "(data/archives/conversations/reference) and each real model's chat chain (data/archives/"
    "local_model_conversations), by archive (analysis.conversations.load)",
    "surface": "records of the real models' reliability-surface archives (data/archives/"
    "local_model_surface): a sampled model swept over fault intensity, epochs per task",
}


@dataclass(frozen=True)
class Table:
    """One generated table. ``builder(*inputs)`` returns its frame; ``inputs`` are keys of
    :data:`INPUTS`; ``appendix``: a supplementary table (numbered A1, A2, ...); ``recompute``:
    rebuilt by :func:`layerlab.reporting.paper.recompute.recompute` from archives alone."""

    id: str
    builder: Callable[..., pd.DataFrame]
    inputs: tuple[str, ...]
    appendix: bool = False
    recompute: bool = False

    def __post_init__(self) -> None:
        unknown = sorted(set(self.inputs) - set(INPUTS))
        if unknown:
            raise ValueError(f"table {self.id!r}: unknown inputs {unknown}")

    @property
    def stem(self) -> str:
        """The file stem under the tables folder: ``<stem>.csv``, ``.md`` and ``.tex``."""
        return self.id

    @property
    def label(self) -> str:
        """The LaTeX label the exporter gives the table (``\\ref{tab:...}``)."""
        return export.label(self.stem)

    @property
    def caption(self) -> str | None:
        """The static caption (the builder completes it from the data); ``None``: the builder
        writes the whole caption (Table 10)."""
        return CAPTIONS.get(self.id)

    @property
    def number(self) -> str:
        """The paper's number of the table: ``"4"`` in the body, ``"A2"`` in the appendix."""
        same = [t.id for t in TABLES if t.appendix == self.appendix]
        return ("A" if self.appendix else "") + str(same.index(self.id) + 1)

    def build(self, *inputs: Any) -> pd.DataFrame:
        """The table's frame from its inputs (in the order of :attr:`inputs`)."""
        return self.builder(*inputs)

    def caption_of(self, frame: pd.DataFrame) -> str:
        """The caption of a built frame: the builder's (``attrs['caption']``), else the static one."""
        return frame.attrs.get("caption") or CAPTIONS[self.id]

    def write(self, frame: pd.DataFrame, out_dir: Path, caption: str) -> list[Path]:
        """Write ``frame`` as this table's CSV, Markdown and LaTeX into ``out_dir``."""
        return export.write_table(frame, self.stem, caption, out_dir)


TABLES = (
    Table("table1", benchmark.table1, ("scenarios",)),
    Table("table2", benchmark.table2, ("summary",)),
    Table("table3", benchmark.table3, ("audit",)),
    Table("table4", rates.table4, ("records",), recompute=True),
    Table("table5", effects.table5, ("analysis",), recompute=True),
    Table("table6", cases.table6, ("cases",)),
    Table("table7", study.table7, ("study",)),
    Table("table8", rates.table8, ("records",), recompute=True),
    Table("table9", rates.table9, ("records",), recompute=True),
    Table("table10", specificity.table10, ("matrix", "matrix_records"), recompute=True),
    Table("table5_safe", effects.safe_effects_table, ("safe_analysis",), recompute=True),
    Table("safe_resolution_models", rates.safe_resolution_by_unit, ("model_records",)),
    Table("table6_models", cases.table6_archive, ("model_records", "cases")),
    Table("replicates_models", variability.replicates_table, ("replicates",)),
    Table("exchangeability_models", variability.exchangeability_table, ("replicates",)),
    Table(
        "agent_vs_single",
        agentmode.agent_vs_single,
        ("agent_single", "agent_records", "agent_rows"),
    ),
    Table("user_table4", userpipeline.user_table4, ("user_records",)),
    Table("user_table5", userpipeline.user_table5, ("user_analysis",)),
    Table("user_table10", userpipeline.user_table10, ("user_matrix", "user_matrix_records")),
    Table(
        "user_table10_sized",
        userpipeline.user_table10_sized,
        ("user_sized_matrix", "user_sized_matrix_records"),
    ),
    Table("conversations", conversations.conversations_table, ("conversation_runs",)),
    Table("specificity_margin", effects.margin_table, ("analysis",), appendix=True, recompute=True),
    Table(
        "table5_crosscheck", effects.crosscheck_table, ("analysis",), appendix=True, recompute=True
    ),
    Table("table7_by_condition", study.table7_by_condition, ("study",), appendix=True),
    Table(
        "table10_cells",
        specificity.table10_cells,
        ("matrix", "matrix_records"),
        appendix=True,
        recompute=True,
    ),
    Table(
        "answer_quality", rates.table_answer_quality, ("records",), appendix=True, recompute=True
    ),
    Table(
        "paper_comparison",
        comparison.paper_comparison,
        ("analysis", "audit"),
        appendix=True,
        recompute=True,
    ),
    Table("coverage", variability.coverage_table, ("coverage",), appendix=True),
    Table("surface_models", surface.surface_models, ("surface",), appendix=True),
    Table(
        "conversations_matrix",
        conversations.conversations_matrix,
        ("conversation_runs",),
        appendix=True,
    ),
)
REGISTRY = {t.id: t for t in TABLES}
RECOMPUTED = tuple(t for t in TABLES if t.recompute)


def publish(name: str, *inputs: Any) -> pd.DataFrame:
    """Build the registered table ``name`` from ``inputs``, write it (CSV, Markdown, LaTeX) to
    ``paper/tables`` under its caption, and return the frame for display."""
    table = REGISTRY[name]
    frame = table.build(*inputs)
    table.write(frame, paths.TABLES, table.caption_of(frame))
    return frame

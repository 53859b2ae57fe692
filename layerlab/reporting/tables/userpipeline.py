"""The worked example's tables: a team's own pipeline as a target, its Table 4, 5 and 10 rows
computed by the paper's builders on its own records (notebook 13), and its Table 10 rows again
from a larger run of fewer arms (``user_table10_sized``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.reporting.tables import effects, rates, specificity
from layerlab.reporting.tables.captions import CAPTIONS


def _named(t: pd.DataFrame, name: str) -> pd.DataFrame:
    t.attrs["caption"] = f"{CAPTIONS[name]} {t.attrs.get('caption', '')}".strip()
    return t


def user_table4(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4's rows of the user pipeline (its contract arms)."""
    return _named(rates.table4(df), "user_table4")


def user_table5(analysis: Mapping[str, Any]) -> pd.DataFrame:
    """Table 5's rows of the user pipeline."""
    return _named(effects.table5(analysis), "user_table5")


def user_table10(matrix: Any, records: Any) -> pd.DataFrame:
    """Table 10's rows of the user pipeline: every mitigation on the pipeline's own records."""
    return _named(specificity.table10(matrix, records), "user_table10")


def user_table10_sized(matrix: Any, records: Any) -> pd.DataFrame:
    """Table 10's rows of the user pipeline at the size its guards' verdicts need: the baseline
    and the guards the committed example could not call (issue 33), on more tasks."""
    return _named(specificity.table10(matrix, records), "user_table10_sized")

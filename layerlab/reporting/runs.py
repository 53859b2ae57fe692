"""A live run at a glance, for notebooks: success by model, scenario and arm
(:func:`run_overview`) and whether two runs hold the same records (:func:`same_records`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from layerlab.archive import archive

if TYPE_CHECKING:
    from layerlab.harness.live import LiveResult


def run_overview(result: LiveResult) -> pd.DataFrame:
    """Success by model × scenario × mitigation arm of a finished run (what a notebook shows)."""
    df = pd.DataFrame([r.__dict__ for r in archive.read_records(result.out / archive.ARCHIVE)])
    g = df.groupby(["provider", "model", "scenario", "mitigation"], sort=False)["success"].mean()
    wide = g.unstack("mitigation").reset_index()
    arms = [m for m in _arms(df) if m in wide]
    return wide[["provider", "model", "scenario", *arms]]


def _arms(df: pd.DataFrame) -> list[str]:
    """The arms of a records frame, in the order they first appear."""
    return list(dict.fromkeys(df["mitigation"]))


def same_records(a: Path | str, b: Path | str) -> bool:
    """Whether two run folders (or archives) hold the same records, label for label.

    Run ids are ignored: they name the run, not its content.
    """

    def load(p: Path | str) -> list[tuple[Any, ...]]:
        p = Path(p)
        recs = archive.read_records(p / archive.ARCHIVE if p.is_dir() else p)
        return sorted(tuple(v for k, v in r.__dict__.items() if k != "run_id") for r in recs)

    return load(a) == load(b)

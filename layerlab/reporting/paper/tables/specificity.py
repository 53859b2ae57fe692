"""Table 10: the mitigation x scenario specificity matrix (:mod:`layerlab.analysis.specificity`) as a
table per mitigation (``table10``) and as the matrix of cells (``table10_cells``), with their
captions built from the matrix and the records it was computed from.

Both take one matrix and its records frame (``recompute``: the given archives together), or one
matrix and one frame per block of units (the notebook: reference agents and real models, each on
its own records, one block under the other with a leading ``block`` column).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from layerlab.analysis import stats
from layerlab.reporting.format.display import margin, points

if TYPE_CHECKING:
    from layerlab.analysis.specificity import Matrix


def table10(
    matrix: Matrix | Mapping[str, Matrix], records: pd.DataFrame | Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """Table 10: per mitigation, target gain, largest off-target change, margin and verdict (pp);
    caption in ``attrs``."""
    return _table(_summary, "table10", matrix, records)


def table10_cells(
    matrix: Matrix | Mapping[str, Matrix], records: pd.DataFrame | Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """The matrix itself: rows mitigations, columns scenarios; each cell the effect (pp) with its
    95% interval, target cells marked with *; caption in ``attrs``."""
    return _table(_cells, "table10_cells", matrix, records)


def _table(
    build: Callable[[Matrix], pd.DataFrame],
    name: str,
    matrix: Matrix | Mapping[str, Matrix],
    records: pd.DataFrame | Mapping[str, pd.DataFrame],
) -> pd.DataFrame:
    if isinstance(matrix, Mapping):
        assert isinstance(records, Mapping)
        matrix = {b: _chances(m, records[b]) for b, m in matrix.items()}
        frames = [build(m).assign(block=b) for b, m in matrix.items()]
        out = pd.concat(frames, ignore_index=True)
        out = out[["block", *[c for c in out.columns if c != "block"]]]
        out.attrs["caption"] = _captions_blocks(matrix, records)[name]
        out.attrs["notes"] = _notes(next(iter(matrix.values())).delta)
    else:
        assert isinstance(records, pd.DataFrame)
        matrix = _chances(matrix, records)
        out = build(matrix)
        out.attrs["caption"] = _captions(matrix, records)[name]
        out.attrs["notes"] = _notes(matrix.delta)
    return out


def _chances(m: Matrix, records: pd.DataFrame) -> Matrix:
    """The matrix with the probability of each verdict at its size (Table 10's P(specific)
    column), unless it has it already."""
    from layerlab.analysis import planning

    return m if "p specific" in m.summary else planning.with_chances(m, records)


def _pp(v: float) -> str:
    """Table 10's points: a share difference, signed as written (``+0.0``), ``-`` for none."""
    return points(v, share=True, sign="always", missing="-")


def _ci(lo: float, hi: float) -> str:
    return "-" if lo != lo else f"[{_pp(lo)}, {_pp(hi)}]"


def target_interval(m: Matrix) -> dict[str, tuple[float, float]]:
    """Per mitigation, the marginal 95% interval of its target gain: the interval of the target
    cell the gain is (the smallest target effect), exactly the one the cells table and the
    heatmap print for that cell, so one quantity has one interval everywhere. (The verdict reads
    the simultaneous band, a different and wider interval, shown as such.)"""
    out: dict[str, tuple[float, float]] = {}
    c = m.cells[m.cells["target"]]
    for name, sub in c.groupby("mitigation", sort=False):
        e = sub.loc[sub["estimate"].idxmin()]
        out[str(name)] = (float(e["ci_low"]), float(e["ci_high"]))  # never zero-width (exact.py)
    return out


def _summary(m: Matrix) -> pd.DataFrame:
    s = m.summary
    nan = float("nan")
    marginal = target_interval(m)
    return pd.DataFrame(
        {
            "mitigation": s["mitigation"],
            "layer(s)": s["layers"],
            "stage": s["stage"],
            "target scenario(s)": s["targets"],
            "target gain (pp)": [_pp(v) for v in s["target gain"]],
            "95% interval": [_ci(*marginal.get(str(a), (nan, nan))) for a in s["mitigation"]],
            "widest off-target 90% interval": [
                "-" if w == "-" else f"{w} {_ci(lo, hi)}"
                for w, lo, hi in s[
                    ["widest off-target", "widest off-target low", "widest off-target high"]
                ].itertuples(index=False)
            ],
            "largest off-target": s["largest off-target"],
            "change (pp)": [_pp(v) for v in s["off-target change"]],
            "margin (pp)": [_pp(v) for v in s["margin"]],
            "margin 95% interval": [
                _ci(lo, hi) for lo, hi in zip(s["margin low"], s["margin high"], strict=True)
            ],
            "off-target harm": s["off-target harm"],
            "off-target gain": s["off-target gain"],
            "verdict": s["verdict"],
            # what this design can decide: the chance a run of its size says specific, by
            # simulation from its own per-task rates (layerlab.analysis.planning)
            "P(specific) at this size": [_prob(v) for v in s["p specific"]],
            "why not specific": [r or "-" for r in s["reason"]],
        }
    )


def _prob(v: float) -> str:
    return "-" if v != v else f"{v:.2f}"


def _sims(m: Matrix) -> str:
    n = m.summary["sims"].max() if "sims" in m.summary and len(m.summary) else 0
    return f"{int(n)}" if n == n else "0"


def _floor(m: Matrix) -> str:
    from layerlab.analysis.specificity import specific_floor

    return f"{specific_floor(0.05, m.delta)} tasks (policies, where question variants cluster)"


def _cells(m: Matrix) -> pd.DataFrame:
    c = m.cells
    order = list(dict.fromkeys(c["scenario"]))
    rows = []
    for name, sub in c.groupby("mitigation", sort=False):
        row: dict[str, Any] = {"mitigation": name}
        for _, e in sub.set_index("scenario").loc[order].reset_index().iterrows():
            # a constant cell (exactly zero included) prints its score interval, never [x, x]
            cell = f"{_pp(e['estimate'])} {_ci(e['ci_low'], e['ci_high'])}"
            row[str(e["scenario"])] = ("*" if e["target"] else "") + cell
        rows.append(row)
    return pd.DataFrame(rows)


def _captions(m: Matrix, df: pd.DataFrame) -> dict[str, str]:
    """Captions of ``table10`` and ``table10_cells`` for one matrix: what each table shows and what
    the archive holds; how the intervals and the verdict are read is in :func:`_notes`."""
    units = sorted(set(df["provider"] + "/" + df["model"]))
    n = int(df["mitigation"].eq(m.baseline).sum())
    archive = (
        f" Archive: {', '.join(units)}, {n} baseline records"
        + (f"; {m.methods}" if m.methods else "")
        + "."
        + (f" Note: {m.note}." if m.note else "")
    )
    return {
        "table10": "Mitigation x scenario specificity matrix: per mitigation, its paired effect "
        f"against the {m.baseline} baseline on its target scenarios (target gain) and off target "
        "(the largest change), the margin and the verdict at the equivalence margin "
        f"{margin(m.delta)}, in percentage points, with the widest off-target 90% interval "
        "(the equivalence test's) and the probability that a run of this size is called "
        f"specific if the mitigation changes nothing off target (from {_sims(m)} archives "
        "simulated from its own per-task rates, off-target cells at the baseline's; specific "
        f"needs at least {_floor(m)} with unchanged off-target outcomes)." + archive,
        "table10_cells": "Specificity matrix cells: the paired effect of each mitigation against "
        f"the {m.baseline} baseline on each scenario, in percentage points, with its 95% interval; "
        "* marks target scenarios (the mitigation's layer)." + archive,
    }


def _notes(delta: float) -> str:
    """Table 10's notes, stated once under the table: the outcome, the intervals, the margin and
    the verdict rule."""
    from layerlab.analysis.specificity import VERDICT_RULE

    return (
        f"Equivalence margin {margin(delta)}. Effects are on the scenario's judged outcome "
        "(strict success on answerable scenarios, "
        "safe resolution - a structured non-answer - on unsafe ones). Cell intervals are marginal "
        "95% intervals (each covers its own effect; together they are not simultaneous). "
        "Target gain = the smallest gain over the target scenarios, with that cell's marginal "
        "interval (as in the cells table); off target, the verdict reads each cell's 90% interval "
        "(equivalence) and the mitigation's simultaneous 95% band over all its cells (over-broad); "
        "where a cell's pairs are few or constant its interval is "
        "a score interval from the discordant pairs, never of width zero (the caption names the "
        "method each block used). Margin = target gain minus the largest absolute "
        "off-target change whose simultaneous band excludes zero, with an interval projected from "
        f"that band (it covers when off-target effects are zero but noisy). {VERDICT_RULE}"
    )


def _captions_blocks(
    ms: Mapping[str, Matrix], frames: Mapping[str, pd.DataFrame]
) -> dict[str, str]:
    """Captions of the per-block tables: the rule once, then what each block's archive holds
    (for real models also how replies were drawn: temperature, reply schema, replicates)."""
    out: dict[str, str] = {}
    per_block = {b: _captions(m, frames[b]) for b, m in ms.items()}
    for name in ("table10", "table10_cells"):
        head = next(iter(per_block.values()))[name].partition(" Archive: ")[0]
        parts = []
        for b, caps in per_block.items():
            archive_part, _, note = caps[name].partition(" Archive: ")[2].partition(" Note: ")
            how = stats.sampling_phrase(frames[b]) if b == stats.BLOCK_MODELS else ""
            tasks = frames[b]["task_id"].nunique()
            parts.append(
                f"{b[0].upper()}{b[1:]}: {archive_part.rstrip('.')}, {tasks} tasks"
                + (f"; {how}" if how else "")
                + "."
                + (f" Note: {note}" if note else "")
            )
        out[name] = head + " " + " ".join(parts)
    return out

"""One quantity, one interval: an effect shown in several tables and figures carries the same 95%
interval in each. Repair's gain on schema drift used to read [+95.4, +99.6] in Table 10 (the
verdict's simultaneous band) and [+95.4, +99.2] in Table A4 and the heatmap (the cell's marginal
interval); Table 10 now shows the marginal interval as the gain's and the band as the verdict's."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from layerlab import paths
from layerlab.analysis import specificity, stats
from layerlab.reporting.format import display
from layerlab.reporting.paper import figures

TABLES = paths.COMMITTED_ARTIFACTS / "paper" / "tables"
REF, MODELS = stats.BLOCK_REFERENCE, stats.BLOCK_MODELS
INTERVAL = re.compile(r"\[([+-]?\d+\.\d), ([+-]?\d+\.\d)\]")


def _csv(name: str) -> pd.DataFrame:
    return pd.read_csv(TABLES / f"{name}.csv", dtype=str, keep_default_na=False)


def _pair(text: str) -> tuple[float, float]:
    m = INTERVAL.search(text)
    assert m, f"no interval in {text!r}"
    return float(m.group(1)), float(m.group(2))


def _cell(cells: pd.DataFrame, block: str, mitigation: str, scenario: str) -> str:
    row = cells[(cells["block"] == block) & (cells["mitigation"] == mitigation)]
    return row[scenario].iloc[0]


@pytest.fixture(scope="module")
def live_analysis() -> dict[str, stats.Block]:
    """Table 5's analysis of the committed archives (a small bootstrap: the cells compared here
    take the score interval, which no resample changes)."""
    return stats.analyse(stats.records_frame(paths.live_archives()), n_boot=200, seed=0)


@pytest.fixture(scope="module")
def matrices() -> tuple[dict[str, specificity.Matrix], dict[str, pd.DataFrame]]:
    frames = specificity.block_frames(None)
    return {b: specificity.matrix(f, n_boot=200, seed=0) for b, f in frames.items()}, frames


def _iv(lo: float, hi: float) -> tuple[float, float]:
    return round(float(lo), 1), round(float(hi), 1)


def test_repair_gain_on_schema_drift_has_one_interval_in_every_table(
    live_analysis, matrices
) -> None:
    """The reference agents' repair gain on schema drift: Table 5, the paper comparison (both from
    the reference archive: two deterministic agents that agree on every task), Table 10 and Table
    A4 (the mitigation archive's repair arm: one agent, the same tasks' strict and repair
    outcomes) all print one interval, the score interval of the 234 of 240 discordant tasks
    (exact.cell_methods owns the choice, effects_from_paired applies it)."""
    from layerlab.analysis import exact
    from layerlab.reporting.paper.tables import comparison, effects
    from layerlab.reporting.paper.tables import specificity as spec_tables

    t5 = effects.table5(live_analysis)
    row = t5[(t5["block"] == REF) & (t5["scenario"] == "schema_drift")].iloc[0]
    from_t5 = _iv(row["95% low (pp)"], row["95% high (pp)"])
    pc = comparison.paper_comparison(live_analysis).set_index("figure")
    from_pc = _pair(pc.loc["schema_drift gain 95% interval (pp)", REF])
    ms, frames = matrices
    t10 = spec_tables.table10(ms, frames)
    r10 = t10[(t10["block"] == REF) & (t10["mitigation"] == "repair")].iloc[0]
    from_t10 = _pair(r10["95% interval"])
    from_a4 = _pair(_cell(spec_tables.table10_cells(ms, frames), REF, "repair", "schema_drift"))
    assert from_t5 == from_pc == from_t10 == from_a4, {
        "Table 5": from_t5,
        "paper comparison": from_pc,
        "Table 10": from_t10,
        "Table A4": from_a4,
    }
    ref = live_analysis[REF].eff
    method = ref.methods[list(ref.paired.scenarios).index("schema_drift")]
    assert method in (exact.SCORE, exact.SCORE_CLUSTERED)  # clustered when variants share policies
    assert from_t5[1] - from_t5[0] > 0
    # the real model: Table 5 and the comparison share the 80-task archive
    row = t5[(t5["block"] == MODELS) & (t5["scenario"] == "schema_drift")].iloc[0]
    m5 = _iv(row["95% low (pp)"], row["95% high (pp)"])
    assert m5 == _pair(pc.loc["schema_drift gain 95% interval (pp)", MODELS])
    # each caption names the method its block's cells used
    for t in (t5, t10):
        notes = t.attrs.get("notes", "")
        text = " ".join(
            [t.attrs.get("caption", ""), *([notes] if isinstance(notes, str) else notes)]
        )
        assert exact.METHODS[method] in text, text[:300]


def test_every_target_gain_in_table10_has_its_cells_interval() -> None:
    """Table 10's target gain is a cell of Table A4 (the smallest target effect): the same
    interval, for every mitigation of every block; the verdict's band is a column of its own."""
    t10, cells = _csv("table10"), _csv("table10_cells")
    assert "widest off-target 90% interval" in t10.columns  # what the equivalence test read
    checked = 0
    for _, r in t10.iterrows():
        targets = [s.strip() for s in r["target scenario(s)"].split(",") if s.strip() != "-"]
        if not targets:
            continue
        shown = {t: _cell(cells, r["block"], r["mitigation"], t).lstrip("*") for t in targets}
        gain = r["target gain (pp)"]
        match = [
            t for t, c in shown.items() if c.startswith(gain) or (c == "0" and float(gain) == 0)
        ]
        assert match, (r["block"], r["mitigation"], gain, shown)
        c = shown[match[0]]
        expected = "[+0.0, +0.0]" if c == "0" else INTERVAL.search(c).group(0)
        assert r["95% interval"] == expected, (r["block"], r["mitigation"], r["95% interval"], c)
        checked += 1
    assert checked >= 10


@pytest.fixture(scope="module")
def reference_matrix() -> specificity.Matrix:
    frames = specificity.block_frames(None)
    return specificity.matrix(frames[REF], n_boot=stats.N_BOOT, seed=0)


def test_the_heatmap_and_table_a4_print_the_same_cell_intervals(reference_matrix) -> None:
    """The heatmap (figures/specificity_matrix) and Table A4 draw each cell's interval from one
    computation: the committed table's intervals are the matrix's, and the heatmap prints them."""
    m = reference_matrix
    cells = _csv("table10_cells")
    fig = figures.specificity_heatmap(m.cells, "t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    for _, c in m.cells[~m.cells["exactly_zero"]].iterrows():
        committed = _pair(_cell(cells, REF, c["mitigation"], c["scenario"]))
        assert committed == (round(100 * c["ci_low"], 1), round(100 * c["ci_high"], 1))
        lo, hi = (display.points(100 * v, 0) for v in (c["ci_low"], c["ci_high"]))
        assert any(f"[{lo}, {hi}]" in t for t in texts), (c["mitigation"], c["scenario"], lo, hi)


ANY_INTERVAL = re.compile(r"\[([+-]?\d+(?:\.\d+)?)%?, ([+-]?\d+(?:\.\d+)?)%?\]")


def _zero_width(folder) -> list[str]:
    """Every interval of width zero in the table CSVs of ``folder``: a bracketed ``[a, a]`` in any
    cell, or a ``... low``/``... high`` column pair with equal values in one row."""
    bad = []
    for f in sorted(folder.glob("*.csv")):
        t = pd.read_csv(f, dtype=str, keep_default_na=False)
        pairs = [(c, c.replace("low", "high")) for c in t.columns if "low" in c]
        pairs = [(lo, hi) for lo, hi in pairs if hi in t.columns and hi != lo]
        for i, r in t.iterrows():
            for c in t.columns:
                for m in ANY_INTERVAL.finditer(r[c]):
                    if float(m.group(1)) == float(m.group(2)):
                        bad.append(f"{f.name} row {i} {c}: {r[c]!r}")
            for lo, hi in pairs:
                try:
                    a, b = float(r[lo]), float(r[hi])
                except ValueError:
                    continue
                if a == b:
                    bad.append(f"{f.name} row {i} {lo}/{hi}: {a}")
    return bad


def _nbval_tables() -> list:
    import os
    from pathlib import Path

    folders = [paths.COMMITTED_ARTIFACTS / "out" / "nbval-artifacts"]
    if os.environ.get("LAYERLAB_ARTIFACTS"):
        folders.append(Path(os.environ["LAYERLAB_ARTIFACTS"]))
    return [f / "paper" / "tables" for f in folders if (f / "paper" / "tables").is_dir()]


def test_no_committed_table_prints_a_zero_width_interval() -> None:
    """No committed table (and no table the notebooks wrote under nbval, when present) prints an
    interval of width zero: a constant cell gets its score interval (issue 33 item 2)."""
    folders = [TABLES, *_nbval_tables()]
    assert len(list(TABLES.glob("*.csv"))) >= 20
    bad = [x for f in folders for x in _zero_width(f)]
    assert not bad, bad[:20]


def test_the_zero_width_check_finds_one(tmp_path) -> None:
    """The check above can fail: a table with "+100 [+100, +100]" or equal low and high."""
    pd.DataFrame({"cell": ["+100 [+100.0, +100.0]"], "x": ["1"]}).to_csv(tmp_path / "a.csv")
    pd.DataFrame({"95% low": ["0.5"], "95% high": ["0.5"]}).to_csv(tmp_path / "b.csv")
    assert len(_zero_width(tmp_path)) == 2

"""The real model's reliability surface in the paper: the table ``surface_models`` (one row per
faulted layer, safe resolution per λ, pass^k, the tolerance) and the section's macros
(layerlab/reporting/paper/surfacevalues.py) read from it and from the archive's manifest."""

from __future__ import annotations

import pandas as pd
import pytest

from layerlab import archive, paths
from layerlab.analysis import surface
from layerlab.analysis.records import records_frame
from layerlab.reporting.paper import surfacevalues, tables
from layerlab.reporting.paper.papervalues import ValuesError

RUN = paths.LOCAL_MODEL_SURFACE / "qwen2.5-coder-1.5b"


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return tables.REGISTRY["surface_models"].build(records_frame([RUN]))


def test_one_row_per_faulted_layer_each_from_the_clean_rate(table: pd.DataFrame) -> None:
    df = records_frame([RUN])
    faulted = sorted({s.split("@")[0] for s in df["scenario"]} - {"clean"})
    assert sorted(table["layer"].str.extract(r"\((.+)\)")[0]) == faulted
    assert {"transport (service_outage)", "transport (rate_limited)"} <= set(table["layer"])
    clean = df[df["scenario"] == "clean"]
    k, n = int(clean["safe_resolution"].sum()), len(clean)
    assert set(table["safe, λ = 0"].str.split(" ").str[0]) == {f"{k / n:.3f}"}  # λ = 0: clean
    assert list(table.columns[-5:]) == ["pass^2, λ = 0", "pass^2, λ = 1", "pass^4, λ = 0",
                                        "pass^4, λ = 1", "keeps 0.900"]  # fmt: skip
    # the outage ends every struck record before the reader: nothing safe at λ = 1
    outage = table[table["layer"] == "transport (service_outage)"].iloc[0]
    assert outage["safe, λ = 1"].startswith("0.000") and outage["records per λ"] == "64"
    assert "4 replicates" in table.attrs["caption"] and "Threshold 0.900" in table.attrs["caption"]


def test_the_tolerance_cell_says_how_far_and_whether_decided() -> None:
    from layerlab.reporting.paper.tables.surface import tolerance_cell

    curve = next(c for c in surface.load([RUN])["qwen2.5-coder-1.5b"] if c.scenario == "stale_index")
    assert tolerance_cell(surface.tolerance(curve, 0.9)) == "below at λ = 0 (decided)"
    assert tolerance_cell(surface.tolerance(curve, 0.3)) == "to λ = 0.25 by the estimates, decided at λ = 0"
    assert tolerance_cell(surface.tolerance(curve, 0.0)) == "to λ = 1 (decided)"


def test_the_section_s_values_come_from_the_table_and_the_manifest(table: pd.DataFrame) -> None:
    csv = table.astype(str)
    got = surfacevalues.values(csv, RUN)
    man = archive.read_manifest(RUN)
    (model,) = man["local_models"].values()
    assert got["SurfaceSha"] == model["file_sha256"][:16] and got["SurfaceTasks"] == "sixteen"
    assert got["SurfaceRecords"] == f"{man['records']:,}".replace(",", "{,}")
    assert got["SurfaceNeed"] == str(surface.least_to_decide(64, 0.9)) == "63"
    row = table[table["layer"] == "freshness (stale_index)"].iloc[0]
    assert got["SurfaceSafeStaleIndexHalf"] == row["safe, λ = 0.5"].split(" ")[0]
    assert got["SurfaceSafeZero"] + " [" + got["SurfaceSafeZeroLow"] in row["safe, λ = 0"]
    assert got["SurfaceDoses"] == "0, 0.1, 0.25, 0.5 and 1" and got["SurfaceKMax"] == "4"
    assert got["SurfaceBelow"] == got["SurfaceLayers"] == "six"


def test_a_table_the_prose_cannot_name_is_one_line(table: pd.DataFrame) -> None:
    odd = table.astype(str).rename(columns={"safe, λ = 0.25": "safe, λ = 0.3"})
    with pytest.raises(ValuesError, match=r"column 'safe, λ = 0.3' has no macro name"):
        surfacevalues.values(odd, RUN)
    split = table.astype(str)
    split.loc[0, "safe, λ = 0"] = "0.100 [0.000, 0.200]"
    with pytest.raises(ValuesError, match="differs between layers at λ = 0"):
        surfacevalues.values(split, RUN)

"""`layerlab recompute` on the committed archives, and refusal of bad archives."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from layerlab import paths
from layerlab.archive import SCHEMA_VERSION
from layerlab.cli import app

runner = CliRunner()
REF = paths.ARCHIVES / "reference_agents"


def test_recompute_reproduces_the_paper_structure(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["recompute", str(REF), "--out", str(tmp_path), "--n-boot", "2000", "--json"]
    )
    assert res.exit_code == 0, res.output
    head = json.loads(res.output)
    s = head["success"]
    assert s["schema_drift"]["strict"] == 0.0 and s["schema_drift"]["repair"] > 0.9
    for name in ("stale_index", "missing_tool_output", "permission_denied", "wrong_session"):
        assert s[name] == {"strict": 0.0, "repair": 0.0}
    gain = head["schema_drift_gain"]
    assert gain["ci95"][0] > 0.8
    m = head["specificity_margin"]
    assert (
        abs(m["largest_off_target_change"]) <= 0.02 and m["ci_low"] <= m["margin"] <= m["ci_high"]
    )
    assert set(head["exactly_zero"]) >= {
        "stale_index",
        "missing_tool_output",
        "permission_denied",
        "wrong_session",
    }
    for n in (
        "table4",
        "table5",
        "table8",
        "table9",
        "table5_crosscheck",
        "specificity_margin",
        "paper_comparison",
    ):
        for x in ("csv", "md", "tex"):
            assert (tmp_path / f"{n}.{x}").stat().st_size > 0
    comp = (tmp_path / "paper_comparison.md").read_text()
    assert "0.913" in comp and "not provider models" in comp
    # two reference agents: tasks-only intervals, said so; crossed and nested shown beside them
    assert head["design"] == "tasks" and "these units" in head["note"]
    assert set(head["schema_drift_gain"]["by_design"]) == {"crossed", "nested", "tasks"}
    assert "gain 95% interval, nested" in comp and "not reported: fewer than 5 units" in comp
    assert "describes these units" in (tmp_path / "table4.md").read_text()
    assert "margin (pp)" in (tmp_path / "specificity_margin.md").read_text()
    # the same seed gives the same bytes
    runner.invoke(
        app, ["recompute", str(REF), "--out", str(tmp_path / "again"), "--n-boot", "2000"]
    )
    assert (tmp_path / "table5.csv").read_bytes() == (
        tmp_path / "again" / "table5.csv"
    ).read_bytes()


def _bad(tmp_path: Path, name: str, table: pa.Table) -> Path:
    p = tmp_path / name
    pq.write_table(table, p)
    return p


def test_bad_archives_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    good = pq.read_table(REF / "records.parquet")
    out = tmp_path / "out"
    i = good.schema.get_field_index("success")
    v = good.schema.get_field_index("schema_version")
    cases = {
        "missing.parquet": (good.drop_columns(["success"]), "missing columns ['success']"),
        "types.parquet": (
            good.set_column(i, "success", pa.array([1] * good.num_rows, pa.int64())),
            "has type int64",
        ),
        "dups.parquet": (
            pa.concat_tables([good.slice(0, 10), good.slice(0, 10)]),
            "duplicate record key",
        ),
    }
    for name, (table, msg) in cases.items():
        res = runner.invoke(app, ["recompute", str(_bad(tmp_path, name, table)), "--out", str(out)])
        assert res.exit_code == 1 and msg in res.output and "nothing written" in res.output, (
            name,
            res.output,
        )
        assert not out.exists()
    newer = good.set_column(
        v,
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.array([SCHEMA_VERSION + 1] * good.num_rows, pa.int16()),
    )
    res = runner.invoke(
        app, ["recompute", str(REF), str(_bad(tmp_path, "vnext.parquet", newer)), "--out", str(out)]
    )
    assert res.exit_code == 1 and f"schema_version [{SCHEMA_VERSION + 1}]" in res.output
    assert not out.exists()

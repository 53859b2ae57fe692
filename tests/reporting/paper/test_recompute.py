"""`layerlab recompute` on the committed archives, and refusal of bad archives."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.analysis import stats
from layerlab.archive import SCHEMA_VERSION
from layerlab.cli import app

runner = CliRunner()
REF = paths.ARCHIVES / "reference_agents"


def test_recompute_reproduces_the_paper_structure(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["recompute", str(REF), "--out", str(tmp_path), "--n-boot", "2000", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert list(out["blocks"]) == [stats.BLOCK_REFERENCE]  # reference agents only: one block
    head = out["blocks"][stats.BLOCK_REFERENCE]
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
    assert "0.913" in comp and stats.BLOCK_REFERENCE in comp
    # two reference agents: tasks-only intervals, said so; crossed and nested shown beside them
    assert head["design"] == "tasks" and "these units" in head["note"]
    assert set(head["schema_drift_gain"]["by_design"]) == {"crossed", "nested", "tasks"}
    assert "gain 95% interval, nested" in comp and "not reported: < 5 units" in comp
    assert "describes these units" in (tmp_path / "table4.md").read_text()
    assert "margin (pp)" in (tmp_path / "specificity_margin.md").read_text()
    # the same seed gives the same bytes
    runner.invoke(
        app, ["recompute", str(REF), "--out", str(tmp_path / "again"), "--n-boot", "2000"]
    )
    assert (tmp_path / "table5.csv").read_bytes() == (
        tmp_path / "again" / "table5.csv"
    ).read_bytes()


def test_real_models_and_reference_agents_are_separate_blocks_never_pooled(tmp_path: Path) -> None:
    """Tables 4, 5, 8, 9, the margin and the paper comparison carry real models as their own
    block; each block's numbers equal those computed on its archive alone."""
    import pandas as pd

    model = paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b"
    res = runner.invoke(
        app, ["recompute", str(model), str(REF), "--out", str(tmp_path), "--n-boot", "500",
              "--no-matrix", "--json"],
    )
    assert res.exit_code == 0, res.output
    both = json.loads(res.output)["blocks"]
    assert list(both) == [stats.BLOCK_MODELS, stats.BLOCK_REFERENCE]
    assert both[stats.BLOCK_MODELS]["units"] == ["local/qwen2.5-coder-1.5b"]
    assert both[stats.BLOCK_REFERENCE]["units"] == ["layerlab/cautious", "layerlab/extractive"]
    alone = runner.invoke(
        app, ["recompute", str(model), "--out", str(tmp_path / "alone"), "--n-boot", "500",
              "--no-matrix", "--json"],
    )
    assert json.loads(alone.output)["blocks"][stats.BLOCK_MODELS] == both[stats.BLOCK_MODELS]
    for name in ("table4", "table5", "table8", "table9", "specificity_margin"):
        t = pd.read_csv(tmp_path / f"{name}.csv")
        assert t.columns[0] == "block", name
        assert set(t["block"]) <= {stats.BLOCK_MODELS, stats.BLOCK_REFERENCE}, name
    t4 = pd.read_csv(tmp_path / "table4.csv")
    assert set(t4["block"]) == {stats.BLOCK_MODELS, stats.BLOCK_REFERENCE}
    t9 = pd.read_csv(tmp_path / "table9.csv").set_index("block")
    assert t9.loc[stats.BLOCK_MODELS, "records"] == 1440  # the model's records only
    comp = pd.read_csv(tmp_path / "paper_comparison.csv").set_index("figure")
    assert comp.loc["live records", stats.BLOCK_MODELS] == "1440"
    assert comp.loc["live records", stats.BLOCK_REFERENCE] == "8640"
    caption = (tmp_path / "table4.md").read_text()
    assert "Real models: local/qwen2.5-coder-1.5b" in caption and "Reference agents" in caption
    assert "greedy (temperature 0), reply schema 2, 1 replicate" in caption  # how it was drawn
    # the thesis on safe behaviour: the reference agents' off-target effects are exactly zero by
    # construction; the greedy real model's are exactly zero wherever its prompts are
    # byte-identical (one reply per prompt) and measured where the arm changes the prompt
    safe = pd.read_csv(tmp_path / "table5_safe.csv")
    ref = safe[safe["block"] == stats.BLOCK_REFERENCE].set_index("scenario")
    assert ref.drop(index="schema_drift")["exactly zero"].all()
    real = safe[safe["block"] == stats.BLOCK_MODELS].set_index("scenario")
    assert not real.loc["schema_drift", "exactly zero"]
    same = real["identical inputs"].str.split("/", expand=True).astype(int)
    identical = same[0].eq(same[1]) & same[1].gt(0)
    assert identical.any() and real.loc[identical, "exactly zero"].all()


def _bad(tmp_path: Path, name: str, table: pa.Table) -> Path:
    p = tmp_path / name
    pq.write_table(table, p)
    return p


def test_bad_archives_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    good = archive.read_table(REF / "records.parquet")  # in the current schema
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

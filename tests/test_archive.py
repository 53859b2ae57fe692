"""Archives: allowlisted columns, typed, key-unique, checked on write and read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from layerlab.archive import (
    SCHEMA_VERSION,
    ArchiveError,
    Record,
    read_records,
    to_table,
    write_records,
)


def _rec(**over: object) -> Record:
    base = dict(
        schema_version=SCHEMA_VERSION,
        run_id="r",
        provider="p",
        model="m",
        scenario="clean",
        mitigation="strict",
        task_id="t-01-q1",
        replicate=0,
        policy_id="t-01",
        variant=1,
        stage="reader",
        reached_reader=True,
        success=True,
        exact_match=True,
        retrieval_ok=True,
        citation_ok=True,
        schema_ok=True,
        grounded=True,
        grounded_false_positive=False,
        abstained=False,
        answered=True,
        safe_resolution=True,
        diagnostic="ok",
        prompt_hash="ab" * 32,
    )
    base.update(over)
    return Record(**base)  # type: ignore[arg-type]


def test_roundtrip(tmp_path: Path) -> None:
    recs = [_rec(task_id=f"t-01-q{i}") for i in (3, 1, 2)]
    write_records(tmp_path / "a.parquet", recs)
    back = read_records(tmp_path / "a.parquet")
    assert [r.task_id for r in back] == ["t-01-q1", "t-01-q2", "t-01-q3"]
    assert back[0] == dataclasses.replace(recs[1])


def test_duplicate_keys_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="duplicate record key"):
        write_records(tmp_path / "a.parquet", [_rec(), _rec()])
    assert not (tmp_path / "a.parquet").exists()


def test_extra_column_is_refused_on_read(tmp_path: Path) -> None:
    table = to_table([_rec()]).append_column("answer_text", pa.array(["90 days"]))
    pq.write_table(table, tmp_path / "x.parquet")
    with pytest.raises(ArchiveError, match=r"outside the archive allowlist: \['answer_text'\]"):
        read_records(tmp_path / "x.parquet")


def test_missing_column_wrong_type_and_garbage(tmp_path: Path) -> None:
    table = to_table([_rec()])
    pq.write_table(table.drop_columns(["grounded"]), tmp_path / "m.parquet")
    with pytest.raises(ArchiveError, match=r"missing columns \['grounded'\]"):
        read_records(tmp_path / "m.parquet")
    i = table.schema.get_field_index("success")
    pq.write_table(
        table.set_column(i, "success", pa.array([1], pa.int64())), tmp_path / "t.parquet"
    )
    with pytest.raises(ArchiveError, match="column 'success' has type int64, expected bool"):
        read_records(tmp_path / "t.parquet")
    (tmp_path / "g.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(ArchiveError, match="not a readable Parquet archive"):
        read_records(tmp_path / "g.parquet")


def test_foreign_schema_version(tmp_path: Path) -> None:
    write_records(tmp_path / "a.parquet", [_rec()])
    table = pq.read_table(tmp_path / "a.parquet")
    i = table.schema.get_field_index("schema_version")
    table = table.set_column(
        i, pa.field("schema_version", pa.int16(), nullable=False), pa.array([99], pa.int16())
    )
    pq.write_table(table, tmp_path / "v.parquet")
    with pytest.raises(ArchiveError, match=r"schema_version \[99\] found"):
        read_records(tmp_path / "v.parquet")


def test_replicates_are_distinct_records(tmp_path: Path) -> None:
    write_records(tmp_path / "a.parquet", [_rec(replicate=1), _rec(replicate=0)])
    assert [r.replicate for r in read_records(tmp_path / "a.parquet")] == [0, 1]


def test_version_1_archives_still_read(tmp_path: Path) -> None:
    """A v1 archive (``contract_mode``, no ``replicate``) reads as v2: renamed, replicate 0."""
    table = to_table([_rec(mitigation="repair"), _rec()]).drop_columns(["replicate"])
    names = ["contract_mode" if n == "mitigation" else n for n in table.column_names]
    table = table.rename_columns(names)
    i = table.schema.get_field_index("schema_version")
    table = table.set_column(i, "schema_version", pa.array([1, 1], pa.int16()))
    pq.write_table(table, tmp_path / "v1.parquet")
    back = read_records(tmp_path / "v1.parquet")
    assert [(r.mitigation, r.replicate, r.schema_version) for r in back] == [
        ("repair", 0, SCHEMA_VERSION),
        ("strict", 0, SCHEMA_VERSION),
    ]
    # a v2 archive that still carries the old column name is not silently accepted
    bad = to_table([_rec()]).append_column("contract_mode", pa.array(["strict"]))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(ArchiveError, match="contract_mode"):
        read_records(tmp_path / "bad.parquet")

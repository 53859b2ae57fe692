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
        answerable=True,
        mitigation="strict",
        task_id="t-01-q1",
        replicate=0,
        domain="t",
        policy_id="t-01",
        variant=1,
        stage="reader",
        reached_reader=True,
        success=True,
        exact_match=True,
        contained=True,
        token_f1=1.0,
        retrieval_ok=True,
        citation_ok=True,
        schema_ok=True,
        grounded=True,
        grounded_cited=True,
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
    """A v1 archive (``contract_mode``, no ``replicate``) reads as current: renamed, replicate 0."""
    table = to_table([_rec(mitigation="repair"), _rec()]).drop_columns(
        ["replicate", "domain", "answerable", "grounded_cited", "contained", "token_f1"]
    )
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


# --- schema 3: domain, answerable, nulls; migration ---------------------------------------------

V2_COLUMNS = [
    "schema_version", "run_id", "provider", "model", "scenario", "mitigation", "task_id",
    "replicate", "policy_id", "variant", "stage", "reached_reader", "success", "exact_match",
    "retrieval_ok", "citation_ok", "schema_ok", "grounded", "grounded_false_positive",
    "abstained", "answered", "safe_resolution", "diagnostic", "prompt_hash",
]  # fmt: skip


def as_v3(table: pa.Table) -> pa.Table:
    """A current record table as the schema-3 writer wrote it: ``grounded`` is the cited-only
    definition (today's ``grounded_cited``), GF follows it, no contained or token_f1."""
    cited = table.column("grounded_cited")
    gf = pa.array([c and not s for c, s in zip(cited.to_pylist(), table.column("success").to_pylist(), strict=True)])
    table = table.set_column(table.schema.get_field_index("grounded"), "grounded", cited)
    table = table.set_column(table.schema.get_field_index("grounded_false_positive"), "grounded_false_positive", gf)
    table = table.drop_columns(["grounded_cited", "contained", "token_f1"])
    i = table.schema.get_field_index("schema_version")
    table = table.set_column(i, "schema_version", pa.array([3] * table.num_rows, pa.int16()))
    return table.cast(
        pa.schema(
            [pa.field(f.name, f.type, nullable=f.name == "prompt_hash") for f in table.schema],
            metadata={b"layerlab.archive.schema_version": b"3"},
        )
    )


def as_migrated(records: list[Record]) -> list[Record]:
    """What a migration from schema 3 can know of ``records``: the labels the old ones
    determine, the rest null (not recorded)."""
    from layerlab.archive import v4_labels

    out = []
    for r in records:
        old = {**dataclasses.asdict(r), "grounded": r.grounded_cited}
        out.append(dataclasses.replace(r, **v4_labels(old)))
    return out


def as_v2(table: pa.Table) -> pa.Table:
    """A current record table as the schema-2 writer wrote it: no domain or answerable,
    ``""`` for a missing prompt hash, every column non-null (and schema 3's labels)."""
    table = as_v3(table)
    ph = ["" if h is None else h for h in table.column("prompt_hash").to_pylist()]
    table = table.set_column(table.schema.get_field_index("prompt_hash"), "prompt_hash", pa.array(ph))
    i = table.schema.get_field_index("schema_version")
    table = table.set_column(i, "schema_version", pa.array([2] * table.num_rows, pa.int16()))
    schema = pa.schema(
        [pa.field(n, table.schema.field(n).type, nullable=False) for n in V2_COLUMNS],
        metadata={b"layerlab.archive.schema_version": b"2"},
    )
    return table.select(V2_COLUMNS).cast(schema)


@pytest.fixture(scope="module")
def small_run(corpus, key) -> list[Record]:  # type: ignore[no-untyped-def]
    """Deterministic records over an answerable and an unsafe scenario, both contract arms."""
    from layerlab import harness
    from layerlab.scenario import load_scenarios

    scen = {k: v for k, v in load_scenarios().items() if k in ("clean", "permission_denied", "stale_index")}
    return harness.run_deterministic(corpus, key, scen, run_id="deterministic")


def test_records_carry_domain_answerable_and_null_prompt_hash(small_run: list[Record]) -> None:
    assert {(r.scenario, r.answerable) for r in small_run} == {
        ("clean", True), ("permission_denied", False), ("stale_index", False),
    }  # fmt: skip
    assert all(r.domain == r.policy_id.rsplit("-", 1)[0] for r in small_run)
    assert all((r.prompt_hash is None) == (not r.reached_reader) for r in small_run)
    assert any(r.prompt_hash is None for r in small_run)


def test_placeholders_and_inconsistent_derived_columns_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="prompt_hash"):
        write_records(tmp_path / "a.parquet", [_rec(prompt_hash="")])
    with pytest.raises(ArchiveError, match="null exactly where reached_reader"):
        write_records(tmp_path / "a.parquet", [_rec(prompt_hash=None)])
    with pytest.raises(ArchiveError, match="'domain' holds 'hr' for policy 't-01'"):
        write_records(tmp_path / "a.parquet", [_rec(domain="hr")])
    assert not (tmp_path / "a.parquet").exists()


def _v2_run_folder(folder: Path, records: list[Record]) -> dict[str, object]:
    from layerlab._io import sha256_file
    from layerlab.archive import write_manifest

    folder.mkdir()
    pq.write_table(as_v2(to_table(records)), folder / "records.parquet", compression="zstd", write_statistics=False)
    return write_manifest(
        folder,
        {
            "run_id": "deterministic",
            "kind": "deterministic",
            "provenance": {"corpus": "c", "scenarios": "s"},
            "archive_schema_version": 2,
            "records": len(records),
            "complete": True,
            "files": {"records.parquet": sha256_file(folder / "records.parquet")},
        },
    )


def test_a_migrated_v2_run_equals_a_fresh_write_and_keeps_its_provenance(
    tmp_path: Path, small_run: list[Record]
) -> None:
    import json

    from layerlab.archive import check_path, migrate, read_manifest

    before = _v2_run_folder(tmp_path / "run", small_run)
    # a v2 archive still reads (upgraded in memory) before it is migrated
    known = as_migrated(small_run)
    assert read_records(tmp_path / "run" / "records.parquet") == sorted(
        known, key=lambda r: (r.provider, r.model, r.scenario, r.mitigation, r.task_id, r.replicate)
    )
    rep = migrate(tmp_path / "run")
    assert (rep["from"], rep["to"], rep["changed"]) == (2, SCHEMA_VERSION, True)
    write_records(tmp_path / "fresh.parquet", known)
    assert (tmp_path / "run" / "records.parquet").read_bytes() == (tmp_path / "fresh.parquet").read_bytes()
    m = read_manifest(tmp_path / "run")
    assert m["provenance"] == before["provenance"] and m["archive_schema_version"] == SCHEMA_VERSION
    (step,) = m["migrations"]
    assert step["from_schema_version"] == 2 and step["previous_sha256"] == before["files"]["records.parquet"]  # type: ignore[index]
    assert check_path(tmp_path / "run")["records"] == len(small_run)
    # migrating again changes nothing
    text = (tmp_path / "run" / "manifest.json").read_text()
    assert migrate(tmp_path / "run")["changed"] is False
    assert (tmp_path / "run" / "manifest.json").read_text() == text
    assert json.loads(text)["files"]["records.parquet"] != before["files"]["records.parquet"]  # type: ignore[index]


def test_migration_refuses_a_scenario_spec_that_contradicts_the_labels(
    tmp_path: Path, small_run: list[Record]
) -> None:
    from layerlab.archive import migrate

    _v2_run_folder(tmp_path / "run", small_run)
    spec = (Path(__file__).parent.parent / "data" / "specs" / "scenarios.yaml").read_text()
    # clean judged unsafe: its correct answers would not be safe resolutions, yet they were scored so
    flipped = spec.replace(
        "expected_behaviour: answer from the current policy\n    answerable: true",
        "expected_behaviour: answer from the current policy\n    answerable: false",
    )
    assert flipped != spec
    (tmp_path / "flipped.yaml").write_text(flipped)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(ArchiveError, match="scenario 'clean': the scenario spec says unsafe"):
        migrate(tmp_path / "run", tmp_path / "flipped.yaml")
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before


def test_archive_migrate_command(tmp_path: Path, small_run: list[Record]) -> None:
    from typer.testing import CliRunner

    from layerlab.cli import app

    _v2_run_folder(tmp_path / "run", small_run)
    res = CliRunner().invoke(app, ["archive", "migrate", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert f"migrated {tmp_path / 'run'}: schema 2 -> {SCHEMA_VERSION}" in res.output
    res = CliRunner().invoke(app, ["archive", "migrate", str(tmp_path / "nope")])
    assert res.exit_code == 1 and "does not exist" in res.output

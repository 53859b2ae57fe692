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
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import deterministic as harness

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
    spec = (Path(__file__).parents[2] / "data" / "specs" / "scenarios.yaml").read_text()
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


# --- schema 4: grounded in delivered documents, answer measures; migration from schema 3 ---------


def test_a_committed_schema_3_archive_migrates_to_schema_4(tmp_path: Path) -> None:
    """A real-model archive as committed under schema 3 (SmolLM2's, kept as a fixture: the
    committed copy is now retired and migrated): grounded_cited is the old grounded; the new grounded,
    GF, contained and token_f1 are derived where the old labels determine them and null (not
    recorded) elsewhere; the manifest keeps its provenance and gains the step."""
    import shutil

    from layerlab.analysis import results
    from layerlab.archive import check_path, migrate, read_manifest
    from layerlab.reporting.format import cells

    run = Path(shutil.copytree(Path(__file__).parents[1] / "fixtures" / "schema3_smollm2", tmp_path / "smol"))
    old = pq.read_table(run / "records.parquet").to_pylist()
    assert {r["schema_version"] for r in old} == {3}
    before = read_manifest(run)
    rep = migrate(run)
    assert (rep["from"], rep["to"], rep["changed"]) == (3, SCHEMA_VERSION, True)
    new = {(r.scenario, r.mitigation, r.task_id, r.replicate): r for r in read_records(run / "records.parquet")}
    assert len(new) == len(old)
    nulls = 0
    for o in old:
        r = new[(o["scenario"], o["mitigation"], o["task_id"], o["replicate"])]
        assert r.schema_version == SCHEMA_VERSION and r.grounded_cited == o["grounded"]
        assert (r.success, r.exact_match, r.diagnostic) == (o["success"], o["exact_match"], o["diagnostic"])
        if not o["answered"]:
            assert (r.grounded, r.grounded_false_positive, r.contained, r.token_f1) == (False, False, False, 0.0)
        elif o["exact_match"]:
            assert r.contained is True and r.token_f1 == 1.0
        elif o["grounded"]:
            assert r.grounded is True and r.grounded_false_positive == (not o["success"])
        else:  # answered, not grounded in a cited document, not exact: needs the reply text
            assert r.grounded is None and r.contained is None and r.token_f1 is None
            assert r.grounded_false_positive is (False if o["success"] else None)
            nulls += 1
    assert nulls > 0  # this model answered without citing what it repeated
    m = read_manifest(run)
    assert m["provenance"] == before["provenance"] and m["archive_schema_version"] == SCHEMA_VERSION
    assert [s["to_schema_version"] for s in m["migrations"]] == [3, SCHEMA_VERSION]
    assert "grounded_cited" in m["migrations"][-1]["changes"]
    assert check_path(run)["complete"] is True
    assert migrate(run)["changed"] is False
    # results say what was not recorded rather than imputing it; the cited-only GF stays
    res = results.for_run(run)
    (model,) = res["models"]
    strict = model["arms"]["strict"]
    assert strict["GF"]["rate"] is None and strict["GF"]["not_recorded"] > 0
    assert strict["GF_cited"]["rate"] == 0.0 and "not_recorded" not in strict["GF_cited"]
    assert strict["answer_quality"]["answered"] > 0 and strict["answer_quality"]["token_f1"] is None
    assert "not recorded" in cells.results_table(res).iloc[0]["GF"]


def test_the_committed_study_archive_migrates_to_version_3(tmp_path: Path) -> None:
    """The study archive as committed under version 2 (kept as a fixture; `make archives` now
    writes version 3)."""
    import shutil

    from layerlab.archive import STUDY_SCHEMA_VERSION, migrate, read_study

    run = Path(shutil.copytree(Path(__file__).parents[1] / "fixtures" / "study_v2", tmp_path / "study"))
    old = {(r["scenario"], r["mitigation"], r["task_id"]): r for r in pq.read_table(run / "study.parquet").to_pylist()}
    rep = migrate(run)
    assert (rep["from"], rep["to"], rep["changed"]) == (2, STUDY_SCHEMA_VERSION, True)
    for r in read_study(run):
        o = old[(r["scenario"], r["mitigation"], r["task_id"])]
        assert r["grounded_cited"] == o["grounded"] and r["success"] == o["success"]
        if o["success"]:
            assert r["exact_match"] is True and r["contained"] is True and r["token_f1"] == 1.0
        if not o["answered"]:
            assert (r["exact_match"], r["grounded"], r["token_f1"]) == (False, False, 0.0)


def test_inconsistent_groundedness_labels_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="GF = grounded and not S"):
        write_records(tmp_path / "a.parquet", [_rec(success=False, grounded=True, grounded_false_positive=False)])
    with pytest.raises(ArchiveError, match="grounded_cited but not grounded"):
        write_records(tmp_path / "a.parquet", [_rec(grounded=False, grounded_cited=True)])
    with pytest.raises(ArchiveError, match="token_f1"):
        write_records(tmp_path / "a.parquet", [_rec(token_f1=1.5)])
    assert not (tmp_path / "a.parquet").exists()
    # null = not recorded is allowed (a migrated archive), and GF may then be unknown too
    write_records(tmp_path / "a.parquet", [_rec(success=False, grounded=None, grounded_false_positive=None, contained=None, token_f1=None)])
    (back,) = read_records(tmp_path / "a.parquet")
    assert back.grounded is None and back.token_f1 is None


def test_results_json_carries_the_answer_measures_and_both_gf(tmp_path: Path, small_run: list[Record]) -> None:
    import json

    from layerlab.analysis import results
    from layerlab.archive import write_run
    from layerlab.reporting.format import cells

    write_run(tmp_path / "run", small_run, {"run_id": "deterministic", "kind": "deterministic", "complete": True})
    res = results.write_results(tmp_path / "run")
    on_disk = json.loads((tmp_path / "run" / "results.json").read_text())
    assert on_disk["results_version"] == results.RESULTS_VERSION == 4
    (model,) = on_disk["models"]
    for arm, cell in model["arms"].items():
        recs = [r for r in small_run if r.mitigation == arm]
        answered = [r for r in recs if r.answered]
        a = cell["answer_quality"]
        assert a["answered"] == len(answered)
        assert a["exact_match"]["k"] == sum(r.exact_match for r in answered)
        assert a["contained"]["k"] == sum(bool(r.contained) for r in answered)
        assert a["extra_words"]["k"] == sum(bool(r.contained) and not r.exact_match for r in answered)
        assert a["token_f1"] == round(sum(r.token_f1 or 0.0 for r in answered) / len(answered), 4)
        assert cell["GF"]["k"] == sum(bool(r.grounded_false_positive) for r in recs)
        assert cell["GF_cited"]["k"] == sum(r.grounded_cited and not r.success for r in recs)
    for per in model["by_scenario"].values():
        assert all({"S", "safe", "GF", "GF_cited"} <= set(c) for c in per.values())
    assert "E|contained|F1 (answered)" in cells.results_table(res).columns


def test_answer_quality_table(small_run: list[Record]) -> None:
    import pandas as pd

    from layerlab.reporting.paper.tables import table_answer_quality

    df = pd.DataFrame([r.__dict__ for r in small_run])
    t = table_answer_quality(df)
    assert {"block", "scenario", "mitigation", "answered", "E", "contained", "extra words", "mean token F1"} <= set(t.columns)
    assert len(t) == df.groupby(["scenario", "mitigation"]).ngroups
    clean = t[(t["scenario"] == "clean") & (t["mitigation"] == "strict")].iloc[0]
    ans = df[(df["scenario"] == "clean") & (df["mitigation"] == "strict") & df["answered"]]
    assert clean["answered"] == len(ans) and clean["E"] == round(ans["exact_match"].mean(), 4)
    assert clean["contained"] >= clean["E"]  # an exact match is contained
    assert "token F1" in t.attrs["caption"] and "S uses, unchanged" in t.attrs["caption"]

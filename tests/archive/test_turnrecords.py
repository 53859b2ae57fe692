"""The conversational archive's turn rows: written sorted, read back checked."""

from __future__ import annotations

import json

import pytest

from layerlab.archive import turnrecords as turns


def _rec(turn: int = 0, **kw) -> turns.TurnRecord:
    base = dict(schema_version=turns.TURN_SCHEMA_VERSION, provider="layerlab",
                model="layerlab/extractive", scenario="conversation_clean", answerable=True,
                conversation_id="finance-01-c1", policy_id="finance-01", domain="finance",
                epoch=0, turn=turn, kind="opening", category="answered", struck=False,
                history_messages=0, memory_entries=0, searches=1, cache_hits=0, success=True,
                exact_match=True, retrieval_ok=True, citation_ok=True, schema_ok=True,
                grounded=True, grounded_false_positive=False, answered=True, abstained=False,
                clarified=False, safe_resolution=True, leak=False, diagnostic="ok")  # fmt: skip
    return turns.TurnRecord(**{**base, **kw})


def test_rows_round_trip_sorted_and_hold_no_prose(tmp_path) -> None:
    recs = [_rec(2), _rec(0), _rec(1)]
    path = turns.write(recs, tmp_path)
    back = turns.read(tmp_path)
    assert [r.turn for r in back] == [0, 1, 2]
    assert set(json.loads(path.read_text().splitlines()[0])) == set(turns.COLUMNS)
    assert not {"answer", "citations", "text", "question"} & set(turns.COLUMNS)


@pytest.mark.parametrize("change, problem", [
    ({"leak": "no"}, "field 'leak' expected bool"),
    ({"turn": True}, "field 'turn' expected int"),
    ({"answer": "$5"}, "field 'answer' is not in the turn schema"),
    ({"schema_version": 9}, "schema_version 9"),
])  # fmt: skip
def test_a_bad_row_is_one_line_naming_the_field(tmp_path, change, problem) -> None:
    row = {**turns.row(_rec()), **change}
    (tmp_path / turns.FILE).write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=problem):
        turns.read(tmp_path)


def test_a_missing_file_says_how_to_write_it(tmp_path) -> None:
    with pytest.raises(ValueError, match="layerlab run conversations"):
        turns.read(tmp_path)


def _run_folder(tmp_path, recs):
    """A conversational run folder as ``run conversations`` writes it (its manifest's checksums)."""
    from layerlab.harness.conversation import write_run

    write_run(tmp_path / "run", recs, {"systems": ["layerlab/extractive"]})
    return tmp_path / "run"


def test_pack_keeps_the_runs_rows_as_parquet_with_deterministic_bytes(tmp_path) -> None:
    recs = [_rec(1, success=False, safe_resolution=False, diagnostic="freshness"), _rec(0)]
    run = _run_folder(tmp_path, recs)
    a = turns.pack(run, tmp_path / "a")
    b = turns.pack(run, tmp_path / "b")
    assert sorted(p.name for p in a.iterdir()) == sorted(turns.PACKED_FILES)
    assert (a / turns.PARQUET).read_bytes() == (b / turns.PARQUET).read_bytes()
    assert turns.read(a) == turns.read(run) == turns.check_packed(a)
    assert turns.jsonl_sha256(turns.read(a)) == json.loads((a / "manifest.json").read_text())[
        "files"][turns.FILE]  # fmt: skip


def test_a_packed_archive_whose_rows_or_summary_moved_is_refused(tmp_path) -> None:
    run = _run_folder(tmp_path, [_rec(0), _rec(1)])
    packed = turns.pack(run, tmp_path / "a")
    other = _run_folder(tmp_path / "x", [_rec(0)])
    (packed / turns.PARQUET).write_bytes(turns.pack(other, tmp_path / "b").joinpath(
        turns.PARQUET).read_bytes())  # fmt: skip
    with pytest.raises(ValueError, match="not the run's turns.jsonl"):
        turns.check_packed(packed)
    packed = turns.pack(run, tmp_path / "c")
    (packed / "summary.json").write_text("{}\n")
    with pytest.raises(ValueError, match="summary.json: not the run's"):
        turns.check_packed(packed)


def test_the_arm_is_kept_and_a_schema_1_row_reads_as_the_baseline(tmp_path) -> None:
    recs = [_rec(0, mitigation="update_invalidation"), _rec(0)]
    turns.write(recs, tmp_path)
    back = turns.read(tmp_path)
    assert [r.mitigation for r in back] == ["none", "update_invalidation"]  # sorted by arm
    old = {k: v for k, v in turns.row(_rec()).items() if k != "mitigation"}
    (tmp_path / turns.FILE).write_text(json.dumps({**old, "schema_version": 1}) + "\n")
    (r,) = turns.read(tmp_path)
    assert r.mitigation == "none" and r.schema_version == 1
    (tmp_path / turns.FILE).write_text(json.dumps({**old, "schema_version": 2}) + "\n")
    with pytest.raises(ValueError, match="field 'mitigation' missing"):
        turns.read(tmp_path)

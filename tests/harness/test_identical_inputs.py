"""Identical inputs, not identical requests: the column Table 5 prints compares what the reader or
system saw between the two arms (a model's prompt; a target's or agent's tool observations, in
order), and an archive that never recorded it says so instead of claiming a false match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from layerlab import archive, paths
from layerlab._io import canonical_json, sha256_file
from layerlab.analysis import stats
from layerlab.archive import agenttable
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.agent import AgentLoop
from layerlab.harness.live import agentlog
from layerlab.harness.prepare import prepare
from layerlab.reporting.paper.tables import effects

FIXTURES = Path(__file__).parents[1] / "fixtures"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")
SCENARIOS = ("clean", "schema_drift", "missing_tool_output")


@pytest.fixture(scope="module")
def target_run(corpus, key, tmp_path_factory) -> Path:
    """A Python target (the extractive fixture) on three scenarios, strict and repair."""
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(FIXTURES))
    tmp = tmp_path_factory.mktemp("inputs")
    scen = {s: v for s, v in load_scenarios().items() if s in SCENARIOS}
    cfg = live.LiveConfig(models=(), scenarios=SCENARIOS, task_ids=TASKS,
                          target="python:user_targets:extractive")  # fmt: skip
    r = live.run_live(corpus, key, scen, cfg, tmp / "run", cache_dir=tmp / "cache",
                      scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    mp.undo()
    assert r.complete
    return tmp / "run"


def test_a_target_s_inputs_are_its_observations_not_its_request(target_run: Path) -> None:
    df = stats.records_frame([target_run])
    same = stats.identical_inputs(df)
    # clean: both arms deliver the same observations; schema drift: strict delivers the
    # contract's rejection, repair the repaired results, so no pair saw the same input
    assert same["clean"] == stats.SameInputs(len(TASKS), len(TASKS))
    assert same["schema_drift"] == stats.SameInputs(0, len(TASKS))
    # the record's prompt_hash hashes the request (target, question, session): identical in
    # both arms everywhere, which is why it cannot be the column
    pairs = stats.arm_pairs(df)
    assert (pairs["prompt_hash_a"] == pairs["prompt_hash_b"]).all()
    rows = agentlog.read_table(target_run, target=True)
    assert all(len(r[agenttable.INPUT_HASH]) == 64 for r in rows)
    assert archive.check_path(target_run)["records"] == len(df)


def test_the_table_prints_identical_inputs(target_run: Path) -> None:
    df = stats.records_frame([target_run])
    t = effects.table5_block(df, stats.analyse(df, n_boot=200, seed=0)[stats.BLOCK_TARGETS].eff)
    col = dict(zip(t["scenario"], t[effects.IDENTICAL], strict=True))
    assert col["clean"] == f"{len(TASKS)}/{len(TASKS)}" and col["schema_drift"] == f"0/{len(TASKS)}"


def _rewrite(folder: Path, table: pa.Table) -> None:
    """Replace a run's target table and name its checksum in the manifest, as a run does."""
    import json

    pq.write_table(table, folder / agenttable.TARGET_TABLE)
    m = json.loads((folder / archive.MANIFEST).read_text())
    m["target"]["table_sha256"] = sha256_file(folder / agenttable.TARGET_TABLE)
    archive.write_manifest(folder, m)


@pytest.fixture()
def copy_of(target_run: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(target_run, tmp_path / "run")
    return tmp_path / "run"


def test_a_table_without_inputs_reads_not_recorded(copy_of: Path) -> None:
    """A table written before the column (every committed target and agent archive): valid,
    and the column says "not recorded" rather than a match nobody measured."""
    t = pq.read_table(copy_of / agenttable.TARGET_TABLE)
    _rewrite(copy_of, t.drop_columns([agenttable.INPUT_HASH]))
    archive.check_path(copy_of)
    same = stats.identical_inputs(stats.records_frame([copy_of]))
    assert str(same["clean"]) == "not recorded" and same["clean"].not_recorded == len(TASKS)


def test_a_resumed_row_without_inputs_is_null_and_counted_apart(copy_of: Path) -> None:
    t = pq.read_table(copy_of / agenttable.TARGET_TABLE)
    hashes = t.column(agenttable.INPUT_HASH).to_pylist()
    hashes[0] = None  # a row carried over from a log written before the column
    i = t.schema.get_field_index(agenttable.INPUT_HASH)
    _rewrite(copy_of, t.set_column(i, t.schema.field(i), pa.array(hashes, pa.string())))
    archive.check_path(copy_of)
    same = stats.identical_inputs(stats.records_frame([copy_of]))
    assert sum(s.not_recorded for s in same.values()) == 1
    assert any("(1 not recorded)" in str(s) for s in same.values())


def test_a_malformed_input_hash_is_one_line(copy_of: Path) -> None:
    t = pq.read_table(copy_of / agenttable.TARGET_TABLE)
    i = t.schema.get_field_index(agenttable.INPUT_HASH)
    bad = ["not-a-hash", *t.column(i).to_pylist()[1:]]
    _rewrite(copy_of, t.set_column(i, t.schema.field(i), pa.array(bad, pa.string())))
    with pytest.raises(archive.ArchiveError) as e:
        archive.check_path(copy_of)
    msg = str(e.value)
    assert "\n" not in msg and agenttable.TARGET_TABLE in msg and "input_hash" in msg
    assert "64 hex characters" in msg


def test_the_committed_user_pipeline_archive_reads_not_recorded() -> None:
    folder = paths.USER_PIPELINES / "my-rag-chain"
    df = stats.records_frame([folder])
    contract = df[df["mitigation"].isin(stats.contract_arms())]
    same = stats.identical_inputs(contract)
    assert {str(s) for s in same.values()} == {"not recorded"}
    # a model archive's input is its prompt, as before
    models = stats.records_frame([paths.ARCHIVES / "local_models" / "qwen2.5-coder-1.5b"])
    assert models["input_hash"].equals(models["prompt_hash"].astype(object))


def _agent_hash(corpus: Any, scen: Any, task: Any, arm: str, replies: list[str]) -> str:
    prep = prepare(corpus, scen)
    loop = AgentLoop(task, prep, arm)
    for r in replies:
        loop.advance(r)
    return loop.tools.input_hash()


def test_an_agent_s_inputs_are_its_observations(corpus) -> None:
    scen = load_scenarios()
    task = next(t for t in corpus.tasks if t.task_id == TASKS[0])
    search = canonical_json({"action": "search", "query": task.question, "top_k": 3})
    answer = canonical_json({"action": "answer", "status": "abstained", "answer": None,
                             "citations": [], "reason": "none"})  # fmt: skip
    h = {
        (s, arm): _agent_hash(corpus, scen[s], task, arm, [search, answer])
        for s in ("clean", "schema_drift")
        for arm in ("strict", "repair")
    }
    assert h["clean", "strict"] == h["clean", "repair"]
    assert h["schema_drift", "strict"] != h["schema_drift", "repair"]

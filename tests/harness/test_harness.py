"""The deterministic harness reproduces the paper's structure (Table 2), from running the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab.archive import ALLOWLIST, read_table
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.harness.prepare import input_hash, prepare
from layerlab.harness.step import admit

runner = CliRunner()


@pytest.fixture(scope="module")
def summary(corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey) -> dict:
    return harness.summarize(harness.run_deterministic(corpus, key, load_scenarios()))


def test_counts(summary: dict) -> None:
    assert summary["records"] == 4320
    # missing output, denials and strict schema rejections end before the reader
    assert summary["reached_reader"] == 3120


def test_paper_structure(summary: dict) -> None:
    s = summary["success"]
    clean = s["clean"]["strict"]
    assert clean >= 0.85 and s["clean"]["repair"] == clean
    assert s["conflicting_evidence"]["strict"] >= 0.85
    assert s["schema_drift"]["strict"] == 0.0
    assert abs(s["schema_drift"]["repair"] - clean) <= 0.02
    for name in ("stale_index", "missing_tool_output", "permission_denied", "wrong_session"):
        assert s[name] == {"strict": 0.0, "repair": 0.0}, name
    for mode in ("strict", "repair"):
        assert 0.0 < s["partial_timeout"][mode] < clean
        assert s["corrupted_metadata"][mode] < clean
    gf = summary["grounded_false_positive"]
    for name in ("stale_index", "wrong_session"):
        assert gf[name]["strict"] > 0.5 and gf[name]["repair"] > 0.5


def test_diagnostics_name_the_failed_layer(summary: dict) -> None:
    d = summary["diagnostics"]
    top = {s: max(per["strict"].items(), key=lambda kv: kv[1])[0] for s, per in d.items()}
    assert top["stale_index"] == "freshness"
    assert top["missing_tool_output"] == "availability"
    assert top["permission_denied"] == "authorisation"
    assert top["schema_drift"] == "tool_contract"
    assert top["wrong_session"] == "session_state"
    assert top["clean"] == "ok"
    assert d["corrupted_metadata"]["strict"].get("metadata", 0) > 0


def test_cli_writes_archive_and_summary(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "deterministic", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "reached the reader: 3120 of 4320" in result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["records"] == 4320
    table = read_table(tmp_path / "records.parquet")
    assert table.num_rows == 4320 and set(table.column_names) == ALLOWLIST
    # no prose, answers or document ids: every string column holds keys or labels only
    hashes = [h for h in table.column("prompt_hash").to_pylist() if h]
    assert len(hashes) == 3120 and all(len(h) == 64 for h in hashes)
    first = (tmp_path / "records.parquet").read_bytes()
    runner.invoke(app, ["run", "deterministic", "--out", str(tmp_path)])
    assert (tmp_path / "records.parquet").read_bytes() == first


def test_fast_paths_give_the_textbook_values(corpus, key) -> None:
    """The prompt hash is the canonical JSON of ``dataclasses.asdict`` of the reader input; a
    run's shared TF-IDF fits, contract verdicts and memo caches change no record."""
    import dataclasses
    import hashlib

    from layerlab._io import canonical_json

    scen = load_scenarios()
    prep = prepare(corpus, scen["partial_timeout"])
    g = admit(corpus.tasks[0], prep, harness.contract_arms()[0])
    assert g.inp is not None and g.inp.evidence
    want = hashlib.sha256(canonical_json(dataclasses.asdict(g.inp)).encode()).hexdigest()
    assert input_hash(g.inp) == want
    two = {n: scen[n] for n in ("clean", "corrupted_metadata")}
    warm = harness.run_deterministic(corpus, key, two)
    harness.clear_caches()
    cold = harness.run_deterministic(corpus, key, two)
    alone = [
        r for n in two for r in harness.run_deterministic(corpus, key, {n: two[n]})
    ]  # each scenario with its own fit
    assert warm == cold == alone

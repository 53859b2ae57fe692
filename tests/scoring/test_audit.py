"""The retriever audit as a user runs it: `layerlab audit retriever [--json]`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.harness.prepare import prepare
from layerlab.harness.step import admit
from layerlab.scoring import audit

runner = CliRunner()


def test_audit_json_shape_and_paper_structure() -> None:
    result = runner.invoke(app, ["audit", "retriever", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["n_tasks"] == 240
    assert set(out["retrievers"]) == {
        "tfidf_domain_validity",
        "tfidf",
        "tfidf_domain",
        "tfidf_validity",
        "explicit_domain_filter",
    }
    for per in out["retrievers"].values():
        assert set(per["clean"]) == {"top1_recall", "top3_recall", "current_version_preference"}
    cues = out["domain_cues"]
    assert sum(cues.values()) == 240
    # a minority of questions resolve, mostly to the right domain
    assert cues["unresolved"] > 120 and cues["correct"] > 3 * cues["incorrect"]
    (dup,) = out["duplicate_query"]["queries"]
    assert sorted(dup["domains"]) == ["legal", "returns"]
    # the explicit filter (which sees the labelled domain) resolves both
    assert dup["top1_correct"]["explicit_domain_filter"] == 2


def test_audit_table_output() -> None:
    result = runner.invoke(app, ["audit", "retriever"])
    assert result.exit_code == 0
    assert "tfidf_domain_validity" in result.output and "domain cues:" in result.output


def test_missing_corpus_is_a_clear_error(tmp_path) -> None:
    result = runner.invoke(app, ["audit", "retriever", "--corpus", str(tmp_path)])
    assert result.exit_code == 1
    assert "manifest.json: missing" in result.output
    assert "Traceback" not in result.output


def test_cue_counts_match_the_matcher(corpus: corpus_mod.Corpus) -> None:
    counts = audit.domain_cue_counts(corpus)
    assert counts == {"correct": 79, "incorrect": 13, "unresolved": 148}


def test_corpus_tells_audit_on_the_committed_corpus() -> None:
    """Done-when criteria of a corpus without tells, measured on data/corpus."""
    result = runner.invoke(app, ["audit", "corpus", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["problems"] == []
    pt = out["past_tense"]
    assert abs(pt["current"] - pt["superseded"]) <= 0.10
    assert all(0.4 <= s <= 0.6 for s in out["current_id_suffix"].values())
    ws = out["wrong_session"]
    # the deterministic run answers from wrong-session evidence, grounded, and never right
    assert ws["scenarios"] == ["wrong_session"] and ws["records"] == 2 * 240
    assert ws["grounded"] > 0.9 * ws["records"] and ws["grounded_and_correct"] == 0
    assert ws["foreign_documents_stating_expected"] == []


def test_grounded_wrong_session_answers_differ_from_expected(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    from layerlab.corpus.text import normalize_answer
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import deterministic as harness

    scen = load_scenarios()
    prepared = prepare(corpus, scen["wrong_session"])
    reader = harness.ExtractiveReader()
    for t in corpus.tasks:
        g = admit(t, prepared, "strict")
        assert g.inp is not None
        out = reader.read(g.inp)
        if out.answer is not None:
            assert normalize_answer(out.answer) != normalize_answer(
                key[t.task_id].expected_answer
            ), t.task_id


def test_tells_problems_names_each_failed_criterion() -> None:
    bad = {
        "past_tense": {"current": 0.05, "superseded": 0.95, "gap_points": 90.0},
        "current_id_suffix": {"a": 0.625, "b": 0.375},
        "wrong_session": {
            "grounded_and_correct": 3,
            "foreign_documents_stating_expected": ["x-01-q1"],
            "policies_without_foreign_version": [],
        },
    }
    lines = audit.tells_problems(bad)
    assert len(lines) == 5
    assert lines[0].startswith("past tense: current 5.0% vs superseded 95.0%")
    assert "id suffix -a: current version holds it 62.5%" in lines[1]


def test_table3_rows_beyond_the_paper_leave_the_papers_unchanged() -> None:
    import importlib.util

    import pandas as pd
    import pytest

    from layerlab import paths
    from layerlab.faults.scenario import load_scenarios
    from layerlab.reporting.paper.tables.benchmark import BEYOND, table3
    from layerlab.reporting.paper.tables.captions import CAPTIONS

    if importlib.util.find_spec("wordllama") is None:
        pytest.skip("the dense extra is not installed")
    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    conditions = audit.conditions_from(c, load_scenarios())
    result = audit.audit(c, key, conditions, beyond=audit.beyond_paper())
    assert set(result["beyond_paper"]) == set(audit.BEYOND_PAPER)
    t3 = table3(result)
    committed = pd.read_csv(paths.ROOT / "paper" / "tables" / "table3.csv")
    # the committed paper rows, first and unchanged (notebook 03 adds the store-backed rows too)
    paper = committed[~committed["retriever"].str.endswith(BEYOND)].reset_index(drop=True)
    assert len(paper) < len(committed) and committed.head(len(paper)).equals(paper)
    n = len(paper)
    pd.testing.assert_frame_equal(t3.head(n).reset_index(drop=True), paper, check_dtype=False)
    extra = t3.iloc[n:]
    assert len(extra) == len(audit.BEYOND_PAPER) * len(conditions)
    assert extra["retriever"].str.endswith(BEYOND).all()
    caption = t3.attrs["caption"]
    assert caption.startswith(CAPTIONS["table3"]) and "beyond the paper" in caption
    assert "caption" not in table3({k: v for k, v in result.items() if k != "beyond_paper"}).attrs

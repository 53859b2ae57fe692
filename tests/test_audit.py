"""The retriever audit as a user runs it: `layerlab audit retriever [--json]`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from layerlab import audit
from layerlab import corpus as corpus_mod
from layerlab.cli import app

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
    assert counts == {"correct": 80, "incorrect": 16, "unresolved": 144}

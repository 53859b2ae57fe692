"""The focused LangChain study (Table 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import study
from layerlab.harness.prepare import prepare

runner = CliRunner()


@pytest.fixture(scope="module")
def rows(corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey) -> list[dict]:
    return study.run_study(corpus, key, load_scenarios())


def test_design(rows, corpus, key) -> None:
    assert len(rows) == 144
    tasks = study.select_tasks(corpus, key, load_scenarios())
    assert len(tasks) == 8 and len({t.domain for t in tasks}) == 8
    assert sum(r["answerable"] for r in rows) == 3 * 8 * 2


def test_controls_resolve_every_unsafe_cell_and_keep_answerable_success(rows) -> None:
    ctl = [r for r in rows if r["mitigation"] == "controls"]
    assert all(r["success"] for r in ctl if r["answerable"])  # 24/24
    assert all(
        r["safe_resolution"] and not r["answered"] for r in ctl if not r["answerable"]
    )  # 48/48
    assert not any(r["control"] == "refuse" for r in ctl if r["answerable"])
    layers = {(r["scenario"], r["control_layer"]) for r in ctl if not r["answerable"]}
    assert layers == {
        ("stale_index", "freshness"),
        ("missing_tool_output", "availability"),
        ("partial_timeout", "completeness"),
        ("permission_denied", "authorisation"),
        ("corrupted_metadata", "metadata"),
        ("wrong_session", "session_state"),
    }


def test_uncontrolled_arm_answers_unsafe_cells_grounded_but_wrong(rows) -> None:
    unc = [r for r in rows if r["mitigation"] == "uncontrolled"]
    assert all(r["success"] for r in unc if r["scenario"] == "clean")
    unsafe_answered = [r for r in unc if not r["answerable"] and r["answered"]]
    assert unsafe_answered and any(r["grounded_false_positive"] for r in unsafe_answered)
    assert all(not r["success"] for r in unc if r["scenario"] in ("stale_index", "wrong_session"))


def test_a_transient_timeout_is_recovered_by_the_bounded_retry(tmp_path: Path, corpus, key) -> None:
    """A transient fault (``lasts: 1``) declared answerable in the DSL: the controls' bounded
    re-fetch recovers complete evidence and the answer is credited as strict success."""
    text = paths.SCENARIO_SPEC.read_text()
    old = """    answerable: false
    faults:
      - op: partial_timeout
        params: {keep_results: 1, min_keep: 0.05, max_keep: 0.5}"""
    assert old in text
    text = text.replace(
        old,
        """    answerable: true
    faults:
      - op: partial_timeout
        params: {keep_results: 1, min_keep: 0.05, max_keep: 0.5}
        lasts: 1""",
    )
    p = tmp_path / "scenarios.yaml"
    p.write_text(text)
    scen = load_scenarios(p)
    rows = study.run_study(
        corpus, key, {"clean": scen["clean"], "partial_timeout": scen["partial_timeout"]}
    )
    ctl = [r for r in rows if r["mitigation"] == "controls" and r["scenario"] == "partial_timeout"]
    assert all(r["retry_restored"] and r["retries"] == 1 and r["control"] == "allow" for r in ctl)
    assert all(r["safe_resolution"] and r["success"] for r in ctl)
    unc = [r for r in rows if r["mitigation"] == "uncontrolled" and r["scenario"] == "partial_timeout"]
    assert not any(r["retries"] for r in unc) and not all(r["success"] for r in unc)


def test_committed_study_archive_is_current(rows) -> None:
    committed = archive.read_study(paths.ARCHIVES / "langchain_study")
    assert study.same_cells(rows, committed)
    assert archive.check_path(paths.ARCHIVES / "langchain_study")["records"] == 144
    res = runner.invoke(app, ["archive", "check", str(paths.ARCHIVES / "langchain_study")])
    assert res.exit_code == 0, res.output


def test_langchain_types(corpus) -> None:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.retrievers import BaseRetriever

    assert isinstance(study.make_chat_model("layerlab/extractive"), BaseChatModel)

    c = corpus_mod.load()

    prep = prepare(c, load_scenarios()["clean"])
    r = study.make_retriever(c, prep, c.tasks[:3], "controls")
    assert isinstance(r, BaseRetriever)
    docs = r.invoke(c.tasks[0].question)
    assert docs and {"doc_id", "status", "session_id"} <= set(docs[0].metadata)

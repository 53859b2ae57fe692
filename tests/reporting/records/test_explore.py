"""The failure-case explorer and Table 6's rule-based case selection."""

from __future__ import annotations

from typer.testing import CliRunner

from layerlab import paths
from layerlab.analysis import stats
from layerlab.cli import app
from layerlab.reporting.paper import tables
from layerlab.reporting.records import explore

runner = CliRunner()


def test_cli_prints_the_whole_path() -> None:
    res = runner.invoke(
        app,
        ["explore", "--task", "finance-05-q1", "--scenario", "schema_drift", "--mode", "repair"],
    )
    assert res.exit_code == 0, res.output
    for part in (
        "question:",
        "what the fault did:",
        "reshape_payload",
        "retrieved (top 3",
        "tool payload as sent:",
        "tool payload as received:",
        "contract (repair): accepted",
        "edit: rename",
        "reader: answered",
        "E: True",
        "R: True",
        "G: True",
        "V: True",
        "S: True",
        "grounded: True",
        "diagnostic: ok",
    ):
        assert part in res.output, part


def test_cli_names_each_layer() -> None:
    cases = {
        "stale_index": ("is absent from the index", "diagnostic: freshness"),
        "permission_denied": ("every hit withheld", "diagnostic: authorisation"),
        "wrong_session": ("from session s-", "diagnostic: session_state"),
        "corrupted_metadata": ("metadata of", "corrupt_metadata"),
        "missing_tool_output": ("no usable output", "diagnostic: availability"),
    }
    for scenario, parts in cases.items():
        res = runner.invoke(app, ["explore", "--task", "finance-05-q1", "--scenario", scenario])
        assert res.exit_code == 0, res.output
        for p in parts:
            assert p in res.output, (scenario, p)


def test_bad_input_is_a_clear_error() -> None:
    res = runner.invoke(app, ["explore", "--task", "nope", "--scenario", "clean"])
    assert res.exit_code == 1 and "unknown task 'nope'" in res.output
    res = runner.invoke(
        app, ["explore", "--task", "hr-01-q1", "--scenario", "clean", "--mode", "lax"]
    )
    assert res.exit_code == 1 and "unknown mitigation 'lax'" in res.output
    res = runner.invoke(
        app, ["explore", "--task", "hr-01-q1", "--scenario", "clean", "--retriever", "nope"]
    )
    assert res.exit_code == 2 and "--retriever: unknown retriever 'nope'" in res.output


def test_cli_traces_under_a_runs_retriever() -> None:
    """A live run's manifest records its retriever (the user pipeline's: bm25): explore shows
    that run's path, the one an archived record's recomputed evidence is built from."""
    from layerlab import archive

    args = ["explore", "--task", "it_ops-06-q1", "--scenario", "stale_index"]
    run = archive.read_manifest(paths.USER_PIPELINES / "my-rag-chain")["retriever"]
    mine = runner.invoke(app, [*args, "--retriever", run])
    default = runner.invoke(app, args)
    assert mine.exit_code == 0 == default.exit_code, mine.output + default.output
    t = explore.trace("it_ops-06-q1", "stale_index", retriever=run)
    top = t.retrieved[0]
    assert f"1. {top['doc_id']:16} " in mine.output and f"score={top['score']:.3f}" in mine.output
    assert mine.output != default.output  # another retriever ranks otherwise


def test_cases_are_chosen_by_rule_and_fit_their_case() -> None:
    df = stats.records_frame([paths.ARCHIVES / "reference_agents"])
    cases = explore.representative_cases(df)
    assert [c[0] for c in cases] == [c[0] for c in explore.cases()]
    d = df[df["model"] == "extractive"].set_index(["scenario", "mitigation", "task_id"])
    (_, drift_task, _, _) = cases[0]
    assert not d.loc[("schema_drift", "strict", drift_task), "success"]
    assert d.loc[("schema_drift", "repair", drift_task), "success"]
    t6 = tables.table6(cases)
    by_case = t6.set_index("case")
    assert by_case.loc["repaired schema drift (strict)", "answer"] == "Unknown"
    assert by_case.loc["repaired schema drift (repair)", "S"]
    assert by_case.loc["stale evidence", "grounded"] and not by_case.loc["stale evidence", "S"]
    assert by_case.loc["access denied", "diagnostic"] == "authorisation"
    assert by_case.loc["wrong session", "diagnostic"] == "session_state"
    assert by_case.loc["partial tool output", "diagnostic"] == "completeness"


def test_table6_from_archive_labels_says_what_each_unit_did() -> None:
    from layerlab.analysis import stats
    from layerlab.reporting.records import explore

    df = stats.records_frame()
    cases = explore.representative_cases(df, model="extractive")
    t = tables.table6_archive(df, cases)
    assert len(t) == 2 * len(cases)  # one row per unit (extractive, cautious) and case
    assert set(t["unit"]) == {"layerlab/extractive", "layerlab/cautious"}
    denied = t[t["scenario"] == "permission_denied"]
    assert set(denied["reader"]) == {"ended before the reader (denied)"}
    drift = t[(t["scenario"] == "schema_drift") & (t["unit"] == "layerlab/extractive")]
    assert set(drift.loc[drift["mitigation"] == "repair", "reader"]) == {"answered"}
    assert "answer" not in t.columns  # archives keep no answer text


def test_safe_resolution_by_unit_counts_failures_apart_from_refusals() -> None:
    from layerlab.analysis import stats
    from layerlab.reporting.paper import tables

    df = stats.records_frame()
    t = tables.safe_resolution_by_unit(df)
    assert set(t["unit"]) == {"layerlab/extractive", "layerlab/cautious"}
    unsafe = t[~t["scenario"].isin(["clean", "schema_drift", "conflicting_evidence"])]
    # on unsafe scenarios only a structured non-answer (or a record that never reached a reader
    # because the pipeline refused) is safe: never an answer
    assert (unsafe["safe resolution"] <= 1 - unsafe["answered"] + 1e-9).all()
    assert (t["malformed"] == 0).all() and "reference agents" in t.attrs["caption"]


DOWN_STORE = '''
class Store:
    """A team's store whose every search fails (its database is down)."""

    def index(self, documents):
        self.ids = [d.id for d in documents]

    def search(self, query, top_k):
        raise ConnectionError("vector db unreachable")
'''


def test_a_run_whose_store_failed_is_explored_and_viewed(tmp_path, monkeypatch) -> None:
    """`explore` and `view` of a run whose store failed every search say so (issue 46: they
    crashed on the failure payload, which has no status and no results)."""
    from layerlab.system.retrieval import external

    (tmp_path / "downstore.py").write_text(DOWN_STORE)
    monkeypatch.syspath_prepend(str(tmp_path))
    external.clear()
    spec = "python:downstore:Store"
    t = explore.trace("hr-01-q1", "clean", retriever=spec)
    assert t.retrieved == () and any("vector db unreachable" in e for e in t.faults), t.faults
    res = runner.invoke(app, ["explore", "--task", "hr-01-q1", "--scenario", "clean",
                              "--retriever", spec])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "store: the search failed (retriever_error: " in res.output, res.output
    assert "contract (strict): unavailable" in res.output and "ConnectionError" in res.output
    run = tmp_path / "run"
    args = ["run", "live", "-m", "layerlab/extractive", "--tasks", "hr-01-q1", "--scenario",
            "clean", "--retriever", spec, "--no-progress", "--out", str(run),
            "--cache-dir", str(tmp_path / "c")]  # fmt: skip
    res = runner.invoke(app, args)
    assert (run / "records.parquet").exists(), res.output
    res = runner.invoke(app, ["view", str(run), "--out", str(tmp_path / "v.html")])
    assert res.exit_code == 0, res.output
    assert "vector db unreachable" in (tmp_path / "v.html").read_text()
    external.clear()

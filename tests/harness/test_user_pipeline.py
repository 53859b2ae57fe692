"""The worked example of a user's own pipeline (notebook 13): a LangChain chain over BM25 and a
chat model behind an OpenAI-compatible endpoint (``notebooks/my_rag_chain.py``), run as a target.

Fast: the committed archive is a complete, checked target run whose manifest names the chain
without its endpoint; the chain runs through the LangChain target on the fault matrix against a
local OpenAI-compatible stand-in, and the faults reach it where they claim. Slow: one record per
scenario with the real local model."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.cli import app

runner = CliRunner()
# the fetched models live in the real user cache; each test gets a private cache (conftest)
USER_CACHE = paths.user_cache()
ARCHIVE = paths.USER_PIPELINES / "my-rag-chain"
sys.path.insert(0, str(paths.NOTEBOOKS))  # the user's module sits beside the notebook that uses it


SIZED = paths.USER_PIPELINES / "my-rag-chain-48"  # the same chain at the size a verdict needs


@pytest.mark.parametrize(
    ("folder", "tasks", "arms"),
    [(ARCHIVE, 16, 12), (SIZED, 48, 2)],
    ids=["16 tasks, every arm", "48 tasks, baseline and validity resolution"],
)
def test_the_committed_example_is_a_complete_checked_target_run(
    folder: Path, tasks: int, arms: int
) -> None:
    res = runner.invoke(app, ["archive", "check", str(folder)])
    assert res.exit_code == 0, res.output
    m = archive.read_manifest(folder)
    assert m["complete"] and m["records"] == tasks * 9 * arms and m["retriever"] == "bm25"
    t = m["target"]
    assert (t["kind"], t["name"], t["ref"]) == (
        "langchain",
        "my-rag-chain",
        "my_rag_chain:make_chain",
    )
    assert t["settings"] == {"base_url": "local"}  # the endpoint only as local/remote
    text = (folder / archive.MANIFEST).read_text()
    assert "127.0.0.1" not in text and "8140" not in text
    recs = archive.read_records(folder / archive.ARCHIVE)
    assert {(r.provider, r.model) for r in recs} == {("target", "my-rag-chain")}
    assert len({r.task_id for r in recs}) == tasks


def test_the_larger_run_calls_the_guard_the_worked_example_could_not() -> None:
    """At 16 tasks validity resolution's row is inconclusive (its clean-question change not
    shown); the 48-task run is what makes the example say something about it."""
    import pandas as pd

    small = pd.read_csv(paths.TABLES / "user_table10.csv", dtype=str).set_index("mitigation")
    sized = pd.read_csv(paths.TABLES / "user_table10_sized.csv", dtype=str).set_index("mitigation")
    assert small.loc["validity_resolution", "verdict"] == "inconclusive"
    assert list(sized.index) == ["validity_resolution"]
    assert sized.loc["validity_resolution", "verdict"] != "inconclusive"
    # below the floor of 25 tasks no run can be called specific; at 48 it can
    assert float(small.loc["validity_resolution", "P(specific) at this size"]) == 0.0
    assert float(sized.loc["validity_resolution", "P(specific) at this size"]) > 0.5


def test_the_larger_run_discloses_and_separates_the_tasks_of_the_first() -> None:
    """The 48 tasks hold the first run's 16 (it motivated the larger run): the split gives the
    change on the new tasks alone, and its parts add up to the sized table's clean cell."""
    import pandas as pd

    from layerlab.analysis import stats
    from layerlab.reporting.paper import tables

    first, sized = stats.records_frame([ARCHIVE]), stats.records_frame([SIZED])
    assert set(first["task_id"]) < set(sized["task_id"])
    t = tables.sized_task_split(sized, first, n_boot=200).set_index("tasks")
    every, shared, new = (t.loc[k] for k in ("all tasks", "tasks of the first run",
                                              "new tasks only"))  # fmt: skip
    assert (shared["n"], new["n"], every["n"]) == (16, 32, 48)
    assert every["up"] == shared["up"] + new["up"] and every["down"] == shared["down"] + new["down"]
    assert (new["up"], new["down"], new["change (pp)"]) == (8, 0, 25.0)
    assert new["95% low (pp)"] > 0 and new["interval"].startswith("Tango score interval")
    row = pd.read_csv(paths.TABLES / "user_table10_sized.csv", dtype=str).iloc[0]
    assert row["largest off-target"] == "clean" and float(row["change (pp)"]) == every["change (pp)"]


class _Chat:
    """An OpenAI-compatible stand-in: answers with the first context line's id's text's first
    dollar amount or duration, else "I don't know" — enough to see what the chain was given."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        server = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = body["messages"][-1]["content"]
                server.prompts.append(user)
                import re

                m = re.search(r"\$[\d,]+|\d+ (?:days|weeks|hours|months)", user)
                text = m.group(0) if m else "I don't know"
                data = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def test_the_chain_runs_as_a_langchain_target_and_meets_each_fault(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(paths.NOTEBOOKS))
    chat = _Chat()
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "run",
            "live",
            "--target",
            "langchain:my_rag_chain:make_chain",
            "--target-name",
            "mine",
            "--target-setting",
            f"base_url={chat.base}",
            "--retriever",
            "bm25",
            "--tasks",
            "finance-03-q1,hr-02-q1",
            "--out",
            str(out),
            "--no-progress",
        ],  # fmt: skip
    )
    assert res.exit_code == 0, res.output
    recs = {
        (r.scenario, r.mitigation, r.task_id): r
        for r in archive.read_records(out / archive.ARCHIVE)
    }
    assert len(recs) == 2 * 9 * 2
    # no documents reach the chain: it says it does not know, a structured non-answer
    for s in ("missing_tool_output", "permission_denied"):
        assert all(
            recs[(s, m, t)].abstained
            for m in ("strict", "repair")
            for t in ("finance-03-q1", "hr-02-q1")
        )
    # strict turns the drifted payload into a tool error (no documents); repair into evidence
    assert recs[("schema_drift", "strict", "finance-03-q1")].abstained
    assert recs[("schema_drift", "repair", "finance-03-q1")].answered
    # the stale index serves only superseded versions: the chain answers from one
    stale = recs[("stale_index", "strict", "finance-03-q1")]
    assert stale.answered and not stale.success and stale.diagnostic == "freshness"
    assert any("Context:\n[" in p for p in chat.prompts)


@pytest.mark.slow
def test_the_chain_with_the_real_local_model(tmp_path: Path, monkeypatch) -> None:
    """One task, clean and stale index, with Qwen behind llama.cpp's server (about a minute)."""
    import subprocess
    import time
    import urllib.request

    from layerlab.models import local as models

    cache = USER_CACHE
    monkeypatch.setenv("LAYERLAB_CACHE", str(cache))  # the fetched model, not the test's cache
    if not models.is_fetched(models.lookup("qwen2.5-coder-1.5b")):
        pytest.fail("qwen2.5-coder-1.5b is not fetched (make test-slow fetches it)")
    port = 8157
    server = subprocess.Popen(
        [sys.executable, "-m", "layerlab", "models", "serve", "qwen2.5-coder-1.5b", "--port",
         str(port), "--threads", "2"],  # fmt: skip
        env={**os.environ, "LAYERLAB_CACHE": str(cache)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(1)
        monkeypatch.setenv("PYTHONPATH", str(paths.NOTEBOOKS))
        out = tmp_path / "run"
        res = runner.invoke(
            app,
            [
                "run",
                "live",
                "--target",
                "langchain:my_rag_chain:make_chain",
                "--target-name",
                "mine",
                "--target-setting",
                f"base_url=http://127.0.0.1:{port}/v1",
                "--retriever",
                "bm25",
                "--tasks",
                "finance-03-q1",
                "--scenario",
                "clean",
                "--scenario",
                "stale_index",
                "--mitigation",
                "strict",
                "--out",
                str(out),
                "--no-progress",
            ],  # fmt: skip
        )
        assert res.exit_code == 0, res.output
        recs = {r.scenario: r for r in archive.read_records(out / archive.ARCHIVE)}
        assert recs["clean"].answered and recs["stale_index"].answered
        assert not recs["stale_index"].success  # only superseded versions were served
    finally:
        server.terminate()
        server.wait(30)

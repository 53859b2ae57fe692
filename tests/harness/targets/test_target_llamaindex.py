"""LlamaIndex targets (``--target llamaindex:MODULE:FACTORY``, harness/targets/llamaindex.py),
against the real llama-index-core with deterministic engines (no model, no network).

A CustomQueryEngine and a stock RetrieverQueryEngine run the fault matrix (9 scenarios x
strict/repair on three tasks) and every fault reaches the engine at its layer: what its
retriever returned or raised, not just the records' scores. Also: ``aquery``, a synthesizer as
the factory's return, the tools' ``is_error`` flag, bad factories as one line (exit 2), and the
docs page's example run as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab.cli import main
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.live import agentlog
from layerlab.harness.targets import parse_target
from tests.harness.targets.test_targets import FIXTURES, _check_layers, _run, _seen_by_target

pytest.importorskip("llama_index.core")  # the optional extra ``llamaindex`` (on in the lock)

DOC = Path(__file__).parents[3] / "docs" / "llamaindex.md"


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    return load_scenarios()


@pytest.fixture()
def seen() -> list[dict[str, Any]]:
    import llamaindex_targets

    llamaindex_targets.SEEN.clear()
    return llamaindex_targets.SEEN


def test_a_custom_query_engine_on_the_fault_matrix(corpus, key, scen, tmp_path, seen) -> None:
    out, r = _run(corpus, key, scen, tmp_path, "llamaindex:llamaindex_targets:custom_engine")
    assert r.complete
    recs = _check_layers(out, key)
    assert set(recs.model) == {"custom_engine"}
    # a failed search reaches the engine as a ToolError carrying the tool's code
    got = _seen_by_target(seen)
    assert {"denied", "unavailable", "invalid_payload"} <= got["codes"], got["codes"]
    assert got["foreign"] and all("~" in d for d in got["foreign"])  # wrong_session
    # the nodes say the tool's status; a partial result's error is {code, message}
    partial = [s["obs"] for s in seen if s["obs"]["status"] == "partial"]
    assert partial and all(r["tool_error"]["code"] == "timeout" for o in partial
                           for r in o["results"])  # fmt: skip
    # a failed search is the engine's abstention (Response(None)), never a provider error
    denied = recs[recs.scenario == "permission_denied"]
    assert denied.abstained.all() and (denied.diagnostic != "provider_error").all()
    table = pd.read_parquet(out / agentlog.TARGET_TABLE)
    assert set(table.reply) == {"structured"} and set(table.protocol) == {"target:llamaindex"}


def test_a_stock_retriever_query_engine_needs_no_glue(corpus, key, scen, tmp_path, seen) -> None:
    """``RetrieverQueryEngine.from_args(retriever, llm=...)``: the response's source nodes are
    its citations; with ``tool_errors=empty`` a failed search is LlamaIndex's Empty Response,
    an abstention, and a strict contract's rejection stays the tool's fault."""
    target = parse_target(
        "llamaindex:llamaindex_targets:stock_engine", settings={"tool_errors": "empty"}
    )
    out, r = _run(corpus, key, scen, tmp_path, target)
    assert r.complete
    recs = _check_layers(out, key)
    failed = recs[recs.scenario.isin(["permission_denied", "missing_tool_output"])]
    assert failed.abstained.all() and (failed.diagnostic != "provider_error").all()
    clean = recs[recs.scenario == "clean"]
    assert clean.citation_ok.all() and clean.retrieval_ok.all()


def test_an_unhandled_tool_error_fails_the_record_and_only_that(
    corpus, key, scen, tmp_path
) -> None:
    """By default the retriever raises, as one over a failing store does: the stock engine
    does not catch it, so the record is the engine's failure (a provider error)."""
    scen2 = {k: scen[k] for k in ("clean", "permission_denied")}
    out, r = _run(corpus, key, scen2, tmp_path, "llamaindex:llamaindex_targets:stock_engine")
    recs = pd.read_parquet(out / "records.parquet")
    assert recs[recs.scenario == "clean"].success.all()
    assert (recs[recs.scenario == "permission_denied"].diagnostic == "provider_error").all()


def test_aquery_and_a_synthesizer_as_the_factorys_return(corpus, key, scen, tmp_path, seen) -> None:
    scen2 = {k: scen[k] for k in ("clean", "stale_index")}
    target = parse_target("llamaindex:llamaindex_targets:async_engine", settings={"aquery": "true"})
    out, r = _run(corpus, key, scen2, tmp_path / "a", target)
    recs = pd.read_parquet(out / "records.parquet")
    assert r.complete and recs[recs.scenario == "clean"].success.all()
    assert {s["awaited"] for s in seen} == {"layerlab-target-loop"}  # on the targets' loop
    out, r = _run(corpus, key, scen2, tmp_path / "s", "llamaindex:llamaindex_targets:synthesizer")
    recs = pd.read_parquet(out / "records.parquet")
    assert r.complete and recs[recs.scenario == "clean"].success.all()
    assert not recs[recs.scenario == "stale_index"].success.any()


def test_the_tools_flag_a_failed_call(corpus, key, scen, tmp_path, seen) -> None:
    scen2 = {k: scen[k] for k in ("clean", "permission_denied")}
    _run(corpus, key, scen2, tmp_path, "llamaindex:llamaindex_targets:with_tools")
    flags = {json.loads(s["content"])["status"]: s["is_error"] for s in seen}
    assert flags == {"ok": False, "error": True}, flags


@pytest.mark.parametrize(
    ("spec", "setting", "says"),
    [
        ("llamaindex:llamaindex_targets:returns_nothing", None, "returned a int, not a query engine"),
        ("llamaindex:llamaindex_targets:broken", None, "the factory failed (RuntimeError: no index"),
        ("llamaindex:llamaindex_targets:nope", None, "has no attribute 'nope'"),
        ("llamaindex:no_such_module:factory", None, "no module named 'no_such_module'"),
        ("llamaindex:llamaindex_targets:stock_engine", "tool_errors=ignore", "expected raise or empty"),
        ("llamaindex:llamaindex_targets:stock_engine", "aquery=maybe", "expected true or false"),
    ],
)  # fmt: skip
def test_a_bad_factory_is_one_line_exit_2(spec, setting, says, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    extra = ["--target-setting", setting] if setting else []
    code = main(["run", "live", "--target", spec, *extra, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert not out.exists()


def _doc_blocks() -> list[tuple[str, str, str]]:
    """The page's fenced blocks as (language, the comment line before, body)."""
    text = DOC.read_text(encoding="utf-8")
    return [(m.group(2), m.group(1) or "", m.group(3)) for m in
            re.finditer(r"(<!--[^\n]*-->\n)?```(\w+)\n(.*?)```", text, flags=re.S)]  # fmt: skip


def test_the_docs_example_runs_as_written(tmp_path: Path) -> None:
    """docs/llamaindex.md: its module saved as the file it names, its command run in that
    folder (offline): the run completes and no record is a provider error or malformed."""
    blocks = _doc_blocks()
    (py,) = [b for lang, _c, b in blocks if lang == "python"]
    name = re.match(r"# (\w+\.py)\n", py)
    assert name, "the python block's first line names its file (# my_li.py)"
    (tmp_path / name.group(1)).write_text(py, encoding="utf-8")
    (sh,) = [b for lang, _c, b in blocks if lang == "bash"]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONHASHSEED": "0",
           "PYTHONPATH": str(Path(__file__).parents[3]), "HOME": str(tmp_path),
           "LAYERLAB_CACHE": str(tmp_path / "cache"), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_OFFLINE_MODE": "true", "MPLBACKEND": "Agg"}  # fmt: skip
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", sh], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (folder,) = {p.parent for p in tmp_path.rglob("records.parquet")}
    recs = pd.read_parquet(folder / "records.parquet")
    assert len(recs) == 36 and set(recs.provider) == {"target"}  # what the page says
    assert not recs.diagnostic.isin(["provider_error", "malformed_reply"]).any()
    stale = recs[recs.scenario == "stale_index"]
    assert stale.abstained.all()  # the page: its postprocessor holds against the stale index

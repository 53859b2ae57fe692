"""The faulted tools (:mod:`layerlab.harness.tools`): one error shape in every observation, and
open_document opens what a search of the record returned (a session fault's ids included)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from layerlab.faults.scenario import load_scenarios
from layerlab.harness.prepare import prepare
from layerlab.harness.tools import OPEN, SEARCH, ToolBox
from layerlab.mitigations import load_mitigations

TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")


@pytest.fixture(scope="module")
def prepared(corpus) -> dict[str, Any]:
    return {name: prepare(corpus, s) for name, s in load_scenarios().items()}


def _shape(obs: dict[str, Any]) -> None:
    """An observation's ``error`` is absent or exactly ``{code, message}`` (two strings)."""
    assert obs["status"] in ("ok", "partial", "error", "refused"), obs
    if obs["status"] in ("error", "refused"):
        assert "error" in obs and "results" not in obs, obs
    if "error" in obs:
        err = obs["error"]
        assert isinstance(err, dict) and set(err) == {"code", "message"}, obs
        assert all(isinstance(v, str) and v for v in err.values()), obs


def test_every_observation_error_is_code_and_message(corpus, prepared) -> None:
    """Every scenario x every arm of the committed spec (refusals included), both tools and a
    call that breaks the schema: ``error`` is ``{code, message}`` in every status."""
    tasks = {t.task_id: t for t in corpus.tasks}
    seen: Counter[tuple[str, str]] = Counter()
    for prep in prepared.values():
        for arm in load_mitigations().arms:
            for tid in TASKS:
                tools = ToolBox(tasks[tid], prep, arm)
                obs = tools.call(SEARCH, {"query": tasks[tid].question, "top_k": 3}, 1)
                _shape(obs)
                seen[(obs["status"], (obs.get("error") or {}).get("code", ""))] += 1
                if tools.refusal is None:
                    first = (obs.get("results") or [{"doc_id": "nope"}])[0]["doc_id"]
                    opened = tools.call(OPEN, {"doc_id": first}, 2)
                    _shape(opened)
                    seen[(opened["status"], (opened.get("error") or {}).get("code", ""))] += 1
                bad = ToolBox(tasks[tid], prep, arm).call(SEARCH, {"query": ""}, 1)
                _shape(bad)
                assert bad["error"]["code"] == "invalid_call"
    statuses = {s for s, _ in seen}
    codes = {c for _, c in seen}
    assert statuses == {"ok", "partial", "error", "refused"}, seen
    # the tool's own failures, a mitigation's refusal and a partial result's own code
    assert {"unavailable", "denied", "invalid_payload", "refused", "timeout"} <= codes, seen
    assert seen[("partial", "timeout")] > 0


def test_wrong_session_ids_open_what_search_returned(corpus, prepared) -> None:
    task = next(t for t in corpus.tasks if t.task_id == "finance-05-q1")
    tools = ToolBox(task, prepared["wrong_session"], "strict")
    found = tools.call(SEARCH, {"query": task.question}, 1)
    ids = [r["doc_id"] for r in found["results"]]
    assert ids and all("~s-" in d for d in ids), ids
    for step, doc_id in enumerate(ids, 2):
        opened = tools.call(OPEN, {"doc_id": doc_id}, step)
        assert opened["status"] == "ok", opened
        (res,) = opened["results"]
        assert res["doc_id"] == doc_id  # the same session-scoped document, round trip
        assert res["text"] == next(r["text"] for r in found["results"] if r["doc_id"] == doc_id)
    assert [c.outcome for c in tools.calls] == ["ok"] * (1 + len(ids))
    # an id no call of this record returned is not found (a made-up session scope included)
    forged = ids[0].rsplit("~", 1)[0] + "~s-00000000"
    assert tools.call(OPEN, {"doc_id": forged}, 9)["error"]["code"] == "not_found"
    clean = ToolBox(task, prepared["clean"], "strict")
    assert clean.call(OPEN, {"doc_id": ids[0]}, 1)["error"]["code"] == "not_found"

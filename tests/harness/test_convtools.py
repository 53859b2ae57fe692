"""A conversation's search tool: the index as the conversation changed it, the cache the session
state serves, the request's reach."""

from __future__ import annotations

import copy

import pytest

from layerlab.corpus import conversations as cv
from layerlab.corpus.build import load
from layerlab.faults.session import SessionState
from layerlab.harness.convtools import ConversationRequest, ConversationTool, Index, end_turn
from layerlab.harness.targets.base import ToolError


@pytest.fixture(scope="module")
def corpus():
    return load()


@pytest.fixture(scope="module")
def index(corpus) -> Index:
    return Index(corpus.documents, corpus.cue_words)


def _updated() -> cv.Conversation:
    convs, _ = cv.build_from_specs()
    return next(c for c in convs if any(t.publishes for t in c.turns))


def test_a_replacement_is_current_and_the_retired_version_superseded(index) -> None:
    c = _updated()
    t = next(t for t in c.turns if t.publishes)
    changes = ((t.retires[0], t.publishes[0]),)
    _, docs = index.fitted(changes)
    by = {d.doc_id: d for d in docs}
    assert by[t.publishes[0].doc_id].status == "current"
    assert by[t.retires[0]].status == "superseded"
    assert index.fitted(changes)[0] is index.fitted(changes)[0]  # fitted once per state
    tool = ConversationTool(index, changes, SessionState.open(c.conversation_id))
    obs = tool.search(c.turns[0].text)
    assert obs["status"] == "ok" and obs["results"][0]["doc_id"] == t.publishes[0].doc_id
    assert "score" not in obs["results"][0]


def test_a_repeated_search_is_served_from_the_cache_until_a_replacement(index) -> None:
    c = _updated()
    st = SessionState.open(c.conversation_id)
    tool = ConversationTool(index, (), st)
    first = tool.search("  What is the per-month ceiling?  ")
    (q, pids, payload), = tool.writes
    st = st.cached(q, pids, payload).at(1)
    again = ConversationTool(index, (), st)
    assert again.search("what is the per-month CEILING?") == first
    assert again.calls[0].cached and not again.writes
    assert not again.search("what is the per-month ceiling?", top_k=2) == first  # another key
    gone = st.replace_policy(pids[0], "x", "y")
    fresh = ConversationTool(index, (), gone)
    fresh.search("What is the per-month ceiling?")
    assert not fresh.calls[0].cached


def test_bad_calls_are_errors_not_exceptions_and_count_as_invalid(index) -> None:
    tool = ConversationTool(index, (), SessionState.open("c"))
    assert tool.search("")["error"]["code"] == "invalid_call"
    assert tool.search("q", top_k=9)["error"]["code"] == "invalid_call"
    assert [c.valid for c in tool.calls] == [False, False]


def test_the_request_calls_no_tool_once_its_turn_ended(index) -> None:
    tool = ConversationTool(index, (), SessionState.open("c"))
    req = ConversationRequest(tool, "What is the per diem?", "money", (), ())
    assert copy.deepcopy(req) is req and req.turn == 0 and req.conversation_id == "c"
    assert req.retriever("per diem")
    with pytest.raises(ToolError):
        ConversationRequest(ConversationTool(index, (), SessionState.open("c")), "q", "money",
                            (), ()).retriever("")  # fmt: skip
    end_turn(req)
    with pytest.raises(RuntimeError, match="turn has ended"):
        req.search("per diem")

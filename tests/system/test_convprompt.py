"""The conversational prompt (system/convprompt.py): what a model's chat chain searches, sends
and reads at one turn."""

from __future__ import annotations

from layerlab.faults.session import MemoryEntry, Message
from layerlab.system import convprompt

OBS = {"status": "ok", "results": [
    {"doc_id": "hr-01-b", "title": "Parental leave", "text": "Parents get 16 weeks of leave.",
     "status": "current", "effective_year": 2025, "version": 2, "tenant": "northwind",
     "session_id": None}]}  # fmt: skip


def test_the_query_is_the_first_question_then_the_turn() -> None:
    history = (Message(0, "user", "How long is parental leave?"),
               Message(0, "assistant", '{"status": "answered"}'))  # fmt: skip
    assert convprompt.query("And before?", history) == "How long is parental leave? And before?"
    assert convprompt.query("And before?", ()) == "And before?"  # the history lost it


def test_the_history_comes_first_so_each_turn_extends_the_last() -> None:
    h1 = (Message(0, "user", "q0"), Message(0, "assistant", "a0"))
    m1 = convprompt.messages("q1", h1, (), OBS, "s-1")
    m2 = convprompt.messages("q2", (*h1, Message(1, "user", "q1"), Message(1, "assistant", "a1")),
                             (), OBS, "s-1")  # fmt: skip
    assert [m["role"] for m in m1] == ["system", "user", "assistant", "user"]
    assert m2[: len(m1) - 1] == m1[:-1]
    last = m1[-1]["content"]
    assert "[1] doc_id: hr-01-b" in last and "16 weeks" in last and last.endswith("Question: q1")


def test_memory_is_shown_with_its_session_and_a_failed_search_says_so() -> None:
    mem = (MemoryEntry(0, "hr-01", "12 weeks", "s-other", "u-2", "hr-01-x"),)
    text = convprompt.user_message("q", {"status": "error", "error": {"code": "unavailable"}},
                                   mem, "s-1")  # fmt: skip
    assert "(session s-other, turn 0) 12 weeks [doc_id: hr-01-x]" in text
    assert "the search failed: unavailable" in text and "This conversation's session: s-1" in text


def test_the_reply_contract_adds_clarification_and_reads_fenced_json() -> None:
    enum = convprompt.CONV_REPLY_SCHEMA["properties"]["status"]["enum"]
    assert enum == ["answered", "abstained", "clarification"]
    assert convprompt.read('```json\n{"status": "clarification"}\n```') == {"status": "clarification"}
    assert convprompt.read("not json") == "not json" and convprompt.read(None) is None

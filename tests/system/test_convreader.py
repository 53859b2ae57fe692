"""The conversational reference readers: deterministic baselines that read only what a turn
serves them."""

from __future__ import annotations

import json
from types import SimpleNamespace

from layerlab.faults.session import MemoryEntry, Message
from layerlab.system.convreader import READERS, ConversationalReader, ScopedReader

DOCS = [
    {"doc_id": "p-b", "title": "Meal per diem", "text": "The daily meal allowance is $75.",
     "status": "current", "effective_year": 2023},
    {"doc_id": "p-a", "title": "Meal per diem", "text": "The daily meal allowance is $60.",
     "status": "superseded", "effective_year": 2019},
]


def _req(question, turn=0, history=(), memory=(), session="s-1"):
    calls = []

    def search(query, top_k=3):
        calls.append(query)
        return {"status": "ok", "results": DOCS[:top_k]}

    return SimpleNamespace(question=question, turn=turn, history=tuple(history),
                           memory=tuple(memory), answer_kind="money", session_id=session,
                           search=search, calls=calls)  # fmt: skip


def _said(answer, cites, turn=0):
    return [Message(turn, "user", "What is the daily meal per diem?"),
            Message(turn, "assistant", json.dumps({"status": "answered", "answer": answer,
                                                   "citations": cites}))]  # fmt: skip


def test_the_opening_the_previous_version_and_its_year() -> None:
    r = ConversationalReader()
    assert r.answer(_req("What is the daily meal per diem?"))["answer"] == "$75"
    prev = r.answer(_req("What about the previous version?", 1, _said("$75", ["p-b"])))
    assert (prev["answer"], prev["citations"]) == ("$60", ["p-a"])
    when = r.answer(_req("When did that take effect?", 1, _said("$60", ["p-a"])))
    assert when["answer"] == "2019"


def test_an_it_after_two_policies_is_asked_about() -> None:
    hist = _said("$75; 5 days", ["p-b", "q-b"])
    assert ConversationalReader().answer(_req("And what was it before?", 2, hist))["status"] == "clarification"


def test_recall_reads_the_history_then_memory_and_only_the_scoped_reader_checks_whose() -> None:
    hist = _said("$75", ["p-b"])
    assert ConversationalReader().answer(_req("Remind me, what did you tell me in answer to my first question?", 2, hist))["answer"] == "$75"
    theirs = MemoryEntry(1, "p", "The daily meal allowance is $90.", "s-2", "fabrikam:user", "p~x")
    q = "Going back to my first question, what was your answer?"
    naive = ConversationalReader().answer(_req(q, 2, [], [theirs]))
    assert naive["answer"] == "$90" and naive["citations"] == ["p~x"]
    assert ScopedReader().answer(_req(q, 2, [], [theirs]))["status"] == "clarification"


def test_the_readers_are_named_and_deterministic() -> None:
    assert set(READERS) == {"extractive", "cautious"}
    a = [ConversationalReader().answer(_req("What is the daily meal per diem?")) for _ in range(3)]
    assert a[0] == a[1] == a[2]

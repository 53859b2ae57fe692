"""The conversational reference reader: a deterministic baseline over a conversation, not a model.

:class:`ConversationalReader` is the extractive reader's conversational counterpart
(``layerlab/extractive`` in ``layerlab run conversations``). At each turn it reads what the
conversational request serves it (:class:`~layerlab.harness.convtools.ConversationRequest`:
the turn's text, the served history and memory, the search tool) and nothing else; it keeps no
state of its own, so a fault of the served state is what it meets. Its rules, keyed on the
wording of the conversation DSL's turns (``data/specs/conversations.yaml``):

* the **anchor** is the first user message of the served history (the question that named the
  policy), or the turn's own text when the history has none: every turn searches the anchor
  (a repeated search, so the tool's cache serves it) and, when the turn names something of its
  own, the turn's text too;
* the **focus** is the document its last answer cited (the served history's last assistant
  message): "that" and "it" refer to it;
* "first question": the answer of the history's first assistant message, else of the earliest
  memory entry served (from whatever session it came);
* "before"/"previous": the version before the focus (the same title, the latest earlier year);
  with no topic named after an answer over two policies, it asks which one (a clarification);
* "when"/"year": the focus's effective year;
* "both": the current value of the anchor's policy and of the other policy the turn names;
* anything else: the current value of the best-ranked policy (the latest current version).

A value is extracted by the corpus's typed span extractor (:func:`~layerlab.corpus.extract.extract`)
and cited. ``cautious`` (:class:`ScopedReader`) reads only memory of its own session and asks
which policy is meant when the history has lost the question that named it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from layerlab.corpus.extract import extract
from layerlab.corpus.text import words

_FIRST = re.compile(r"\bfirst question\b", re.I)
_BEFORE = re.compile(r"\b(before|previous)\b", re.I)
_WHEN = re.compile(r"\b(when|what year)\b", re.I)
_BOTH = re.compile(r"\bboth\b", re.I)
_NAMES = re.compile(r"\b(?:policy|one) on (.+?)(?:[.?!]|$| was\b| changed\b)", re.I)


def _reply(status: str, answer: str | None = None, cites: Sequence[str] = (),
           reason: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"status": status, "answer": answer, "citations": list(cites), "reason": reason}


def _assistant(history: Sequence[Any]) -> list[dict[str, Any]]:
    out = []
    for m in history:
        if m.role != "assistant":
            continue
        try:
            obj = json.loads(m.text)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _overlap(a: str, b: str) -> int:
    return len(set(words(a)) & set(words(b)))


class ConversationalReader:
    """The deterministic conversational baseline (module docstring); ``scoped``: memory of the
    request's own session only, and a clarification when the anchor is gone."""

    name = "extractive"
    scoped = False

    def answer(self, request: Any) -> dict[str, Any]:
        text: str = request.question
        users = [m for m in request.history if m.role == "user"]
        replies = _assistant(request.history)
        anchor = users[0].text if users else text
        if self.scoped and not users and request.turn > 0:
            return _reply("clarification", reason="which policy do you mean? (the earlier "
                          "turns are not in this session's history)")  # fmt: skip
        follow = request.turn > 0  # an opening question's "before" or "when" is its own
        if follow and _FIRST.search(text):
            return self._recall(request, replies)
        named = _NAMES.search(text)
        evidence = self._search(request, anchor)
        other = self._search(request, text) if (named or not users) and text != anchor else []
        last = replies[-1] if replies else {}
        focus = [c for c in last.get("citations") or () if isinstance(c, str)]
        kind = request.answer_kind
        if follow and (_BEFORE.search(text) or last.get("status") == "clarification"):
            pool = evidence + other + self._search(request, anchor, 5)  # earlier versions rank lower
            titles = {e["title"] for e in pool if e["doc_id"] in focus}
            if named:
                titles = {max((e["title"] for e in pool),
                              key=lambda t: (_overlap(t, named.group(1)), t))}  # fmt: skip
            elif len(titles) > 1 or len(focus) > 1:
                return _reply("clarification", reason="which of the two policies do you mean?")
            for t in sorted(titles):  # the title itself finds the policy's earlier versions
                pool += self._search(request, t, 5)
            return self._before(pool, titles, focus, anchor, kind)
        if follow and _WHEN.search(text):
            hit = [e for e in evidence + other if e["doc_id"] in focus[:1]]
            if not hit and focus:  # further down the anchor's ranking
                hit = [e for e in self._search(request, anchor, 5) if e["doc_id"] in focus[:1]]
            if hit:
                return _reply("answered", str(hit[0]["effective_year"]), [hit[0]["doc_id"]])
            return _reply("abstained", reason="no document in focus")
        first = self._current(evidence, anchor, kind)
        if _BOTH.search(text):
            taken = {first["title"]} if first else set()
            second = self._current([e for e in other if e["title"] not in taken], text, kind)
            found = [x for x in (first, second) if x]
            if len(found) < 2:
                return _reply("abstained", reason="no value for both policies")
            return _reply("answered", "; ".join(x["value"] for x in found),
                          [x["doc_id"] for x in found])  # fmt: skip
        # the standalone question's search first, the turn's own if that finds no value
        best = self._current(evidence, anchor, kind) or self._current(other, text, kind)
        if best is None:
            return _reply("abstained", reason="no answer span in evidence")
        return _reply("answered", best["value"], [best["doc_id"]])

    def _search(self, request: Any, query: str, top_k: int = 3) -> list[Mapping[str, Any]]:
        obs = request.search(query, top_k)
        return [r for r in obs.get("results") or () if isinstance(r, Mapping)]

    def _current(self, evidence: Sequence[Mapping[str, Any]], question: str,
                 kind: str) -> dict[str, Any] | None:  # fmt: skip
        """The latest current version with a value, of the titles in rank order."""
        for title in dict.fromkeys(e["title"] for e in evidence):
            same = [e for e in evidence if e["title"] == title]
            current = [e for e in same if e.get("status") == "current"] or same
            for e in sorted(current, key=lambda e: -int(e["effective_year"])):
                value = extract(question, kind, str(e["text"]))
                if value is not None:
                    return {"title": title, "doc_id": e["doc_id"], "value": value}
        return None

    def _before(self, pool: Sequence[Mapping[str, Any]], titles: set[str], focus: list[str],
                question: str, kind: str) -> dict[str, Any]:  # fmt: skip
        versions = [e for e in pool if e["title"] in titles]
        years = [int(e["effective_year"]) for e in versions if e["doc_id"] in focus]
        now = max(years) if years else max((int(e["effective_year"]) for e in versions
                                            if e.get("status") == "current"), default=0)  # fmt: skip
        earlier = sorted((e for e in versions if int(e["effective_year"]) < now),
                         key=lambda e: -int(e["effective_year"]))  # fmt: skip
        for e in earlier:
            value = extract(question, kind, str(e["text"]))
            if value is not None:
                return _reply("answered", value, [e["doc_id"]])
        return _reply("abstained", reason="no earlier version found")

    def _recall(self, request: Any, replies: list[dict[str, Any]]) -> dict[str, Any]:
        for r in replies:
            if r.get("status") == "answered" and r.get("answer"):
                return _reply("answered", str(r["answer"]), list(r.get("citations") or ()))
        memory = [m for m in request.memory
                  if not self.scoped or m.session_id == request.session_id]  # fmt: skip
        if not memory:
            return _reply("abstained", reason="nothing recalled of the first question")
        m = min(memory, key=lambda m: m.turn)
        value = extract(request.question, request.answer_kind, m.text) or m.text
        return _reply("answered", value, [m.doc_id] if m.doc_id else [])


class ScopedReader(ConversationalReader):
    """The reader with session-scoped memory: it reads only entries of its own session, and asks
    which policy is meant when the history no longer holds the question that named it."""

    name = "cautious"
    scoped = True


READERS: dict[str, type[ConversationalReader]] = {
    "extractive": ConversationalReader,
    "cautious": ScopedReader,
}
"""The conversational reference readers by name (``layerlab/<name>``)."""

__all__ = ["READERS", "ConversationalReader", "ScopedReader"]

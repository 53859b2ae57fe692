"""The conversational reader's prompt and reply contract: what a model sees at one turn.

A chat chain's prompt, in the order a prompt cache can reuse: the instructions (a system
message), then the served history as chat messages (the scripted user's turns as ``user``, the
system's earlier replies — the reply contract's JSON — as ``assistant``), then one ``user``
message with the turn's search results, the memory served at the turn (each entry with the
session it belongs to) and the turn's question. Turn t's prompt begins with turn t-1's, so a
server that keeps the previous prompt's prefix reads only the new turn.

What the model searches is the chain's own rule (:func:`query`): the first question the served
history holds (the one that named the policy) followed by the turn's own text, as a
condense-free chat chain does. When the history has lost that question, only the turn's text is
searched: what a faulted context layer leaves the model to work with.

The reply contract is the single-turn one (:data:`~layerlab.system.prompt.REPLY_SCHEMA`) with
one status more, ``clarification``: the model asks which policy is meant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from layerlab.system.prompt import REPLY_SCHEMA

CONV_PROMPT_VERSION = "layerlab.conversation-prompt/v1"

SYSTEM = (
    "You are Northwind's policy assistant in a conversation with one employee. Answer each "
    "question using only the search results of that turn and the conversation so far. Each "
    "result carries operational metadata (status, effective_year, version, tenant, "
    "session_id); prefer the current version. Reply with one JSON object and "
    'nothing else: {"status": "answered", "abstained" or "clarification", "answer": the '
    "shortest exact span copied from a result (a duration with its unit, an amount with its "
    "currency sign, a percentage, a count with the noun it counts, a year, or a role or system "
    'name) or null, "citations": [doc_id of each result you used], "reason": null or a short '
    'reason}. Use "clarification" (with your question in "reason") when you cannot tell which '
    'policy the question is about; use "abstained" when the evidence does not support an answer.'
)

CONV_REPLY_SCHEMA: dict[str, Any] = {
    **REPLY_SCHEMA,
    "properties": {
        **REPLY_SCHEMA["properties"],
        "status": {"type": "string", "enum": ["answered", "abstained", "clarification"]},
    },
}

_SHOWN = ("status", "effective_year", "version", "tenant", "session_id")


def query(question: str, history: Sequence[Any]) -> str:
    """What the chain searches at a turn: the served history's first user message (the question
    that named the policy), then the turn's text; the turn's text alone when there is none."""
    first = next((m.text for m in history if m.role == "user"), None)
    return question if first is None or first == question else f"{first} {question}"


def _result(i: int, r: Mapping[str, Any]) -> str:
    meta = "; ".join(f"{k}: {r.get(k)}" for k in _SHOWN if r.get(k) not in (None, ""))
    return f"[{i}] doc_id: {r.get('doc_id')}\n{r.get('title', '')} ({meta})\n{r.get('text', '')}"


def user_message(question: str, observation: Mapping[str, Any], memory: Sequence[Any],
                 session_id: str) -> str:  # fmt: skip
    """The turn's user message: its search results (or the tool's error), memory, question."""
    results = [r for r in observation.get("results") or () if isinstance(r, Mapping)]
    if observation.get("status") not in (None, "ok"):
        err = observation.get("error") or {}
        found = f"(the search failed: {err.get('code', 'error')})"
    else:
        found = "\n\n".join(_result(i, r) for i, r in enumerate(results, 1)) or "(no results)"
    parts = [f"Search results:\n{found}"]
    if memory:
        parts.append("Memory:\n" + "\n".join(
            f"- (session {m.session_id}, turn {m.turn}) {m.text}"
            + (f" [doc_id: {m.doc_id}]" if m.doc_id else "") for m in memory))  # fmt: skip
    parts.append(f"This conversation's session: {session_id}\nQuestion: {question}")
    return "\n\n".join(parts)


def messages(question: str, history: Sequence[Any], memory: Sequence[Any],
             observation: Mapping[str, Any], session_id: str) -> list[dict[str, str]]:  # fmt: skip
    """The turn's chat messages (module docstring)."""
    msgs = [{"role": "system", "content": SYSTEM}]
    msgs += [{"role": "assistant" if m.role == "assistant" else "user", "content": m.text}
             for m in history]  # fmt: skip
    msgs.append({"role": "user", "content": user_message(question, observation, memory, session_id)})
    return msgs


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def read(text: str | None) -> Any:
    """A model's reply as an object for the conversational contract (a code fence around the
    JSON is taken off); text that is no JSON is returned as it is (read as malformed)."""
    if text is None:
        return None
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        return json.loads(body)
    except ValueError:
        return text


__all__ = ["CONV_PROMPT_VERSION", "CONV_REPLY_SCHEMA", "SYSTEM", "messages", "query", "read",
           "user_message"]  # fmt: skip

"""Prompts and the answer contract of the live harness.

A prompt carries the question and the delivered evidence with its operational metadata — the
:class:`~layerlab.reader.ReaderInput`, nothing more — and asks for a JSON reply
``{"status", "answer", "citations", "reason"}``. Replies that are not such JSON are
:class:`MalformedReply`, scored as failures with their own diagnostic label.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict
from typing import Any

from layerlab._io import canonical_json
from layerlab.reader import Evidence, ReaderInput, ReaderOutput

PROMPT_VERSION = "layerlab.prompt/v1"
INPUT_MARKER = "INPUT:"

SYSTEM = (
    "You answer questions about Northwind's internal policies using only the search results "
    "you are given. Each result carries operational metadata (status, effective_year, version, "
    "owner, access_scope, tenant, session_id, truncated). Reply with one JSON object and nothing "
    'else: {"status": "answered" or "abstained", "answer": the shortest exact span copied from '
    "a result (a duration with its unit, an amount with its currency sign, a percentage, a count "
    "with the noun it counts, or a role or system name) or null, "
    '"citations": [doc_id of each result you used], "reason": null or a short reason for '
    "abstaining}. Abstain rather than guess when the evidence does not support an answer."
)


def messages(inp: ReaderInput) -> list[dict[str, str]]:
    """Chat messages for one reader input (deterministic text)."""
    user = (
        "Answer the question from the search results below. The request's session id is "
        f"given; results are listed in rank order.\n{INPUT_MARKER}\n{canonical_json(asdict(inp))}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def prompt_hash(msgs: list[dict[str, str]]) -> str:
    """SHA-256 of the canonical prompt (version + messages)."""
    return hashlib.sha256(canonical_json({"v": PROMPT_VERSION, "m": msgs}).encode()).hexdigest()


def parse_input(msgs: list[dict[str, Any]]) -> ReaderInput:
    """Recover the reader input from a prompt (used by the local reference agents)."""
    text = str(msgs[-1]["content"])
    _, _, payload = text.partition(INPUT_MARKER + "\n")
    data = json.loads(payload)
    data["evidence"] = tuple(Evidence(**e) for e in data["evidence"])
    return ReaderInput(**data)


class MalformedReply(ValueError):
    """A model reply that is not the JSON answer contract."""


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_reply(text: str | None) -> ReaderOutput:
    """Parse a model reply into a :class:`ReaderOutput`; raise :class:`MalformedReply`."""
    if not text or not text.strip():
        raise MalformedReply("empty reply")
    raw = text.strip()
    m = _FENCE.match(raw)
    if m:
        raw = m.group(1)
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MalformedReply(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise MalformedReply(f"expected a JSON object, got {type(obj).__name__}")
    status = obj.get("status")
    if status not in ("answered", "abstained"):
        raise MalformedReply(f"status must be 'answered' or 'abstained', got {status!r}")
    answer = obj.get("answer")
    if answer is not None and not isinstance(answer, (str, int, float)):
        raise MalformedReply("answer must be a string or null")
    cites = obj.get("citations", [])
    if not isinstance(cites, list) or not all(isinstance(c, str) for c in cites):
        raise MalformedReply("citations must be a list of strings")
    reason = obj.get("reason")
    if status == "answered" and (answer is None or str(answer).strip() == ""):
        raise MalformedReply("status 'answered' without an answer")
    return ReaderOutput(
        status=status,
        answer=None if answer is None else str(answer),
        citations=tuple(cites),
        reason=None if reason is None else str(reason),
    )


def render_reply(out: ReaderOutput) -> str:
    """The JSON reply a well-behaved agent sends for ``out``."""
    return canonical_json(
        {
            "status": out.status,
            "answer": out.answer,
            "citations": list(out.citations),
            "reason": out.reason,
        }
    )

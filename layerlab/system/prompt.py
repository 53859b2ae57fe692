"""Prompts and the answer contract of the live harness.

A prompt carries the question and the delivered evidence with its operational metadata — the
:class:`~layerlab.system.reader.ReaderInput`, nothing more — and asks for a JSON reply
``{"status", "answer", "citations", "reason"}``. Replies that are not such JSON are
:class:`MalformedReply`, scored as failures with their own diagnostic label.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from layerlab._io import canonical_json
from layerlab.system.reader import Evidence, ReaderInput, ReaderOutput

INPUT_MARKER = "Search results:"
PROMPT_VERSION = "layerlab.prompt/v2"

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

# The reply contract as a JSON schema, for servers that constrain decoding to one
# (``--response-format json_schema``). Bounded lengths keep a small model from rambling. Every
# string also carries a pattern without control characters, quotes or backslashes: a JSON string
# may not hold a raw control character (RFC 8259), but llama-cpp-python turns a plain
# ``"type": "string"`` into a grammar that allows one, and 102 of SmolLM2's 136 malformed replies
# (248 of Gemma 3 270M's 544) under schema 1 were raw newlines inside a string. Servers that
# convert a schema to a grammar use the pattern; validators check it on the decoded value.
REPLY_SCHEMA_VERSION = "layerlab.reply-schema/2"
"""Identity of :data:`REPLY_SCHEMA`: part of a structured-output run's id and reply-cache keys
(schema 1, without patterns, made the committed real-model archives)."""


def _text(max_length: int) -> dict[str, Any]:
    return {
        "type": "string",
        "maxLength": max_length,
        "pattern": '^[^\\x00-\\x1F"\\\\]{0,' + str(max_length) + "}$",
    }


REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"type": "string", "enum": ["answered", "abstained"]},
        "answer": {"anyOf": [_text(80), {"type": "null"}]},
        "citations": {"type": "array", "items": _text(40), "maxItems": 3},
        "reason": {"anyOf": [_text(160), {"type": "null"}]},
    },
    "required": ["status", "answer", "citations", "reason"],
    "additionalProperties": False,
}

# The user turn is plain text a small model can read (v1 sent canonical JSON). It is still
# machine-readable: :func:`parse_input` recovers the exact ReaderInput (the reference agents
# read it that way), and a test checks the round trip over every prompt of every cell.
_META = (
    "status", "effective_year", "version", "domain", "owner", "access_scope", "tenant",
    "session_id", "truncated",
)  # fmt: skip
_HEAD = re.compile(r"^\[(\d+)\] doc_id: (.*)$")


def _meta_line(e: Evidence) -> str:
    vals = {
        **{k: getattr(e, k) for k in _META},
        "session_id": e.session_id if e.session_id is not None else "none",
        "truncated": "yes" if e.truncated else "no",
    }
    return " | ".join(f"{k}: {vals[k]}" for k in _META)


def render_input(inp: ReaderInput) -> str:
    """The user turn's text for one reader input (deterministic)."""
    lines = [
        "Answer the question from the search results below; they are listed in rank order.",
        f"Question: {inp.question}",
        f"Answer kind: {inp.answer_kind}",
        f"Request session id: {inp.session_id}",
        f"Search status: {inp.tool_status}",
    ]
    if inp.tool_error is not None:
        lines.append(f"Search error: {inp.tool_error}")
    lines.append(INPUT_MARKER)
    if not inp.evidence:
        lines.append("(no results)")
    for e in inp.evidence:
        lines += ["", f"[{e.rank}] doc_id: {e.doc_id}", f"title: {e.title}", _meta_line(e)]
        lines.append(f"text: {e.text}")
    return "\n".join(lines)


def messages(inp: ReaderInput) -> list[dict[str, str]]:
    """Chat messages for one reader input (deterministic text)."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": render_input(inp)}]


def merge_system(msgs: list[dict[str, str]]) -> list[dict[str, str]]:
    """Fold the system message into the first user turn (for chat templates that drop it)."""
    system = [m["content"] for m in msgs if m["role"] == "system"]
    rest = [dict(m) for m in msgs if m["role"] != "system"]
    if system and rest:
        rest[0]["content"] = "\n\n".join([*system, rest[0]["content"]])
    return rest


def prompt_hash(msgs: list[dict[str, str]]) -> str:
    """SHA-256 of the canonical prompt (version + messages)."""
    return hashlib.sha256(canonical_json({"v": PROMPT_VERSION, "m": msgs}).encode()).hexdigest()


def _field(line: str, name: str) -> str:
    prefix = f"{name}: "
    if not line.startswith(prefix):
        raise ValueError(f"expected a {name!r} line, got {line[:40]!r}")
    return line[len(prefix) :]


def parse_input(msgs: list[dict[str, Any]]) -> ReaderInput:
    """Recover the reader input from a prompt (used by the local reference agents)."""
    text = str(msgs[-1]["content"])
    head, _, body = text.partition("\n" + INPUT_MARKER + "\n")
    h = head.split("\n")
    error = next((_field(x, "Search error") for x in h if x.startswith("Search error: ")), None)
    evidence: list[Evidence] = []
    blocks = [] if body == "(no results)" else body.split("\n\n")
    for block in blocks:
        lines = block.strip("\n").split("\n")
        m = _HEAD.match(lines[0])
        if m is None:
            raise ValueError(f"expected a result header, got {lines[0][:40]!r}")
        meta = dict(kv.split(": ", 1) for kv in lines[2].split(" | "))
        evidence.append(
            Evidence(
                rank=int(m.group(1)),
                doc_id=m.group(2),
                title=_field(lines[1], "title"),
                text=_field("\n".join(lines[3:]), "text"),
                domain=meta["domain"],
                status=meta["status"],
                effective_year=int(meta["effective_year"]),
                version=int(meta["version"]),
                owner=meta["owner"],
                access_scope=meta["access_scope"],
                tenant=meta["tenant"],
                session_id=None if meta["session_id"] == "none" else meta["session_id"],
                truncated=meta["truncated"] == "yes",
            )
        )
    return ReaderInput(
        question=_field(h[1], "Question"),
        answer_kind=_field(h[2], "Answer kind"),
        session_id=_field(h[3], "Request session id"),
        tool_status=_field(h[4], "Search status"),
        tool_error=error,
        evidence=tuple(evidence),
    )


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

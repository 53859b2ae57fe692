"""The agent's conversation: its instructions, its actions and what the tools' replies look like.

Agent mode (:mod:`layerlab.harness.agent`) gives the model the question, the request's session
id and two tools (:data:`layerlab.harness.tools.TOOL_DEFINITIONS`), and lets it act. Two
*protocols* carry the tool calls:

* ``native`` — the provider's own tool calling: OpenAI-style ``tools``/``tool_calls`` through
  litellm, tool results as ``tool`` messages; the final reply is the single-call answer contract
  (:data:`layerlab.system.prompt.REPLY_SCHEMA`) in the message text.
* ``json_action`` — each reply is one JSON *action*, constrained by a JSON schema where the
  server supports one (:data:`ACTION_SCHEMA`; llama.cpp turns it into a grammar):
  ``{"action": "search", "query", "top_k"}``, ``{"action": "open_document", "doc_id"}`` or
  ``{"action": "answer", "status", "answer", "citations", "reason"}``; tool results come back as
  user turns. For local models served by llama.cpp with the model's own chat template, which
  does not turn ``tools`` into tool calls (measured: llama-cpp-python 0.3.36 with the Qwen2.5
  GGUF template returned ``tool_calls: null`` and echoed the tool list as text; nor does its
  ``chatml-function-calling`` format give a working loop: docs/local-models-tools.md).

On the last turn (the step limit reached) the agent is told to answer now, and under
``json_action`` the schema allows only the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from layerlab._io import canonical_json
from layerlab.system import prompt
from layerlab.system.reader import ReaderOutput

AGENT_PROMPT_VERSION = "layerlab.agent-prompt/v1"
PROTOCOLS = ("json_action", "native")
Protocol = Literal["json_action", "native"]

_ANSWER_RULES = (
    "Your final reply is one JSON object: "
    '{"status": "answered" or "abstained", "answer": the shortest exact span copied from a '
    "document (a duration with its unit, an amount with its currency sign, a percentage, a count "
    "with the noun it counts, or a role or system name) or null, "
    '"citations": [doc_id of each document you used], "reason": null or a short reason for '
    "abstaining}. Abstain rather than guess when the documents you got do not support an "
    "answer. Each document carries operational metadata (status, effective_year, version, "
    "owner, access_scope, tenant, session_id, truncated): check it before you rely on it."
)

SYSTEM = {
    "native": (
        "You answer questions about Northwind's internal policies. You have two tools: search "
        "(query, top_k) finds policy documents; open_document (doc_id) opens one. Call them "
        "as you need, then reply without a tool call. A tool may fail or return an error; you "
        "may call it again. " + _ANSWER_RULES
    ),
    "json_action": (
        "You answer questions about Northwind's internal policies. Each of your replies is one "
        "JSON action and nothing else: "
        '{"action": "search", "query": what to search for, "top_k": 1 to 5} finds policy '
        'documents; {"action": "open_document", "doc_id": a doc_id} opens one; '
        '{"action": "answer", "status": ..., "answer": ..., "citations": [...], "reason": ...} '
        "ends with your final reply. After each tool action you get the tool's result. A tool "
        "may fail or return an error; you may call it again. " + _ANSWER_RULES
    ),
}

LAST_TURN = "No tool calls are left: give your final reply now."


def first_messages(
    question: str, answer_kind: str, session_id: str, max_steps: int, protocol: str
) -> list[dict[str, Any]]:
    """The conversation's opening: the instructions and the question (no evidence)."""
    user = "\n".join(
        [
            f"Question: {question}",
            f"Answer kind: {answer_kind}",
            f"Request session id: {session_id}",
            f"You may make up to {max_steps} tool calls.",
        ]
    )
    return [{"role": "system", "content": SYSTEM[protocol]}, {"role": "user", "content": user}]


def _text(n: int) -> dict[str, Any]:
    return prompt._text(n)  # the reply schema's bounded, control-free strings


_ANSWER_ACTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"const": "answer"},
        **prompt.REPLY_SCHEMA["properties"],
    },
    "required": ["action", *prompt.REPLY_SCHEMA["required"]],
    "additionalProperties": False,
}
ACTION_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "properties": {
                "action": {"const": "search"},
                "query": _text(200),
                "top_k": {"enum": [1, 2, 3, 4, 5]},
            },
            "required": ["action", "query", "top_k"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"action": {"const": "open_document"}, "doc_id": _text(60)},
            "required": ["action", "doc_id"],
            "additionalProperties": False,
        },
        _ANSWER_ACTION,
    ]
}
"""The ``json_action`` reply schema (what a grammar-constraining server decodes under)."""
ANSWER_SCHEMA: dict[str, Any] = {"anyOf": [_ANSWER_ACTION]}
"""The last turn's schema: the answer only."""


@dataclass(frozen=True)
class ToolRequest:
    """A tool call as the agent made it (arguments unchecked; the tool box checks them)."""

    name: str
    args: Any
    call_id: str = ""


@dataclass(frozen=True)
class Turn:
    """One parsed agent reply: tool calls, or the final reply (``out``)."""

    calls: tuple[ToolRequest, ...] = ()
    out: ReaderOutput | None = None


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _json_object(text: str | None) -> dict[str, Any]:
    if not text or not text.strip():
        raise prompt.MalformedReply("empty reply")
    raw = text.strip()
    m = _FENCE.match(raw)
    try:
        obj = json.loads(m.group(1) if m else raw)
    except json.JSONDecodeError as exc:
        raise prompt.MalformedReply(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise prompt.MalformedReply(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_action(text: str | None) -> Turn:
    """A ``json_action`` reply: a tool call, or the final reply. Raises
    :class:`~layerlab.system.prompt.MalformedReply` for a reply that is no JSON object or has
    no ``action``; an unknown action is a tool call to an unknown tool (an invalid call)."""
    obj = _json_object(text)
    action = obj.pop("action", None)
    if not isinstance(action, str):
        raise prompt.MalformedReply("no 'action' in the reply")
    if action == "answer":
        return Turn(out=prompt.parse_reply(canonical_json(obj)))
    return Turn(calls=(ToolRequest(action, obj),))


def parse_native(reply: str | None) -> Turn:
    """A ``native`` reply (:func:`native_reply`'s JSON): its tool calls, else the final reply."""
    msg = _json_object(reply)
    calls = msg.get("tool_calls") or []
    if calls:
        out = []
        for c in calls:
            try:
                args: Any = json.loads(c.get("arguments") or "{}")
            except (json.JSONDecodeError, TypeError):
                args = c.get("arguments")  # not JSON: an invalid call
            out.append(ToolRequest(str(c.get("name")), args, str(c.get("id") or "")))
        return Turn(calls=tuple(out))
    return Turn(out=prompt.parse_reply(msg.get("content")))


def native_reply(message: Any) -> str:
    """A provider message (content and tool calls) as one JSON string: what the reply cache
    stores for a ``native`` turn."""
    calls = []
    for c in getattr(message, "tool_calls", None) or []:
        fn = getattr(c, "function", None)
        calls.append(
            {
                "id": getattr(c, "id", "") or "",
                "name": getattr(fn, "name", "") or "",
                "arguments": getattr(fn, "arguments", "") or "",
            }
        )
    return canonical_json({"content": getattr(message, "content", None), "tool_calls": calls})


def assistant_message(protocol: str, reply: str, turn: Turn) -> dict[str, Any]:
    """The agent's reply as the conversation carries it on."""
    if protocol == "native" and turn.calls:
        return {
            "role": "assistant",
            "content": json.loads(reply).get("content"),
            "tool_calls": [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.args if isinstance(c.args, str) else canonical_json(c.args),
                    },
                }
                for c in turn.calls
            ],
        }
    return {"role": "assistant", "content": reply}


TOOL_RESULT = "Tool result"


def tool_message(protocol: str, call: ToolRequest, observation: dict[str, Any]) -> dict[str, Any]:
    """A tool's observation as the next message."""
    body = canonical_json(observation)
    if protocol == "native":
        return {"role": "tool", "tool_call_id": call.call_id, "content": body}
    return {"role": "user", "content": f"{TOOL_RESULT} ({call.name}):\n{body}"}


def observations(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool observation in a conversation, in order (either protocol)."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if m.get("role") == "tool":
            out.append(json.loads(content))
        elif m.get("role") == "user" and content.startswith(TOOL_RESULT + " ("):
            out.append(json.loads(content.split("\n", 1)[1]))
    return out


def is_agent_conversation(messages: list[dict[str, Any]]) -> bool:
    """Whether ``messages`` are an agent conversation (either protocol)."""
    text = " ".join(str(m.get("content") or "") for m in messages[:2])
    return any(s[:60] in text for s in SYSTEM.values()) or any(
        str(m.get("content") or "").startswith(SYSTEM[p][:60]) for m in messages for p in SYSTEM
    )


def opening(messages: list[dict[str, Any]]) -> dict[str, str]:
    """The question, answer kind and session id of an agent conversation's opening."""
    for m in messages:
        content = str(m.get("content") or "")
        if m.get("role") == "user" and "Question: " in content:
            lines = content[content.index("Question: ") :].split("\n")
            head = dict(x.split(": ", 1) for x in lines[:3])
            return {
                "question": head["Question"],
                "answer_kind": head["Answer kind"],
                "session_id": head["Request session id"],
            }
    raise ValueError("no question in the conversation")


def protocol_of(messages: list[dict[str, Any]]) -> str | None:
    """The protocol of an agent conversation, judged by its instructions (None: not one)."""
    for m in messages:
        if m.get("role") == "system":
            for p, text in SYSTEM.items():
                if m.get("content") == text:
                    return p
    return None


def turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An agent conversation's tool-calling turns, in order (either protocol): per turn the
    assistant's text beside its calls (native; None under ``json_action``, whose text is the
    action) and its ``calls``, each ``{"tool", "args", "observation"}`` — the arguments as the
    agent sent them (decoded from JSON where they are JSON) and the observation the call got
    (None when the conversation holds none)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role == "assistant":
            calls: list[dict[str, Any]] = []
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                args: Any = fn.get("arguments")
                try:
                    args = json.loads(args)
                except (TypeError, ValueError):
                    pass  # not JSON: shown as sent
                calls.append({"tool": fn.get("name"), "args": args, "observation": None,
                              "id": c.get("id") or ""})  # fmt: skip
            text = content if m.get("tool_calls") else None
            if not m.get("tool_calls"):
                try:
                    calls = [
                        {"tool": c.name, "args": c.args, "observation": None, "id": ""}
                        for c in parse_action(content).calls
                    ]
                except prompt.MalformedReply:
                    text = content
            out.append({"text": text, "calls": calls})
        elif out and (
            role == "tool" or (role == "user" and str(content or "").startswith(TOOL_RESULT + " ("))
        ):
            body = content if role == "tool" else str(content).split("\n", 1)[-1]
            try:
                obs: Any = json.loads(body)
            except (TypeError, ValueError):
                obs = {"status": "error", "error": {"code": "unreadable", "message": str(body)}}
            open_ = [c for c in out[-1]["calls"] if c["observation"] is None]
            same = [c for c in open_ if role == "tool" and c["id"] == m.get("tool_call_id")]
            if same or open_:
                (same or open_)[0]["observation"] = obs
    for t in out:
        for c in t["calls"]:
            del c["id"]
    return out


def final_parse(protocol: str, reply: str | None) -> str:
    """What a record's last reply was, in a few words: the final reply, tool calls (past the
    step limit), or why it is no action (malformed)."""
    if reply is None:
        return "no reply (the provider failed)"
    parse = parse_native if protocol == "native" else parse_action
    try:
        turn = parse(reply)
    except prompt.MalformedReply as exc:
        return f"malformed: {exc}"
    if turn.out is not None:
        return "final reply"
    return "still calling " + ", ".join(c.name for c in turn.calls) + " (no final reply)"

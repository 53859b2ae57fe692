"""An agent record's steps as the viewer shows them, from a sample-log entry or an agent table row.

A sample-log entry of an agent record (``run live --agent --sample-log``) carries the whole
conversation (:data:`~layerlab.archive.samplelog.AGENT_ENTRY_VERSION`). :func:`from_entry` turns
it into steps, verdict first: the agent's step fields, then per tool-calling turn each action
(tool and arguments), the tool's outcome (ok, partial, or its error code), the documents
delivered (ids and status, year, version, session, truncated, and a short excerpt of their text:
the page is private) and, last, the final reply and its parse. An archive holds no conversation:
:func:`from_row` gives the same steps from ``agent.parquet``'s per-call log (tools and outcomes,
no arguments, document ids or text).
"""

from __future__ import annotations

import json
from typing import Any

from layerlab._io import canonical_json
from layerlab.system import agentprompt as ap

EXCERPT = 160  # characters of a delivered document's text the viewer shows (folded)
ARGS = 300  # characters of a call's arguments


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _docs(obs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for d in obs.get("results") or []:
        if not isinstance(d, dict):
            continue
        out.append(
            {
                "doc_id": d.get("doc_id"),
                "status": d.get("status"),
                "effective_year": d.get("effective_year"),
                "version": d.get("version"),
                "session_id": d.get("session_id"),
                "truncated": bool(d.get("truncated")),
                "excerpt": _cut(" ".join(str(d.get("text") or "").split()), EXCERPT),
            }
        )
    return out


def _status(obs: dict[str, Any] | None) -> tuple[str, str]:
    """A call's observed outcome (``ok``, ``partial``, ``refused`` or the error's code) and its
    message."""
    if obs is None:
        return "no result", ""
    err = obs.get("error")
    if obs.get("status") == "error" and isinstance(err, dict):
        return str(err.get("code") or "error"), str(err.get("message") or "")
    if obs.get("status") == "refused":
        return "refused", str(err or "")
    msg = err.get("message", "") if isinstance(err, dict) else str(err or "")
    return str(obs.get("status")), msg


def from_entry(e: dict[str, Any]) -> dict[str, Any]:
    """The viewer's ``steps`` and ``final`` of an agent sample-log entry (the ``transcript``
    itself is left out of the page)."""
    msgs = e.get("transcript") or []
    agent = e.get("agent") or {}
    protocol = agent.get("protocol") or ap.protocol_of(msgs) or "json_action"
    log = list(agent.get("calls") or [])
    steps = []
    k = 0
    for i, t in enumerate(ap.turns(msgs), 1):
        calls = []
        for c in t["calls"]:
            status, message = _status(c["observation"])
            logged = log[k] if k < len(log) else {}
            k += 1
            args = c["args"] if isinstance(c["args"], str) else canonical_json(c["args"])
            calls.append(
                {
                    "tool": c["tool"],
                    "args": _cut(args, ARGS),
                    "status": status,
                    "message": _cut(message, ARGS),
                    "outcome": logged.get("outcome", status),
                    "valid": logged.get("valid", status != "invalid_call"),
                    "after_fault": bool(logged.get("after_fault", False)),
                    "docs": _docs(c["observation"] or {}),
                }
            )
        steps.append({"step": i, "text": t["text"], "calls": calls})
    reply = e.get("reply")
    return {
        "steps": steps,
        "final": {
            "step": agent.get("steps", len(steps) + 1),
            "parse": ap.final_parse(protocol, reply),
            "reply": _reply_text(protocol, reply),
        },
    }


def _reply_text(protocol: str, reply: str | None) -> str | None:
    """The last reply as the agent wrote it: under ``native`` its text and tool calls."""
    if reply is None or protocol != "native":
        return reply
    try:
        msg = json.loads(reply)
    except ValueError:
        return reply
    if not isinstance(msg, dict):
        return reply
    parts = [str(msg["content"])] if msg.get("content") else []
    parts += [
        f"tool call {c.get('name')}({c.get('arguments')})" for c in msg.get("tool_calls") or []
    ]
    return "\n".join(parts) or reply


def from_row(row: dict[str, Any]) -> dict[str, Any]:
    """The viewer's ``steps`` of an archived agent record (``agent.parquet``'s row, ``calls``
    decoded): per turn its calls' tools and outcomes, how many documents each delivered."""
    by: dict[int, list[dict[str, Any]]] = {}
    for c in row["calls"]:
        by.setdefault(int(c["step"]), []).append(
            {
                "tool": c["tool"],
                "outcome": c["outcome"],
                "status": c["outcome"],
                "valid": c["valid"],
                "after_fault": c["after_fault"],
                "n_docs": len(c["doc_ids"]),
            }
        )
    return {"steps": [{"step": s, "text": None, "calls": by[s]} for s in sorted(by)]}


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """The step fields the viewer's verdict shows."""
    keys = ("protocol", "steps", "tool_calls", "invalid_calls", "retries_after_fault", "step_limit")
    return {k: row[k] for k in keys}

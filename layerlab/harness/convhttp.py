"""HTTP services through the conversations: ``--target http://host:port/path`` (or ``https://``)
in ``layerlab run conversations``: a conversational system in any language.

layerlab serves the turn's search tool on localhost (the tool server of HTTP targets,
:mod:`~layerlab.harness.targets.toolserver`, in front of the conversation's cache) and POSTs each
turn to the service as JSON::

    {"conversation_id": "finance-01-c1", "turn": 1, "session_id": "s-...",
     "question": "...", "answer_kind": "amount",
     "history": [{"turn": 0, "role": "user", "text": "..."},
                 {"turn": 0, "role": "assistant", "text": "{\\"status\\": ...}"}],
     "memory": [{"turn": 0, "policy_id": "...", "text": "...", "session_id": "s-...",
                 "user": "...", "doc_id": "...", "invalidated_at": null}],
     "tools_url": "http://127.0.0.1:PORT", "tools_token": "...",
     "mcp_url": "http://127.0.0.1:PORT2/mcp/<token>"}

``history`` and ``memory`` are what layerlab serves the turn, after the session faults (the
fields of :class:`~layerlab.harness.convtools.ConversationRequest`). The service searches with
``POST {tools_url}/search {"session_id", "query", "top_k"}`` and the header ``Authorization:
Bearer {tools_token}``: the turn's token, valid while the turn is answered (401 without one, 403
with another's or another ``session_id``); any other tool is an invalid call. The same search is
an MCP tool at ``mcp_url``, the turn's own address (absent without the ``mcp`` extra). It answers with
the reply contract as JSON (``{"status": "answered", "answer": ..., "citations": [...]}``,
``abstained``, or ``clarification`` to ask back); a ``text/plain`` answer is free text. An HTTP
error fails the turn (``provider_error``), a reply not in time (setting ``timeout``, seconds)
is the turn's ``timeout``; the user moves on. A URL nothing answers at is refused before the run. Settings named
``header.NAME`` are sent as request headers, as for a single-turn HTTP target
(:mod:`~layerlab.harness.targets.http`, whose request and reply reading this reuses).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from layerlab.harness.convtools import ConversationRequest, exchange
from layerlab.harness.targets.http import HttpTarget


def body(request: ConversationRequest, tools_url: str, tools_token: str) -> dict[str, Any]:
    """The JSON a service gets for one turn (module docstring)."""
    out = {"conversation_id": request.conversation_id, "turn": request.turn,
           "session_id": request.session_id, "question": request.question,
           "answer_kind": request.answer_kind,
           "history": [asdict(m) for m in request.history],
           "memory": [asdict(m) for m in request.memory],
           "tools_url": tools_url, "tools_token": tools_token}  # fmt: skip
    mcp_url = request.mcp_url
    if mcp_url is not None:
        out["mcp_url"] = mcp_url
    return out


class ConversationalService(HttpTarget):
    """A service that answers each POSTed turn through layerlab's tool server."""

    def answer(self, request: Any) -> Any:
        with self.server.serving(request, exchange) as (tools_url, tools_token):
            return self.post(body(request, tools_url, tools_token))


__all__ = ["ConversationalService", "body"]

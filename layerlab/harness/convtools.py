"""A conversation's tools and the request a conversational system gets at each turn.

:class:`ConversationTool` is the conversation's search tool, held by layerlab: a registered
retriever over the corpus's documents as they stand at the turn (a replacement published during
the conversation is in the index as ``current`` and the document it retires is ``superseded``),
in front of the conversation's **tool cache**: a search repeated at a later turn (same query,
whitespace and case aside, same ``top_k``) is served the result cached at the earlier turn, as
a caching tool layer does. The cache is the session state's
(:class:`~layerlab.faults.session.SessionState`): a replacement invalidates the cached results
of its policy (the clean store's rule), and ``stale_tool_cache`` serves them again.

:class:`ConversationRequest` is what the system gets at one turn: the conversation id, the turn
index, the turn's text, the answer kind of the conversation's policy, the session id, the
history of the earlier turns and the memory served at this turn (both after the scenario's
session faults), the ``--target-setting`` values, and the faulted search tool (``search``,
``retriever``). No field, and no attribute path from it, leads to the answer key, the scenario
or the state's store: the tool lives apart (as for :class:`~layerlab.harness.targets.base.TargetRequest`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from layerlab._io import canonical_json
from layerlab.corpus.build import Document
from layerlab.faults.session import CachedResult, MemoryEntry, Message, SessionState
from layerlab.harness.targets.base import ToolError, documents, raise_for_error
from layerlab.harness.tools import SEARCH
from layerlab.system import retrieval

_SHOWN = ("doc_id", "title", "text", "domain", "status", "effective_year", "version", "owner",
          "access_scope", "tenant", "session_id")  # fmt: skip
MAX_TOP_K = 5


def normal_query(query: str) -> str:
    """A query as the cache keys it: whitespace collapsed, lower case."""
    return " ".join(query.split()).lower()


@dataclass(frozen=True)
class Call:
    """One search of a turn: its query, whether the cache served it, the documents delivered
    (their ids and texts: what the turn's scores are computed over) and whether its arguments
    were valid."""

    query: str
    cached: bool
    delivered: tuple[tuple[str, str], ...] = ()
    valid: bool = True


class Index:
    """The corpus's documents as a conversation has changed them, with a retriever fitted on
    them once per state (shared across the conversations and scenarios of a run)."""

    def __init__(self, docs: Sequence[Document], cue_words: Mapping[str, tuple[str, ...]],
                 retriever: str = retrieval.REPORTED.name) -> None:  # fmt: skip
        self.base = tuple(docs)
        self.cue_words = dict(cue_words)
        self.retriever = retriever
        self._fitted: dict[tuple[tuple[str, str], ...], tuple[Any, tuple[Document, ...]]] = {}

    def fitted(self, changes: tuple[tuple[str, Document], ...]) -> tuple[Any, tuple[Document, ...]]:
        """The retriever and documents after ``changes`` ((retired id, published document),
        in order)."""
        key = tuple((r, d.doc_id) for r, d in changes)
        if key not in self._fitted:
            docs = {d.doc_id: d for d in self.base}
            for retired, new in changes:
                if retired in docs:
                    docs[retired] = replace(docs[retired], status="superseded")
                docs[new.doc_id] = new
            ordered = tuple(docs.values())
            self._fitted[key] = (retrieval.make(self.retriever, ordered, self.cue_words), ordered)
        return self._fitted[key]


class ConversationTool:
    """The search tool of one turn: the conversation's index at the turn, the cache the session
    state serves, and the turn's log (:attr:`calls`, :attr:`writes`: results to cache)."""

    def __init__(self, index: Index, changes: tuple[tuple[str, Document], ...],
                 served: SessionState) -> None:  # fmt: skip
        self.index, self.changes, self.served = index, changes, served
        self.calls: list[Call] = []
        self.writes: list[tuple[str, tuple[str, ...], str]] = []
        self._lock = threading.Lock()  # a call in progress ends before the turn does
        self.closed = False

    def _hit(self, q: str, top_k: int) -> CachedResult | None:
        hits = [c for c in self.served.served_cache()
                if c.query == q and _top_k(c.payload) == top_k]  # fmt: skip
        return max(hits, key=lambda c: c.turn) if hits else None

    def search(self, query: Any, top_k: Any = retrieval.TOP_K) -> dict[str, Any]:
        with self._lock:
            if self.closed:  # a system still running after its turn's timeout
                raise RuntimeError("this ConversationRequest has no tools (its turn has ended)")
            return self._search(query, top_k)

    def call(self, name: str, args: Any) -> dict[str, Any]:
        """One call by name with its JSON arguments: ``search`` (``query``, ``top_k``); any
        other name is an invalid call, counted as one (a conversation's tool opens nothing)."""
        if name == SEARCH and isinstance(args, Mapping):
            return self.search(args.get("query"), args.get("top_k", retrieval.TOP_K))
        with self._lock:
            if self.closed:
                raise RuntimeError("this ConversationRequest has no tools (its turn has ended)")
            query = args.get("query", "") if isinstance(args, Mapping) else ""
            self.calls.append(Call(str(query), False, valid=False))
        return {"status": "error", "error": {"code": "invalid_call", "message":
                f"a conversation's tool is {SEARCH}({{query, top_k}}) only"}}  # fmt: skip

    def close(self) -> None:
        """The turn has ended: no call more (one in progress finishes first)."""
        with self._lock:
            self.closed = True

    def _search(self, query: Any, top_k: Any) -> dict[str, Any]:
        if not isinstance(query, str) or not query.strip():
            self.calls.append(Call(str(query), False, valid=False))
            return {"status": "error", "error": {"code": "invalid_call",
                                                 "message": "query must be a non-empty string"}}  # fmt: skip
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            self.calls.append(Call(query, False, valid=False))
            return {"status": "error", "error": {
                "code": "invalid_call", "message": f"top_k must be an integer in 1-{MAX_TOP_K}"}}
        q = normal_query(query)
        hit = self._hit(q, top_k)
        if hit is not None:
            obs = _observation(hit.payload)
            self.calls.append(Call(query, True, _delivered(obs)))
            return obs
        r, docs = self.index.fitted(self.changes)
        ranking = r.search([query], None, top_k)
        found = ranking.docs(0)
        obs = {"status": "ok", "results": [{k: getattr(d, k) for k in _SHOWN} | {"truncated": False}
                                           for d in found]}  # fmt: skip
        payload = canonical_json({"top_k": top_k, **obs})
        self.writes.append((q, tuple(dict.fromkeys(d.policy_id for d in found)), payload))
        self.calls.append(Call(query, False, _delivered(obs)))
        return obs

    def delivered(self) -> dict[str, str]:
        """Every document the turn's calls delivered: id -> text."""
        return {d: t for c in self.calls for d, t in c.delivered}


def _top_k(payload: str) -> int:
    import json

    return int(json.loads(payload).get("top_k", retrieval.TOP_K))


def _observation(payload: str) -> dict[str, Any]:
    import json

    obj = json.loads(payload)
    obj.pop("top_k", None)
    return obj


def _delivered(obs: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((str(r["doc_id"]), str(r.get("text", ""))) for r in obs.get("results") or ())


def spoken(message: Message) -> str:
    """What a history message says, as a chat framework's message holds it: a user's text; a
    reply's answer (its status when it has none: ``abstained``, ``clarification``)."""
    if message.role == "user":
        return message.text
    import json

    try:
        said = json.loads(message.text)
    except ValueError:
        return message.text
    if not isinstance(said, dict):
        return message.text
    answer = said.get("answer")
    return str(answer) if answer else str(said.get("status", ""))


# The turn's tool, out of the request's reach (see TargetRequest).
_TOOLS: weakref.WeakKeyDictionary[ConversationRequest, ConversationTool] = (
    weakref.WeakKeyDictionary()
)
# The run's MCP service of a turn (McpService over exchange): its address on first use.
_MCP: weakref.WeakKeyDictionary[ConversationRequest, Any] = weakref.WeakKeyDictionary()


class ConversationRequest:
    """What a conversational system gets at one turn (module docstring).

    ``conversation_id``, ``turn`` (0-based), ``question`` (the turn's text, as the scripted user
    said it), ``answer_kind`` (the kind of value the conversation's policy takes), ``session_id``
    (the session the turn is served under), ``history`` (the earlier turns' messages:
    :class:`~layerlab.faults.session.Message`, ``turn``/``role``/``text``; an assistant
    message's text is the reply as JSON), ``memory`` (the memory entries served:
    :class:`~layerlab.faults.session.MemoryEntry`, each with the ``session_id`` and ``user`` it
    belongs to), ``settings``; ``search(query, top_k=3)`` returns the tool's observation
    (``{"status": "ok", "results": [...]}`` or an error), ``retriever(query)`` a list of
    :class:`~layerlab.harness.targets.base.Document` (raising
    :class:`~layerlab.harness.targets.base.ToolError` on an error); ``mcp_url`` the same search
    over MCP, at the turn's own address.
    """

    __slots__ = ("__weakref__", "answer_kind", "conversation_id", "history", "memory",
                 "question", "session_id", "settings", "turn")  # fmt: skip

    def __init__(self, tool: ConversationTool, question: str, answer_kind: str,
                 history: tuple[Message, ...], memory: tuple[MemoryEntry, ...],
                 settings: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        _TOOLS[self] = tool
        served = tool.served
        self.conversation_id = served.conversation_id
        self.turn = served.turn
        self.session_id = served.session_id
        self.question = question
        self.answer_kind = answer_kind
        self.history = history
        self.memory = memory
        self.settings = dict(settings or {})

    def search(self, query: str, top_k: int = retrieval.TOP_K) -> dict[str, Any]:
        tool = _TOOLS.get(self)
        if tool is None:
            raise RuntimeError("this ConversationRequest has no tools (its turn has ended)")
        return tool.search(query, top_k)

    def retriever(self, query: str) -> list[Any]:
        obs = self.search(query)
        raise_for_error(obs, ToolError)
        return documents(obs)

    @property
    def mcp_url(self) -> str | None:
        """The turn's search tool as an MCP server (streamable HTTP on 127.0.0.1) at an address
        of this turn's own, valid while the turn is answered; None without the ``mcp`` extra or
        outside a run."""
        service = _MCP.get(self)
        return None if service is None or self not in _TOOLS else service.address(self)

    def __copy__(self) -> ConversationRequest:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ConversationRequest:
        return self


def exchange(request: ConversationRequest, name: str, args: Any) -> tuple[dict[str, Any], None]:
    """One tool call of a turn by name with its JSON arguments, as a service makes it through the
    tool server (:meth:`~layerlab.harness.targets.toolserver.ToolServer.serving`): ``search``
    (``query``, ``top_k``) is the turn's search tool; any other name is an invalid call (a
    conversation's tool opens nothing), counted as one. No transport event: a conversation's
    faults are the session's."""
    tool = _TOOLS.get(request)
    if tool is None:
        raise RuntimeError("this ConversationRequest has no tools (its turn has ended)")
    return tool.call(name, args), None


def user_of(request: ConversationRequest) -> str:
    """The user the turn's conversation belongs to (a session fault changes the session, not
    the user), for a framework that scopes long-term memory by user
    (:mod:`~layerlab.harness.convlanggraph`); not a request field, so a Python target sees no
    more than before."""
    tool = _TOOLS.get(request)
    if tool is None:
        raise RuntimeError("this ConversationRequest has no tools (its turn has ended)")
    return tool.served.user


def end_turn(request: ConversationRequest) -> None:
    """The turn has ended: its request calls no more tools (a call in progress finishes first;
    then the turn's log is fixed, whatever a system left running still tries)."""
    tool = _TOOLS.pop(request, None)
    if tool is not None:
        tool.close()
    service = _MCP.pop(request, None)
    if service is not None:
        service.release(request)


def mcp_service() -> Any:
    """A run's MCP service of the turns' tools (:class:`~layerlab.harness.targets.mcp.McpService`
    over :func:`exchange`, the search tool only; started when a turn first asks for its
    address), or None without the ``mcp`` extra. The caller closes it."""
    from layerlab.harness.targets.mcp import McpService, available

    return McpService(exchange=exchange, names=(SEARCH,)) if available() else None


def serve_mcp(request: ConversationRequest, service: Any) -> None:
    """Give ``request`` its address at ``service`` (None: no MCP address)."""
    if service is not None:
        _MCP[request] = service


__all__ = ["Call", "ConversationRequest", "ConversationTool", "Index", "end_turn", "exchange",
           "mcp_service", "normal_query", "serve_mcp", "spoken", "user_of"]  # fmt: skip

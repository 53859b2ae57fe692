"""LangGraph graphs through the conversations: ``--target langgraph:MODULE:FACTORY`` in
``layerlab run conversations``.

Layerlab holds the conversation's state (:mod:`~layerlab.faults.session`); a LangGraph team
keeps it in a checkpointer (the thread's messages) and a store (long-term memory). Here both are
real: a ``SqliteSaver`` (``langgraph-checkpoint-sqlite``) on a file in a temporary folder of the
run, and a ``SqliteStore`` on another (``--target-setting store=memory``: an ``InMemoryStore``).
Each turn, before the graph runs, layerlab writes into them what its session store *serves* the
turn (after the scenario's session faults and the arm's mitigation), so a fault sits where the
team's graph reads:

* the thread (``thread_id``: the turn's session id) is deleted and written afresh with the
  served history (``graph.update_state``): a user turn a ``HumanMessage``, a reply an
  ``AIMessage`` of its answer (:func:`~layerlab.harness.convtools.spoken`), ids
  ``"{turn}-{role}"``. A history a fault truncated is a thread without those turns; a swapped
  session is another thread id;
* the store is emptied (a store the graph brought: its ``("memory", ...)`` namespaces only)
  and holds the served memory entries under the namespace
  ``("memory", user_id)`` (:data:`NAMESPACE`; the user the conversation belongs to: a
  LangGraph team's user-scoped long-term memory), one item per entry, its value the entry's
  fields (``text``, ``policy_id``, ``doc_id``, ``session_id``, ``user``, ``turn``), so another
  user's entry a fault injects is in the team's store, under the team's user, tagged with the
  session it came from (a graph that scopes its memory reads ``session_id``).

What the graph writes during the turn (its reply, other state keys, store items) is replaced at
the next: layerlab's store keeps the clean record of the turn, as for a LangChain chain.

The factory is called once per run as a LangChain conversational target's is
(:mod:`~layerlab.harness.convlangchain`): with the ``BaseRetriever`` and the ``search`` tool over
the current turn's tool, ``settings=`` when it takes it, and ``checkpointer=`` and ``store=``
(layerlab's) when it takes them. It returns a compiled graph (``invoke`` and ``update_state``;
compiled without a checkpointer or store, it gets layerlab's) or an uncompiled ``StateGraph``,
which layerlab compiles with its checkpointer and store. The graph's state needs a ``messages``
key (``MessagesState``). Each turn invokes it with ``{"messages": [HumanMessage(question)],
"conversation_id", "turn", "answer_kind"}`` (keys its state does not declare are ignored) and
the config ``{"configurable": {"thread_id": <session id>, "user_id": <user>}}``::

    def factory(retriever, tool):
        def answer(state: MessagesState):
            docs = retriever.invoke(state["messages"][0].content)
            return {"messages": [AIMessage(docs[0].page_content if docs else "")]}
        return StateGraph(MessagesState).add_node(answer).add_edge(START, "answer")

The reply is the last AI message the graph added this turn: its text the answer (text that is
the reply contract as JSON is read as such), the citations from the first state key of
``citations``/``source_documents``/``context`` (``--target-setting sources_key=...``) or the
message's ``additional_kwargs["citations"]``; without citations the text is free text (its
citations the doc ids it mentions). A final state with ``status: clarification``, or a graph
stopped by ``interrupt()`` (human in the loop), asks back; no AI message is an abstention.
Graphs are invoked synchronously (``invoke``), one turn at a time.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from layerlab.harness.convtools import ConversationRequest, spoken, user_of
from layerlab.harness.targets.langchain import _CURRENT, LangChainTarget, components, reply_keys
from layerlab.harness.targets.python import _takes, build, load_attr
from layerlab.harness.targets.spec import TargetError, TargetSpec

INSTALL_HINT = ("a LangGraph target needs langgraph and langgraph-checkpoint-sqlite: "
                "pip install 'layerlab[langgraph]'")  # fmt: skip
NAMESPACE = "memory"
"""The store's namespace of the served memory: ``(NAMESPACE, user_id)``."""
STORES = ("sqlite", "memory")
CHECKPOINTS, MEMORIES = "checkpoints.sqlite", "store.sqlite"


def _imports() -> tuple[Any, Any, Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.memory import InMemoryStore
        from langgraph.store.sqlite import SqliteStore
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise TargetError(INSTALL_HINT) from exc
    return SqliteSaver, SqliteStore, InMemoryStore


def served_messages(request: ConversationRequest) -> list[Any]:
    """The turn's served history as LangChain messages (``HumanMessage`` for a user turn, an
    ``AIMessage`` of its answer for a reply; ids ``"{turn}-{role}"``)."""
    from langchain_core.messages import AIMessage, HumanMessage

    return [(HumanMessage if m.role == "user" else AIMessage)(spoken(m), id=f"{m.turn}-{m.role}")
            for m in request.history]  # fmt: skip


def memory_items(request: ConversationRequest) -> list[tuple[str, dict[str, Any]]]:
    """The turn's served memory as store items: (key, value), in the order served."""
    out = []
    for i, m in enumerate(request.memory):
        value = {k: v for k, v in asdict(m).items() if k != "invalidated_at"}
        out.append((f"{i:03d}-{m.session_id}-{m.turn}", value))
    return out


def _connect(path: Path, **kw: Any) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, **kw)
    conn.execute("PRAGMA synchronous=OFF")
    return conn


class Stores:
    """Layerlab's real LangGraph stores for one run: a ``SqliteSaver`` and a ``SqliteStore``
    (or ``InMemoryStore``) on files in a temporary folder, removed by :meth:`close`."""

    def __init__(self, store: str = "sqlite") -> None:
        SqliteSaver, SqliteStore, InMemoryStore = _imports()
        self.folder = Path(tempfile.mkdtemp(prefix="layerlab-langgraph-"))
        # turns run in a worker thread of their own (the run's turn timeout), one at a time; the
        # files live as long as the run, so no write waits for the disk (synchronous=OFF)
        self._conns = [_connect(self.folder / CHECKPOINTS)]
        self.checkpointer = SqliteSaver(self._conns[0])
        self.checkpointer.setup()
        if store == "memory":
            self.store: Any = InMemoryStore()
        else:
            self._conns.append(_connect(self.folder / MEMORIES, isolation_level=None))
            self.store = SqliteStore(self._conns[1])
            self.store.setup()

    @property
    def checkpoint_file(self) -> Path:
        """The checkpointer's SQLite file."""
        return self.folder / CHECKPOINTS

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def refill_store(store: Any, namespace: tuple[str, ...], items: list[tuple[str, dict[str, Any]]],
                 emptied: tuple[str, ...] = ()) -> None:  # fmt: skip
    """``store``'s items under the prefix ``emptied`` (all: layerlab holds the memory) deleted,
    then ``items`` put under ``namespace``, in one batch: the store holds what a turn is served."""
    from langgraph.store.base import PutOp

    ops = {(tuple(it.namespace), it.key): PutOp(tuple(it.namespace), it.key, None)
           for ns in store.list_namespaces(prefix=emptied or None, limit=100_000)
           for it in store.search(ns, limit=100_000)}  # fmt: skip
    ops |= {(namespace, k): PutOp(namespace, k, v, index=False) for k, v in items}
    if ops:
        store.batch(list(ops.values()))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: their text
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content
                       if isinstance(b, str) or isinstance(b, dict) and b.get("type") == "text")  # fmt: skip
    return str(content)


class ConversationalGraph(LangChainTarget):
    """A LangGraph graph from the user's factory, invoked once per turn (module docstring)."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        factory = load_attr(spec)
        opts = spec.options()
        kind = str(opts.get("store", "sqlite")).strip().lower()
        if kind not in STORES:
            raise TargetError(f"--target-setting store={opts['store']!r}: expected one of "
                              f"{', '.join(STORES)}")  # fmt: skip
        self.answer_keys, self.source_keys = reply_keys(opts)
        retriever, search, _open = components()
        self.stores = Stores(kind)
        self._lock = threading.Lock()  # a turn left running after its timeout waits its turn
        try:
            kw: dict[str, Any] = {}
            if _takes(factory, "settings"):
                kw["settings"] = opts
            if _takes(factory, "checkpointer"):
                kw["checkpointer"] = self.stores.checkpointer
            if _takes(factory, "store"):
                kw["store"] = self.stores.store
            self.graph = self._compiled(build(spec, factory, retriever, search, **kw))
        except BaseException:
            self.stores.close()
            raise

    def _compiled(self, made: Any) -> Any:
        """The factory's graph, compiled with layerlab's checkpointer and store where it has
        none; :class:`TargetError` (one line) when it is not a LangGraph graph with messages."""
        where = f"--target {self.spec.spec}"
        expected = ("expected a compiled LangGraph graph (invoke() and update_state()) or a "
                    "StateGraph to compile")  # fmt: skip
        if callable(getattr(made, "compile", None)) and not hasattr(made, "invoke"):
            try:
                made = made.compile(checkpointer=self.stores.checkpointer, store=self.stores.store)
            except Exception as exc:
                raise TargetError(self.spec.redact(f"{where}: compiling the StateGraph failed "
                                                   f"({type(exc).__name__}: {exc})")) from None  # fmt: skip
        if not all(callable(getattr(made, n, None)) for n in ("invoke", "update_state", "copy")):
            raise TargetError(f"{where}: the factory returned a {type(made).__name__}, not a "
                              f"LangGraph graph ({expected})")  # fmt: skip
        missing = {k: v for k, v in (("checkpointer", self.stores.checkpointer),
                                     ("store", self.stores.store))
                   if getattr(made, k, None) in (None, False)}  # fmt: skip
        if missing:
            made = made.copy(update=missing)
        if "messages" not in (getattr(made, "channels", None) or {}):
            raise TargetError(f"{where}: the graph's state has no 'messages' key (expected a "
                              "MessagesState, or a state with messages: add_messages)")  # fmt: skip
        return made

    @property
    def checkpointer(self) -> Any:
        """The checkpointer the graph runs with (layerlab's unless the graph brought its own)."""
        return self.graph.checkpointer

    @property
    def store(self) -> Any:
        """The store the graph runs with (layerlab's unless the graph brought its own)."""
        return self.graph.store

    def serve(self, request: ConversationRequest, config: dict[str, Any]) -> None:
        """Write what layerlab serves the turn into the graph's checkpointer and store (module
        docstring)."""
        thread = config["configurable"]["thread_id"]
        self.checkpointer.delete_thread(thread)
        self.graph.update_state(config, {"messages": served_messages(request)})
        # layerlab's own store is emptied whole; a store the graph brought, only of the memory
        mine = self.store is self.stores.store
        refill_store(self.store, (NAMESPACE, config["configurable"]["user_id"]),
                     memory_items(request), () if mine else (NAMESPACE,))  # fmt: skip

    def answer(self, request: Any) -> Any:
        from langchain_core.messages import HumanMessage

        config = {"configurable": {"thread_id": request.session_id,
                                   "user_id": user_of(request)}}  # fmt: skip
        asked = f"{request.turn}-user"
        token = _CURRENT.set(request)  # the retriever and tool search through the turn's tool
        try:
            with self._lock:
                self.serve(request, config)
                out = self.graph.invoke(
                    {"messages": [HumanMessage(request.question, id=asked)],
                     "conversation_id": request.conversation_id, "turn": request.turn,
                     "answer_kind": request.answer_kind},
                    config=config,
                )  # fmt: skip
        finally:
            _CURRENT.reset(token)
        return self.read(out, asked)

    def read(self, out: Any, asked: str) -> Any:
        """The final state as a reply (module docstring); ``asked``: the id of the turn's
        question among its messages."""
        if not isinstance(out, dict):
            return out
        if out.get("__interrupt__"):  # the graph stopped to ask the user (interrupt())
            value = out["__interrupt__"][0].value
            return {"status": "clarification", "answer": value if isinstance(value, str) else None}
        if out.get("status") == "clarification":
            return {"status": "clarification", "answer": out.get("answer")}
        messages = list(out.get("messages") or ())
        ids = [getattr(m, "id", None) for m in messages]
        after = messages[ids.index(asked) + 1:] if asked in ids else []
        said = [m for m in after if getattr(m, "type", None) == "ai"]
        if not said:
            return {"status": "abstained", "reason": "the graph added no AI message"}
        last = said[-1]
        text = _text(last.content)
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "status" in obj:
            return obj
        state = {k: v for k, v in out.items() if k in self.source_keys}
        if not state and "citations" in last.additional_kwargs:
            state = {"citations": last.additional_kwargs["citations"]}
        return self.reply({"answer": text, **state})

    def close(self) -> None:
        self.stores.close()


__all__ = ["NAMESPACE", "ConversationalGraph", "Stores", "memory_items", "refill_store",
           "served_messages"]  # fmt: skip

"""LangChain chat chains through the conversations: ``--target langchain:MODULE:FACTORY`` in
``layerlab run conversations``.

The factory is called once per run as a LangChain target's is
(:mod:`~layerlab.harness.targets.langchain`): with a ``BaseRetriever`` and the ``search`` tool,
both over the current turn's search tool (the conversation's cache in front), ``settings=`` when
it takes it and, when it takes it, ``get_session_history=``: the function
``RunnableWithMessageHistory`` wants, which returns the history layerlab serves the current turn
under that session (after the session faults) as a ``BaseChatMessageHistory`` (a user turn a
``HumanMessage``, a reply an ``AIMessage`` of its answer). What the chain adds to it is dropped:
layerlab's store keeps the turn. A chain with message history is then its factory's one line::

    def factory(retriever, tool, get_session_history):
        return RunnableWithMessageHistory(chain, get_session_history,
                                          input_messages_key="question",
                                          history_messages_key="history")

Each turn invokes the Runnable with ``{"question", "conversation_id", "turn", "answer_kind",
"memory"}`` (``memory``: the served entries as dicts) and the config
``{"configurable": {"session_id": <the turn's session id>}}``; its output is read as a
LangChain target's (``answer``/``output``/``result`` and ``source_documents``/``context``/
``citations``), and a dict with ``status: clarification`` asks back.
"""

from __future__ import annotations

import functools
from dataclasses import asdict
from typing import Any, cast

from layerlab.harness.convtools import ConversationRequest, spoken
from layerlab.harness.targets.langchain import (
    _CURRENT,
    LangChainTarget,
    components,
    reply_keys,
)
from layerlab.harness.targets.python import _takes, build, load_attr
from layerlab.harness.targets.spec import TargetError, TargetSpec


def _current() -> ConversationRequest:
    try:
        return cast(ConversationRequest, _CURRENT.get())
    except LookupError:
        raise RuntimeError("the layerlab history is read outside a turn") from None


@functools.cache
def _served_history() -> type:
    from langchain_core.chat_history import BaseChatMessageHistory

    class ServedHistory(BaseChatMessageHistory):
        """The history layerlab serves a turn; what a chain adds is dropped (layerlab's store
        keeps the turn)."""

        def __init__(self, messages: list[Any]) -> None:
            self.messages = messages

        def add_messages(self, messages: Any) -> None:
            return None

        def clear(self) -> None:
            return None

    return ServedHistory


def session_history(session_id: str) -> Any:
    """The history served to the current turn, when ``session_id`` is its session (else an
    empty one), as a ``BaseChatMessageHistory``."""
    from langchain_core.messages import AIMessage, HumanMessage

    req = _current()
    messages: list[Any] = []
    for m in req.history if session_id == req.session_id else ():
        messages.append((HumanMessage if m.role == "user" else AIMessage)(spoken(m)))
    return _served_history()(messages)


class ConversationalChain(LangChainTarget):
    """A Runnable from the user's factory, invoked once per turn (module docstring)."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        factory = load_attr(spec)
        opts = spec.options()
        self.answer_keys, self.source_keys = reply_keys(opts)
        retriever, search, _open = components()
        kw: dict[str, Any] = {}
        if _takes(factory, "get_session_history"):
            kw["get_session_history"] = session_history
        if _takes(factory, "settings"):
            kw["settings"] = opts
        self.chain = build(spec, factory, retriever, search, **kw)
        if not hasattr(self.chain, "invoke"):
            raise TargetError(f"--target {spec.spec}: the factory returned a "
                              f"{type(self.chain).__name__}, not a Runnable (expected invoke())")  # fmt: skip

    def answer(self, request: Any) -> Any:
        token = _CURRENT.set(request)
        try:
            out = self.chain.invoke(
                {"question": request.question, "conversation_id": request.conversation_id,
                 "turn": request.turn, "answer_kind": request.answer_kind,
                 "memory": [asdict(m) for m in request.memory]},
                config={"configurable": {"session_id": request.session_id}},
            )  # fmt: skip
        finally:
            _CURRENT.reset(token)
        if isinstance(out, dict) and out.get("status") == "clarification":
            return out
        return self.reply(out)


__all__ = ["ConversationalChain", "session_history"]

"""LlamaIndex chat engines through the conversations: ``--target llamaindex:MODULE:FACTORY`` in
``layerlab run conversations``.

The factory is called once per run as a LlamaIndex target's is
(:mod:`~layerlab.harness.targets.llamaindex`): with a LlamaIndex ``BaseRetriever`` over the
current turn's search tool (the conversation's cache in front; its ``session_id`` and
``answer_kind`` attributes tell the turn's), ``tools=`` (the ``search`` ``FunctionTool``) and
``settings=`` when it takes those keywords. It returns a chat engine: anything with
``chat(message, chat_history=...)`` (or only ``achat``). A stock engine is its factory's one
line::

    def factory(retriever):
        return CondensePlusContextChatEngine.from_defaults(retriever, llm=my_llm)

Each turn calls ``engine.chat(question, chat_history=messages)``. ``messages`` are LlamaIndex
``ChatMessage`` objects of what layerlab serves the turn (after the session faults): first the
memory entries served, each a ``system`` message of its text (``additional_kwargs``: the entry's
``session_id``, ``user``, ``policy_id``, ``doc_id`` and ``turn``, for an engine that scopes its
memory), then the earlier turns, a user's text a ``user`` message and a reply an ``assistant``
message of its answer (its status when it has none). A stock engine sets its memory to the chat
history it is given, so what it kept of a turn is replaced at the next: layerlab's store keeps
the turn.

The reply is read as a LlamaIndex target's (``response`` the answer, its ``source_nodes``' doc
ids the citations; an empty response an abstention; a response text that is the reply contract
as JSON is read as such, so ``{"status": "clarification"}`` asks back). ``--target-setting
achat=true`` (or an engine with only ``achat``) awaits ``achat``; ``tool_errors=empty`` makes a
failed search return no nodes, as for a single-turn target.
"""

from __future__ import annotations

from typing import Any

from layerlab.harness.convtools import ConversationRequest, spoken
from layerlab.harness.targets.llamaindex import (
    _CURRENT,
    LlamaIndexTarget,
    components,
    tool_errors_setting,
)
from layerlab.harness.targets.options import bool_setting
from layerlab.harness.targets.python import _takes, build, load_attr
from layerlab.harness.targets.spec import TargetError, TargetSpec
from layerlab.harness.tools import SEARCH


def chat_history(request: ConversationRequest) -> list[Any]:
    """The turn's served memory and history as LlamaIndex ``ChatMessage`` objects (module
    docstring)."""
    from llama_index.core.llms import ChatMessage, MessageRole

    out = [ChatMessage(role=MessageRole.SYSTEM, content=m.text,
                       additional_kwargs={"session_id": m.session_id, "user": m.user,
                                          "policy_id": m.policy_id, "doc_id": m.doc_id,
                                          "turn": m.turn})
           for m in request.memory]  # fmt: skip
    for m in request.history:
        role = MessageRole.USER if m.role == "user" else MessageRole.ASSISTANT
        out.append(ChatMessage(role=role, content=spoken(m)))
    return out


class ConversationalEngine(LlamaIndexTarget):
    """A chat engine from the user's factory, chatted with once per turn (module docstring)."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        factory = load_attr(spec)
        opts = spec.options()
        retriever, tools = components(tool_errors_setting(spec))
        kw: dict[str, Any] = {}
        if _takes(factory, "tools"):  # a conversation's tool searches; it opens nothing
            kw["tools"] = [t for t in tools if t.metadata.name == SEARCH]
        if _takes(factory, "settings"):
            kw["settings"] = opts
        self.engine = build(spec, factory, retriever, **kw)
        wanted = bool_setting(spec, "achat")
        self.is_async = bool(wanted) if wanted is not None else not hasattr(self.engine, "chat")
        needed = "achat" if self.is_async else "chat"
        if not callable(getattr(self.engine, needed, None)):
            raise TargetError(
                f"--target {spec.spec}: the factory returned a {type(self.engine).__name__}, "
                f"not a chat engine (expected {needed}(message, chat_history); "
                f"--target-setting achat={str(self.is_async).lower()})"
            )

    def answer(self, request: Any) -> Any:
        if self.is_async:
            return self._achat(request)
        token = _CURRENT.set(request)  # the retriever searches through the turn's tool
        try:
            out = self.engine.chat(request.question, chat_history=chat_history(request))
        finally:
            _CURRENT.reset(token)
        return self.reply(out)

    async def _achat(self, request: Any) -> Any:
        token = _CURRENT.set(request)
        try:
            out = await self.engine.achat(request.question, chat_history=chat_history(request))
        finally:
            _CURRENT.reset(token)
        return self.reply(out)


__all__ = ["ConversationalEngine", "chat_history"]

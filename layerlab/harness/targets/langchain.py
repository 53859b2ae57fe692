"""LangChain targets: ``--target langchain:pkg.module:factory``.

The factory is called once per run with a ``langchain_core`` ``BaseRetriever`` and the ``search``
``BaseTool``, both over the faulted tools of whichever record is being answered; with ``tools=``
(both tools, ``[search, open_document]``, ready for ``llm.bind_tools``) and ``settings=`` when it
takes those keywords. It returns a Runnable. Each record invokes it with ``{"question": ...,
"session_id": ..., "answer_kind": ...}``. Example::

    def factory(retriever, tool):
        docs = retriever.with_fallbacks([RunnableLambda(lambda q: [])],
                                        exceptions_to_handle=(ToolException,))
        def answer(inp):
            found = docs.invoke(inp["question"])
            return {"answer": found[0].page_content if found else "", "source_documents": found[:1]}
        return RunnableLambda(answer)

**Tool errors, as LangChain users expect them.** The retriever returns ``Document`` objects
(``metadata`` holds ``doc_id``, the operational metadata, ``tool_status`` ``ok``/``partial`` and,
on a partial result, ``tool_error`` ``{code, message}``) and an empty list when nothing matched;
when the tool fails it *raises* a ``langchain_core.tools.ToolException`` (also a
:class:`~layerlab.harness.targets.ToolError`) whose ``code`` says why (``unavailable``,
``denied``, ``invalid_payload``, ``refused``...), as a retriever over a failing backend raises.
A chain that does not handle it fails the record, counted as a ``provider_error``. The tools
return the tool's observation as JSON, the error included (``{"status": "error", "error":
{"code", "message"}}``), never raising: what an agent reads as the observation.

The reply is read from the output: a string (or a message's content) is free text; a dict gives
the answer from the first of ``answer``, ``output``, ``result`` and the sources from
``source_documents``, ``context``, ``citations`` (documents, dicts with ``doc_id``, or ids) — the
settings ``answer_key`` and ``sources_key`` name other keys. A dict with an answer but no sources
is free text (its citations are the doc ids it mentions).

Records are invoked concurrently (``invoke`` in threads, up to ``--concurrency``); a chain that
only runs asynchronously (a ``RunnableLambda`` of an ``async def``), or any chain with
``--target-setting ainvoke=true``, is awaited with ``ainvoke``. A factory (or the chain it
returns) that sets ``concurrent = False`` is invoked one record at a time; a chain with
``setup()``/``close()`` has them called once per run. A chain that reaches its tools over MCP
reads the record's address with :func:`mcp_url` while it runs (the address is not in the
chain's input: a fresh token per record would change every prompt that shows the input).
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Mapping
from typing import Any

from layerlab.harness.targets.base import (
    TargetRequest,
    ToolError,
    call_hook,
    documents,
    raise_for_error,
)
from layerlab.harness.targets.options import bool_setting
from layerlab.harness.targets.python import _takes, build, load_attr
from layerlab.harness.targets.spec import TargetError, TargetSpec
from layerlab.harness.tools import OPEN, SEARCH

ANSWER_KEYS = ("answer", "output", "result")
SOURCE_KEYS = ("source_documents", "context", "citations")
INSTALL_HINT = "a LangChain target needs langchain-core: pip install 'layerlab[study]'"

_CURRENT: contextvars.ContextVar[TargetRequest] = contextvars.ContextVar("layerlab_target")


def _request() -> TargetRequest:
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("the layerlab retriever/tool is used outside a record") from None


def mcp_url() -> str | None:
    """The MCP address of the record being answered, for a chain that reaches its tools over
    MCP (e.g. ``langchain-mcp-adapters``): call it inside the chain, per record. None without
    the ``mcp`` extra."""
    return _request().mcp_url


@functools.cache
def tool_exception() -> type[ToolError]:
    """The exception the retriever raises on a tool error: LangChain's ``ToolException`` and
    layerlab's :class:`ToolError` (``code``, ``message``) at once."""
    from langchain_core.tools import ToolException

    class FaultedToolException(ToolException, ToolError):
        """A failed layerlab tool call (``code``: why; ``message``: the tool's words)."""

    return FaultedToolException


def components() -> tuple[Any, Any, Any]:
    """(a ``BaseRetriever``, the ``search`` tool, the ``open_document`` tool) over the current
    record's tools."""
    try:
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever
        from langchain_core.tools import StructuredTool
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise TargetError(INSTALL_HINT) from exc
    error = tool_exception()

    class FaultedRetriever(BaseRetriever):
        """layerlab's faulted search tool as a retriever: documents, or a ``ToolException``
        carrying the tool's error code."""

        top_k: int = 3

        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Any]:
            obs = _request().search(query, self.top_k)
            raise_for_error(obs, error)
            return [Document(page_content=d.page_content, metadata=d.metadata, id=d.doc_id)
                    for d in documents(obs)]  # fmt: skip

    def search(query: str, top_k: int = 3) -> str:
        """Search the company's policy documents: results with text and metadata, or an error."""
        return json.dumps(_request().search(query, top_k))

    def open_document(doc_id: str) -> str:
        """Open one document by its doc_id (as a search returned it): its text and metadata,
        or an error."""
        return json.dumps(_request().open_document(doc_id))

    return (FaultedRetriever(), StructuredTool.from_function(func=search, name=SEARCH),
            StructuredTool.from_function(func=open_document, name=OPEN))  # fmt: skip


def _pick(out: dict[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any]:
    for k in keys:
        if k in out:
            return True, out[k]
    return False, None


def reply_keys(opts: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The output keys a chain's answer and sources are read from: the settings
    ``answer_key`` / ``sources_key`` when given, else :data:`ANSWER_KEYS` / :data:`SOURCE_KEYS`."""
    answer = (str(opts["answer_key"]),) if "answer_key" in opts else ANSWER_KEYS
    sources = (str(opts["sources_key"]),) if "sources_key" in opts else SOURCE_KEYS
    return answer, sources


class LangChainTarget:
    """A Runnable from the user's factory, invoked once per record."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        factory = load_attr(spec)
        opts = spec.options()
        self.answer_keys, self.source_keys = reply_keys(opts)
        retriever, search, open_document = components()
        kw: dict[str, Any] = {}
        if _takes(factory, "tools"):
            kw["tools"] = [search, open_document]
        if _takes(factory, "settings"):
            kw["settings"] = opts
        self.chain = build(spec, factory, retriever, search, **kw)
        if not hasattr(self.chain, "invoke"):
            raise TargetError(
                f"--target {spec.spec}: the factory returned a {type(self.chain).__name__}, "
                "not a Runnable (expected an object with invoke())"
            )
        self.concurrent = bool(getattr(factory, "concurrent", True)) and bool(
            getattr(self.chain, "concurrent", True)
        )
        wanted = bool_setting(spec, "ainvoke")
        only_async = hasattr(self.chain, "afunc") and not hasattr(self.chain, "func")
        self.is_async = bool(wanted) if wanted is not None else only_async

    def answer(self, request: TargetRequest) -> Any:
        if self.is_async:
            return self._aanswer(request)
        token = _CURRENT.set(request)
        try:
            out = self.chain.invoke({"question": request.question,
                                     "session_id": request.session_id,
                                     "answer_kind": request.answer_kind})  # fmt: skip
        finally:
            _CURRENT.reset(token)
        return self.reply(out)

    async def _aanswer(self, request: TargetRequest) -> Any:
        token = _CURRENT.set(request)  # this record's task has a context of its own
        try:
            out = await self.chain.ainvoke({"question": request.question,
                                            "session_id": request.session_id,
                                            "answer_kind": request.answer_kind})  # fmt: skip
        finally:
            _CURRENT.reset(token)
        return self.reply(out)

    def reply(self, out: Any) -> Any:
        """The chain's output as a reply (see the module docstring)."""
        content = getattr(out, "content", None)
        if isinstance(content, str):
            return content
        if not isinstance(out, dict) or "status" in out:
            return out
        has_answer, answer = _pick(out, self.answer_keys)
        has_sources, sources = _pick(out, self.source_keys)
        answer = getattr(answer, "content", answer)
        if not has_answer:
            return out
        if not has_sources:
            return answer if isinstance(answer, str) else out  # free text: ids it mentions
        if isinstance(sources, str):
            sources = [sources]
        return {"answer": answer, "citations": list(sources or [])}

    def setup(self) -> None:
        call_hook(self.chain, "setup")

    def close(self) -> None:
        call_hook(self.chain, "close")

"""LlamaIndex targets: ``--target llamaindex:pkg.module:factory``.

The factory is called once per run with a LlamaIndex ``BaseRetriever`` over the faulted
``search`` of whichever record is being answered; with ``tools=`` (``[search, open_document]``
as LlamaIndex ``FunctionTool`` objects, ready for an agent) and ``settings=`` when it takes
those keywords. It returns what answers a query:

* a query engine — anything with ``query`` (or only ``aquery``): a ``RetrieverQueryEngine``, a
  ``CustomQueryEngine``, a router...;
* a response synthesizer (``get_response_synthesizer(llm=...)``): layerlab queries it over its
  own retriever (``RetrieverQueryEngine(retriever, synthesizer)``);
* a tuple ``(retriever, synthesizer)`` or ``(retriever, synthesizer, node_postprocessors)``: the
  same over the retriever the factory built (its own wrapper of layerlab's, say).

Each record queries it with the question. Example (no glue: the LLM is yours)::

    from llama_index.core.query_engine import RetrieverQueryEngine

    def factory(retriever):
        return RetrieverQueryEngine.from_args(retriever, llm=my_llm)

**Nodes and tool errors.** The retriever returns ``NodeWithScore`` objects whose ``TextNode`` has
the document's id as its ``node_id`` and in ``metadata`` (``doc_id``), the operational metadata
(status, effective_year, version, owner, access_scope, tenant, session_id, truncated — what a
synthesizer's prompt shows of a node by default), ``tool_status`` ``ok``/``partial`` and, on a
partial result, ``tool_error`` ``{code, message}``; ``score`` is None (the tool never shows the
retriever's score). When the tool fails it *raises* :class:`FaultedToolError` (a
:class:`~layerlab.harness.targets.ToolError`: ``code`` ``unavailable``, ``denied``,
``invalid_payload``, ``refused``...), as a retriever over a failing store raises: an engine
that does not handle it fails the record (a ``provider_error``). ``--target-setting
tool_errors=empty`` makes a failed search return no nodes instead (a LlamaIndex synthesizer then
answers ``Empty Response``: an abstention). The retriever also tells the current record's
``session_id`` and ``answer_kind`` (attributes), for an engine that checks them. The tools
return the observation as JSON and flag a failed call (``ToolOutput.is_error``), never raising:
what an agent reads as the observation.

**The reply.** A ``Response`` gives the answer (``response``) and, as citations, its
``source_nodes``' doc ids; a response that is empty, ``None`` or LlamaIndex's ``Empty Response``
is an abstention (``metadata["reason"]`` its reason, if given); a response text that is the
reply contract (JSON with ``status``) is read as such; a response with no source nodes is free
text (its citations are the doc ids it mentions). A ``PydanticResponse`` or a dict is read as
the reply contract's fields; a string is free text.

Records are queried concurrently (``query`` in threads, up to ``--concurrency``); an engine with
only ``aquery``, or any with ``--target-setting aquery=true``, is awaited with ``aquery``. A
factory (or the engine it returns) that sets ``concurrent = False`` is queried one record at a
time; an engine with ``setup()``/``close()`` has them called once per run.
"""

from __future__ import annotations

import contextvars
import functools
import json
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
from layerlab.harness.tools import OPEN, SEARCH, TOOL_DEFINITIONS
from layerlab.system import retrieval

INSTALL_HINT = "a LlamaIndex target needs llama-index-core: pip install 'layerlab[llamaindex]'"
EMPTY_RESPONSE = "Empty Response"
"""What LlamaIndex's synthesizers answer when no node reached them: an abstention."""
TOOL_ERRORS = ("raise", "empty")

_CURRENT: contextvars.ContextVar[TargetRequest] = contextvars.ContextVar("layerlab_li_target")


class FaultedToolError(ToolError):
    """A failed layerlab tool call raised by the LlamaIndex retriever (``code``: why)."""


def _request() -> TargetRequest:
    try:
        return _CURRENT.get()
    except LookupError:
        raise RuntimeError("the layerlab retriever/tool is used outside a record") from None


def _description(name: str) -> str:
    return next(t["function"]["description"] for t in TOOL_DEFINITIONS
                if t["function"]["name"] == name)  # fmt: skip


@functools.cache
def _classes() -> tuple[type, Any, Any]:
    """(the retriever class, the node builder, the tools' builder), built once."""
    try:
        from llama_index.core.retrievers import BaseRetriever
        from llama_index.core.schema import NodeWithScore, TextNode
        from llama_index.core.tools import FunctionTool
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise TargetError(INSTALL_HINT) from exc

    class FaultedRetriever(BaseRetriever):  # type: ignore[misc]
        """layerlab's faulted search tool as a LlamaIndex retriever: nodes, or a
        :class:`FaultedToolError` carrying the tool's error code."""

        def __init__(self, similarity_top_k: int = retrieval.TOP_K, tool_errors: str = "raise",
                     **kwargs: Any) -> None:  # fmt: skip
            super().__init__(**kwargs)
            self.similarity_top_k = similarity_top_k
            self.tool_errors = tool_errors

        @property
        def session_id(self) -> str:
            """The current record's request session id."""
            return _request().session_id

        @property
        def answer_kind(self) -> str:
            """What kind of value the current record's question asks for."""
            return _request().answer_kind

        def _retrieve(self, query_bundle: Any) -> list[Any]:
            obs = _request().search(query_bundle.query_str, self.similarity_top_k)
            if self.tool_errors == "empty" and obs.get("status") in ("error", "refused"):
                return []
            raise_for_error(obs, FaultedToolError)
            return [nodes(d) for d in documents(obs)]

    def nodes(d: Any) -> Any:
        return NodeWithScore(node=TextNode(id_=d.doc_id, text=d.page_content,
                                           metadata=d.metadata), score=None)  # fmt: skip

    def flagged(out: Any) -> Any:
        """A tool's output, flagged ``is_error`` when the call failed (status error/refused)."""
        if json.loads(out.raw_output).get("status") in ("error", "refused"):
            out.is_error = True
        return out

    class FaultedTool(FunctionTool):  # type: ignore[misc]
        """A layerlab tool: the observation as JSON text, a failed call flagged ``is_error``."""

        def call(self, *args: Any, **kwargs: Any) -> Any:
            return flagged(super().call(*args, **kwargs))

        async def acall(self, *args: Any, **kwargs: Any) -> Any:
            return flagged(await super().acall(*args, **kwargs))

    def search(query: str, top_k: int = retrieval.TOP_K) -> str:
        return json.dumps(_request().search(query, top_k))

    def open_document(doc_id: str) -> str:
        return json.dumps(_request().open_document(doc_id))

    def tools() -> list[Any]:
        return [FaultedTool.from_defaults(fn=fn, name=name, description=_description(name))
                for fn, name in ((search, SEARCH), (open_document, OPEN))]  # fmt: skip

    return FaultedRetriever, nodes, tools


def components(tool_errors: str = "raise") -> tuple[Any, list[Any]]:
    """(a LlamaIndex ``BaseRetriever``, the ``search`` and ``open_document`` tools) over the
    current record's tools."""
    retriever_cls, _nodes, tools = _classes()
    return retriever_cls(tool_errors=tool_errors), tools()


def tool_errors_setting(spec: TargetSpec) -> str:
    """``--target-setting tool_errors``: ``raise`` (the default) or ``empty``."""
    raw = spec.options().get("tool_errors", "raise")
    value = str(raw).strip().lower()
    if value not in TOOL_ERRORS:
        raise TargetError(f"--target-setting tool_errors={raw!r}: expected "
                          f"{' or '.join(TOOL_ERRORS)}")  # fmt: skip
    return value


def _engine(made: Any, retriever: Any, spec: TargetSpec) -> Any:
    """What the factory returned, as something with ``query``/``aquery``."""
    if hasattr(made, "query") or hasattr(made, "aquery"):
        return made
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers import BaseSynthesizer

    if isinstance(made, BaseSynthesizer):
        return RetrieverQueryEngine(retriever, response_synthesizer=made)
    if isinstance(made, tuple) and len(made) in (2, 3) and isinstance(made[1], BaseSynthesizer):
        post = list(made[2]) if len(made) == 3 else None
        return RetrieverQueryEngine(made[0], response_synthesizer=made[1],
                                    node_postprocessors=post)  # fmt: skip
    raise TargetError(
        f"--target {spec.spec}: the factory returned a {type(made).__name__}, not a query engine "
        "(expected an object with query() or aquery(), a response synthesizer, or a tuple "
        "(retriever, synthesizer[, node_postprocessors]))"
    )


def _cite(node: Any) -> str:
    inner = getattr(node, "node", node)
    meta = getattr(inner, "metadata", None) or {}
    return str(meta.get("doc_id") or getattr(inner, "node_id", "") or "")


class LlamaIndexTarget:
    """A query engine from the user's factory, queried once per record."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        factory = load_attr(spec)
        opts = spec.options()
        retriever, tools = components(tool_errors_setting(spec))
        kw: dict[str, Any] = {}
        if _takes(factory, "tools"):
            kw["tools"] = tools
        if _takes(factory, "settings"):
            kw["settings"] = opts
        made = build(spec, factory, retriever, **kw)
        self.engine = _engine(made, retriever, spec)
        self.concurrent = bool(getattr(factory, "concurrent", True)) and bool(
            getattr(self.engine, "concurrent", True)
        )
        wanted = bool_setting(spec, "aquery")
        only_async = not hasattr(self.engine, "query")
        self.is_async = bool(wanted) if wanted is not None else only_async
        needed = "aquery" if self.is_async else "query"
        if not callable(getattr(self.engine, needed, None)):
            raise TargetError(
                f"--target {spec.spec}: the {type(self.engine).__name__} has no callable "
                f"{needed}() (--target-setting aquery={str(self.is_async).lower()})"
            )

    def answer(self, request: TargetRequest) -> Any:
        if self.is_async:
            return self._aanswer(request)
        token = _CURRENT.set(request)
        try:
            out = self.engine.query(request.question)
        finally:
            _CURRENT.reset(token)
        return self.reply(out)

    async def _aanswer(self, request: TargetRequest) -> Any:
        token = _CURRENT.set(request)  # this record's task has a context of its own
        try:
            out = await self.engine.aquery(request.question)
        finally:
            _CURRENT.reset(token)
        return self.reply(out)

    def reply(self, out: Any) -> Any:
        """The engine's output as a reply (see the module docstring)."""
        if hasattr(out, "get_response") and not hasattr(out, "response"):
            out = out.get_response()  # a streaming response, drained
        if isinstance(out, (str, dict)) or not hasattr(out, "response"):
            return out
        body, sources = out.response, list(getattr(out, "source_nodes", None) or [])
        if hasattr(body, "model_dump"):  # a PydanticResponse: the model's fields
            return body.model_dump()
        text = "" if body is None else str(body).strip()
        if text in ("", EMPTY_RESPONSE):
            reason = (getattr(out, "metadata", None) or {}).get("reason") or "empty response"
            return {"status": "abstained", "reason": str(reason)}
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "status" in parsed:
            return parsed
        if not sources:
            return text  # free text: its citations are the ids it mentions
        return {
            "answer": text,
            "citations": list(dict.fromkeys(c for c in map(_cite, sources) if c)),
        }

    def setup(self) -> None:
        call_hook(self.engine, "setup")

    def close(self) -> None:
        call_hook(self.engine, "close")

"""The system-under-test interface: what a target gets per record, what it returns, and the
record step that runs it and scores the result.

Per record the benchmark builds the record's faulted tools (:class:`~layerlab.harness.tools.ToolBox`:
the scenario's index, access and tool faults, the arm's contract and mitigations) and hands the
target a :class:`TargetRequest`: the question, its answer kind, the session id and those tools.
Whatever the target returns is read as the reply contract (:func:`read_reply`):

* a structured reply — a :class:`TargetReply`, a reader output, or a dict/JSON object with
  ``status`` (``answered``/``abstained``), ``answer`` and ``citations`` (a dict without
  ``status`` counts as answered when it has an answer);
* **free text** — a string that is not the JSON contract: the answer is the text, its citations
  the known document ids it mentions (removed from the answer). It is labelled ``free_text`` in
  the target table and the sample log, never passed off as structured; exact match (E) then
  rarely holds, ``contained`` says whether the text states the value.

A target that raises (or a service that fails) ends the record as ``provider_error`` — also
after a mitigation refused one of its calls: the failure is the record's, never passed off as
the refusal's abstention; a reply that is neither gives ``malformed_reply``. The record is scored by the one scorer over what the
target's tool calls delivered (:func:`layerlab.harness.tools.finish`), exactly as an agent's.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from layerlab._io import canonical_json
from layerlab.archive.agenttable import REPLY_FORMATS as REPLY_FORMATS  # the table's vocabulary
from layerlab.corpus.build import Task
from layerlab.faults.transport import TransportEvent, exception_for
from layerlab.harness.prepare import PreparedScenario
from layerlab.harness.step import Done, Reading, RecordContext
from layerlab.harness.targets.spec import TargetSpec
from layerlab.harness.tools import OPEN, SEARCH, ToolBox, finish
from layerlab.mitigations import Arm
from layerlab.system import prompt, retrieval
from layerlab.system.reader import ReaderOutput


class ToolError(RuntimeError):
    """A tool call that returned an error, raised by :meth:`TargetRequest.retriever` (``search``
    and ``open_document`` return the error as their result instead): ``code`` is the tool's
    error code (``unavailable``, ``denied``, ``invalid_payload``, ``not_found``, ``refused``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Document:
    """One retrieved document as :meth:`TargetRequest.retriever` returns it (LangChain's shape:
    ``page_content`` and ``metadata``, with ``doc_id`` and the operational metadata)."""

    page_content: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def doc_id(self) -> str:
        return str(self.metadata.get("doc_id", ""))


@dataclass(frozen=True)
class TargetReply:
    """The reply contract: ``answered`` with an answer and the doc ids it cites, or
    ``abstained`` (a structured non-answer) with a reason."""

    status: str
    answer: str | None = None
    citations: tuple[str, ...] = ()
    reason: str | None = None


def call_hook(obj: Any, name: str) -> None:
    """Call the user's object's optional lifecycle hook ``name`` (``setup`` or ``close``) when it
    has a callable one: what every adapter's own ``setup()``/``close()`` forwards to (a plain
    function's attributes are not hooks)."""
    if inspect.isfunction(obj):
        return
    hook = getattr(obj, name, None)
    if callable(hook):
        hook()


def documents(obs: Mapping[str, Any]) -> list[Document]:
    """A tool observation's results as :class:`Document` objects: the text apart; the metadata
    with the result's fields, ``tool_status`` (the observation's ``ok``/``partial``: a result's
    own ``status`` is the document's, current or superseded) and, on a partial result,
    ``tool_error`` (``{code, message}``)."""
    tool = {"tool_status": obs.get("status")}
    if obs.get("error"):
        tool["tool_error"] = obs["error"]
    return [
        Document(str(r.get("text", "")), {**{k: v for k, v in r.items() if k != "text"}, **tool})
        for r in obs.get("results") or ()
    ]


def raise_for_error(obs: Mapping[str, Any], error: type[ToolError] = ToolError) -> None:
    """Raise ``error(code, message)`` when ``obs`` is a failed call (status ``error`` or
    ``refused``); a partial or empty result is not a failure."""
    if obs.get("status") in ("error", "refused"):
        err = obs.get("error") or {}
        raise error(str(err.get("code", obs["status"])), str(err.get("message", "")))


# The record's ToolBox, out of the request's reach: a target gets the request, and no attribute
# path from it (``dir``/``vars``, closures, bound methods) leads to the scenario or its index.
# A Python target runs in layerlab's process, so code that goes looking (``gc``, frames) still
# can: run a system you do not trust as an HTTP target.
_TOOLBOXES: weakref.WeakKeyDictionary[TargetRequest, ToolBox] = weakref.WeakKeyDictionary()


# The run's MCP service of a request (:class:`~layerlab.harness.targets.mcp.McpService`): it
# gives the record its MCP address on first use and takes it back when the record ends.
_MCP: weakref.WeakKeyDictionary[TargetRequest, Any] = weakref.WeakKeyDictionary()


def _toolbox(request: TargetRequest) -> ToolBox:
    try:
        return _TOOLBOXES[request]
    except KeyError:
        raise RuntimeError("this TargetRequest has no tools (its record has ended)") from None


class TargetRequest:
    """What a target gets for one record.

    ``question``, ``answer_kind`` (what kind of value is asked: duration, amount, ...),
    ``session_id`` (the request's session; evidence of another session is a fault), ``settings``
    (the ``--target-setting`` values), and the record's faulted tools:

    * ``search(query, top_k=3)`` and ``open_document(doc_id)`` return the tool's observation:
      ``{"status": "ok"|"partial", "results": [{doc_id, text, status, effective_year, version,
      owner, access_scope, tenant, session_id, truncated}, ...]}``, or ``{"status": "error"|
      "refused", "error": {"code", "message"}}`` — ``error`` is always that object, a partial
      result's included (``{"code": "timeout", ...}``); errors are returned, never raised —
      except a **transport** fault (``scenarios_transport.yaml``), which a call meets as a
      network client would: a slow call takes its time, a failed one raises
      :class:`~layerlab.faults.transport.RateLimited` (``retry_after``),
      ``ServiceUnavailable``, ``ConnectionReset``, ``TimedOut``, ``TruncatedBody`` or
      ``AuthExpired`` (subclasses of ``ConnectionError``, ``ConnectionResetError``,
      ``TimeoutError`` and ``PermissionError``; :func:`deliver`).
      ``open_document`` opens a document of the scenario's index by id (returned by a search
      or not) and a session-scoped ``doc~s-...`` id once a search of the record returned it,
      through the same faults and contract as a search; another id is ``not_found``;
    * ``retriever(query)`` returns a list of :class:`Document` and raises :class:`ToolError` when
      the tool fails (a retriever has no other way to say so);
    * ``mcp_url``: the same tools as an MCP server (streamable HTTP on 127.0.0.1), at an
      address of this record's own, valid while the record is answered (for an agent built on
      an agent framework: :mod:`~layerlab.harness.targets.mcp`); None without the ``mcp``
      extra or outside a run.

    The request holds no reference to the scenario or its index (the tools live apart). It has
    ``__slots__`` (no ``__dict__``: add nothing to it; keep what you need beside it), and
    ``copy.copy``/``copy.deepcopy`` give the request itself (frameworks that deep-copy their
    inputs, Haystack's pipelines, get the record's working tools); it calls no tool once the
    record has ended.
    """

    __slots__ = ("__weakref__", "answer_kind", "question", "session_id", "settings")

    def __init__(self, tools: ToolBox, settings: Mapping[str, Any] | None = None) -> None:
        _TOOLBOXES[self] = tools
        self.question = tools.task.question
        self.answer_kind = tools.task.answer_kind
        self.session_id = tools.session_id
        self.settings = dict(settings or {})

    def call(self, name: str, args: Any) -> dict[str, Any]:
        """One tool call by name (``search`` or ``open_document``) with its JSON arguments; a
        transport fault is delivered in process (:func:`deliver`)."""
        tools = _toolbox(self)
        obs, event = exchange(self, name, args)
        deliver(event, tools)
        return obs

    def search(self, query: str, top_k: int = retrieval.TOP_K) -> dict[str, Any]:
        return self.call(SEARCH, {"query": query, "top_k": top_k})

    def open_document(self, doc_id: str) -> dict[str, Any]:
        return self.call(OPEN, {"doc_id": doc_id})

    def retriever(self, query: str) -> list[Document]:
        obs = self.search(query)
        raise_for_error(obs)
        return documents(obs)

    def __copy__(self) -> TargetRequest:
        return self  # a copy would hold no tools: the record's request is one object

    def __deepcopy__(self, memo: dict[int, Any]) -> TargetRequest:
        return self

    @property
    def mcp_url(self) -> str | None:
        service = _MCP.get(self)
        return None if service is None or self not in _TOOLBOXES else service.address(self)


def exchange(
    request: TargetRequest, name: str, args: Any
) -> tuple[dict[str, Any], TransportEvent | None]:
    """One tool call of ``request``'s record: its observation and its transport event (None: no
    transport fault), undelivered — what the tool server and the MCP endpoint deliver their own
    way (an HTTP status, an MCP tool error)."""
    tools = _toolbox(request)
    obs = tools.call(name, args, len(tools.calls) + 1)
    return obs, tools.last_event


def deliver(event: TransportEvent | None, tools: ToolBox) -> None:
    """A transport event in process: sleep its delay on the record's clock (bounded), then
    raise the failure's exception (:func:`layerlab.faults.transport.exception_for`)."""
    if event is None:
        return
    tools.clock.wait(event.delay_s)
    if event.fails:
        raise exception_for(event)


class Target(Protocol):
    """A loaded target: answers one request (the raw reply, read by :func:`read_reply`)."""

    spec: TargetSpec

    def answer(self, request: TargetRequest) -> Any: ...

    def close(self) -> None: ...


# --- reading the reply ------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadReply:
    """A target's reply as read: the reader output (None: no usable reply), its format
    (:data:`REPLY_FORMATS`) and the failure, if any."""

    out: ReaderOutput | None
    format: str
    failure: str | None = None
    reason: str | None = None  # why a reply is malformed (the sample log's target_error)


@dataclass(frozen=True)
class Unreadable:
    """A reply an adapter could not read (an HTTP service that said JSON and sent something
    else): read as ``malformed_reply`` with ``reason``."""

    reason: str


def _malformed(reason: str) -> ReadReply:
    return ReadReply(None, "none", "malformed_reply", reason)


_RUN = re.compile(r"[\w-]+")
"""A run of id characters: an id is mentioned where it starts and ends at a run's edges."""
_BRACKETS = re.compile(r"\(\s*[,;]?\s*\)|\[\s*[,;]?\s*\]")


def _id_pattern(doc_id: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(doc_id) + r"(?![\w-])")


def mentions(text: str, known: Iterable[str]) -> list[tuple[int, int, str]]:
    """Every mention of a known doc id in ``text`` as (start, end, id): where the id stands
    alone (no letter, digit, ``_`` or ``-`` on either side). Linear in the text: the text's
    runs of id characters are read once and each span of 1..k runs (k: the most an id has) is
    looked up, instead of one scan of the text per known id."""
    by_runs: dict[int, set[str]] = {}
    odd = []  # ids that start or end with another character: searched one by one
    longest = 0
    for d in set(known):
        runs = _RUN.findall(d)
        if runs and d.startswith(runs[0]) and d.endswith(runs[-1]):
            by_runs.setdefault(len(runs), set()).add(d)
            longest = max(longest, len(d))
        elif d:
            odd.append(d)
    found: list[tuple[int, int, str]] = []
    if by_runs:
        spans = [m.span() for m in _RUN.finditer(text)]
        for k, ids in by_runs.items():
            for i in range(len(spans) - k + 1):
                start, end = spans[i][0], spans[i + k - 1][1]
                if end - start <= longest and text[start:end] in ids:
                    found.append((start, end, text[start:end]))
    for d in odd:
        found += [(m.start(), m.end(), d) for m in _id_pattern(d).finditer(text)]
    return found


def free_text(text: str, known: Iterable[str]) -> ReaderOutput:
    """A free-text reply: the known doc ids it mentions are its citations (in the order first
    mentioned), the text without them (the longer of two overlapping mentions removed, and
    the brackets left empty) its answer. Linear in the text (:func:`mentions`)."""
    found = mentions(text, known)
    first: dict[str, int] = {}
    for start, _end, d in found:
        first[d] = min(start, first.get(d, start))
    cites = tuple(d for _, d in sorted((p, d) for d, p in first.items()))
    taken: list[tuple[int, int]] = []
    covered = bytearray(len(text))  # 1 where a taken mention stands
    for start, end, _d in sorted(found, key=lambda f: (f[0] - f[1], f[2], f[0])):
        if covered.find(1, start, end) < 0:  # longer mentions first, no overlap
            taken.append((start, end))
            covered[start:end] = b"\x01" * (end - start)
    parts, at = [], 0
    for start, end in sorted(taken):
        parts.append(text[at:start])
        at = end
    answer = "".join([*parts, text[at:]])
    answer = _BRACKETS.sub("", answer)
    answer = re.sub(r"\s+", " ", answer).strip(" \t\n,;:")
    if not answer:
        return ReaderOutput("abstained", None, (), "empty reply")
    return ReaderOutput("answered", answer, cites)


def _cites(value: Any) -> tuple[str, ...] | None:
    """Citations from a list of ids, of documents (``metadata['doc_id']``) or of dicts."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for v in value:
        meta = getattr(v, "metadata", None)
        if isinstance(v, str):
            out.append(v)
        elif isinstance(meta, Mapping) and meta.get("doc_id"):
            out.append(str(meta["doc_id"]))
        elif isinstance(v, Mapping) and v.get("doc_id"):
            out.append(str(v["doc_id"]))
        else:
            return None
    return tuple(dict.fromkeys(out))


def read_reply(raw: Any, known: Iterable[str]) -> ReadReply:
    """Read a target's raw reply (see the module docstring); a malformed one says why."""
    if isinstance(raw, Unreadable):
        return _malformed(raw.reason)
    if isinstance(raw, ReaderOutput):
        return ReadReply(raw, "structured")
    if isinstance(raw, TargetReply):
        raw = {"status": raw.status, "answer": raw.answer, "citations": list(raw.citations),
               "reason": raw.reason}  # fmt: skip
    if isinstance(raw, str):
        try:
            obj = json.loads(raw.strip().removeprefix("```json").strip("`\n "))
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and ("status" in obj or "answer" in obj):
            raw = obj
        else:
            return ReadReply(free_text(raw, known), "free_text")
    if not isinstance(raw, Mapping):
        return _malformed(f"the reply is of type {type(raw).__name__} (expected the reply contract: "
                          "a dict or JSON object with status, answer and citations, or text)")
    obj = dict(raw)
    if "status" not in obj:
        ans = obj.get("answer")
        obj["status"] = "answered" if ans not in (None, "") else "abstained"
    cites = _cites(obj.get("citations", []))
    if cites is None:
        return _malformed(f"citations is of type {type(obj.get('citations')).__name__} (expected a "
                          "list of doc ids, documents or dicts with doc_id)")
    obj["citations"] = list(cites)
    try:
        text = canonical_json(obj)
    except (TypeError, ValueError) as exc:  # an object, a set, bytes, a NaN...: not JSON
        return _malformed(f"the reply holds a value JSON cannot encode ({exc})"[:300])
    try:
        return ReadReply(prompt.parse_reply(text), "structured")
    except prompt.MalformedReply as exc:
        return _malformed(f"not the reply contract ({exc})"[:300])


# --- the record step --------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetDone:
    """A finished target record: the scored record, the reply as read, the ToolBox (its calls
    are the target table's row) and, for the private sample log, the raw reply and any error."""

    done: Done
    reply: ReadReply
    tools: ToolBox
    raw: str | None
    error: str | None
    kind: str = "python"


def request_hash(spec: TargetSpec, task: Task, session_id: str) -> str:
    """The record's request hash (its ``prompt_hash``): the target's identity and the request."""
    ident = {"target": spec.identity(), "question": task.question,
             "answer_kind": task.answer_kind, "session_id": session_id}  # fmt: skip
    return hashlib.sha256(canonical_json(ident).encode()).hexdigest()


MAX_REPLY_BYTES = 1 << 20
"""A reply larger than this (1 MiB of text, or of strings in a structure) is not read."""
MAX_REPLY_DEPTH = 64
"""A reply nested deeper than this is not read."""


def reply_problem(raw: Any) -> str | None:
    """Why ``raw`` is too large or too deep to read (one line), or None. Linear, iterative
    (a reply nested 100,000 deep is measured, never recursed into)."""
    size, stack = 0, [(raw, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_REPLY_DEPTH:
            return f"the reply is nested deeper than {MAX_REPLY_DEPTH} levels (not read)"
        if isinstance(value, str):
            size += len(value)
        elif isinstance(value, (bytes, bytearray)):
            size += len(value)
        elif isinstance(value, Mapping):
            size += len(value)
            stack.extend((v, depth + 1) for kv in value.items() for v in kv)
        elif isinstance(value, (list, tuple)):
            size += len(value)
            stack.extend((v, depth + 1) for v in value)
        else:
            size += 1
        if size > MAX_REPLY_BYTES:
            return f"the reply is larger than {MAX_REPLY_BYTES // (1 << 20)} MiB (not read)"
    return None


def start_record(
    target: Target, task: Task, prepared: PreparedScenario, arm: str | Arm, mcp: Any = None
) -> tuple[ToolBox, TargetRequest]:
    """A record's faulted tools and the request the target gets; ``mcp`` (the run's
    :class:`~layerlab.harness.targets.mcp.McpService`) gives it an MCP address."""
    tools = ToolBox(task, prepared, arm)
    request = TargetRequest(tools, target.spec.options())
    if mcp is not None:
        _MCP[request] = mcp
    return tools, request


def end_record(request: TargetRequest) -> None:
    """The record has ended (answered, failed or timed out): its request calls no more tools,
    whoever kept it (a thread left running past its timeout included), and its MCP address
    refuses every call."""
    _TOOLBOXES.pop(request, None)
    service = _MCP.pop(request, None)
    if service is not None:
        service.release(request)


def score_record(
    spec: TargetSpec,
    tools: ToolBox,
    prepared: PreparedScenario,
    ctx: RecordContext,
    raw: Any,
    error: str | None,
    replicate: int = 0,
) -> TargetDone:
    """A record from the target's raw reply (or its error's one line): the reply read (capped
    in size and depth: :func:`reply_problem`), the one scorer."""
    problem = None if error is not None else reply_problem(raw)
    if error is not None:
        reply = ReadReply(None, "none", "provider_error")
    elif problem is not None:
        reply, error = ReadReply(None, "none", "malformed_reply"), problem
    else:
        known = [*tools.evidence, *prepared.index]
        try:
            reply = read_reply(raw, known)
        except RecursionError:  # JSON text nested past the parser's limit
            reply = ReadReply(None, "none", "malformed_reply")
            error = f"the reply is nested deeper than {MAX_REPLY_DEPTH} levels (not read)"
        else:
            error = None if reply.reason is None else spec.redact(reply.reason)
    reading = Reading(reply.out, request_hash(spec, tools.task, tools.session_id), reply.failure)
    done = finish(tools, ctx, reading, replicate)
    if raw is None:
        shown = None
    elif problem is not None:
        shown = f"({type(raw).__name__}: {problem})"
    else:
        shown = (raw if isinstance(raw, str) else repr(raw))[:4000]
    return TargetDone(done, reply, tools, shown, error, spec.kind)


def run_record(
    target: Target,
    task: Task,
    prepared: PreparedScenario,
    arm: str | Arm,
    ctx: RecordContext,
    replicate: int = 0,
) -> TargetDone:
    """One record of a target, in this thread: its faulted tools, the target's reply, the one
    scorer (a run answers through :class:`~layerlab.harness.targets.execute.Runner`)."""
    tools, request = start_record(target, task, prepared, arm)
    raw, error = None, None
    try:
        raw = target.answer(request)
    except Exception as exc:  # the system under test failed: a failure of the record, not ours
        error = target.spec.redact(f"{type(exc).__name__}: {exc}")[:500]  # never a secret
    finally:
        end_record(request)
    return score_record(target.spec, tools, prepared, ctx, raw, error, replicate)

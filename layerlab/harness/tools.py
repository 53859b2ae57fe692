"""The faulted tools an agent calls itself: ``search(query, top_k)`` and ``open_document(doc_id)``.

In single-call mode the harness makes the one search and hands the result to the reader. In
agent mode (:mod:`layerlab.harness.agent`) the model calls these tools, as often as its step
limit allows, and every call goes through the same layers as the harness's own search:

* the **index** is the scenario's (a stale index serves superseded versions; a document that is
  not in the index cannot be opened);
* the **access** fault withholds what the principal may not see (a denial when nothing is left);
* the **tool-stage** faults reshape, drop, truncate or swap the payload. A transient fault
  (``lasts: N``) hits the first N tool payloads of the *record*, whatever tool asked: an agent
  that retries can recover, one that does not cannot;
* the **transport** faults (:mod:`layerlab.faults.transport`) decide whether each call's reply
  arrives: a failed call is the tool's error (``{code, message}``, its code the fault's kind:
  ``rate_limited``, ``server_error``, ...); :attr:`ToolBox.last_event` is the call's event, which
  each delivery turns into what its caller meets (an HTTP status, an MCP tool error, an
  exception) and whose delay it sleeps on :attr:`ToolBox.clock`; a team's store that takes
  ``transport`` meets a search's faults itself (:meth:`PreparedScenario.ask_wired`), and the
  caller meets only a fault that escaped it;
* the arm's **contract** (strict or repair) checks the payload, and its access, tool and
  reader-input **mitigations** act on every call (a retry calls again; a refusal ends the
  record with a structured non-answer, as in single-call mode).

``open_document`` answers in the search tool's own payload schema (one result), so one contract
checks both tools. The agent sees an observation: the evidence the contract let through, in
the fields the single-call reader sees (never the retriever's score), or the tool's error.
:class:`ToolBox` keeps every call (:class:`ToolCall`) and every delivered document — what the
scorer's R, G and V are computed over.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any

from layerlab._io import canonical_json
from layerlab.corpus.build import Task
from layerlab.faults.operators import SCOPED_ID
from layerlab.faults.transport import CLOCK, Clock, TransportEvent, merge
from layerlab.harness.prepare import PreparedScenario, session_for
from layerlab.harness.step import (
    Admission,
    Done,
    Reading,
    RecordContext,
    admit,
    after_reader,
    as_arm,
    evaluate,
)
from layerlab.mitigations import Arm
from layerlab.system import retrieval
from layerlab.system.contract import ContractResult, search_failure, search_payload
from layerlab.system.reader import Evidence, ReaderInput, reader_input

TOOLS_VERSION = "layerlab.tools/v2"
"""Identity of the tool definitions (names, arguments, observations): part of an agent run's
provenance and of its reply-cache keys. v2: every observation's ``error`` is ``{code, message}``
(v1 gave a partial or refused observation's error as a string), and ``open_document`` opens a
session-scoped id that a search of the record returned (v1 answered ``not_found``)."""

MAX_TOP_K = 5
SEARCH = "search"
OPEN = "open_document"

TOOL_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": SEARCH,
            "description": "Search the company's policy documents. Returns the best-matching "
            "documents with their text and operational metadata (status, effective_year, "
            "version, owner, access_scope, tenant, session_id, truncated), or an error.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to search for"},
                    "top_k": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_TOP_K,
                        "description": f"how many documents to return (1-{MAX_TOP_K})",
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": OPEN,
            "description": "Open one document by its doc_id (as a search returned it): its "
            "full text and metadata, or an error.",
            "parameters": {
                "type": "object",
                "properties": {"doc_id": {"type": "string"}},
                "required": ["doc_id"],
                "additionalProperties": False,
            },
        },
    },
)

TOOL_NAMES = (SEARCH, OPEN)

OUTCOMES = (
    "ok",  # the contract accepted the payload and it has results
    "partial",  # accepted, but the tool reports partial output or a result is truncated
    "empty",  # accepted, no results
    "unavailable",  # no usable tool output
    "rejected",  # the payload failed the contract
    "denied",  # permission denied
    "not_found",  # open_document: no such document in the index
    "refused",  # a mitigation refused: the record ends with a structured non-answer
    "invalid",  # the agent's call broke the tool's schema (unknown tool, bad arguments)
)
FAULTS = frozenset({"partial", "empty", "unavailable", "rejected", "denied", "not_found"})
"""Outcomes after which another call is a *retry after a fault*."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call of an agent: what it asked, whether the call met the tool's schema, what
    came back (:data:`OUTCOMES`), the documents it delivered and how many payloads it took (a
    mitigation's retries included). Public fields only: no evidence text, no answer."""

    step: int
    tool: str
    valid: bool
    outcome: str
    doc_ids: tuple[str, ...] = ()
    payloads: int = 0
    after_fault: bool = False
    problem: str = ""


def _check_args(name: str, args: Any) -> tuple[dict[str, Any] | None, str]:
    """The call's arguments checked against the tool's schema: (arguments, "") or (None, why)."""
    if name not in TOOL_NAMES:
        return None, f"unknown tool {name!r} (tools: {', '.join(TOOL_NAMES)})"
    if not isinstance(args, dict):
        return None, "arguments must be a JSON object"
    allowed = {SEARCH: {"query", "top_k"}, OPEN: {"doc_id"}}[name]
    extra = sorted(set(args) - allowed)
    if extra:
        return None, f"unknown argument {extra[0]!r}"
    if name == SEARCH:
        q, k = args.get("query"), args.get("top_k", retrieval.TOP_K)
        if not isinstance(q, str) or not q.strip():
            return None, "query must be a non-empty string"
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_TOP_K:
            return None, f"top_k must be an integer in 1-{MAX_TOP_K}"
        return {"query": q, "top_k": k}, ""
    d = args.get("doc_id")
    if not isinstance(d, str) or not d.strip():
        return None, "doc_id must be a non-empty string"
    return {"doc_id": d.strip()}, ""


_SHOWN = tuple(f.name for f in fields(Evidence) if f.name != "rank")


def tool_error(code: str, message: str) -> dict[str, str]:
    """An observation's ``error``: always ``{"code", "message"}``, in every status. The codes:
    ``invalid_call``, ``not_found``, ``invalid_payload``, ``unavailable``, ``denied``,
    ``refused``; a partial result passes on the tool's own (e.g. ``timeout``)."""
    return {"code": code, "message": message}


def observation(g: Admission) -> dict[str, Any]:
    """What the agent (or target) sees of one tool call: the delivered evidence (the single-call
    reader's fields, never the retriever's score) or the tool's error. ``error``, when present,
    is :func:`tool_error`'s ``{code, message}`` whatever the status (``error``, ``refused``, or a
    ``partial`` result's own error)."""
    if g.refusal is not None:
        return {"status": "refused", "error": tool_error("refused", g.refusal)}
    cr = g.contract
    if g.inp is None or cr.outcome != "accepted":
        msg = "; ".join(cr.problems[:2]) or cr.outcome
        code = {"rejected": "invalid_payload"}.get(cr.outcome, cr.outcome)
        return {"status": "error", "error": tool_error(code, msg)}
    inp = g.inp
    out: dict[str, Any] = {"status": inp.tool_status}
    if inp.tool_error:
        err = cr.payload.error if cr.payload is not None else None
        out["error"] = tool_error(err.code if err is not None else inp.tool_status, inp.tool_error)
    out["results"] = [{k: getattr(e, k) for k in _SHOWN} for e in inp.evidence]
    return out


class ToolBox:
    """The faulted tools of one record (one task, scenario and arm), and their log."""

    def __init__(self, task: Task, prepared: PreparedScenario, arm: str | Arm) -> None:
        self.task, self.prepared, self.arm = task, prepared, as_arm(arm)
        self.session_id = session_for(task.task_id)
        self.payloads = 0  # tool payloads fetched so far (transient faults count these)
        self.calls: list[ToolCall] = []
        self.evidence: dict[str, Evidence] = {}  # doc id -> the latest delivered version
        self.last_status = "ok"
        self.last_failed: Admission | None = None
        self.accepted = False
        self.edits: list[str] = []
        self.refusal: str | None = None
        self.actions: list[str] = []
        self.waited_s = 0.0
        self.observed: list[str] = []  # each observation returned, as canonical JSON, in order
        self.last_event: TransportEvent | None = None  # the latest call's transport fault
        self.clock: Clock = CLOCK  # where a delivery sleeps a call's delay (bounded)
        self._transport = any(op.stage == "transport" for op in prepared.scenario.operators)
        self._escaped: TransportEvent | None = None  # what escaped a wired store (last search)
        # a session-scoped id a call delivered (``doc~s-...``, a session fault's) -> the index's
        # document it stands for: open_document opens what a search returned
        self._issued: dict[str, str] = {}

    # --- the tools ---------------------------------------------------------------------------

    def call(self, name: str, args: Any, step: int) -> dict[str, Any]:
        """Make one tool call for the agent; returns its observation (a JSON object), which
        joins :meth:`input_hash` as it was delivered (before the caller can change it)."""
        obs = self._call(name, args, step)
        self.observed.append(canonical_json(obs))
        return obs

    def input_hash(self) -> str:
        """What the agent or target saw: the SHA-256 of the canonical JSON list of every
        observation delivered, in order (a model's counterpart is its prompt hash). Two arms
        whose calls delivered the same observations have the same input hash."""
        return hashlib.sha256(f"[{','.join(self.observed)}]".encode()).hexdigest()

    def _call(self, name: str, args: Any, step: int) -> dict[str, Any]:
        after = bool(self.calls) and self.calls[-1].outcome in FAULTS
        self.last_event = None
        checked, problem = _check_args(name, args)
        if checked is None:
            self.calls.append(ToolCall(step, name, False, "invalid", after_fault=after,
                                       problem=problem))  # fmt: skip
            return {"status": "error", "error": tool_error("invalid_call", problem)}
        if name == OPEN:
            doc_id = checked["doc_id"]
            base = doc_id if doc_id in self.prepared.index else self._issued.get(doc_id)
            if base is None:
                self.calls.append(ToolCall(step, name, True, "not_found", after_fault=after))
                return {"status": "error", "error": tool_error("not_found",
                                                               f"no document {doc_id!r}")}  # fmt: skip
            fetch = self._open(base)
        else:
            fetch = self._search(checked["query"], checked["top_k"])
        self._escaped = None
        first = self.payloads
        g = admit(self.task, self.prepared, self.arm, fetch, first_call=first)
        self.payloads += g.attempts
        self.waited_s += g.waited_s
        self.actions += g.actions
        self.edits += g.contract.edits
        outcome = self._take(g)
        docs = (
            tuple(e.doc_id for e in g.inp.evidence) if g.inp is not None and not g.refusal else ()
        )
        self.calls.append(ToolCall(step, name, True, outcome, docs, g.attempts, after))
        obs = observation(g)
        if self._transport and name == SEARCH and self.prepared.wired(g.retriever):
            # the store met the faults itself: the caller meets only one that escaped it
            ev = self._escaped if obs["status"] == "error" else None
            if ev is not None:
                obs["error"] = ev.error()
            self.last_event = ev
        elif self._transport:
            ev = self._event(first, g.attempts)
            if ev is not None and ev.fails:
                if obs["status"] == "error":
                    obs["error"] = ev.error()  # the wire's own error, not the contract's word
                else:  # the arm answered it (a refusal): the caller meets that, after the wait
                    ev = TransportEvent("latency", delay_s=ev.delay_s) if ev.delay_s else None
            self.last_event = ev
        return obs

    def _event(self, first: int, attempts: int) -> TransportEvent | None:
        """The transport event a call delivers: its last payload's (a failure, or a slow call),
        with the delays of the attempts a mitigation made before it added."""
        prep = self.prepared
        events = [prep.scenario.transport_event(prep.tool_context(self.task, n))
                  for n in range(first, first + attempts)]  # fmt: skip
        last = events[-1]
        delay = sum(e.delay_s for e in events[:-1] if e is not None)
        if last is None:
            return merge([TransportEvent("latency", delay_s=delay)]) if delay else None
        return merge([TransportEvent("latency", delay_s=delay), last]) if delay else last

    def _search(self, query: str, top_k: int) -> Any:
        task, prep = self.task, self.prepared
        contract = self.arm.contract
        own = query == task.question and top_k == retrieval.TOP_K

        def fetch(n: int, retr: str) -> tuple[ContractResult, ReaderInput | None]:
            if prep.wired(retr):  # a team's store that meets the transport faults itself
                sent, self._escaped = prep.ask_wired(task, query, top_k, n, retr)
                cr = contract.check(sent)
                return cr, (reader_input(task, cr.payload) if cr.payload is not None else None)
            if own and n == 0 and retr == prep.retriever:
                return prep.checked(contract, task, 0, retr)  # exactly the single call's reply
            r = prep.fitted(retr)  # fitted once per scenario and retriever
            ranking = r.search([query], [task.domain], top_k,
                               prep.scenario.principal_scopes(task.task_id),
                               [prep.principal(task)])  # fmt: skip
            if ranking.error(0):  # a team's store failed: the tool's error reply
                return self._checked(search_failure(ranking.error(0)), n)
            keep = ranking.indices[0] >= 0
            sent = search_payload(query, ranking.docs(0), ranking.scores[0][keep].tolist(),
                                  self.session_id, prep.scenario.principal_scopes(task.task_id))  # fmt: skip
            return self._checked(sent, n)

        return fetch

    def _open(self, doc_id: str) -> Any:
        doc = self.prepared.index[doc_id]

        def fetch(n: int, retr: str) -> tuple[ContractResult, ReaderInput | None]:
            sent = search_payload(f"doc_id:{doc_id}", [doc], [1.0], self.session_id,
                                  self.prepared.scenario.principal_scopes(self.task.task_id))  # fmt: skip
            return self._checked(sent, n)

        return fetch

    def _checked(self, sent: dict[str, Any], n: int) -> tuple[ContractResult, ReaderInput | None]:
        task, prep = self.task, self.prepared
        cr = self.arm.contract.check(prep.scenario.transport(sent, prep.tool_context(task, n)))
        return cr, (reader_input(task, cr.payload) if cr.payload is not None else None)

    def _take(self, g: Admission) -> str:
        """Fold one call's admission into the record: delivered evidence, refusal, last failure."""
        if g.refusal is not None:
            self.refusal = g.refusal
            return "refused"
        if g.inp is None or g.contract.outcome != "accepted":
            self.last_failed = g
            return g.contract.outcome
        self.accepted = True
        self.last_status = g.inp.tool_status
        for e in g.inp.evidence:
            self.evidence.pop(e.doc_id, None)
            self.evidence[e.doc_id] = e
            base = e.doc_id.rpartition(SCOPED_ID)[0]
            if e.doc_id not in self.prepared.index and base in self.prepared.index:
                self._issued[e.doc_id] = base
        if not g.inp.evidence:
            return "empty"
        if g.inp.tool_status != "ok" or any(e.truncated for e in g.inp.evidence):
            return "partial"
        return "ok"

    # --- what the record is scored on ----------------------------------------------------------

    def delivered(self) -> ReaderInput:
        """Every document the agent's calls delivered (the latest version of each, in the
        order first delivered), as the scorer's reader input."""
        ev = tuple(
            Evidence(**{**{k: getattr(e, k) for k in _SHOWN}, "rank": i + 1})
            for i, e in enumerate(self.evidence.values())
        )
        error = None
        if self.last_failed is not None and not self.accepted:
            error = "; ".join(self.last_failed.contract.problems[:1]) or None
        return ReaderInput(self.task.question, self.task.answer_kind, self.session_id,
                           self.last_status, error, ev)  # fmt: skip

    def contract(self) -> ContractResult:
        """The record's contract verdict over all its calls: accepted when any call delivered
        evidence (or no call was made); else the last failed call's."""
        if self.accepted or self.last_failed is None:
            return ContractResult("accepted", True, None, tuple(self.edits))
        cr = self.last_failed.contract
        return ContractResult(cr.outcome, cr.valid, None, tuple(self.edits), cr.problems)

    def admission(self) -> Admission:
        """The record's admission for the scorer (:meth:`RecordStep.finish`): the contract's
        verdict over all its calls, and what they delivered or the refusal."""
        inp = None if self.refusal is not None else self.delivered()
        return Admission(self.contract(), inp, self.refusal, max(self.payloads, 1),
                         self.arm.retriever(self.prepared.retriever), self.waited_s,
                         tuple(self.actions))  # fmt: skip


def finish(tools: ToolBox, ctx: RecordContext, reading: Reading, replicate: int = 0) -> Done:
    """Score a record whose evidence came through ``tools`` (an agent's, or a target's): the
    reply through the arm's after-reader steps, then the one scorer over everything the calls
    delivered, with every call's validity (V)."""
    g, out = tools.admission(), reading.out
    if out is not None and g.refusal is None:
        g, out = after_reader(tools.task, tools.prepared, tools.arm, g, out)
    rec, labels = evaluate(
        tools.task, ctx.key, ctx.corpus, tools.prepared, tools.arm.name, g, out,
        provider=ctx.provider, model=ctx.model, run_id=ctx.run_id,
        # a record that never reached a reader (a refusal) has no prompt (archive schema)
        prompt_hash=reading.prompt_hash if g.inp is not None else "",
        failure=reading.failure, replicate=replicate,
        invalid_calls=sum(not c.valid for c in tools.calls),
    )  # fmt: skip
    return Done(rec, labels, g, out)

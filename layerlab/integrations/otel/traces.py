"""A record as a trace: the spans and events of one layerlab record, in OpenTelemetry's GenAI
semantic conventions, as plain data (:class:`PlanSpan`; :mod:`~layerlab.integrations.otel.export`
sends them).

One trace per record, its ids those the record had while it ran
(:func:`~layerlab.harness.targets.spans.record_ident`: a team's own exported spans of that record
share the trace):

* ``invoke_agent {system}`` — the root: the system under test (a model, a reference agent,
  ``target/<name>``), the record's key (``layerlab.{run_id,task_id,scenario,mitigation,...}``),
  its outcome and diagnostic, the fault (``layerlab.fault.*``) and the mitigation arm
  (``layerlab.mitigation.arm``); status ERROR when the record failed the outcome its scenario is
  judged by (``safe_resolution``: success where the question is answerable, a structured
  non-answer elsewhere). One ``gen_ai.evaluation.result`` event per score: S, E, R, G, V, GF
  and safe resolution (``gen_ai.evaluation.name``, ``.score.value``, ``.score.label``; with the
  private log, ``.explanation``: the scorer's reason);
* ``retrieval`` — the index the scenario served (its index-stage faults);
* ``execute_tool {tool}`` — each tool call the record made (the target's or agent's calls, from
  the run's public table; a single-call record's one search), with the tool-stage and access
  faults as ``layerlab.fault.*`` and the arm, the call's outcome;
* ``chat {model}`` — a model reader's call (single-call records);
* with the private sample log only: the question and reply (``input.value``, ``output.value``),
  evidence and returned document ids, the expected answer, and the team's own spans, under the
  root as they were collected (their measured offsets and durations).

What the archive does not keep the trace does not have: without the private log only allowlisted
fields (labels, keys, the fault's definition from the scenario spec, the public call table).
Archives keep no time: layerlab's own spans are laid out one millisecond apart from the run's
export time; only the team's spans carry measured durations. ``openinference.span.kind`` is set
too (AGENT, RETRIEVER, TOOL, LLM), so Phoenix and other OpenInference viewers show each span's kind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerlab._io import canonical_json
from layerlab.archive.samplelog import outcome
from layerlab.archive.schema import Record
from layerlab.harness.targets.spans import record_ident, record_trace

MS = 1_000_000
SCORES = (("S", "success"), ("E", "exact_match"), ("R", "retrieval_ok"), ("G", "citation_ok"),
          ("V", "schema_ok"), ("GF", "grounded_false_positive"),
          ("safe_resolution", "safe_resolution"))  # fmt: skip
"""The scores a record's trace carries as ``gen_ai.evaluation.result`` events: name, label."""
REASON_OF = {"S": "S", "E": "E", "R": "R", "G": "G", "V": "V", "GF": "grounded"}


@dataclass
class PlanSpan:
    """One span to send (ids as ints; times in ns since the epoch)."""

    name: str
    span_id: int
    parent_id: int | None
    kind: str  # internal | client | server
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None  # the status: None ok, else the ERROR description


@dataclass(frozen=True)
class Fault:
    """A scenario's fault as its spans carry it (from the scenario spec, public)."""

    scenario: str
    layer: str
    seed: int | None
    operators: tuple[tuple[str, str, str], ...]  # (name, stage, params as canonical JSON)

    def attributes(self, stages: Sequence[str] | None = None) -> dict[str, Any]:
        ops = [o for o in self.operators if stages is None or o[1] in stages]
        out: dict[str, Any] = {"layerlab.fault.scenario": self.scenario,
                               "layerlab.fault.layer": self.layer}  # fmt: skip
        if self.seed is not None:
            out["layerlab.fault.seed"] = self.seed
        if ops:
            out["layerlab.fault.operator"] = [o[0] for o in ops]
            out["layerlab.fault.intensity"] = [o[2] for o in ops]
        return out


def fault_of(scenario: str, scenarios: Mapping[str, Any]) -> Fault:
    """The record's fault from the compiled scenarios (:func:`layerlab.faults.load_scenarios`);
    a scenario the spec does not hold keeps its name only."""
    s = scenarios.get(scenario)
    if s is None:
        return Fault(scenario, "unknown", None, ())
    ops = tuple((f.op, type(op).stage, canonical_json(f.params))
                for f, op in zip(s.spec.faults, s.operators, strict=True))  # fmt: skip
    return Fault(scenario, s.spec.layer, int(s.seed), ops)


def _sid(trace_id: int, *parts: object) -> int:
    digest = hashlib.sha256(canonical_json([f"{trace_id:032x}", *map(str, parts)]).encode())
    return int.from_bytes(digest.digest()[:8], "big") or 1


def _record_attributes(rec: Record) -> dict[str, Any]:
    return {
        "layerlab.run_id": rec.run_id, "layerlab.provider": rec.provider,
        "layerlab.model": rec.model, "layerlab.scenario": rec.scenario,
        "layerlab.mitigation": rec.mitigation, "layerlab.mitigation.arm": rec.mitigation,
        "layerlab.task_id": rec.task_id, "layerlab.policy_id": rec.policy_id,
        "layerlab.domain": rec.domain, "layerlab.replicate": rec.replicate,
        "layerlab.answerable": rec.answerable, "layerlab.stage": rec.stage,
        "layerlab.diagnostic": rec.diagnostic, "layerlab.outcome": outcome(rec),
    }  # fmt: skip


def evaluations(rec: Record, at: int, reasons: Mapping[str, str] | None) -> list[Any]:
    """One ``gen_ai.evaluation.result`` event per score (a score the record does not hold,
    e.g. GF of a migrated archive, is left out)."""
    out = []
    for name, label in SCORES:
        value = getattr(rec, label)
        if value is None:
            continue
        attrs: dict[str, Any] = {"gen_ai.evaluation.name": name,
                                 "gen_ai.evaluation.score.value": 1.0 if value else 0.0,
                                 "gen_ai.evaluation.score.label": "true" if value else "false"}  # fmt: skip
        why = (reasons or {}).get(REASON_OF.get(name, ""))
        if why:
            attrs["gen_ai.evaluation.explanation"] = why
        out.append(("gen_ai.evaluation.result", at, attrs))
    return out


class _Layout:
    """layerlab's own spans of one record, a millisecond apart, under the record's span."""

    def __init__(self, trace_id: int, root: int, start_ns: int) -> None:
        self.trace_id, self.root, self.t = trace_id, root, start_ns + MS
        self.spans: list[PlanSpan] = []

    def add(self, name: str, op: str, oi_kind: str, attrs: dict[str, Any]) -> PlanSpan:
        s = PlanSpan(name, _sid(self.trace_id, name, len(self.spans)), self.root, "internal",
                     self.t, self.t + MS,
                     {"gen_ai.operation.name": op, "openinference.span.kind": oi_kind, **attrs})  # fmt: skip
        self.spans.append(s)
        self.t += MS
        return s


def _tool_spans(
    lay: _Layout, rec: Record, fault: Fault, calls: Sequence[Mapping[str, Any]], private: bool
) -> None:
    """An ``execute_tool`` span per call (a single-call record: its one search), each with the
    tool-stage and access faults and the arm."""
    faults = {**fault.attributes(("tool", "access")), "layerlab.mitigation.arm": rec.mitigation}
    for i, c in enumerate(calls or [{"tool": "search", "outcome": rec.stage, "valid": True}]):
        tool = str(c.get("tool", "search"))
        s = lay.add(f"execute_tool {tool}", "execute_tool", "TOOL", {
            **faults, "gen_ai.tool.name": tool, "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": f"call-{i + 1}", "layerlab.tool.outcome": str(c.get("outcome")),
            "layerlab.tool.valid": bool(c.get("valid", True)),
            "layerlab.tool.after_fault": bool(c.get("after_fault", False)),
        })  # fmt: skip
        if private and c.get("doc_ids"):
            s.attributes["output.value"] = json.dumps(list(c["doc_ids"]))
        if c.get("outcome") not in ("ok", "reader", None) or not c.get("valid", True):
            s.error = f"tool call {c.get('outcome')}"


def record_spans(
    rec: Record,
    fault: Fault,
    start_ns: int,
    calls: Sequence[Mapping[str, Any]] = (),
    entry: Mapping[str, Any] | None = None,
) -> tuple[int, list[PlanSpan]]:
    """The record's trace id and spans. ``calls``: its public tool calls (the run's target or
    agent table); ``entry``: its private sample-log entry (only when the user asked for it)."""
    trace = record_trace(record_ident(rec.run_id, rec.provider, rec.model, rec.scenario,
                                      rec.mitigation, rec.task_id, rec.replicate))  # fmt: skip
    lay = _Layout(trace.trace_id, trace.span_id, start_ns)
    private, e = entry is not None, dict(entry or {})
    ret = lay.add("retrieval", "retrieval", "RETRIEVER", {
        **fault.attributes(("index",)), "layerlab.mitigation.arm": rec.mitigation,
        "gen_ai.data_source.id": "layerlab corpus"})  # fmt: skip
    if private:
        ret.attributes["input.value"] = str(e.get("question", ""))
        for i, ev in enumerate(e.get("evidence") or ()):
            ret.attributes[f"retrieval.documents.{i}.document.id"] = str(ev.get("doc_id"))
    _tool_spans(lay, rec, fault, calls or list(e.get("tool_calls") or ()), private)
    if rec.provider not in ("target", "layerlab", "deterministic") and not calls:
        chat = lay.add(f"chat {rec.model}", "chat", "LLM", {
            "gen_ai.request.model": rec.model, "gen_ai.provider.name": rec.provider,
            "llm.model_name": rec.model})  # fmt: skip
        if private and e.get("reply") is not None:
            chat.attributes["output.value"] = str(e["reply"])
    team = _team_spans(trace.trace_id, trace.span_id, start_ns + MS, e.get("spans") or ())
    end = max([lay.t, *(s.end_ns for s in team)]) + MS
    attrs = {"gen_ai.operation.name": "invoke_agent",
             "gen_ai.agent.name": f"{rec.provider}/{rec.model}", "openinference.span.kind": "AGENT",
             **_record_attributes(rec), **fault.attributes()}  # fmt: skip
    if private:
        attrs.update({"input.value": str(e.get("question", "")),
                      "output.value": json.dumps(e.get("parsed"), sort_keys=True),
                      "layerlab.expected": str(e.get("expected")),
                      "layerlab.reply": str(e.get("reply"))})  # fmt: skip
        if e.get("target_error"):
            attrs["layerlab.target_error"] = str(e["target_error"])
    top = PlanSpan(f"invoke_agent {rec.provider}/{rec.model}", trace.span_id, None, "internal",
                   start_ns, end, attrs, evaluations(rec, end - MS // 2, e.get("reasons")))  # fmt: skip
    if not rec.safe_resolution:
        top.error = f"{outcome(rec)} ({rec.diagnostic})"
    return trace.trace_id, [top, *lay.spans, *team]


def _team_spans(
    tid: int, root: int, start_ns: int, kept: Sequence[Mapping[str, Any]]
) -> list[PlanSpan]:
    """The team's own spans of the record (private sample log), under the root, at their
    measured offsets and durations."""
    out = []
    for s in kept:
        begin = start_ns + int(float(s.get("start_ms", 0)) * MS)
        attrs = dict(s.get("attributes") or {})
        attrs["layerlab.team_span"] = True
        out.append(PlanSpan(
            str(s.get("name", "")), int(str(s["span_id"]), 16),
            int(str(s["parent"]), 16) if s.get("parent") else root,
            str(s.get("kind", "internal")), begin,
            begin + int(float(s.get("duration_ms", 0)) * MS), attrs,
            [(str(e.get("name", "")), start_ns + int(float(e.get("at_ms", 0)) * MS),
              dict(e.get("attributes") or {})) for e in s.get("events") or ()],
            s.get("message") or "error" if s.get("status") == "error" else None,
        ))  # fmt: skip
    return out

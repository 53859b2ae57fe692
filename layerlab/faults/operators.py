"""Fault operators: named, seeded, registered faults, each acting at one stage of the pipeline.

* ``index``  — the document collection the retriever is fitted on (stale, conflicting, corrupted,
  another tenant's documents mixed in);
* ``access`` — which access scopes the requesting principal holds (denials);
* ``tool``   — the search tool's JSON payload in transit (drift, missing output, partial
  timeout, another session's context);
* ``session`` — a conversation's state across turns (history, memory, cached tool results):
  :mod:`layerlab.faults.session`.
* ``transport`` — whether and how the call's reply arrives at all (latency, 429, 5xx, reset,
  stall, truncated body, expired credential): :mod:`layerlab.faults.transport`.

Operators are registered by name (:func:`register_operator`), so the scenario DSL
(:mod:`layerlab.faults.scenario`) refers to them by name and users can add their own, in this
module or from a plug-in. Everything random draws from a ``numpy.random.Generator`` seeded from
the scenario file's seed, the scenario name, the operator's position and (for per-task faults)
the task id: the same spec gives the same faults.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from layerlab.corpus.build import Document, policy_of
from layerlab.registry import Registry

Stage = Literal["index", "access", "tool", "transport", "session"]
Payload = dict[str, Any] | None


def stable_int(*parts: object) -> int:
    """A stable 64-bit integer from ``parts`` (Python's ``hash`` is salted per process)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big")


def _copy_json(obj: Any) -> Any:
    """A deep copy of a JSON-shaped value (dicts, lists, scalars): what ``copy.deepcopy`` gives
    for a tool payload, without its memo bookkeeping (payloads hold no shared or cyclic parts)."""
    if isinstance(obj, dict):
        return {k: _copy_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy_json(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_copy_json(v) for v in obj)
    return obj


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class ToolContext:
    """What a tool-stage operator may know about the call it corrupts (public fields only)."""

    task_id: str
    policy_id: str
    session_id: str
    attempt: int = 0  # 0 for the first call; a bounded retry calls the tool again with 1, 2, ...
    # policy id -> another tenant's version of that policy (Corpus.foreign_by_policy): public
    # documents that the session-state fault serves in place of ours
    foreign: Mapping[str, Document] = field(default_factory=dict, repr=False, compare=False)
    # doc id -> policy id (Corpus.policy_by_doc); ids it lacks are read as ``<policy>-<suffix>``
    policies: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)


class FaultOperator:
    """Base class. Subclasses set ``name``, ``stage``, ``layer``, ``Params`` and one hook."""

    name: ClassVar[str]
    stage: ClassVar[Stage]
    layer: ClassVar[str]
    Params: ClassVar[type[_Params]] = _Params

    def __init__(self, params: _Params):
        self.params = params

    def apply_index(self, docs: list[Document], rng: np.random.Generator) -> list[Document]:
        raise NotImplementedError

    def principal_scopes(self) -> frozenset[str] | None:
        raise NotImplementedError

    def apply_tool(self, payload: Payload, ctx: ToolContext, rng: np.random.Generator) -> Payload:
        raise NotImplementedError


OPERATORS: Registry[type[FaultOperator]] = Registry("fault operator", lambda c: c.name)


def register_operator(cls: type[FaultOperator]) -> type[FaultOperator]:
    """Class decorator: make a fault operator available to the DSL under ``cls.name``."""
    return OPERATORS.register(cls)


# --- index stage -------------------------------------------------------------------------------


@register_operator
class ServeSuperseded(FaultOperator):
    """The index lags behind publication: current versions are absent, superseded ones served."""

    name = "serve_superseded"
    stage = "index"
    layer = "freshness"

    def apply_index(self, docs: list[Document], rng: np.random.Generator) -> list[Document]:
        has_old = {d.policy_id for d in docs if d.status == "superseded"}
        return [d for d in docs if not (d.status == "current" and d.policy_id in has_old)]


class _ConflictParams(_Params):
    status: str = "unverified"
    owner: str = "Team wiki"
    year_offset: int = Field(default=1, ge=0, le=10)
    prefix: str = "Team note (copied from the policy portal): "


@register_operator
class InjectConflict(FaultOperator):
    """Add, per policy, an unofficial newer-looking note that restates the superseded value."""

    name = "inject_conflict"
    stage = "index"
    layer = "evidence"
    Params = _ConflictParams

    def apply_index(self, docs: list[Document], rng: np.random.Generator) -> list[Document]:
        p: _ConflictParams = self.params  # type: ignore[assignment]
        by_policy: dict[str, dict[str, Document]] = {}
        for d in docs:
            by_policy.setdefault(d.policy_id, {})[d.status] = d
        extra = []
        for pid in sorted(by_policy):
            v = by_policy[pid]
            if "superseded" not in v or "current" not in v:
                continue
            old, cur = v["superseded"], v["current"]
            extra.append(
                replace(
                    old,
                    doc_id=f"{pid}-n",
                    text=p.prefix + old.text,
                    status=p.status,
                    effective_year=cur.effective_year + p.year_offset,
                    version=0,
                    owner=p.owner,
                )
            )
        return [*docs, *extra]


class _CorruptParams(_Params):
    fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    domain_labels: bool = True


@register_operator
class CorruptMetadata(FaultOperator):
    """Swap status/year/version between the two versions of a seeded share of policies, and
    (optionally) relabel every document's domain by a seeded derangement of the domains."""

    name = "corrupt_metadata"
    stage = "index"
    layer = "metadata"
    Params = _CorruptParams

    def apply_index(self, docs: list[Document], rng: np.random.Generator) -> list[Document]:
        p: _CorruptParams = self.params  # type: ignore[assignment]
        policies = sorted({d.policy_id for d in docs})
        n_swap = int(round(p.fraction * len(policies)))
        swapped = (
            set(rng.choice(policies, size=n_swap, replace=False).tolist()) if n_swap else set()
        )
        relabel: dict[str, str] = {}
        if p.domain_labels:
            domains = sorted({d.domain for d in docs})
            if len(domains) > 1:
                shift = int(rng.integers(1, len(domains)))
                relabel = {d: domains[(i + shift) % len(domains)] for i, d in enumerate(domains)}
        by_policy: dict[str, list[Document]] = {}
        for d in docs:
            by_policy.setdefault(d.policy_id, []).append(d)
        out = []
        for d in docs:
            new = d
            pair = by_policy[d.policy_id]
            if d.policy_id in swapped and len(pair) == 2:
                other = pair[1] if pair[0] is d else pair[0]
                new = replace(
                    new,
                    status=other.status,
                    effective_year=other.effective_year,
                    version=other.version,
                )
            if relabel:
                new = replace(new, domain=relabel[d.domain])
            out.append(new)
        return out


# --- access stage ------------------------------------------------------------------------------


class _DenyParams(_Params):
    principal_scopes: list[str] = Field(default_factory=list)


@register_operator
class DenyAccess(FaultOperator):
    """The requesting principal holds only ``principal_scopes``; the tool withholds the rest."""

    name = "deny_access"
    stage = "access"
    layer = "authorisation"
    Params = _DenyParams

    def principal_scopes(self) -> frozenset[str] | None:
        p: _DenyParams = self.params  # type: ignore[assignment]
        return frozenset(p.principal_scopes)


# --- tool stage --------------------------------------------------------------------------------


class _DropParams(_Params):
    form: Literal["null", "empty", "error"] = "null"


@register_operator
class DropOutput(FaultOperator):
    """The tool call returns no usable output: nothing, an empty object, or a bare error."""

    name = "drop_output"
    stage = "tool"
    layer = "availability"
    Params = _DropParams

    def apply_tool(self, payload: Payload, ctx: ToolContext, rng: np.random.Generator) -> Payload:
        form = self.params.form  # type: ignore[attr-defined]
        if form == "null":
            return None
        if form == "empty":
            return {}
        return {
            "error": {"code": "upstream_unavailable", "message": "search backend did not respond"}
        }


class _PartialParams(_Params):
    keep_results: int = Field(default=1, ge=0, le=10)
    min_keep: float = Field(default=0.15, ge=0.0, le=1.0)
    max_keep: float = Field(default=0.85, ge=0.0, le=1.0)


@register_operator
class PartialTimeout(FaultOperator):
    """The call times out part-way: later results are lost and the first texts are cut at a
    seeded fraction of their length; the payload says it is partial."""

    name = "partial_timeout"
    stage = "tool"
    layer = "completeness"
    Params = _PartialParams

    def apply_tool(self, payload: Payload, ctx: ToolContext, rng: np.random.Generator) -> Payload:
        if not payload or "results" not in payload:
            return payload
        p: _PartialParams = self.params  # type: ignore[assignment]
        out = _copy_json(payload)
        kept = out["results"][: p.keep_results]
        for r in kept:
            frac = float(rng.uniform(p.min_keep, p.max_keep))
            cut = int(len(r["text"]) * frac)
            r["text"] = r["text"][:cut].rsplit(" ", 1)[0] if cut else ""
            r["truncated"] = True
        out["results"] = kept
        out["status"] = "partial"
        out["error"] = {"code": "timeout", "message": "search timed out before completion"}
        return out


class _ReshapeParams(_Params):
    rename_top: dict[str, str] = Field(default_factory=lambda: {"results": "hits"})
    rename_result: dict[str, str] = Field(
        default_factory=lambda: {"doc_id": "id", "text": "content"}
    )
    nest_metadata_under: str | None = "meta"
    stringify_numbers: bool = True


_METADATA_KEYS = (
    "domain",
    "status",
    "effective_year",
    "version",
    "owner",
    "access_scope",
    "tenant",
    "session_id",
)


@register_operator
class ReshapePayload(FaultOperator):
    """Schema drift: keys renamed, metadata nested one level down, numbers sent as strings.
    The evidence itself is untouched."""

    name = "reshape_payload"
    stage = "tool"
    layer = "tool_contract"
    Params = _ReshapeParams

    def apply_tool(self, payload: Payload, ctx: ToolContext, rng: np.random.Generator) -> Payload:
        if not payload or "results" not in payload:
            return payload
        p: _ReshapeParams = self.params  # type: ignore[assignment]
        results = []
        for r in payload["results"]:
            r = dict(r)
            if p.stringify_numbers:
                r = {
                    k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                    for k, v in r.items()
                }
            if p.nest_metadata_under:
                meta = {k: r.pop(k) for k in _METADATA_KEYS if k in r}
                r[p.nest_metadata_under] = meta
            results.append({p.rename_result.get(k, k): v for k, v in r.items()})
        out = {k: v for k, v in payload.items() if k != "results"}
        out["results"] = results
        return {p.rename_top.get(k, k): v for k, v in out.items()}


SCOPED_ID = "~"
"""A session-scoped document id is ``<doc_id>~<session>``: what :class:`ForeignSession` serves."""


class _ForeignParams(_Params):
    tag: str = "foreign"


@register_operator
class ForeignSession(FaultOperator):
    """Session state crosses over: the search runs in another tenant's session, so each result
    is that tenant's version of the same policy — a different value of the same kind — carrying
    that session's id, that tenant and a session-scoped document id. Two results of one policy
    collapse into its one foreign version; ranks are renumbered.

    The foreign documents come from the corpus (``ToolContext.foreign``); a result without one
    is an error, never silently passed through as our own evidence.
    """

    name = "foreign_session"
    stage = "tool"
    layer = "session_state"
    Params = _ForeignParams

    def apply_tool(self, payload: Payload, ctx: ToolContext, rng: np.random.Generator) -> Payload:
        if not payload or "results" not in payload:
            return payload
        other = f"s-{stable_int(ctx.session_id, self.params.tag) % 16**8:08x}"  # type: ignore[attr-defined]
        out = _copy_json(payload)
        results: list[dict[str, Any]] = []
        served: set[str] = set()
        for r in out["results"]:
            theirs = ctx.foreign.get(ctx.policies.get(r["doc_id"]) or policy_of(r["doc_id"]))
            if theirs is None:
                raise ValueError(
                    f"foreign_session: no other-tenant version of {r['doc_id']!r}; build the "
                    "tool context with the corpus's foreign versions (Corpus.foreign_by_policy)"
                )
            if theirs.doc_id in served:
                continue
            served.add(theirs.doc_id)
            r.update(
                rank=len(results) + 1,
                doc_id=f"{r['doc_id']}{SCOPED_ID}{other}",
                title=theirs.title,
                text=theirs.text,
                domain=theirs.domain,
                status=theirs.status,
                effective_year=theirs.effective_year,
                version=theirs.version,
                owner=theirs.owner,
                access_scope=theirs.access_scope,
                tenant=theirs.tenant,
                session_id=other,
            )
            results.append(r)
        out["results"] = results
        return out


class _LeakParams(_Params):
    tag: str = "foreign"


def foreign_session_id(tenant: str, tag: str = "foreign") -> str:
    """The session id another tenant's documents carry in a leaking index (stable, opaque)."""
    return f"s-{stable_int(tenant, tag) % 16**8:08x}"


@register_operator
class ForeignTenantIndex(FaultOperator):
    """Session state crosses over *inside the store*: the index also holds another tenant's
    version of each policy, with that tenant and one of its sessions in the metadata, under its
    own id. Nothing after the search removes them: only the store's own tenant/session filter
    (its search is told the request's tenant and session) keeps them out of the results.

    Its documents come from the corpus (``Corpus.foreign``), passed by
    :meth:`~layerlab.faults.scenario.Scenario.index`."""

    name = "foreign_tenant_index"
    stage = "index"
    layer = "session_state"
    Params = _LeakParams
    uses_foreign: ClassVar[bool] = True

    def apply_index(
        self,
        docs: list[Document],
        rng: np.random.Generator,
        foreign: Sequence[Document] = (),
    ) -> list[Document]:
        if not foreign:
            raise ValueError(
                "foreign_tenant_index: no other-tenant documents; index the corpus with its "
                "foreign versions (Scenario.index(corpus.documents, corpus.foreign))"
            )
        tag = self.params.tag  # type: ignore[attr-defined]
        theirs = [replace(d, session_id=foreign_session_id(d.tenant, tag)) for d in foreign]
        return [*docs, *theirs]


# --- the DSL -----------------------------------------------------------------------------------

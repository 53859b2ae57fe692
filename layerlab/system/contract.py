"""The search tool, its declared payload schema, and the contract modes that check it.

The tool returns a JSON payload (``layerlab.search/v1``). A contract mode decides what reaches
the reader: ``strict`` accepts only a payload that validates as-is; ``repair`` first applies a
bounded normalisation — key aliases, one level of unnesting, string-to-number coercion, at most
``max_edits`` edits — and records every edit. Repair only changes the *representation* of
evidence that is present: it never adds a result or a field, never turns a denial or an error
into evidence, never refreshes an index and never touches session ids.

A contract mode is the contract layer's *mitigation*: the named modes (the strict baseline and
schema repair) are entries of ``data/specs/mitigations.yaml`` of the registered kind
``contract`` (:class:`layerlab.mitigations.ContractCheck`), beside the other layers' mitigations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab.corpus.build import Document
from layerlab.faults.operators import Payload

SCHEMA = "layerlab.search/v1"
TOOL_NAME = "search_policies"


@dataclass(frozen=True)
class Hit:
    """What a search result is: its rank, document, title and text."""

    rank: Annotated[int, Field(ge=1)]
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class _Scored:
    score: float  # the retriever's score: in the tool's payload, never shown to the reader


@dataclass(frozen=True)
class HitMetadata:
    """A search result's operational metadata (what the fault scenarios corrupt)."""

    domain: str
    status: str
    effective_year: int
    version: int
    owner: str
    access_scope: str
    tenant: str
    session_id: str | None
    truncated: bool = False


class SearchResult(BaseModel, HitMetadata, _Scored, Hit, frozen=True):
    """One search hit: the evidence a reader may use, with its operational metadata. Its fields
    are :class:`Hit`'s, the score, then :class:`HitMetadata`'s (the reader's
    :class:`~layerlab.system.reader.Evidence` is the same without the score). Frozen by the
    class keyword, which type checkers read."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ToolError(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    code: str
    message: str


class SearchPayload(BaseModel):
    """The declared schema of the search tool's reply."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    schema_: Literal["layerlab.search/v1"] = Field(alias="schema")
    tool: Literal["search_policies"]
    status: Literal["ok", "partial", "denied"]
    query: str
    session_id: str
    results: list[SearchResult]
    withheld: int = Field(ge=0)
    error: ToolError | None = None


def search_payload(
    query: str,
    docs: Sequence[Document],
    scores: Sequence[float],
    session_id: str,
    principal_scopes: frozenset[str] | None,
) -> dict[str, Any]:
    """The tool's reply for ranked ``docs``, with access control applied.

    Documents whose ``access_scope`` the principal lacks are withheld; when every hit is
    withheld the reply is a denial with no results.
    """
    results: list[dict[str, Any]] = []
    withheld = 0
    for doc, score in zip(docs, scores, strict=True):
        if principal_scopes is not None and doc.access_scope not in principal_scopes:
            withheld += 1
            continue
        results.append(
            {
                "rank": len(results) + 1,
                "doc_id": doc.doc_id,
                "title": doc.title,
                "text": doc.text,
                "score": round(float(score), 4),
                "domain": doc.domain,
                "status": doc.status,
                "effective_year": doc.effective_year,
                "version": doc.version,
                "owner": doc.owner,
                "access_scope": doc.access_scope,
                "tenant": doc.tenant,
                "session_id": doc.session_id,
            }
        )
    denied = withheld > 0 and not results
    payload: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": TOOL_NAME,
        "status": "denied" if denied else "ok",
        "query": query,
        "session_id": session_id,
        "results": results,
        "withheld": withheld,
    }
    if denied:
        payload["error"] = {
            "code": "permission_denied",
            "message": "principal lacks the access scope of every hit",
        }
    return payload


def search_failure(message: str) -> dict[str, Any]:
    """The tool's reply when its retriever failed (an external retriever's exception or bad
    reply, :mod:`layerlab.system.retrieval.external`): an error and nothing else, which every
    contract finds unavailable, as it finds a missing tool output."""
    return {"error": {"code": "retriever_error", "message": message}}


# --- repair ------------------------------------------------------------------------------------

TOP_ALIASES = {
    "hits": "results",
    "documents": "results",
    "items": "results",
    "docs": "results",
    "data": "results",
    "tool_name": "tool",
    "schema_version": "schema",
    "session": "session_id",
    "q": "query",
}
RESULT_ALIASES = {
    "id": "doc_id",
    "document_id": "doc_id",
    "docid": "doc_id",
    "content": "text",
    "body": "text",
    "passage": "text",
    "name": "title",
    "relevance": "score",
    "year": "effective_year",
    "effective": "effective_year",
    "scope": "access_scope",
    "session": "session_id",
    "position": "rank",
}
NEST_KEYS = ("meta", "metadata", "attributes", "properties")
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_INT_FIELDS = {"rank", "effective_year", "version", "withheld"}
_FLOAT_FIELDS = {"score"}
_BOOL_FIELDS = {"truncated"}
_TYPED_FIELDS = frozenset(_INT_FIELDS | _FLOAT_FIELDS | _BOOL_FIELDS)


@dataclass
class Repair:
    """What a repair did: the edits in order, and whether it gave up at the cap."""

    edits: list[str] = field(default_factory=list)
    capped: bool = False


class _Capped(Exception):
    pass


def _edit(rep: Repair, cap: int, what: str) -> None:
    if len(rep.edits) >= cap:
        rep.capped = True
        raise _Capped
    rep.edits.append(what)


def _coerce(key: str, value: Any, rep: Repair, cap: int, where: str) -> Any:
    if key not in _TYPED_FIELDS:
        return value
    if isinstance(value, str):
        s = value.strip()
        if key in _INT_FIELDS and _INT.match(s):
            _edit(rep, cap, f"coerce {where}.{key} to int")
            return int(s)
        if key in _FLOAT_FIELDS and _FLOAT.match(s):
            _edit(rep, cap, f"coerce {where}.{key} to float")
            return float(s)
        if key in _BOOL_FIELDS and s.lower() in {"true", "false"}:
            _edit(rep, cap, f"coerce {where}.{key} to bool")
            return s.lower() == "true"
    if key in _FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        _edit(rep, cap, f"coerce {where}.{key} to float")
        return float(value)
    return value


def _rename(
    obj: dict[str, Any], aliases: dict[str, str], rep: Repair, cap: int, where: str
) -> dict[str, Any]:
    if aliases.keys().isdisjoint(obj):
        return dict(obj)  # nothing to rename (the common case: a payload already in shape)
    out: dict[str, Any] = {}
    for k, v in obj.items():
        target = aliases.get(k, k)
        if target != k:
            if target in obj or target in out:
                out[k] = v  # never overwrite a field that is present under its own name
                continue
            _edit(rep, cap, f"rename {where}.{k} -> {target}")
        out[target] = v
    return out


def _unnest(obj: dict[str, Any], rep: Repair, cap: int, where: str) -> dict[str, Any]:
    out = dict(obj)
    for nk in NEST_KEYS:
        inner = out.get(nk)
        if isinstance(inner, dict) and not any(k in out for k in inner):
            _edit(rep, cap, f"unnest {where}.{nk}")
            del out[nk]
            out.update(inner)  # one level only: dicts inside ``inner`` stay as they are
    return out


def repair_payload(payload: Any, max_edits: int = 48) -> tuple[Any, Repair]:
    """Bounded normalisation of a drifted payload; returns the new payload and the edits.

    Non-dict payloads (``None``, text, lists) are returned unchanged: there is nothing to
    normalise. On reaching ``max_edits`` the original payload is returned with ``capped``
    set, so a heavily mangled payload is rejected rather than rewritten wholesale.
    """
    rep = Repair()
    if not isinstance(payload, dict):
        return payload, rep
    try:
        top = _unnest(_rename(payload, TOP_ALIASES, rep, max_edits, "$"), rep, max_edits, "$")
        for k in list(top):
            top[k] = _coerce(k, top[k], rep, max_edits, "$")
        results = top.get("results")
        if isinstance(results, list):
            fixed = []
            for i, r in enumerate(results):
                where = f"$.results[{i}]"
                if isinstance(r, dict):
                    r = _unnest(
                        _rename(r, RESULT_ALIASES, rep, max_edits, where), rep, max_edits, where
                    )
                    r = _rename(r, RESULT_ALIASES, rep, max_edits, where)
                    r = {k: _coerce(k, v, rep, max_edits, where) for k, v in r.items()}
                fixed.append(r)
            top["results"] = fixed
    except _Capped:
        return payload, rep
    return top, rep


# --- contract modes ----------------------------------------------------------------------------

Outcome = Literal["accepted", "unavailable", "rejected", "denied"]


@dataclass(frozen=True)
class ContractResult:
    """What the contract let through. ``payload`` is set only when ``outcome == "accepted"``."""

    outcome: Outcome
    valid: bool
    payload: SearchPayload | None
    edits: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    # a tool that returned only an error: its code (e.g. a transport fault's ``rate_limited``)
    # and the seconds its Retry-After asked for, what a retry policy reads
    error_code: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class ContractMode:
    """How a tool payload is checked before the reader sees it (built from a ``contract`` entry
    of the mitigations spec; see :func:`layerlab.mitigations.contract_mode`)."""

    name: str
    repair: bool
    max_edits: int = 48
    description: str = ""

    def check(self, payload: Payload) -> ContractResult:
        """Classify and validate ``payload`` (after repair, in repair mode)."""
        if not payload or not isinstance(payload, dict):
            return ContractResult("unavailable", False, None, problems=("no tool output",))
        edits: tuple[str, ...] = ()
        if self.repair:
            fixed, rep = repair_payload(payload, self.max_edits)
            edits = tuple(rep.edits)
            if rep.capped:
                return ContractResult(
                    "rejected",
                    False,
                    None,
                    edits,
                    (f"repair stopped at the cap of {self.max_edits} edits",),
                )
            payload = fixed
        if set(payload) <= {"error"}:
            err = payload.get("error")
            err = err if isinstance(err, dict) else {}
            after = err.get("retry_after")
            return ContractResult(
                "unavailable", False, None, edits, ("tool returned only an error",),
                str(err.get("code") or ""),
                float(after) if isinstance(after, (int, float)) and after >= 0 else None,
            )  # fmt: skip
        try:
            parsed = SearchPayload.model_validate(payload)
        except ValidationError as exc:
            problems = tuple(
                f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}" for e in exc.errors()
            )
            return ContractResult("rejected", False, None, edits, problems)
        if parsed.status == "denied":
            return ContractResult("denied", True, None, edits, ("permission denied",))
        return ContractResult("accepted", True, parsed, edits)

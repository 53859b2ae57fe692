"""The built-in mitigation kinds: the contract check, one mitigation per reliability layer, and
the deliberately over-broad controls the specificity matrix must flag. Each is registered in
:data:`~layerlab.mitigations.base.KINDS` by the :func:`~layerlab.mitigations.base.register`
decorator when this module is imported."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
from pydantic import Field

from layerlab.faults.operators import stable_int
from layerlab.faults.transport import KINDS as TRANSPORT_KINDS
from layerlab.faults.transport import LAYER as TRANSPORT
from layerlab.faults.transport import RETRYABLE
from layerlab.mitigations.base import (
    MAX_ATTEMPTS,
    PASS,
    Act,
    Call,
    Mitigation,
    MitigationParams,
    register,
)
from layerlab.system.contract import ContractMode, ContractResult
from layerlab.system.reader import ReaderInput, ReaderOutput


def _refuse(reason: str) -> Act:
    return Act("refuse", reason)


# --- the contract layer --------------------------------------------------------------------------


class _ContractParams(MitigationParams):
    repair: bool = False
    max_edits: int = Field(default=48, ge=0, le=10_000)


@register
class ContractCheck(Mitigation):
    """The tool contract: reject a payload that fails the schema, or repair it first (bounded
    normalisation). Rejection is the contract failing, not a refusal."""

    kind = "contract"
    layers = ("tool_contract",)
    stage = "contract"
    actions = ("pass", "repair")
    Params = _ContractParams

    @property
    def mode(self) -> ContractMode:
        p = self.typed(_ContractParams)
        return ContractMode(self.name, repair=p.repair, max_edits=p.max_edits)


# --- layer mitigations ---------------------------------------------------------------------------


class _RetryParams(MitigationParams):
    max_retries: int = Field(default=2, ge=0, le=MAX_ATTEMPTS - 1)
    backoff_s: float = Field(default=2.0, ge=0.0)
    jitter: float = Field(default=0.5, ge=0.0, le=1.0)


@register
class AvailabilityRetry(Mitigation):
    """No usable tool output: call again (bounded, linear backoff with seeded jitter), then refuse."""

    kind = "availability_retry"
    layers = ("availability",)
    stage = "tool"
    actions = ("pass", "retry", "refuse")
    Params = _RetryParams

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        if result.outcome != "unavailable":
            return PASS
        p = self.typed(_RetryParams)
        if call.attempt >= p.max_retries:
            return _refuse(f"no tool output after {call.attempt} bounded retries")
        u = float(np.random.default_rng(stable_int(self.name, call.task_id, call.attempt)).random())
        return Act(
            "retry", "no tool output", delay_s=p.backoff_s * (call.attempt + 1) * (1 + p.jitter * u)
        )


@register
class AccessAbstention(Mitigation):
    """Evidence withheld by access control (a denial, or some hits withheld): refuse."""

    kind = "access_abstention"
    layers = ("authorisation",)
    stage = "access"
    actions = ("pass", "refuse")

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        if result.outcome == "denied":
            return _refuse("access to the evidence was denied")
        if result.payload is not None and result.payload.withheld > 0:
            return _refuse(f"{result.payload.withheld} result(s) withheld by access control")
        return PASS


class _CompletenessParams(MitigationParams):
    max_retries: int = Field(default=2, ge=0, le=MAX_ATTEMPTS - 1)


@register
class CompletenessGuard(Mitigation):
    """Partial or truncated tool output: re-fetch with a longer deadline (bounded), else refuse."""

    kind = "completeness_guard"
    layers = ("completeness",)
    stage = "reader_input"
    actions = ("pass", "retry", "refuse")
    Params = _CompletenessParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        if inp.tool_status == "ok" and not any(e.truncated for e in inp.evidence):
            return PASS
        p = self.typed(_CompletenessParams)
        if call.attempt >= p.max_retries:
            return _refuse(f"partial tool output after {call.attempt} bounded retries")
        return Act("retry", "partial tool output: re-fetch with a longer deadline")


class _RequeryParams(MitigationParams):
    requeries: int = Field(default=1, ge=0, le=MAX_ATTEMPTS - 1)


@register
class FreshnessGuard(Mitigation):
    """Drop evidence that is not the current, valid version (superseded, unverified); when none
    is left, re-query (bounded) and then refuse."""

    kind = "freshness_guard"
    layers = ("freshness",)
    stage = "reader_input"
    actions = ("pass", "filter", "retry", "refuse")
    Params = _RequeryParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        keep = tuple(e for e in inp.evidence if e.status == "current")
        if len(keep) == len(inp.evidence) and keep:
            return PASS
        if keep:
            return Act("filter", "non-current evidence dropped", inp=replace(inp, evidence=keep))
        p = self.typed(_RequeryParams)
        if call.attempt < p.requeries:
            return Act("retry", "no current evidence: re-query")
        return _refuse("no current evidence")


@register
class SessionIsolation(Mitigation):
    """Drop evidence carrying another session's id; when none is left, re-query in the request's
    session (bounded) and then refuse."""

    kind = "session_isolation"
    layers = ("session_state",)
    stage = "reader_input"
    actions = ("pass", "filter", "retry", "refuse")
    Params = _RequeryParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        keep = tuple(e for e in inp.evidence if e.session_id in (None, inp.session_id))
        if len(keep) == len(inp.evidence) and keep:
            return PASS
        if keep:
            return Act(
                "filter", "foreign-session evidence dropped", inp=replace(inp, evidence=keep)
            )
        p = self.typed(_RequeryParams)
        if call.attempt < p.requeries:
            return Act("retry", "only foreign-session evidence: re-query in the request's session")
        return _refuse("evidence belongs to another session")


class _MetadataParams(MitigationParams):
    fallback_retriever: str = "tfidf_validity"
    scope: Literal["all", "current"] = "all"


@register
class MetadataIntegrity(Mitigation):
    """Check each result's domain label against its owner (which owner publishes which domain is
    public corpus metadata). Inconsistent labels: fall back to a retriever without the domain
    signal and drop inconsistent results; if nothing consistent remains, refuse.
    ``scope: current`` checks only results labelled current (the study's control)."""

    kind = "metadata_integrity"
    layers = ("metadata",)
    stage = "reader_input"
    actions = ("pass", "retry", "filter", "refuse")
    Params = _MetadataParams

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        p = self.typed(_MetadataParams)
        checked = [e for e in inp.evidence if p.scope == "all" or e.status == "current"]
        bad = {
            e.doc_id
            for e in checked
            if e.domain not in call.domain_owners.get(e.owner, frozenset())
        }
        if not bad:
            return PASS
        if call.retriever != p.fallback_retriever:
            return Act(
                "retry",
                "domain labels inconsistent with owners: no domain signal",
                retriever=p.fallback_retriever,
            )
        keep = tuple(e for e in inp.evidence if e.doc_id not in bad)
        if keep and p.scope == "all":
            return Act("filter", "inconsistent results dropped", inp=replace(inp, evidence=keep))
        return _refuse("domain label inconsistent with the document owner")


@register
class ValidityResolution(Mitigation):
    """Conflicting versions of one document (same title): keep the current one with the latest
    effective year and drop the others; without a current version, pass (freshness is not its job)."""

    kind = "validity_resolution"
    layers = ("evidence",)
    stage = "reader_input"
    actions = ("pass", "filter")

    def on_input(self, inp: ReaderInput, call: Call) -> Act:
        best: dict[str, tuple[int, int]] = {}
        for e in inp.evidence:
            if e.status == "current":
                best[e.title] = max(best.get(e.title, (-1, -1)), (e.effective_year, e.version))
        keep = tuple(
            e
            for e in inp.evidence
            if e.title not in best
            or (e.status == "current" and (e.effective_year, e.version) == best[e.title])
        )
        if len(keep) == len(inp.evidence):
            return PASS
        return Act(
            "filter", "conflicting versions resolved by validity", inp=replace(inp, evidence=keep)
        )


# --- the transport layer (data/specs/mitigations_transport.yaml) --------------------------------


def _transport_code(result: ContractResult) -> str | None:
    """The transport fault a failed tool call met (its error code), or None: any other reply."""
    if result.outcome == "unavailable" and result.error_code in TRANSPORT_KINDS:
        return result.error_code
    return None


class _TransportRetryParams(MitigationParams):
    max_retries: int = Field(default=3, ge=0, le=MAX_ATTEMPTS - 1)
    backoff_s: float = Field(default=0.5, ge=0.0)
    max_backoff_s: float = Field(default=30.0, ge=0.0)
    jitter: float = Field(default=0.5, ge=0.0, le=1.0)


@register
class TransportRetry(Mitigation):
    """A call that failed on the wire (429, 5xx, reset, timeout, truncated body): call again,
    bounded, after an exponential backoff with seeded "equal jitter" that honours the service's
    Retry-After as a lower bound; after ``max_retries`` (or at once for an expired credential,
    which a retry only sends again) refuse. Any other reply passes: a missing tool output or a
    denial is not the wire's."""

    kind = "transport_retry"
    layers = (TRANSPORT,)
    stage = "tool"
    actions = ("pass", "retry", "refuse")
    Params = _TransportRetryParams

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        code = _transport_code(result)
        if code is None:
            return PASS
        if code not in RETRYABLE:
            return _refuse(f"{code}: a retry cannot recover")
        p = self.typed(_TransportRetryParams)
        if call.attempt >= p.max_retries:
            return _refuse(f"{code} after {call.attempt} bounded retries")
        b = min(p.backoff_s * 2**call.attempt, p.max_backoff_s)
        u = float(np.random.default_rng(stable_int(self.name, call.task_id, call.attempt)).random())
        wait = b * (1 - p.jitter * u)
        if result.retry_after is not None:
            wait = max(wait, min(result.retry_after, p.max_backoff_s))
        return Act("retry", f"{code}: retry after {wait:.2f}s", delay_s=round(wait, 4))


class _BreakerParams(MitigationParams):
    failure_threshold: int = Field(default=2, ge=1, le=MAX_ATTEMPTS - 2)
    cooldown_s: float = Field(default=30.0, ge=0.0)


@register
class CircuitBreaker(Mitigation):
    """A circuit breaker on the search service, per record (records are independent, so a rerun
    meets the same states): closed, a call that failed on the wire is made again at once; after
    ``failure_threshold`` consecutive failures the circuit opens, and after ``cooldown_s`` one
    half-open probe is let through; if it fails too, the circuit stays open and the record ends
    at once with a structured non-answer (fail fast) instead of waiting on a service that is
    down. Honours no Retry-After and makes at most ``failure_threshold`` + 1 calls."""

    kind = "circuit_breaker"
    layers = (TRANSPORT,)
    stage = "tool"
    actions = ("pass", "retry", "refuse")
    Params = _BreakerParams

    def on_tool(self, result: ContractResult, call: Call) -> Act:
        code = _transport_code(result)
        if code is None:
            return PASS
        p = self.typed(_BreakerParams)
        failures = call.attempt + 1  # every earlier call of this step failed, or it had passed
        if failures < p.failure_threshold:
            return Act("retry", f"{code}: circuit closed, call again")
        if failures == p.failure_threshold:
            return Act("retry", f"{code}: circuit open; half-open probe after {p.cooldown_s:g}s",
                       delay_s=p.cooldown_s)  # fmt: skip
        return _refuse(f"circuit open after {failures} consecutive transport failures ({code})")


# --- deliberately over-broad controls (the matrix must flag them) --------------------------------


@register
class AlwaysAbstain(Mitigation):
    """Over-broad on purpose: refuse every reply. Safe on every unsafe scenario, useless elsewhere."""

    kind = "always_abstain"
    layers = (
        "freshness",
        "availability",
        "completeness",
        "authorisation",
        "metadata",
        "session_state",
    )
    stage = "after_reader"
    actions = ("refuse",)

    def on_output(self, inp: ReaderInput, out: ReaderOutput, call: Call) -> Act:
        return _refuse("always abstain")


class _IgnoreParams(MitigationParams):
    retriever: str = "tfidf"


@register
class IgnoreMetadata(Mitigation):
    """Over-broad on purpose: distrust all metadata by retrieving on text alone (no domain cues,
    no validity), which also throws away the signal that picks the current version."""

    kind = "ignore_metadata"
    layers = ("metadata",)
    stage = "index"
    actions = ("repair",)
    Params = _IgnoreParams

    def retriever(self, name: str) -> str:
        return self.typed(_IgnoreParams).retriever


@register
class EmptyContext(Mitigation):
    """Not a mitigation: what an uncontrolled pipeline does with a tool failure — hand the reader
    an empty context (the LangChain study's uncontrolled arm)."""

    kind = "empty_context"
    layers = ()
    stage = "tool"
    actions = ("pass",)


BUILTIN_KINDS: dict[str, type[Mitigation]] = {
    c.kind: c
    for c in list(globals().values())
    if isinstance(c, type) and issubclass(c, Mitigation) and c.__module__ == __name__
}
"""The kinds this module defines (whatever plug-ins register besides)."""

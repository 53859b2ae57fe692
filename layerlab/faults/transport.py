"""Transport faults: what happens to a tool call (or a model call) on the wire, as typed events.

The tool-stage operators of :mod:`layerlab.faults.operators` change a payload that *arrived*; a
transport fault decides whether and how a reply arrives at all: a slow call (``latency``, fixed
or jittered), an HTTP 429 with ``Retry-After`` (``rate_limit``), a 5xx (``server_error``), a
connection reset (``connection_reset``), a call that stalls past any timeout (``stall``), a body
cut short (``truncated_body``) and a credential that expires mid-run (``auth_expiry``: 401 from
the record's N-th call on). Each is an operator of stage ``transport`` (registered in
:data:`~layerlab.faults.operators.OPERATORS`, so the scenario DSL names it like any other), and
each call's fault is a :class:`TransportEvent` — ``kind``, HTTP ``status``, ``retry_after``,
``delay_s`` — decided by :meth:`~layerlab.faults.scenario.Scenario.transport_event` from the
scenario's seed, the task and the call's number in the record: the same spec gives the same
events, on every rerun and in every delivery.

Delivery is the consumer's: the deterministic harness sees a failed call as an error-only tool
payload (:meth:`TransportEvent.payload`, which every contract finds ``unavailable``); the tool
server answers an HTTP target with the real status, header, reset or stall; the MCP endpoint
with an MCP tool error; an in-process target gets the matching exception
(:func:`exception_for`: :class:`RateLimited` is a :class:`ConnectionError` with
``retry_after``, :class:`TimedOut` a :class:`TimeoutError`, ...), and so does a team's store
whose ``search`` takes ``transport`` (a :class:`Wire` it calls for each request to its
service); a model call under ``run live -m`` raises the provider's error before the model is
reached. Delays are slept only on a :class:`Clock`, where a call is delivered, bounded by its
``max_delay_s`` (tests pass a clock that only counts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from layerlab.faults.operators import (
    FaultOperator,
    ToolContext,
    _Params,
    register_operator,
    stable_int,
)

Kind = Literal["latency", "rate_limited", "server_error", "connection_reset", "stall",
               "truncated_body", "auth_expired"]  # fmt: skip
KINDS: tuple[str, ...] = ("latency", "rate_limited", "server_error", "connection_reset", "stall",
                          "truncated_body", "auth_expired")  # fmt: skip
RETRYABLE = frozenset({"rate_limited", "server_error", "connection_reset", "stall",
                       "truncated_body"})  # fmt: skip
"""Failed calls a retry may recover from (an expired credential is not: a retry sends it again)."""
LAYER = "transport"


@dataclass(frozen=True)
class TransportEvent:
    """One call's transport fault. ``status``: the HTTP status a service answers with (429, 5xx,
    401; 200 for a truncated body; None where no response comes: a reset, a stall, or a plain
    slow call); ``retry_after``: the ``Retry-After`` seconds; ``delay_s``: how long the call
    takes before it answers (latency) or gives up (a stall)."""

    kind: Kind
    status: int | None = None
    retry_after: float | None = None
    delay_s: float = 0.0
    keep: float = 1.0  # a truncated body: the share of its bytes that arrive

    @property
    def fails(self) -> bool:
        """Whether the call fails (everything but latency)."""
        return self.kind != "latency"

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    def message(self) -> str:
        """One line saying what the caller met (no payload, no answer: public by construction)."""
        if self.kind == "rate_limited":
            return f"HTTP 429 Too Many Requests; retry after {self.retry_after:g}s"
        if self.kind == "server_error":
            after = f"; retry after {self.retry_after:g}s" if self.retry_after is not None else ""
            return f"HTTP {self.status} from the search service{after}"
        if self.kind == "connection_reset":
            return "the connection was reset by the search service"
        if self.kind == "stall":
            return f"the search service did not answer within {self.delay_s:g}s (timed out)"
        if self.kind == "truncated_body":
            return f"the reply body was cut short ({self.keep:.0%} of its bytes arrived)"
        if self.kind == "auth_expired":
            return "HTTP 401 Unauthorized: the credential expired"
        return f"the call took {self.delay_s:g}s"

    def error(self) -> dict[str, Any]:
        """The tool error a failed call is (``{code, message}``, plus ``retry_after`` when the
        service sent one)."""
        err: dict[str, Any] = {"code": self.kind, "message": self.message()}
        if self.retry_after is not None:
            err["retry_after"] = self.retry_after
        return err

    def payload(self) -> dict[str, Any]:
        """A failed call as the harness's tool payload: an error and nothing else (every
        contract finds it unavailable, as a missing tool output)."""
        return {"error": self.error()}


def merge(events: list[TransportEvent]) -> TransportEvent | None:
    """One call's event from its operators' (in DSL order): the first failure, its delay plus
    every earlier latency; else the latencies summed; None when no operator struck."""
    delay = 0.0
    for ev in events:
        if ev.fails:
            return TransportEvent(ev.kind, ev.status, ev.retry_after, round(ev.delay_s + delay, 6),
                                  ev.keep)  # fmt: skip
        delay += ev.delay_s
    return TransportEvent("latency", delay_s=round(delay, 6)) if events else None


# --- the exceptions an in-process caller meets ---------------------------------------------------


class TransportError(Exception):
    """A tool (or model) call failed on the wire: ``event`` says how."""

    def __init__(self, event: TransportEvent, message: str | None = None) -> None:
        super().__init__(message or event.message())
        self.event = event
        # what a provider's error carries (litellm's name): its Retry-After, read by the live
        # harness's backoff (layerlab.models.llm.retry_after_of)
        self.litellm_response_headers = (
            {"retry-after": f"{event.retry_after:g}"} if event.retry_after is not None else {}
        )

    @property
    def retry_after(self) -> float | None:
        return self.event.retry_after

    @property
    def status(self) -> int | None:
        return self.event.status


class RateLimited(TransportError, ConnectionError):
    """HTTP 429: too many requests; ``retry_after`` seconds to wait."""


class ServiceUnavailable(TransportError, ConnectionError):
    """HTTP 5xx from the service (``status``)."""


class ConnectionReset(TransportError, ConnectionResetError):
    """The service closed the connection without an answer."""


class TimedOut(TransportError, TimeoutError):
    """The service stalled past the caller's timeout."""


class TruncatedBody(TransportError, ConnectionError):
    """The reply's body was cut short (an incomplete read)."""


class AuthExpired(TransportError, PermissionError):
    """HTTP 401: the caller's credential expired."""


EXCEPTIONS: dict[str, type[TransportError]] = {
    "rate_limited": RateLimited, "server_error": ServiceUnavailable,
    "connection_reset": ConnectionReset, "stall": TimedOut, "truncated_body": TruncatedBody,
    "auth_expired": AuthExpired,
}  # fmt: skip


def exception_for(event: TransportEvent) -> TransportError:
    """The exception an in-process caller gets for a failed call (ValueError for latency)."""
    if not event.fails:
        raise ValueError("a latency event is a slow call, not a failure")
    return EXCEPTIONS[event.kind](event)


# --- the clock deliveries sleep on ---------------------------------------------------------------


MAX_DELAY_S = 5.0
"""The longest a delivery really sleeps for one event (a stall of 30 s waits this long, then
fails as timed out): a run under transport faults stays bounded in time."""


@dataclass
class Clock:
    """Where deliveries sleep: ``sleep`` (``time.sleep``), each sleep bounded by ``max_delay_s``;
    ``slept`` counts the seconds asked for (thread-safe). Tests pass ``Clock(sleep=lambda s:
    None)`` to count without waiting."""

    sleep: Callable[[float], None] = time.sleep
    max_delay_s: float = MAX_DELAY_S
    slept: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def wait(self, seconds: float) -> float:
        """Sleep ``seconds`` (at most ``max_delay_s``); the seconds actually waited."""
        s = max(0.0, min(float(seconds), self.max_delay_s))
        with self._lock:
            self.slept += s
        if s > 0:
            self.sleep(s)
        return s


CLOCK = Clock()
"""The default clock of every delivery (real sleeps, at most :data:`MAX_DELAY_S` each)."""


@dataclass
class Wire:
    """The transport faults of one tool call delivered inside a team's store (the ``transport``
    keyword its ``search`` takes): each call of it is one request of the store to its service,
    request ``k`` of the call meeting ``event_of(k)`` — it waits a slow request's delay on
    ``clock`` (bounded) and raises a failed one's exception (:func:`exception_for`), so the
    store's own retry and error handling is what meets the fault. ``made``: requests so far."""

    event_of: Callable[[int], TransportEvent | None]
    clock: Clock = field(default_factory=lambda: CLOCK)
    made: int = 0

    def __call__(self) -> None:
        ev = self.event_of(self.made)
        self.made += 1
        if ev is None:
            return
        self.clock.wait(ev.delay_s)
        if ev.fails:
            raise exception_for(ev)


# --- the operators -------------------------------------------------------------------------------


class _TransportParams(_Params):
    # the share of a struck task's calls this fault strikes (a seeded draw per call); 1: every call
    rate: float = Field(default=1.0, ge=0.0, le=1.0)
    # which calls it strikes: the record's tool calls, its model calls (run live -m), or both
    channel: Literal["both", "tool", "model"] = "both"


class TransportOperator(FaultOperator):
    """Base of the transport operators: :meth:`event` decides one call's fault."""

    stage = "transport"
    layer = LAYER
    Params: ClassVar[type[_Params]] = _TransportParams

    def calls(self, ctx: ToolContext, seed: int, position: int, channel: str = "tool") -> bool:
        """Whether this fault strikes call ``ctx.attempt`` of a struck task on ``channel``
        (``tool`` or ``model``): its ``channel``, then ``rate``'s draw."""
        if self.params.channel not in ("both", channel):  # type: ignore[attr-defined]
            return False
        salt = () if channel == "tool" else (channel,)
        rate = self.params.rate  # type: ignore[attr-defined]
        if rate >= 1:
            return True
        u = stable_int(seed, position, "transport-rate", ctx.task_id, ctx.attempt, *salt) / 2.0**64
        return u < rate

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        raise NotImplementedError


class _LatencyParams(_TransportParams):
    delay_s: float = Field(default=0.25, ge=0.0, le=600.0)
    jitter_s: float = Field(default=0.0, ge=0.0, le=600.0)


@register_operator
class Latency(TransportOperator):
    """The call is slow: ``delay_s`` plus a seeded uniform jitter in [0, ``jitter_s``)."""

    name = "latency"
    Params = _LatencyParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        p: _LatencyParams = self.params  # type: ignore[assignment]
        jitter = float(rng.uniform(0.0, p.jitter_s)) if p.jitter_s > 0 else 0.0
        return TransportEvent("latency", delay_s=round(p.delay_s + jitter, 4))


class _RateLimitParams(_TransportParams):
    retry_after_s: float = Field(default=2.0, ge=0.0, le=3600.0)


@register_operator
class RateLimit(TransportOperator):
    """HTTP 429 Too Many Requests with ``Retry-After: retry_after_s``."""

    name = "rate_limit"
    Params = _RateLimitParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        p: _RateLimitParams = self.params  # type: ignore[assignment]
        return TransportEvent("rate_limited", 429, p.retry_after_s)


class _ServerErrorParams(_TransportParams):
    status: int = Field(default=503, ge=500, le=599)
    retry_after_s: float | None = Field(default=None, ge=0.0, le=3600.0)


@register_operator
class ServerError(TransportOperator):
    """The service answers with a 5xx (``status``; 503 by default), maybe with Retry-After."""

    name = "server_error"
    Params = _ServerErrorParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        p: _ServerErrorParams = self.params  # type: ignore[assignment]
        return TransportEvent("server_error", p.status, p.retry_after_s)


@register_operator
class ConnectionResetFault(TransportOperator):
    """The service closes the connection without answering."""

    name = "connection_reset"

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        return TransportEvent("connection_reset")


class _StallParams(_TransportParams):
    stall_s: float = Field(default=30.0, gt=0.0, le=3600.0)


@register_operator
class Stall(TransportOperator):
    """The service accepts the call and never answers within ``stall_s`` (past the caller's
    timeout): the call times out."""

    name = "stall"
    Params = _StallParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        return TransportEvent("stall", delay_s=self.params.stall_s)  # type: ignore[attr-defined]


class _TruncateParams(_TransportParams):
    min_keep: float = Field(default=0.2, ge=0.0, le=1.0)
    max_keep: float = Field(default=0.8, ge=0.0, le=1.0)


@register_operator
class TruncatedBodyFault(TransportOperator):
    """HTTP 200 whose body stops short: a seeded share in [min_keep, max_keep) of its bytes
    arrive, then the connection closes (the JSON does not parse)."""

    name = "truncated_body"
    Params = _TruncateParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        p: _TruncateParams = self.params  # type: ignore[assignment]
        keep = float(rng.uniform(min(p.min_keep, p.max_keep), max(p.min_keep, p.max_keep)))
        return TransportEvent("truncated_body", 200, keep=round(keep, 4))


class _AuthParams(_TransportParams):
    after_calls: int = Field(default=0, ge=0, le=100)


@register_operator
class AuthExpiry(TransportOperator):
    """The credential expires mid-run: from the record's call number ``after_calls`` on (0: the
    first), every call is refused with HTTP 401."""

    name = "auth_expiry"
    Params = _AuthParams

    def event(self, ctx: ToolContext, rng: np.random.Generator) -> TransportEvent | None:
        if ctx.attempt < self.params.after_calls:  # type: ignore[attr-defined]
            return None
        return TransportEvent("auth_expired", 401)


__all__ = [
    "AuthExpired", "CLOCK", "Clock", "ConnectionReset", "EXCEPTIONS", "KINDS", "LAYER",
    "MAX_DELAY_S", "RETRYABLE", "RateLimited", "ServiceUnavailable", "TimedOut",
    "TransportError", "TransportEvent", "TransportOperator", "TruncatedBody", "Wire",
    "exception_for", "merge",
]  # fmt: skip

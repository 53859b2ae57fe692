"""The team's own spans, per record: what a target's instrumented pipeline emits while it answers.

A target run with a private sample log (``run live --target ... --sample-log PATH``) gives each
record a trace of its own: a trace id and a parent span id derived from the record's identity
(:func:`record_trace` of :func:`record_ident`; the same run and record give the same ids), never drawn at random.

* **in-process targets** (``python:``, ``langchain:``, ``llamaindex:``): layerlab installs an
  OpenTelemetry tracer provider for the process (:func:`install`; when the team set an SDK
  provider of its own, layerlab's span processor is added to it and its exporters keep
  working), and the target's call runs with the record's span as the current OpenTelemetry
  context (:func:`within`): every span the team's code starts in that call is a child of it,
  whichever thread or task the framework uses (OpenInference's LangChain and LlamaIndex
  instrumentors, ``tracer.start_as_current_span`` by hand), so it lands in that record;
* **HTTP targets**: the request carries the W3C ``traceparent`` header of the record's span and
  the body the address of an OTLP/HTTP receiver layerlab runs on 127.0.0.1 for the run
  (:mod:`~layerlab.harness.targets.otlp`); the service's exporter sends its spans there.

:meth:`RecordSpans.take` hands back a record's spans when the record ends (an HTTP service's
spans are waited for, up to ``--target-setting otel_wait=S``, until its top span arrived) as
plain dicts (:func:`span_dict`: name, ids, parent, kind, start and duration in milliseconds from
the record's start, status, attributes, events), secrets redacted (:mod:`layerlab._secrets`),
long values cut. They go to the private sample log only (``spans``), never to an archive: they
hold the team's prompts, queries and document ids. Spans of no open record are dropped.
Without the ``otel`` extra an in-process target's spans are not collected (one note).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from layerlab._io import canonical_json
from layerlab._secrets import SECRET_MARK, is_secret_name, redact

MAX_SPANS = 500
"""Spans kept per record (the first ones by start time); the entry says how many were dropped."""
MAX_VALUE = 4000
"""Characters kept of a string attribute (a prompt, a reply): the rest is cut, marked ``…``."""
MAX_ITEMS = 64
"""Items kept of a list attribute, and events of a span."""
POLL_S = 0.05


@dataclass(frozen=True)
class RecordTrace:
    """A record's trace: its trace id, the id of the record's (layerlab's) span, and when it
    started (``time.time_ns()``); ``otlp_url`` is where an HTTP service exports its spans."""

    trace_id: int
    span_id: int
    start_ns: int
    otlp_url: str | None = None

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` header of the record's span (sampled)."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"


def record_ident(
    run_id: str,
    provider: str,
    model: str,
    scenario: str,
    mitigation: str,
    task_id: str,
    replicate: int,
) -> str:
    """The text a record's trace ids derive from: its run id and archive key."""
    return canonical_json([run_id, provider, model, scenario, mitigation, task_id, replicate])


def record_trace(ident: str, otlp_url: str | None = None) -> RecordTrace:
    """The trace of the record named by ``ident`` (its run id and key): ids from its SHA-256."""
    digest = hashlib.sha256(f"layerlab-record\x00{ident}".encode()).digest()
    trace_id = int.from_bytes(digest[:16], "big") or 1
    span_id = int.from_bytes(digest[16:24], "big") or 1
    return RecordTrace(trace_id, span_id, time.time_ns(), otlp_url)


_CURRENT: contextvars.ContextVar[RecordTrace | None] = contextvars.ContextVar(
    "layerlab_record_trace", default=None
)


def current() -> RecordTrace | None:
    """The record trace the calling code answers in (an HTTP target reads its header here)."""
    return _CURRENT.get()


# --- the spans of open records ----------------------------------------------------------------


class _Store:
    """Spans by trace id, kept only for the traces of open records (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: dict[int, tuple[RecordTrace, list[dict[str, Any]]]] = {}
        self.seen = 0  # spans that reached an open record since the process started

    def add(self, trace_id: int, span: Callable[[RecordTrace], dict[str, Any]]) -> None:
        with self.lock:
            slot = self.open.get(trace_id)
            if slot is None:
                return
            slot[1].append(span(slot[0]))
            self.seen += 1


STORE = _Store()


def _cut(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + "…"


def clean_value(name: str, value: Any) -> Any:
    """An attribute's value as the sample log keeps it: a secret-named string marked, strings
    redacted and cut, lists cut; numbers and booleans as they are."""
    if isinstance(value, (list, tuple)):
        return [clean_value(name, v) for v in list(value)[:MAX_ITEMS]]
    if isinstance(value, bool) or isinstance(value, (int, float)) or value is None:
        return value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    if text and is_secret_name(name):
        return SECRET_MARK
    return _cut(redact(text))


def clean_attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    return {str(k): clean_value(str(k), v) for k, v in sorted((attrs or {}).items())}


def span_dict(
    trace: RecordTrace,
    *,
    name: str,
    span_id: int,
    parent_id: int | None,
    kind: str,
    start_ns: int,
    end_ns: int,
    status: str,
    message: str | None,
    attributes: Mapping[str, Any] | None,
    events: list[tuple[str, int, Mapping[str, Any] | None]],
) -> dict[str, Any]:
    """One span as the sample log keeps it: ``parent`` is None for a span directly under the
    record's (layerlab's) span, times in milliseconds (``start_ms`` from the record's start)."""
    return {
        "name": _cut(redact(str(name))),
        "span_id": f"{span_id:016x}",
        "parent": None if parent_id in (None, 0, trace.span_id) else f"{parent_id:016x}",
        "kind": kind,
        "start_ms": round((start_ns - trace.start_ns) / 1e6, 3),
        "duration_ms": round(max(0, end_ns - start_ns) / 1e6, 3),
        "status": status,
        "message": None if not message else _cut(redact(message)),
        "attributes": clean_attributes(attributes),
        "events": [
            {
                "name": str(n),
                "at_ms": round((t - trace.start_ns) / 1e6, 3),
                "attributes": clean_attributes(a),
            }
            for n, t, a in events[:MAX_ITEMS]
        ],  # fmt: skip
    }


# --- in-process: layerlab's tracer provider ---------------------------------------------------

_installed: dict[int, bool] = {}  # id(provider) -> layerlab's processor added
_install_lock = threading.Lock()


def install() -> str | None:
    """Make the process's OpenTelemetry tracer provider feed the records' spans (once): an SDK
    provider is created and set globally when none is, else layerlab's processor is added to
    the team's. None when done, else why spans cannot be collected (one line)."""
    try:
        from opentelemetry import trace as trace_api
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        from layerlab.extras import install_hint

        return f"the team's spans are not collected: {install_hint('opentelemetry.sdk')}"
    with _install_lock:
        provider = trace_api.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            if type(provider).__name__ != "ProxyTracerProvider":
                return (f"the team's spans are not collected: the process's tracer provider is "
                        f"a {type(provider).__name__}, not the OpenTelemetry SDK's")  # fmt: skip
            provider = TracerProvider()
            trace_api.set_tracer_provider(provider)
            provider = trace_api.get_tracer_provider()  # another thread may have set one first
            if not isinstance(provider, TracerProvider):
                return "the team's spans are not collected: another tracer provider was set"
        if not _installed.get(id(provider)):
            provider.add_span_processor(_processor())
            _installed[id(provider)] = True
    return None


def _processor() -> Any:
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

    class RecordProcessor(SpanProcessor):
        """Hands every ended span to the record whose trace it belongs to."""

        def on_end(self, span: ReadableSpan) -> None:
            ctx = span.context
            if ctx is not None and ctx.trace_id in STORE.open:
                STORE.add(ctx.trace_id, lambda t: _from_sdk(t, span))

    return RecordProcessor()


def _from_sdk(trace: RecordTrace, span: Any) -> dict[str, Any]:
    parent = span.parent.span_id if span.parent is not None else None
    code = span.status.status_code.name.lower() if span.status is not None else "unset"
    return span_dict(
        trace, name=span.name, span_id=span.context.span_id, parent_id=parent,
        kind=span.kind.name.lower(), start_ns=span.start_time or trace.start_ns,
        end_ns=span.end_time or span.start_time or trace.start_ns, status=code,
        message=span.status.description if span.status is not None else None,
        attributes=dict(span.attributes or {}),
        events=[(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
    )  # fmt: skip


def within(trace: RecordTrace | None, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` made to run as the record's code: in the record's trace context (the team's spans
    become children of the record's span) and with :func:`current` giving ``trace``; an
    awaitable it returns is awaited in that context too. ``trace`` None: ``fn`` itself."""
    if trace is None:
        return fn

    def call() -> Any:
        tokens = _enter(trace)
        try:
            result = fn()
        finally:
            _leave(tokens)
        if inspect.isawaitable(result):
            return _awaited(trace, result)
        return result

    return call


async def _awaited(trace: RecordTrace, awaitable: Any) -> Any:
    tokens = _enter(trace)
    try:
        return await awaitable
    finally:
        _leave(tokens)


def _enter(trace: RecordTrace) -> tuple[Any, Any]:
    token = _CURRENT.set(trace)
    try:
        from opentelemetry import context
        from opentelemetry import trace as trace_api
    except ImportError:
        return token, None
    parent = trace_api.NonRecordingSpan(trace_api.SpanContext(
        trace.trace_id, trace.span_id, is_remote=True,
        trace_flags=trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)))  # fmt: skip
    return token, context.attach(trace_api.set_span_in_context(parent))


def _leave(tokens: tuple[Any, Any]) -> None:
    token, otel = tokens
    if otel is not None:
        from opentelemetry import context

        context.detach(otel)
    _CURRENT.reset(token)


# --- a run's collector ------------------------------------------------------------------------


class RecordSpans:
    """A target run's collector of the team's spans: :meth:`begin` a record's trace, run the
    call :func:`within` it, :meth:`take` its spans; :meth:`close` at the end of the run.
    ``kind``: the target's kind (``http`` runs a receiver); ``settings``: the target's
    settings (``otel_port``, ``otel_wait``)."""

    def __init__(self, kind: str, settings: Mapping[str, Any] | None = None) -> None:
        from layerlab.harness.targets import otlp

        settings = settings or {}
        self.kind = kind
        self.wait_s, self.wait_given = otlp.wait_setting(settings)
        self.receiver: Any = None
        self.note: str | None = None
        if kind == "http":
            self.receiver = otlp.Receiver(otlp.port_setting(settings), STORE, span_dict)
        else:
            self.note = install()

    @property
    def otlp_url(self) -> str | None:
        return None if self.receiver is None else self.receiver.url

    def begin(self, ident: str) -> RecordTrace:
        trace = record_trace(ident, self.otlp_url)
        with STORE.lock:
            STORE.open[trace.trace_id] = (trace, [])
        return trace

    async def take(self, trace: RecordTrace) -> dict[str, Any]:
        """The record's spans (``{"spans": [...], "dropped": N}``), its trace closed. An HTTP
        service's are waited for until its top span arrived, at most ``otel_wait`` seconds
        (once the service has sent any span in this run, or when the setting is given)."""
        if self.receiver is not None and (self.wait_given or self.receiver.received):
            deadline = time.monotonic() + self.wait_s
            while time.monotonic() < deadline and not self._top_arrived(trace):
                await asyncio.sleep(POLL_S)
        with STORE.lock:
            _, spans = STORE.open.pop(trace.trace_id, (trace, []))
        spans.sort(key=lambda s: (s["start_ms"], s["span_id"]))
        return {"spans": spans[:MAX_SPANS], "dropped": max(0, len(spans) - MAX_SPANS)}

    def _top_arrived(self, trace: RecordTrace) -> bool:
        with STORE.lock:
            slot = STORE.open.get(trace.trace_id)
            return slot is not None and any(s["parent"] is None for s in slot[1])

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.close()

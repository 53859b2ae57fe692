"""The OTLP/HTTP receiver of HTTP targets: where a team's service exports its spans during a run.

An HTTP target's request carries the W3C ``traceparent`` header of the record's span and, in its
body, ``otlp_traces_url`` (``http://127.0.0.1:PORT/v1/traces``). A service instrumented with
OpenTelemetry sends its spans there with any OTLP/HTTP exporter: binary protobuf
(``application/x-protobuf``, the exporters' default; decoded with ``opentelemetry-proto``, the
``otel`` extra) or JSON (``application/json``, OTLP's JSON encoding: hex ids), gzip or not. A
service configured once at its start points its exporter at a fixed port:
``--target-setting otel_port=4318`` (default: a free port, named in each request body), e.g.
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces``; with the SDK's batch
processor, ``OTEL_BSP_SCHEDULE_DELAY=100`` (ms) sends a record's spans before its wait ends.

Spans are handed to the record whose trace they belong to (:mod:`~layerlab.harness.targets.spans`);
spans of any other trace are dropped. The receiver listens on 127.0.0.1 only, for the run; a body
over :data:`MAX_BODY` gets 413, an undecodable one 400, another path 404.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import threading
import zlib
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layerlab.harness.targets.spec import TargetError

MAX_BODY = 16 << 20
"""The largest export request read (a batch of spans with their prompts)."""
DEFAULT_WAIT_S = 5.0
"""How long a record waits for an HTTP service's spans after its reply (``otel_wait``)."""
KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
STATUS = {0: "unset", 1: "ok", 2: "error"}


def port_setting(settings: Mapping[str, Any]) -> int:
    """``--target-setting otel_port=N`` (0-65535; 0 or absent: a free port)."""
    raw = settings.get("otel_port", 0)
    try:
        port = int(str(raw))
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise TargetError(f"--target-setting otel_port={raw!r}: expected a port, 0-65535 "
                          "(0: a free one)")  # fmt: skip
    return port


def wait_setting(settings: Mapping[str, Any]) -> tuple[float, bool]:
    """``--target-setting otel_wait=S`` (seconds >= 0) and whether it was given."""
    if "otel_wait" not in settings:
        return DEFAULT_WAIT_S, False
    raw = settings["otel_wait"]
    try:
        value = float(str(raw))
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise TargetError(f"--target-setting otel_wait={raw!r}: expected seconds, a number >= 0")
    return value, True


# --- OTLP's JSON shape (protobuf requests are turned into it) ---------------------------------


def _id(value: Any, binary: bool) -> int | None:
    """A trace or span id: hex in OTLP/JSON, base64 bytes in a protobuf message's dict."""
    if not value:
        return None
    raw = base64.b64decode(value) if binary else bytes.fromhex(str(value))
    return int.from_bytes(raw, "big") or None


def any_value(v: Mapping[str, Any]) -> Any:
    """An OTLP ``AnyValue`` as a plain value."""
    for key, cast in (("stringValue", str), ("boolValue", bool), ("intValue", int),
                      ("doubleValue", float)):  # fmt: skip
        if key in v:
            return cast(v[key])
    if "arrayValue" in v:
        return [any_value(x) for x in v["arrayValue"].get("values", [])]
    if "kvlistValue" in v:
        return json.dumps({kv["key"]: any_value(kv.get("value", {}))
                           for kv in v["kvlistValue"].get("values", [])}, sort_keys=True)  # fmt: skip
    if "bytesValue" in v:
        return str(v["bytesValue"])
    return None


def _attrs(items: Any) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value", {})) for kv in items or ()}


def spans_of(request: Mapping[str, Any], binary: bool) -> list[dict[str, Any]]:
    """The spans of an export request (``resourceSpans`` → ``scopeSpans`` → ``spans``) as
    keyword arguments of :func:`~layerlab.harness.targets.spans.span_dict` plus ``trace_id``;
    the resource's ``service.name`` is added to each span's attributes."""
    out = []
    for rs in request.get("resourceSpans", []) or ():
        service = _attrs((rs.get("resource") or {}).get("attributes")).get("service.name")
        for ss in rs.get("scopeSpans", []) or ():
            for s in ss.get("spans", []) or ():
                attrs = _attrs(s.get("attributes"))
                if service is not None:
                    attrs.setdefault("service.name", service)
                status = s.get("status") or {}
                code = status.get("code", 0)
                kind = s.get("kind", 0)
                out.append({
                    "trace_id": _id(s.get("traceId"), binary),
                    "name": s.get("name", ""),
                    "span_id": _id(s.get("spanId"), binary) or 0,
                    "parent_id": _id(s.get("parentSpanId"), binary),
                    "kind": KINDS.get(kind, str(kind)).lower().removeprefix("span_kind_"),
                    "start_ns": int(s.get("startTimeUnixNano", 0)),
                    "end_ns": int(s.get("endTimeUnixNano", 0)),
                    "status": STATUS.get(code, str(code)).lower().removeprefix("status_code_"),
                    "message": status.get("message"),
                    "attributes": attrs,
                    "events": [(e.get("name", ""), int(e.get("timeUnixNano", 0)),
                                _attrs(e.get("attributes"))) for e in s.get("events", []) or ()],
                })  # fmt: skip
    return out


def decode(body: bytes, content_type: str) -> list[dict[str, Any]]:
    """An export request's spans (:func:`spans_of`); ValueError when it cannot be read."""
    if content_type == "application/json":
        try:
            return spans_of(json.loads(body), binary=False)
        except (json.JSONDecodeError, AttributeError, TypeError, KeyError) as exc:
            raise ValueError(f"not an OTLP/JSON export request ({exc})") from None
    try:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        raise ValueError("protobuf needs opentelemetry-proto (the otel extra); "
                         "send OTLP/JSON instead") from None  # fmt: skip
    msg = ExportTraceServiceRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"not an OTLP protobuf export request ({exc})") from None
    return spans_of(MessageToDict(msg, use_integers_for_enums=True), binary=True)


# --- the server -------------------------------------------------------------------------------


class Receiver:
    """The run's OTLP/HTTP receiver on 127.0.0.1 (``port`` 0: a free one), feeding ``store``
    (:data:`~layerlab.harness.targets.spans.STORE`: ``add(trace_id, make)``, ``make(trace)``
    the span as ``span_dict(trace, **fields)`` keeps it); :meth:`close` at the end of the run."""

    def __init__(self, port: int, store: Any, span_dict: Callable[..., dict[str, Any]]) -> None:
        self.received = 0  # spans received in this run (any trace)

        def feed(spans: list[dict[str, Any]]) -> None:
            self.received += len(spans)
            for s in spans:
                tid = s.pop("trace_id")
                if tid is not None:
                    store.add(tid, lambda t, s=s: span_dict(t, **s))

        handler = type("OtlpHandler", (_Handler,), {"feed": staticmethod(feed)})
        try:
            self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        except OSError as exc:
            raise TargetError(f"--target-setting otel_port={port}: cannot listen on 127.0.0.1:"
                              f"{port} ({exc.strerror or exc})") from None  # fmt: skip
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True,
                         name="layerlab-otlp").start()  # fmt: skip

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    feed: Callable[[list[dict[str, Any]]], None]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _reply(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0].rstrip("/") not in ("/v1/traces", ""):
            return self._reply(404, b"only POST /v1/traces is served here", "text/plain")
        size = int(self.headers.get("Content-Length") or 0)
        if size > MAX_BODY:
            return self._reply(413, b"export request too large", "text/plain")
        body = self.rfile.read(size)
        kind = (self.headers.get("Content-Type") or "application/x-protobuf").split(";")[0]
        try:
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            spans = decode(body, kind.strip().lower())
        except (ValueError, OSError, zlib.error) as exc:
            return self._reply(400, str(exc).encode(), "text/plain")
        self.feed(spans)
        json_reply = kind.strip().lower() == "application/json"
        self._reply(200, b"{}" if json_reply else b"", kind if json_reply else
                    "application/x-protobuf")  # fmt: skip

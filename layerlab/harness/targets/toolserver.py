"""The tool server of HTTP targets: the faulted tools on localhost, for a service in any language.

``POST /search {"session_id", "query", "top_k"}`` and ``POST /open_document {"session_id",
"doc_id"}``, each with the header ``Authorization: Bearer <tools_token>``, answer with the
tool's observation (the same JSON a Python target's ``search`` returns: ``{"status":
"ok"|"partial", "results": [...]}`` or ``{"status": "error"|"refused", "error": {"code",
"message"}}``), with HTTP 200 — a tool error is the tool's answer, not the server's. A
**transport** fault (``scenarios_transport.yaml``; :mod:`layerlab.faults.transport`) is the
server's own, delivered as a service would: a slow call answers after its delay; a rate limit
is a 429 with ``Retry-After`` (whole seconds, rounded up; the body's ``error.retry_after`` has
the exact value); a server error its 5xx; an expired credential a 401 with ``WWW-Authenticate:
Bearer error="invalid_token"`` (each with the observation, ``{"status": "error", "error":
{"code", "message"}}``, as its body); a reset closes the connection without an answer; a stall
holds it for its delay (bounded by the clock's ``max_delay_s``), then closes it unanswered; a
truncated body announces its full ``Content-Length`` and sends only part of it.
``GET /openapi.json`` describes both (OpenAPI 3); ``GET /tools`` lists them as OpenAI function
definitions (``{"tools": [{"type": "function", "function": {"name", "description",
"parameters"}}, ...]}``, :data:`~layerlab.harness.tools.TOOL_DEFINITIONS`), ready to register
with an OpenAI-style agent — its tool calls then POST here with the record's token. Neither
needs a token (they hold no record's data).

Each record in flight gets its own unguessable token (``secrets.token_urlsafe``), sent to the
service with the question and valid only while the record is answered: a call without one is
refused with 401, with a token that is not that of a record in flight (or a ``session_id`` that
is not the token's record's) with 403, and neither reaches any record — another local process
cannot act inside a run, one service never reads another session's records. A body larger than
:data:`MAX_BODY` gets 413, no ``Content-Length`` 411, a body that is not a JSON object 400, an
unknown path 404. The server listens on 127.0.0.1 only, on a free port, for the duration of the
run, with a listen backlog (:data:`BACKLOG`) that holds any run's concurrency; a caller that
disconnects before its answer is counted and reported in one line when the server closes.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layerlab.faults.transport import CLOCK, Clock, TransportEvent
from layerlab.harness.targets.base import exchange
from layerlab.harness.tools import OPEN, SEARCH, TOOL_DEFINITIONS, TOOLS_VERSION

MAX_BODY = 1 << 20
"""The largest request body the tool server reads (a tool call's JSON is a few hundred bytes)."""
BACKLOG = 1024
"""The listen backlog: connections waiting to be accepted (the socket module's default of 5
reset callers at concurrency 64)."""
DRAIN = 8 * MAX_BODY  # an oversized body up to this is read and dropped before the 413
READ_TIMEOUT_S = 30.0  # a caller that stops sending mid-request frees its thread after this
DISCONNECTS = (ConnectionError, TimeoutError)  # BrokenPipe/ConnectionReset/Aborted and timeouts
Exchange = Callable[[Any, str, Any], tuple[dict[str, Any], TransportEvent | None]]
"""One tool call of a request in flight: ``(request, name, args) -> (observation, event)``."""


def openapi() -> dict[str, Any]:
    """The tool server's OpenAPI 3 description."""
    params = {t["function"]["name"]: t["function"] for t in TOOL_DEFINITIONS}
    result = {"type": "object", "properties": {
        "status": {"type": "string", "enum": ["ok", "partial", "error", "refused"]},
        "results": {"type": "array", "items": {"type": "object"}},
        "error": {"type": "object", "properties": {"code": {"type": "string"},
                                                   "message": {"type": "string"}}},
    }}  # fmt: skip
    paths = {}
    for name in (SEARCH, OPEN):
        fn = params[name]
        body = json.loads(json.dumps(fn["parameters"]))
        body["properties"] = {"session_id": {"type": "string"}, **body["properties"]}
        paths[f"/{name}"] = {"post": {
            "operationId": name,
            "summary": fn["description"],
            "security": [{"tools_token": []}],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": body}}},
            "responses": {
                "200": {"description": "the tool's observation (a tool error included)",
                        "content": {"application/json": {"schema": result}}},
                "400": {"description": "the body is not a JSON object"},
                "401": {"description": "no Authorization: Bearer <tools_token> header"},
                "403": {"description": "the token (or session_id) is not that of a record in "
                                       "flight"},
                "411": {"description": "no Content-Length"},
                "413": {"description": f"the body is larger than {MAX_BODY} bytes"},
            },
        }}  # fmt: skip
    paths["/tools"] = {"get": {
        "operationId": "tools",
        "summary": "The tools as OpenAI function definitions (register them with your agent)",
        "responses": {"200": {"description": "{\"tools\": [OpenAI function definitions]}",
                              "content": {"application/json": {"schema": {"type": "object"}}}}},
    }}  # fmt: skip
    return {"openapi": "3.0.3",
            "info": {"title": "layerlab faulted tools", "version": TOOLS_VERSION},
            "components": {"securitySchemes": {"tools_token": {
                "type": "http", "scheme": "bearer",
                "description": "the tools_token sent with the record's question"}}},
            "paths": paths}  # fmt: skip


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], backlog: int) -> None:
        self.request_queue_size = backlog  # read by server_activate(), during __init__
        self.disconnects = 0
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], DISCONNECTS):  # the caller went away: counted, no trace
            self.disconnects += 1
            return
        super().handle_error(request, client_address)


class ToolServer:
    """The faulted tools of the records in flight, served over HTTP on 127.0.0.1."""

    def __init__(self, backlog: int = BACKLOG, clock: Clock = CLOCK) -> None:
        self._live: dict[str, tuple[Any, threading.Lock, Exchange]] = {}
        self.clock = clock  # where a transport fault's delay is slept (bounded)
        self._guard = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = READ_TIMEOUT_S

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # no access log: requests hold questions

            def _send(self, code: int, body: dict[str, Any], **headers: str) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k.replace("_", "-"), v)
                if code != 200:  # the body may be unread: never parse it as a next request
                    self.close_connection = True
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?")[0]
                if path == "/openapi.json":
                    self._send(200, openapi())
                elif path == "/tools":
                    self._send(200, {"tools": list(TOOL_DEFINITIONS)})
                else:
                    self._send(404, {"error": f"no such path {self.path!r} (GET /openapi.json, "
                                              "/tools)"})  # fmt: skip

            def _record(self) -> tuple[Any, threading.Lock, Exchange] | None:
                """The record the caller's token names; None (answered) when it names none."""
                scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    self._send(401, {"error": "expected the header Authorization: Bearer "
                                              "<tools_token> (sent with the question)"},
                               WWW_Authenticate="Bearer")  # fmt: skip
                    return None
                live = server._live.get(token.strip())
                if live is None:
                    self._send(403, {"error": "the token is not that of a record in flight"})
                return live

            def _body(self) -> dict[str, Any] | None:
                """The JSON object body; None (answered) when it is missing, too big or no
                object."""
                try:
                    n = int(self.headers["Content-Length"])
                except (KeyError, TypeError, ValueError):
                    self._send(411, {"error": "expected a Content-Length header"})
                    return None
                if n > MAX_BODY:
                    if n <= DRAIN:  # read it away, so that the caller gets to read the 413
                        left = n
                        while left > 0 and (got := len(self.rfile.read(min(left, 1 << 16)))):
                            left -= got
                    self._send(413, {"error": f"the body is {n} bytes; at most {MAX_BODY}"})
                    return None
                try:
                    body = json.loads(self.rfile.read(max(n, 0)) or b"null")
                except (ValueError, RecursionError):
                    body = None
                if not isinstance(body, dict):
                    self._send(400, {"error": "expected a JSON object body"})
                    return None
                return body

            def do_POST(self) -> None:  # noqa: N802
                name = self.path.split("?")[0].strip("/")
                if name not in (SEARCH, OPEN):
                    self._send(404, {"error": f"no tool {name!r} (POST /search, /open_document)"})
                    return
                live = self._record()
                if live is None:
                    return
                body = self._body()
                if body is None:
                    return
                request, lock, call = live
                sid = body.pop("session_id", request.session_id)
                if sid != request.session_id:
                    self._send(403, {"error": "session_id is not that of the token's record"})
                    return
                with lock:  # one record's tools are called one at a time
                    obs, event = call(request, name, body)
                if event is None:
                    self._send(200, obs)
                else:
                    self._deliver(obs, event)

            def _deliver(self, obs: dict[str, Any], ev: TransportEvent) -> None:
                """A transport fault as a service delivers it (the module docstring)."""
                server.clock.wait(ev.delay_s)
                if ev.kind == "latency":
                    self._send(200, obs)
                elif ev.kind in ("connection_reset", "stall"):
                    self._drop()
                elif ev.kind == "truncated_body":
                    data = json.dumps(obs).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(data[: int(len(data) * ev.keep)])
                    self.close_connection = True
                else:  # rate_limited, server_error, auth_expired
                    headers = {}
                    if ev.retry_after is not None:
                        headers["Retry_After"] = str(math.ceil(ev.retry_after))
                    if ev.kind == "auth_expired":
                        headers["WWW_Authenticate"] = 'Bearer error="invalid_token"'
                    self._send(ev.status or 503, obs, **headers)

            def _drop(self) -> None:
                """Close the connection without an answer (an RST where the OS allows)."""
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))  # fmt: skip

        self._httpd = _Server(Handler, backlog)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}"

    @property
    def disconnects(self) -> int:
        """Callers that disconnected before their answer, so far."""
        return self._httpd.disconnects

    @contextlib.contextmanager
    def serving(self, request: Any, call: Exchange = exchange) -> Iterator[tuple[str, str]]:
        """Serve ``request``'s tools while the block runs: yields ``(tools_url, tools_token)``,
        the token a fresh unguessable one that names this record only. ``call`` makes one tool
        call of the request (``(request, name, args) -> (observation, transport event)``): a
        record's :func:`~layerlab.harness.targets.base.exchange` by default, a conversation
        turn's :func:`~layerlab.harness.convtools.exchange` for a conversational service."""
        token = secrets.token_urlsafe(24)
        with self._guard:
            self._live[token] = (request, threading.Lock(), call)
        try:
            yield self.url, token
        finally:
            with self._guard:
                self._live.pop(token, None)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self.disconnects:
            print(f"tool server: {self.disconnects} caller(s) disconnected before their answer "
                  "(their tool calls were made; nothing was lost)", file=sys.stderr)  # fmt: skip

"""The tool server of HTTP targets: the faulted tools on localhost, for a service in any language.

``POST /search {"session_id", "query", "top_k"}`` and ``POST /open_document {"session_id",
"doc_id"}`` answer with the tool's observation (the same JSON a Python target's ``search``
returns: ``{"status": "ok"|"partial", "results": [...]}`` or ``{"status": "error", "error":
{"code", "message"}}``), always with HTTP 200 — a tool error is the tool's answer, not the
server's. ``GET /openapi.json`` describes both (OpenAPI 3). A request whose ``session_id`` is
not that of a record in flight is refused with 403: one service can never read another
session's records. A body that is not a JSON object gets 400; an unknown path 404. The server
listens on 127.0.0.1 only, on a free port, for the duration of the run.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layerlab.harness.targets.base import TargetRequest
from layerlab.harness.tools import OPEN, SEARCH, TOOL_DEFINITIONS

MAX_BODY = 1 << 20


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
        body["required"] = ["session_id", *body["required"]]
        paths[f"/{name}"] = {"post": {
            "operationId": name,
            "summary": fn["description"],
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": body}}},
            "responses": {
                "200": {"description": "the tool's observation (a tool error included)",
                        "content": {"application/json": {"schema": result}}},
                "400": {"description": "the body is not a JSON object"},
                "403": {"description": "session_id is not that of a record in flight"},
            },
        }}  # fmt: skip
    return {"openapi": "3.0.3",
            "info": {"title": "layerlab faulted tools", "version": "layerlab.tools/v1"},
            "paths": paths}  # fmt: skip


class ToolServer:
    """The faulted tools of the records in flight, served over HTTP on 127.0.0.1."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[TargetRequest, threading.Lock]] = {}
        self._guard = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass  # no access log: requests hold questions

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.split("?")[0] == "/openapi.json":
                    self._send(200, openapi())
                else:
                    self._send(404, {"error": f"no such path {self.path!r} (GET /openapi.json)"})

            def do_POST(self) -> None:  # noqa: N802
                name = self.path.split("?")[0].strip("/")
                if name not in (SEARCH, OPEN):
                    self._send(404, {"error": f"no tool {name!r} (POST /search, /open_document)"})
                    return
                try:
                    n = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(min(n, MAX_BODY)) or b"null")
                except (ValueError, json.JSONDecodeError):
                    body = None
                if not isinstance(body, dict):
                    self._send(400, {"error": "expected a JSON object body"})
                    return
                sid = body.pop("session_id", None)
                live = server._live.get(sid) if isinstance(sid, str) else None
                if live is None:
                    self._send(403, {"error": "session_id is not that of a record in flight"})
                    return
                request, lock = live
                with lock:  # one record's tools are called one at a time
                    self._send(200, request.call(name, body))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}"

    @contextlib.contextmanager
    def serving(self, request: TargetRequest) -> Iterator[str]:
        """Serve ``request``'s tools under its session id while the block runs."""
        sid = request.session_id
        with self._guard:
            if sid in self._live:
                raise RuntimeError(f"session {sid} is already in flight")
            self._live[sid] = (request, threading.Lock())
        try:
            yield self.url
        finally:
            with self._guard:
                self._live.pop(sid, None)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

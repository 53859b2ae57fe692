"""An MCP server over streamable HTTP on 127.0.0.1, in a thread of its own (uvicorn).

Each address is ``http://127.0.0.1:PORT/mcp/<token>``: a request whose token the ``allowed``
check refuses gets 404 (as an unknown MCP session does) and never reaches the MCP server; a
request to ``/mcp`` without a token gets 401. The token is also the request's MCP principal
(the SDK's session owner), so a stateful session opened at one address answers 404 at another.
A body larger than :data:`MAX_BODY` gets 413 (the SDK's limit), a caller that disconnects
before its answer is counted (:attr:`Host.disconnects`). The server accepts connections on a
socket bound before the thread starts (the port is known at once, the listen backlog is
:data:`~layerlab.harness.targets.toolserver.BACKLOG`); :meth:`Host.close` stops it within
:data:`STOP_S` seconds and closes the port (open streams are cancelled).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from layerlab.harness.targets.toolserver import BACKLOG, MAX_BODY

STOP_S = 2
"""How long :meth:`Host.close` lets open requests finish before cancelling them."""
START_S = 30.0
"""How long the server may take to start."""


def _refusal(status: int, message: str) -> tuple[int, bytes]:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return status, json.dumps(body).encode()


class Host:
    """``server`` (the SDK's low-level ``Server``) served at ``/mcp/<token>`` on 127.0.0.1."""

    def __init__(
        self,
        server: Any,
        allowed: Callable[[str], bool],
        *,
        port: int = 0,
        stateless: bool = True,
    ) -> None:
        import uvicorn
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken
        from mcp.server.streamable_http_manager import (
            StreamableHTTPASGIApp,
            StreamableHTTPSessionManager,
        )
        from mcp.server.transport_security import TransportSecuritySettings
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.disconnects = 0
        self._lock = threading.Lock()
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
        )
        manager = StreamableHTTPSessionManager(
            app=server, json_response=stateless, stateless=stateless,
            security_settings=security, max_request_body_size=MAX_BODY,
        )  # fmt: skip
        mcp_app = StreamableHTTPASGIApp(manager)

        async def check(scope: Any, receive: Any, send: Any) -> None:
            token = str(scope.get("path_params", {}).get("token", ""))
            if not token:
                status, body = _refusal(401, "expected the record's address /mcp/<token>")
            elif not allowed(token):
                status, body = _refusal(404, "the address is not that of a record in flight")
            else:
                scope["user"] = AuthenticatedUser(AccessToken(token=token, client_id=token,
                                                              scopes=[]))  # fmt: skip
                await mcp_app(scope, *_watched(receive, send, self._count))
                return
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": body})

        gate = _Asgi(check)  # an ASGI app, not a function: Starlette calls it as one
        app = Starlette(
            routes=[Route("/mcp/{token}", endpoint=gate), Route("/mcp", endpoint=gate)],
            lifespan=lambda _app: manager.run(),
        )
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self._sock.listen(BACKLOG)
        self.port = int(self._sock.getsockname()[1])
        config = uvicorn.Config(app, log_level="critical", access_log=False, lifespan="on",
                                timeout_graceful_shutdown=STOP_S, backlog=BACKLOG)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True,
            name="layerlab-mcp",
        )  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + START_S
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not self._server.started:
            self.close()
            raise RuntimeError("the MCP server did not start")

    def _count(self) -> None:
        with self._lock:
            self.disconnects += 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop serving: the thread ends (open requests get :data:`STOP_S` s) and the port is
        closed."""
        self._server.should_exit = True
        self._thread.join(STOP_S + 5.0)
        if self._thread.is_alive():  # still in a request that ignores cancellation
            self._server.force_exit = True
            self._thread.join(2.0)
        self._sock.close()


class _Asgi:
    def __init__(self, fn: Callable[[Any, Any, Any], Any]) -> None:
        self.fn = fn

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.fn(scope, receive, send)


def _watched(receive: Any, send: Any, count: Callable[[], None]) -> tuple[Any, Any]:
    """``receive`` and ``send`` of one request, counting a disconnect before the answer."""
    seen = {"answered": False, "gone": False}

    def gone() -> None:
        if not seen["gone"] and not seen["answered"]:
            seen["gone"] = True
            count()

    async def watched_receive() -> Any:
        message = await receive()
        if message.get("type") == "http.disconnect":
            gone()
        return message

    async def watched_send(message: Any) -> None:
        try:
            await send(message)
        except OSError:  # the caller went away mid-answer
            gone()
            raise
        if message.get("type") == "http.response.body" and not message.get("more_body"):
            seen["answered"] = True

    return watched_receive, watched_send

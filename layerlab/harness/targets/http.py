"""HTTP targets: ``--target http://host:port/path``, a service in any language.

layerlab serves the record's faulted tools on localhost (:mod:`~layerlab.harness.targets.toolserver`)
and POSTs each question to the service as JSON::

    {"question": "...", "answer_kind": "duration", "session_id": "s-1a2b3c4d",
     "tools_url": "http://127.0.0.1:PORT", "tools_token": "...",
     "mcp_url": "http://127.0.0.1:PORT2/mcp/<token>"}

The service searches through ``tools_url`` with the header ``Authorization: Bearer
{tools_token}`` (``POST {tools_url}/search {"session_id", "query", "top_k"}``, ``POST
{tools_url}/open_document {"session_id", "doc_id"}``; the token is the record's, valid while it
is answered: without it the tool server answers 401, nothing else can act inside the run;
``GET {tools_url}/tools`` lists them as OpenAI function definitions), or through the same tools
over MCP at ``mcp_url`` (the record's own address; absent without the ``mcp`` extra), and
answers with the
reply contract as JSON (``{"status": "answered", "answer": "...", "citations": ["doc-id"]}`` or
``{"status": "abstained", "reason": "..."}``); a ``text/plain`` answer is read as free text. An
HTTP error (its record's line: the status and the start of the body, redacted) or a timeout
(setting ``timeout``, seconds, else the run's ``--timeout``: ``timeout: no reply within S s``)
ends the record as ``provider_error``; a reply over 1 MiB is not read (``malformed_reply``). Questions are
POSTed concurrently (up to ``--concurrency``; ``--target-setting concurrent=false``: one at a
time); each record's calls carry its own token, so records of one session may be in flight
together. With a private sample log each request also carries the record's W3C ``traceparent``
header and ``otlp_traces_url`` in its body, where the service may export its own spans
(:mod:`~layerlab.harness.targets.otlp`). Settings named ``header.NAME`` are sent as request headers (e.g.
``--target-setting header.Authorization=...``: a secret-looking name is hashed, never stored).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from layerlab.harness.targets import spans
from layerlab.harness.targets.base import MAX_REPLY_BYTES, TargetRequest, Unreadable
from layerlab.harness.targets.failures import ReplyTimeout, ServiceError
from layerlab.harness.targets.options import timeout_setting
from layerlab.harness.targets.spec import TargetError, TargetSpec
from layerlab.harness.targets.toolserver import ToolServer

EXCERPT_BYTES = 300
"""How much of an error reply's body its record's line quotes (redacted, whitespace folded)."""
DEFAULT_TIMEOUT_S = 180.0
"""The request timeout when neither the setting nor the run gives one (the runner sets it)."""


def reachable(spec: TargetSpec, timeout: float = 5.0) -> None:
    """Refuse a URL nothing accepts a connection at, in one line, before anything is written."""
    import socket
    import urllib.parse

    u = urllib.parse.urlsplit(spec.ref)
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
        with socket.create_connection((u.hostname or "", port), timeout=timeout):
            return
    except TimeoutError:
        why = f"no answer within {timeout:g} s"
    except ValueError:
        why = "the port is not a number in 1-65535"
    except OSError as exc:
        why = (exc.strerror or type(exc).__name__).lower()
    raise TargetError(
        f"--target {spec.ref}: nothing answers there ({why}); start the service first"
    )


def _excerpt(exc: urllib.error.HTTPError) -> str:
    """The start of an error reply's body (what the service said went wrong), or ''."""
    try:
        return exc.read(EXCERPT_BYTES).decode("utf-8", "replace")
    except (OSError, ValueError, AttributeError):
        return ""


class HttpTarget:
    """A service that answers POSTed questions through layerlab's tool server."""

    def __init__(self, spec: TargetSpec) -> None:
        self.spec = spec
        opts = spec.options()
        self.timeout: float | None = timeout_setting(spec, DEFAULT_TIMEOUT_S)
        self.headers = {k.removeprefix("header."): str(v) for k, v in opts.items()
                        if k.startswith("header.")}  # fmt: skip
        self.server = ToolServer()

    def answer(self, request: TargetRequest) -> Any:
        # each record has its own token: records of one session may be in flight together
        with self.server.serving(request) as (tools_url, tools_token):
            body = {"question": request.question, "answer_kind": request.answer_kind,
                    "session_id": request.session_id, "tools_url": tools_url,
                    "tools_token": tools_token}  # fmt: skip
            mcp_url = request.mcp_url
            if mcp_url is not None:
                body["mcp_url"] = mcp_url
            trace, traced = spans.current(), {}  # the record's trace: the service's spans
            if trace is not None and trace.otlp_url is not None:
                body["otlp_traces_url"], traced = trace.otlp_url, {"traceparent": trace.traceparent}
            return self.post(body, traced)

    def post(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        """POST ``body`` to the service as JSON: its reply (JSON read, text as text, a reply
        over the limit as its bytes); :class:`ServiceError` on an HTTP error,
        :class:`ReplyTimeout` on a timeout."""
        req = urllib.request.Request(
            self.spec.ref, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json",
                     **self.headers, **(headers or {})},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310
                raw = resp.read(MAX_REPLY_BYTES + 1)
                kind = resp.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            raise ServiceError(exc.code, _excerpt(exc)) from None
        except (TimeoutError, urllib.error.URLError) as exc:
            if isinstance(exc, TimeoutError) or isinstance(exc.reason, TimeoutError):
                raise ReplyTimeout() from None  # said as the documented timeout line
            raise
        if len(raw) > MAX_REPLY_BYTES:
            return raw  # too large: the record says so (base.reply_problem), nothing read
        data = raw.decode("utf-8", "replace")
        if kind == "application/json":
            try:
                return json.loads(data)
            except json.JSONDecodeError as exc:  # said JSON, is not
                return Unreadable(f"the service said application/json but sent no valid JSON "
                                  f"({exc.msg}; {len(raw)} bytes)")  # fmt: skip
        return data

    def close(self) -> None:
        self.server.close()

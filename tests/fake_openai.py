"""A local OpenAI-compatible chat server with scripted faults, for the live-harness tests.

Listens on 127.0.0.1 only. The model name picks the behaviour:

* ``good``      — answers like the extractive reference agent;
* ``flaky``     — per prompt: first call 429, second 500, third answers;
* ``slow``      — sleeps ``SLOW_S`` before answering (exceeds a short client timeout);
* ``malformed`` — replies with broken JSON; ``text`` — replies with prose, not JSON;
* ``down``      — always 503;
* ``gone``      — answers the first request, then 404 (a model withdrawn mid-run);
* ``fading``    — answers the first request, then 503 (an overloaded server);
* ``limited``   — per prompt: first call 429 with ``Retry-After: 0.3``, then answers;
* ``prefix``    — like llama.cpp's server reusing the previous prompt's prefix at a near-tie:
  answers, except that a prompt identical to the one it served just before gets an abstention;
* ``coin``      — a sampled model: answers like ``good`` or abstains, a coin flip drawn from the
  request's ``seed`` and prompt (so each record's draw is reproducible and an epoch, which gets
  its own seed, draws again; without a seed, from the prompt's count of requests);
* ``tools``     — agent mode, native tool calls: acts like the extractive reference agent
  (search, once more after a fault, then answer), its searches as OpenAI ``tool_calls``;
* ``badtools``  — agent mode: an unknown tool, then a search with bad arguments, then acts
  like ``tools``;
* ``endless``   — agent mode: a search tool call on every turn, never a final reply;
* ``mcp-agent`` — a framework agent's model (any OpenAI ``tools`` request, e.g. the Agents SDK
  over MCP tools): the first user message is the question (JSON ``{question, answer_kind,
  session_id}`` or text), each ``tool`` message an observation; it acts like the extractive
  reference agent (search, once more after a fault, then answer), as ``tool_calls``;
* ``leaky``     — always 500, the message holding the API key the request carried, a
  credentialed upstream URL and the key again as a query parameter (what a careless proxy's
  error may hold): the live harness must say what failed without any of them;
* ``leaky-late`` — answers the first request, then 401 with the key in the message (a key
  revoked mid-run: a setup error raised while records are being written);
* any other name — 404 "model not found", as OpenAI-compatible servers answer.

It also answers Ollama's native ``POST /api/chat`` (what litellm's ``ollama_chat/`` provider
calls) with the same behaviours, as a stand-in for an Ollama server.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from layerlab.models.agents import agent_action, reply_for

SLOW_S = 1.5
UPSTREAM_PASSWORD = "upstream-pw-5521"  # in the ``leaky`` models' error messages


def leaked_message(key: str) -> str:
    """What the ``leaky`` models' errors say: the request's key, three ways."""
    return (
        f"Incorrect API key provided: {key}. Upstream https://proxy:{UPSTREAM_PASSWORD}@"
        f"upstream.example/v1/chat?api_key={key} refused it (Authorization: Bearer {key})"
    )


class FakeOpenAI:
    def __init__(self) -> None:
        self.hits: Counter[tuple[str, str]] = Counter()
        self.requests = 0
        self.held = 0  # requests received and not yet answered ("slow" sleeping)
        self.statuses: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.auth_headers: set[str] = set()
        self.bodies: list[dict[str, Any]] = []  # every request body, in arrival order
        self.paths: list[str] = []
        self.last_prompt: str | None = None  # the ``prefix`` model's previous prompt
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(
                self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                with server.lock:
                    server.statuses[code] += 1
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(length))
                with server.lock:
                    server.requests += 1
                    server.bodies.append(req)
                    server.paths.append(self.path)
                    server.auth_headers.add(self.headers.get("Authorization", ""))
                if self.path.rstrip("/") == "/api/show":  # Ollama: model details (litellm asks)
                    return self._send(
                        200, {"modelfile": "", "parameters": "", "template": "", "details": {}}
                    )
                if self.path.rstrip("/") == "/api/chat":  # Ollama's native API
                    content = reply_for("layerlab/extractive", req["messages"])
                    return self._send(
                        200,
                        {
                            "model": req["model"],
                            "created_at": "2026-01-01T00:00:00Z",
                            "message": {"role": "assistant", "content": content},
                            "done": True,
                            "done_reason": "stop",
                            "prompt_eval_count": 1,
                            "eval_count": 1,
                        },
                    )
                model = req["model"]
                msgs = req["messages"]
                h = hashlib.sha256(json.dumps(msgs, sort_keys=True).encode()).hexdigest()
                with server.lock:
                    server.hits[(model, h)] += 1
                    n = server.hits[(model, h)]
                known = {"good", "flaky", "slow", "malformed", "text", "down", "gone", "limited"}
                known |= {"fading", "prefix", "tools", "badtools", "endless", "mcp-agent", "coin"}
                known |= {"leaky", "leaky-late"}
                if model not in known or (model == "gone" and server.requests > 1):
                    return self._send(
                        404,
                        {"error": {"message": f"model {model!r} not found", "type": "not_found"}},
                    )
                key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                if model == "leaky" or (model == "leaky-late" and server.requests > 1):
                    code = 500 if model == "leaky" else 401
                    return self._send(
                        code, {"error": {"message": leaked_message(key), "type": "server_error"}}
                    )
                if model == "limited" and n == 1:
                    return self._send(
                        429,
                        {"error": {"message": "slow down", "type": "rate_limit"}},
                        {"Retry-After": "0.3"},
                    )
                if model == "down" or (model == "fading" and server.requests > 1):
                    return self._send(
                        503, {"error": {"message": "unavailable", "type": "server_error"}}
                    )
                if model == "flaky" and n == 1:
                    return self._send(
                        429, {"error": {"message": "rate limited", "type": "rate_limit"}}
                    )
                if model == "flaky" and n == 2:
                    return self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                if model == "slow" and n == 1:
                    with server.lock:
                        server.held += 1
                    time.sleep(SLOW_S)
                    with server.lock:
                        server.held -= 1
                if model == "mcp-agent":
                    return self._send(200, _completion(model, *_framework_turn(req)))
                if model in {"tools", "badtools", "endless"}:
                    return self._send(200, _completion(model, *_agent_turn(model, req)))
                content = reply_for("layerlab/extractive", msgs)
                if model == "prefix":
                    with server.lock:
                        repeated, server.last_prompt = server.last_prompt == h, h
                    if repeated:
                        content = json.dumps(
                            {"status": "abstained", "answer": None, "citations": [], "reason": "x"}
                        )
                if model == "coin":
                    draw = hashlib.sha256(f"{req.get('seed', n)}:{h}".encode()).digest()[0]
                    if draw % 2:
                        content = json.dumps(
                            {"status": "abstained", "answer": None, "citations": [], "reason": "x"}
                        )
                if model == "malformed":
                    content = content[: len(content) // 2]
                elif model == "text":
                    content = "I think the answer is probably in the second document."
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": 0,
                        "model": model,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _agent_turn(model: str, req: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """An agent-mode turn of the ``tools``/``badtools``/``endless`` models: (text, tool calls)."""
    msgs = req["messages"]
    turn = sum(m["role"] == "assistant" for m in msgs)
    if model == "endless" or (model == "badtools" and turn < 2):
        name, args = "search", {"query": "policy", "top_k": 3}
        if model == "badtools":
            name, args = (("delete_index", {}) if turn == 0 else ("search", {"query": "", "top_k": 99}))
        return None, [{"id": f"call_{turn}", "type": "function",
                       "function": {"name": name, "arguments": json.dumps(args)}}]  # fmt: skip
    if model == "badtools":  # past its two bad calls (and their errors): acts like ``tools``
        msgs = msgs[:2] + msgs[6:]
    act = agent_action("layerlab/extractive", msgs)
    if act.pop("action") == "answer":
        return json.dumps(act), []
    return None, [{"id": f"call_{turn}", "type": "function",
                   "function": {"name": "search", "arguments": json.dumps(act)}}]  # fmt: skip


def _text(content: Any) -> str:
    """A chat message's content as text (a string, or a list of text parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def _framework_turn(req: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """The ``mcp-agent`` model's turn: (text, tool calls)."""
    from layerlab.system.prompt import render_reply
    from layerlab.system.reader import READERS, Evidence, ReaderInput

    msgs = req["messages"]
    first = _text(next(m for m in msgs if m["role"] == "user")["content"])
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        head = {"question": first}
    seen = []
    for m in msgs:
        if m["role"] == "tool":
            try:
                seen.append(json.loads(_text(m["content"])))
            except json.JSONDecodeError:
                seen.append({"status": "error", "error": {"message": _text(m["content"])}})

    def faulted(o: dict[str, Any]) -> bool:
        res = o.get("results") or []
        return o.get("status") != "ok" or not res or any(r.get("truncated") for r in res)

    turn = sum(m["role"] == "assistant" for m in msgs)
    if not seen or (len(seen) == 1 and faulted(seen[0])):
        args = {"query": head["question"], "top_k": 3}
        return None, [{"id": f"call_{turn}", "type": "function",
                       "function": {"name": "search", "arguments": json.dumps(args)}}]  # fmt: skip
    evidence: dict[str, Evidence] = {}
    status, error = "ok", None
    for o in seen:
        if o.get("status") in ("ok", "partial"):
            status = o["status"]
            for r in o.get("results") or []:
                evidence.pop(r["doc_id"], None)
                evidence[r["doc_id"]] = Evidence(rank=len(evidence) + 1, **r)
        elif isinstance(o.get("error"), dict):
            error = o["error"].get("message")
    inp = ReaderInput(head["question"], head.get("answer_kind", ""), head.get("session_id", ""),
                      status, error if not evidence else None, tuple(evidence.values()))  # fmt: skip
    return render_reply(READERS["extractive"]().read(inp)), []


def _completion(model: str, content: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                     "message": message}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip

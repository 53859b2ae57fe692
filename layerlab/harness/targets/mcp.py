"""The faulted tools over the Model Context Protocol, for an agent built on an agent framework.

The record's ``search`` and ``open_document`` (the same :class:`~layerlab.harness.tools.ToolBox`
calls a Python target and the REST tool server make) are MCP tools with the input schemas of
:data:`~layerlab.harness.tools.TOOL_DEFINITIONS`. A call's result is the tool's observation:
its text content is the observation as JSON (byte for byte the REST tool server's body), its
structured content the same object, and a failed call (status ``error`` or ``refused``) is an
MCP tool error (``isError: true``) whose observation carries ``{"code", "message"}``. A
partial result (``{"status": "partial", "error": {"code": "timeout", ...}, "results": [...]}``)
is a result, not an error. Arguments are not checked by the MCP layer: a call that breaks the
schema reaches the ToolBox, which answers ``invalid_call`` and counts it against V. A
**transport** fault (``scenarios_transport.yaml``) is an MCP tool error whose code is the
fault's kind — ``rate_limited`` (with ``retry_after`` in seconds), ``server_error``,
``connection_reset``, ``stall``, ``truncated_body``, ``auth_expired`` — and a slow or stalled
call answers after its delay (slept on the clock, bounded by its ``max_delay_s``).

:func:`tool_server` builds the official SDK's low-level ``Server`` for one lookup of the
record (in memory: ``mcp.Client(tool_server(...))``); :class:`McpService` serves the records
of a target run over streamable HTTP on 127.0.0.1 (:mod:`~layerlab.harness.targets.mcphost`),
each record at an address of its own (``http://127.0.0.1:PORT/mcp/<token>``, the token fresh
and unguessable, valid while the record is in flight). The service starts when a record first
asks for its address (:attr:`TargetRequest.mcp_url`; the start, a second or two, counts in that
record's time): a target that never uses MCP costs nothing. An HTTP target's run starts it
before its first record (every request body carries the address). Without the ``mcp`` extra
there is no MCP address (``mcp_url`` is None).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import secrets
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from layerlab.faults.transport import CLOCK, Clock
from layerlab.harness.targets.toolserver import Exchange
from layerlab.harness.tools import TOOL_DEFINITIONS, TOOLS_VERSION

if TYPE_CHECKING:
    from layerlab.harness.targets.mcphost import Host
    from layerlab.harness.tools import ToolBox

NAME = "layerlab-tools"
QUESTION, QUESTION_URI = "question", "layerlab://question"
"""``serve mcp``'s prompt and resource holding the session's task's question."""
FAILED = ("error", "refused")
"""Observation statuses returned as MCP tool errors (``isError``)."""

Caller = Callable[[str, Any], dict[str, Any]]
"""One record's tool call: ``(tool name, arguments) -> observation``."""



def available() -> bool:
    """Whether the official MCP SDK (the ``mcp`` extra) is installed."""
    return importlib.util.find_spec("mcp") is not None


def tools(names: tuple[str, ...] | None = None) -> list[Any]:
    """The tools (all, or those ``names`` names) as MCP ``Tool`` definitions (names,
    descriptions and input schemas of :data:`~layerlab.harness.tools.TOOL_DEFINITIONS`)."""
    import mcp_types as types

    return [types.Tool(name=t["function"]["name"], description=t["function"]["description"],
                       input_schema=t["function"]["parameters"])
            for t in TOOL_DEFINITIONS
            if names is None or t["function"]["name"] in names]  # fmt: skip


def tool_result(obs: dict[str, Any]) -> Any:
    """An observation as an MCP ``CallToolResult`` (see the module docstring)."""
    import mcp_types as types

    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(obs))],
        structured_content=obs,
        is_error=obs.get("status") in FAILED,
    )


def tool_server(
    caller_for: Callable[[Any], Caller],
    *,
    instructions: str | None = None,
    name: str = NAME,
    names: tuple[str, ...] | None = None,
    **handlers: Any,
) -> Any:
    """The SDK's low-level MCP ``Server`` over the faulted tools. ``caller_for(ctx)`` gives the
    call function of the record a request belongs to (``ctx``: the SDK's request context, whose
    ``request`` is the HTTP request, None in memory); it raises ``LookupError`` with a one-line
    reason when there is none (the client gets an MCP error, no record is touched). Calls run in
    a worker thread (a search is CPU work; the event loop keeps serving). ``handlers``: more of
    the SDK's ``on_*`` handlers (``serve mcp``'s question resource and prompt); ``names``: the
    tools listed (default: all)."""
    import anyio.to_thread
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    listing = tools(names)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: Any) -> Any:
        try:
            call = caller_for(ctx)
        except LookupError as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc.args[0])) from None
        args = params.arguments if params.arguments is not None else {}
        obs = await anyio.to_thread.run_sync(call, params.name, args)
        return tool_result(obs)

    return Server(name, version=TOOLS_VERSION, instructions=instructions,
                  on_list_tools=list_tools, on_call_tool=call_tool, **handlers)  # fmt: skip


def record_caller(request: Any, lock: threading.Lock, clock: Clock = CLOCK,
                  exchange: Exchange | None = None) -> Caller:  # fmt: skip
    """The call function of one record's MCP address: its calls one at a time (``lock``), a
    transport fault's delay slept on ``clock`` (its failure is the observation's error, an MCP
    tool error: :func:`tool_result`); ``exchange`` makes the call (a record's
    :func:`~layerlab.harness.targets.base.exchange` by default)."""
    from layerlab.harness.targets.base import exchange as record_exchange

    make: Exchange = exchange or record_exchange

    def call(name: str, args: Any) -> dict[str, Any]:
        with lock:
            obs, event = make(request, name, args)
        if event is not None:
            clock.wait(event.delay_s)
        return obs

    return call


def token_of(ctx: Any) -> str:
    """The record token of an HTTP request (the ``/mcp/<token>`` path's); "" in memory."""
    request = getattr(ctx, "request", None)
    if request is None:
        return ""
    return str(request.scope.get("path_params", {}).get("token", ""))


class McpService:
    """The MCP addresses of one target run's records (one HTTP server, started on first use).
    ``exchange`` makes a request's tool call and ``names`` are the tools listed: a record's
    (the default) or, for a conversation's turns, :func:`~layerlab.harness.convtools.exchange`
    and its search only."""

    def __init__(self, clock: Clock = CLOCK, exchange: Exchange | None = None,
                 names: tuple[str, ...] | None = None) -> None:  # fmt: skip
        self._live: dict[str, tuple[Any, threading.Lock]] = {}
        self.clock = clock  # where a transport fault's delay is slept (bounded)
        self._exchange, self._names = exchange, names
        self._tokens: dict[int, str] = {}  # id(request) -> its token
        self._guard = threading.Lock()
        self._host: Host | None = None
        self._closed = False
        self.enabled = available()

    @property
    def disconnects(self) -> int:
        """Callers that disconnected before their answer, so far."""
        return self._host.disconnects if self._host is not None else 0

    @property
    def started(self) -> bool:
        return self._host is not None

    def _caller(self, ctx: Any) -> Caller:
        with self._guard:
            live = self._live.get(token_of(ctx))
        if live is None:
            raise LookupError("the address is not that of a record in flight")
        request, lock = live
        return record_caller(request, lock, self.clock, self._exchange)

    def _allowed(self, token: str) -> bool:
        with self._guard:
            return token in self._live

    def _start(self) -> Host:
        if self._host is None:  # under the guard
            from layerlab.harness.targets.mcphost import Host

            self._host = Host(tool_server(self._caller, names=self._names), self._allowed)
        return self._host

    def start(self) -> None:
        """Start the server now (an HTTP target's records all carry an address: its start is
        then not counted in the first record's time); a no-op without the ``mcp`` extra."""
        if self.enabled:
            with self._guard, contextlib.suppress(RuntimeError):  # a record says it, if used
                if not self._closed:
                    self._start()

    def address(self, request: Any) -> str | None:
        """``request``'s MCP address (starting the server on first use), None without the
        ``mcp`` extra or once the run's service is closed."""
        if not self.enabled:
            return None
        with self._guard:
            if self._closed:
                return None
            host = self._start()
            token = self._tokens.get(id(request))
            if token is None:
                token = secrets.token_urlsafe(24)
                self._tokens[id(request)] = token
                self._live[token] = (request, threading.Lock())
            return f"{host.url}/mcp/{token}"

    def release(self, request: Any) -> None:
        """The record has ended: its address refuses every request from now on."""
        with self._guard:
            token = self._tokens.pop(id(request), None)
            if token is not None:
                self._live.pop(token, None)

    def close(self) -> None:
        """Stop the server (its thread ended, its port closed); idempotent."""
        with self._guard:
            self._closed, host, self._host = True, self._host, None
            self._live.clear()
            self._tokens.clear()
        if host is not None:
            host.close()
            if host.disconnects:
                print(f"MCP tool server: {host.disconnects} caller(s) disconnected before their "
                      "answer (a call that had reached its record is logged as made)",
                      file=sys.stderr)  # fmt: skip


# --- layerlab serve mcp ----------------------------------------------------------------------


class Interactive:
    """The faulted tools of one scenario and arm for interactive use (``layerlab serve mcp``).

    Each MCP session is a record of its own (a fresh :class:`~layerlab.harness.tools.ToolBox`:
    transient faults start over): of ``task`` when one is given, else of the task the client
    picks with ``?task=<task_id>`` on the address (tool-only mode). A client without sessions
    (the 2026-07-28 protocol, stdio) has one record per task for the server's lifetime. The
    session's task's question is also the resource :data:`QUESTION_URI` and the prompt
    :data:`QUESTION` (:meth:`handlers`: without ``task`` the server's one instructions string
    cannot hold it). Only the public task (its question, never its answer or required
    documents) is ever read: the answer key is not loaded."""

    def __init__(self, tasks: Any, prepared: Any, arm: Any, task: Any = None) -> None:
        self.tasks = {t.task_id: t for t in tasks}
        self.prepared, self.arm, self.task = prepared, arm, task
        self.records: dict[tuple[str, str], ToolBox] = {}
        self._guard = threading.Lock()
        self.token = secrets.token_urlsafe(24)

    def instructions(self) -> str:
        """The server's instructions (one string per server, the SDK's): with ``--task`` its
        question; without, where each session's question is (:meth:`question`)."""
        what = "Policy-document tools with injected operational faults (layerlab)."
        if self.task is None:
            return (f"{what} The question to answer is the task's picked with ?task=<task_id> "
                    f"on the address: read the resource {QUESTION_URI} or get the prompt "
                    f"'{QUESTION}'.")  # fmt: skip
        return f"{what} The question to answer: {self.task.question}"

    def question(self, ctx: Any) -> tuple[str, str]:
        """(task id, question) of the session's task (``?task=``, or ``--task``): the public
        task's question only; ``LookupError`` as a tool call's when no task is picked."""
        task = self._task_of(ctx)
        return task.task_id, task.question

    def handlers(self) -> dict[str, Any]:
        """The question as an MCP resource (:data:`QUESTION_URI`) and prompt (:data:`QUESTION`),
        for the session's task: reachable without ``--task``, where the instructions (one per
        server) cannot hold it."""
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        what = "The question to answer, of the task this address serves (?task= or --task)"

        def asked(ctx: Any) -> tuple[str, str]:
            try:
                return self.question(ctx)
            except LookupError as exc:
                raise MCPError(code=types.INVALID_REQUEST, message=str(exc.args[0])) from None

        async def list_resources(ctx: Any, params: Any) -> Any:
            return types.ListResourcesResult(resources=[types.Resource(
                name=QUESTION, uri=QUESTION_URI, description=what, mime_type="text/plain")])  # fmt: skip

        async def read_resource(ctx: Any, params: Any) -> Any:
            if str(params.uri) != QUESTION_URI:
                raise MCPError(code=types.INVALID_PARAMS,
                               message=f"no resource {params.uri}: expected {QUESTION_URI}")  # fmt: skip
            _, text = asked(ctx)
            return types.ReadResourceResult(contents=[types.TextResourceContents(
                uri=QUESTION_URI, mime_type="text/plain", text=text)])  # fmt: skip

        async def list_prompts(ctx: Any, params: Any) -> Any:
            return types.ListPromptsResult(prompts=[types.Prompt(name=QUESTION, description=what)])

        async def get_prompt(ctx: Any, params: Any) -> Any:
            if params.name != QUESTION:
                raise MCPError(code=types.INVALID_PARAMS,
                               message=f"no prompt {params.name!r}: expected {QUESTION!r}")  # fmt: skip
            task_id, text = asked(ctx)
            said = types.TextContent(type="text", text=text)
            return types.GetPromptResult(description=f"task {task_id}",
                                         messages=[types.PromptMessage(role="user", content=said)])  # fmt: skip

        return {"on_list_resources": list_resources, "on_read_resource": read_resource,
                "on_list_prompts": list_prompts, "on_get_prompt": get_prompt}  # fmt: skip

    def _task_of(self, ctx: Any) -> Any:
        request = getattr(ctx, "request", None)
        picked = request.query_params.get("task", "") if request is not None else ""
        if self.task is not None:  # a ?task= of another task is refused, never ignored
            if picked and picked != self.task.task_id:
                raise LookupError(f"?task={picked}: this server serves only task "
                                  f"{self.task.task_id} (started with --task); drop ?task= or "
                                  "start it without --task")  # fmt: skip
            return self.task
        if picked not in self.tasks:
            example = next(iter(self.tasks))
            shown = f"no task {picked!r}" if picked else "no task picked"
            raise LookupError(f"{shown}: add ?task=<task_id> to the address (e.g. ?task={example}"
                              f"; {len(self.tasks)} tasks)")  # fmt: skip
        return self.tasks[picked]

    def caller_for(self, ctx: Any) -> Caller:
        from layerlab.harness.tools import ToolBox

        task = self._task_of(ctx)
        request = getattr(ctx, "request", None)
        session = request.headers.get("mcp-session-id", "") if request is not None else ""
        with self._guard:
            tools = self.records.get((task.task_id, session))
            if tools is None:
                tools = self.records[(task.task_id, session)] = ToolBox(task, self.prepared,
                                                                        self.arm)  # fmt: skip

        def call(name: str, args: Any) -> dict[str, Any]:
            with self._guard:  # interactive: one call at a time
                obs = tools.call(name, args, len(tools.calls) + 1)
                event = tools.last_event
            if event is not None:
                tools.clock.wait(event.delay_s)
            return obs

        return call

    def server(self) -> Any:
        return tool_server(self.caller_for, instructions=self.instructions(), **self.handlers())

    def summary(self) -> str:
        """One line: the records served and their calls' outcomes."""
        from collections import Counter

        outcomes = Counter(c.outcome for t in self.records.values() for c in t.calls)
        calls = sum(outcomes.values())
        shown = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "none"
        return f"{len(self.records)} record(s), {calls} tool call(s): {shown}"

    def serve_http(self, port: int, say: Callable[[str], None]) -> None:
        """Serve on 127.0.0.1 until Ctrl-C (``KeyboardInterrupt``), then stop cleanly."""
        import time

        from layerlab.harness.targets.mcphost import Host

        host = Host(self.server(), lambda t: secrets.compare_digest(t, self.token), port=port,
                    stateless=False)  # fmt: skip
        url = f"{host.url}/mcp/{self.token}" + ("" if self.task else "?task=<task_id>")
        say(f"MCP server (streamable HTTP) at {url} until Ctrl-C")
        say(f"connect: claude mcp add --transport http layerlab '{url}' | Python: "
            f"mcp.Client('{url}') | openai-agents: MCPServerStreamableHttp(params={{'url': ...}})")  # fmt: skip
        try:
            while host.running:
                time.sleep(0.2)
        finally:
            host.close()

    def serve_stdio(self) -> None:
        """Serve over stdin/stdout (what stock desktop clients launch) until the client ends."""
        import anyio
        from mcp.server.stdio import stdio_server

        server = self.server()

        async def run() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(run)

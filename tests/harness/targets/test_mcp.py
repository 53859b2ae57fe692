"""The faulted tools over MCP (:mod:`layerlab.harness.targets.mcp`) and as OpenAI functions.

The official ``mcp`` client, in memory, over the whole fault matrix (every scenario, strict and
repair): each fault at its layer, and every observation byte for byte what the REST tool server
and a Python target's ``search`` return for the same calls. Then the per-record addresses over
real HTTP (tokens, limits, the end of a run), an agent built on the OpenAI Agents SDK as a target
through MCP, and ``layerlab serve mcp`` with the official client against a subprocess."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import paths
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.live import agentlog
from layerlab.harness.live.settings import RunInterrupted
from layerlab.harness.prepare import prepare
from layerlab.harness.targets import TargetRequest, parse_target
from layerlab.harness.targets.base import _MCP, end_record
from layerlab.harness.targets.mcp import McpService, tool_server
from layerlab.harness.targets.toolserver import MAX_BODY, ToolServer, openapi
from layerlab.harness.tools import OPEN, SEARCH, TOOL_DEFINITIONS, ToolBox
from tests.fake_openai import FakeOpenAI

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TASK = "finance-01-q1"
ARMS = ("strict", "repair")


@pytest.fixture(scope="module")
def prepared(corpus) -> dict[str, Any]:
    return {name: prepare(corpus, s) for name, s in load_scenarios().items()}


def _task(corpus, task_id: str = TASK) -> Any:
    return next(t for t in corpus.tasks if t.task_id == task_id)


def _post(url: str, body: bytes, token: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _calls(task: Any, scenario: str) -> list[tuple[str, dict[str, Any]]]:
    """One record's calls: the question, a document opened (the conflict's unverified note
    where there is one), a search that breaks the schema, and a narrower search."""
    doc = f"{task.policy_id}-n" if scenario == "conflicting_evidence" else f"{task.policy_id}-a"
    return [(SEARCH, {"query": task.question, "top_k": 3}), (OPEN, {"doc_id": doc}),
            (SEARCH, {"query": "", "top_k": 99}), (SEARCH, {"query": task.question, "top_k": 1})]  # fmt: skip


def test_the_fault_matrix_through_the_official_client_in_memory(corpus, prepared) -> None:
    """Every scenario x strict/repair: the MCP result of each call is its observation (text:
    the REST server's body, byte for byte; structured content: a Python target's ``search``
    result; ``isError`` exactly for a failed call), the three ToolBoxes log the same calls and
    the same input hash, and each fault shows at its layer."""
    task = _task(corpus)
    clean_index = prepared["clean"].index
    rest = ToolServer()
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}

    async def over_mcp(tools: ToolBox, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        req = TargetRequest(tools)
        async with Client(tool_server(lambda _ctx: req.call)) as client:
            listed = (await client.list_tools()).tools
            assert [t.name for t in listed] == [SEARCH, OPEN]
            return [await client.call_tool(name, args) for name, args in calls]

    try:
        for scenario, prep in prepared.items():
            for arm in ARMS:
                calls = _calls(task, scenario)
                direct, via_rest, via_mcp = (ToolBox(task, prep, arm) for _ in range(3))
                py = TargetRequest(direct)
                expected = [py.call(name, args) for name, args in calls]
                results = asyncio.run(over_mcp(via_mcp, calls))
                with rest.serving(TargetRequest(via_rest)) as (url, token):
                    bodies = [_post(f"{url}/{name}", json.dumps(args).encode(), token)
                              for name, args in calls]  # fmt: skip
                for obs, res, (code, body) in zip(expected, results, bodies, strict=True):
                    text = res.content[0].text
                    assert code == 200 and text.encode() == body, (scenario, arm, text, body)
                    assert json.loads(text) == obs and res.structured_content == obs
                    assert res.is_error == (obs["status"] in ("error", "refused")), obs
                for a, b in ((direct, via_mcp), (direct, via_rest)):
                    assert a.calls == b.calls and a.input_hash() == b.input_hash()
                got[(scenario, arm)] = expected
    finally:
        rest.close()

    def codes(obs: list[dict[str, Any]]) -> list[str]:
        return [(o.get("error") or {}).get("code", o["status"]) for o in obs]

    for (scenario, arm), obs in got.items():
        first, opened, bad, _ = obs
        assert bad["error"]["code"] == "invalid_call"  # V: reached the ToolBox, counted
        res = first.get("results") or []
        if scenario == "clean":
            assert first["status"] == "ok" and res[0]["doc_id"] == f"{task.policy_id}-a"
        elif scenario == "stale_index":  # the index serves the superseded version only
            assert res and {r["status"] for r in res} == {"superseded"}
            assert f"{task.policy_id}-b" in {r["doc_id"] for r in res}
            assert opened["error"]["code"] == "not_found"  # the current one is not indexed
        elif scenario == "schema_drift":
            if arm == "strict":
                assert codes(obs)[:2] == ["invalid_payload"] * 2
            else:
                assert first["status"] == "ok" and res
        elif scenario == "missing_tool_output":
            assert codes(obs)[:2] == ["unavailable"] * 2
        elif scenario == "partial_timeout":
            assert first["status"] == "partial" and first["error"]["code"] == "timeout"
            assert res and any(r["truncated"] for r in res)
        elif scenario == "conflicting_evidence":  # the unverified note is in the index
            (note,) = opened["results"]
            assert note["doc_id"] == f"{task.policy_id}-n" and note["version"] == 0
        elif scenario == "permission_denied":
            assert codes(obs)[:2] == ["denied"] * 2 and "results" not in first
        elif scenario == "corrupted_metadata":  # labels that the clean index contradicts
            assert any((r["status"], r["effective_year"])
                       != (clean_index[r["doc_id"]].status, clean_index[r["doc_id"]].effective_year)
                       for r in res)  # fmt: skip
        elif scenario == "wrong_session":  # another session's documents
            ids = [r["doc_id"] for r in res]
            assert ids and all("~s-" in d for d in ids)
            assert {r["session_id"] for r in res} != {ToolBox(task, prepared[scenario], arm).session_id}
            assert all("~s-" in r["doc_id"] for r in opened["results"])  # open_document too
    assert set(got) == {(s, a) for s in prepared for a in ARMS}


def test_tools_are_listed_as_openai_functions_and_mcp_tools(corpus, prepared) -> None:
    """``GET /tools`` on the REST tool server: the OpenAI function definitions; the MCP tools
    carry the same names, descriptions and input schemas."""
    server = ToolServer()
    try:
        with urllib.request.urlopen(f"{server.url}/tools", timeout=10) as resp:  # noqa: S310
            listed = json.loads(resp.read())
    finally:
        server.close()
    assert listed == {"tools": json.loads(json.dumps(TOOL_DEFINITIONS))}
    assert "get" in openapi()["paths"]["/tools"]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
               for t in listed["tools"])  # fmt: skip

    async def mcp_tools() -> list[Any]:
        req = TargetRequest(ToolBox(_task(corpus), prepared["clean"], "strict"))
        async with Client(tool_server(lambda _ctx: req.call)) as client:
            return list((await client.list_tools()).tools)

    tools = asyncio.run(mcp_tools())
    assert [(t.name, t.description, t.input_schema) for t in tools] == [
        (f["function"]["name"], f["function"]["description"], f["function"]["parameters"])
        for f in TOOL_DEFINITIONS
    ]


def _refused(url: str) -> int:
    """The HTTP status a JSON-RPC ``tools/list`` gets at ``url``."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _new_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before` still alive after a short grace, less AnyIO's pooled
    worker threads: the test's own MCP client leaves those idle for ten seconds, and under load
    one can still be parked when the service has long closed (they are not the service's)."""
    deadline = time.monotonic() + 5
    while True:
        left = [t for t in set(threading.enumerate()) - before
                if t.is_alive() and t.name != "AnyIO worker thread"]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_per_record_addresses_over_http(corpus, prepared, capfd) -> None:
    """Each record in flight has its own address (another record's reaches only that record),
    an unknown or missing token and an ended record are refused before any record is touched,
    a body over the limit gets 413, a caller that disconnects is counted, and closing the run's
    service ends its thread and closes its port."""
    task = _task(corpus)
    service = McpService()
    a_tools = ToolBox(task, prepared["permission_denied"], "strict")
    b_tools = ToolBox(task, prepared["clean"], "strict")
    a, b = TargetRequest(a_tools), TargetRequest(b_tools)
    _MCP[a] = _MCP[b] = service
    before = set(threading.enumerate())
    assert not service.started
    a_url, b_url = a.mcp_url, b.mcp_url
    assert service.started and a_url != b_url and a.mcp_url == a_url
    base, _, a_token = a_url.rpartition("/")
    assert len(a_token) >= 32 and a_token not in b_url

    async def search(url: str) -> Any:
        async with Client(url) as client:
            return await client.call_tool(SEARCH, {"query": task.question})

    ra, rb = asyncio.run(search(a_url)), asyncio.run(search(b_url))
    assert ra.is_error and ra.structured_content["error"]["code"] == "denied"
    assert not rb.is_error and rb.structured_content["status"] == "ok"
    assert len(a_tools.calls) == len(b_tools.calls) == 1  # each reached its own record only

    assert _refused(f"{base}/{'x' * 32}") == 404 and _refused(base) == 401
    host = f"127.0.0.1:{base.split(':')[2].split('/')[0]}"
    port = int(host.split(":")[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # over the limit
        s.sendall(f"POST /mcp/{a_url.rsplit('/', 1)[1]} HTTP/1.1\r\nHost: {host}\r\n"
                  f"Content-Type: application/json\r\nAccept: application/json\r\n"
                  f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode() + b"{" * 65536)  # fmt: skip
        assert b" 413 " in s.recv(4096).split(b"\r\n")[0]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # gone mid-body
        s.sendall(f"POST /mcp/{a_token} HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
                  "application/json\r\nAccept: application/json\r\nContent-Length: 500\r\n"
                  "\r\n{\"jsonrpc\"".encode())  # fmt: skip
    deadline = time.monotonic() + 10
    while service.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert service.disconnects == 1
    assert len(a_tools.calls) == 1  # neither reached the record

    end_record(a)
    assert a.mcp_url is None and _refused(a_url) == 404  # the ended record's address
    assert asyncio.run(search(b_url)).structured_content["status"] == "ok"
    service.close()
    assert "1 caller(s) disconnected" in capfd.readouterr().err
    assert not _new_threads(before)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert b.mcp_url is None  # a closed service gives no address


MATRIX = ("clean", "permission_denied", "schema_drift", "partial_timeout", "wrong_session")


def test_a_framework_agent_is_a_target_through_mcp(corpus, key, tmp_path, monkeypatch) -> None:
    """``notebooks/my_mcp_agent.py`` (the OpenAI Agents SDK: ``Agent``,
    ``MCPServerStreamableHttp``, ``OpenAIChatCompletionsModel``) on the OpenAI-compatible
    stand-in: its calls arrive over MCP, go through the record's ToolBox and are scored like
    every target's (target table, V, R, input hash); each fault reaches it at its layer."""
    pytest.importorskip("agents")
    monkeypatch.syspath_prepend(str(ROOT / "notebooks"))
    scen = {k: v for k, v in load_scenarios().items() if k in MATRIX}
    tasks = (TASK,)
    with FakeOpenAI() as fake:
        target = parse_target("python:my_mcp_agent:McpAgent",
                              settings={"base_url": fake.base, "model": "mcp-agent"})
        cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=tasks, target=target)
        out = tmp_path / "run"
        r = live.run_live(corpus, key, scen, cfg, out, scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                          cache_dir=tmp_path / "cache", concurrency=4)  # fmt: skip
    assert r.complete
    assert any(b.get("tools") for b in fake.bodies)  # the SDK sent the MCP tools as functions
    recs = pd.read_parquet(out / "records.parquet")
    assert len(recs) == len(scen) * len(ARMS) * len(tasks) and set(recs.provider) == {"target"}
    rows = {(r["scenario"], r["mitigation"], r["task_id"]): r
            for r in agentlog.read_table(out, target=True)}  # fmt: skip
    table = pd.read_parquet(out / agentlog.TARGET_TABLE)
    assert set(table.reply) == {"structured"} and table.input_hash.str.len().eq(64).all()
    for (s, arm, task), row in rows.items():
        outcomes = [c["outcome"] for c in row["calls"]]
        seen = {d for c in row["calls"] for d in c["doc_ids"]}
        if s == "clean":
            assert outcomes == ["ok"] and set(key[task].required_doc_ids) <= seen
        elif s == "permission_denied":
            assert outcomes == ["denied", "denied"]  # searched once more after the fault
        elif s == "schema_drift":
            assert outcomes == (["rejected"] * 2 if arm == "strict" else ["ok"])
        elif s == "partial_timeout":
            assert outcomes == ["partial", "partial"]
        elif s == "wrong_session":
            assert seen and all("~s-" in d for d in seen)
    clean = recs[recs.scenario == "clean"]
    assert clean.success.all() and clean.retrieval_ok.all() and clean.schema_ok.all()
    assert not recs[recs.scenario.isin(["permission_denied", "wrong_session"])].success.any()
    assert recs[recs.scenario == "permission_denied"].abstained.all()


def test_serve_mcp_with_the_official_client_over_http(tmp_path) -> None:
    """``layerlab serve mcp`` in a subprocess: one line with the address, the official client
    over real HTTP gets the scenario's faults, Ctrl-C (SIGINT) stops it with exit 0."""
    import signal

    env_py = [sys.executable, "-m", "layerlab", "serve", "mcp", "--scenario", "permission_denied",
              "--mitigation", "strict", "--task", TASK]  # fmt: skip
    proc = subprocess.Popen(env_py, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = next(w for w in line.split() if w.startswith("http://127.0.0.1:"))

        async def use() -> tuple[Any, Any]:
            async with Client(url) as client:
                tools = (await client.list_tools()).tools
                return tools, await client.call_tool(SEARCH, {"query": "purchase approval"})

        tools, res = asyncio.run(use())
        assert [t.name for t in tools] == [SEARCH, OPEN]
        assert res.is_error and res.structured_content["error"]["code"] == "denied"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_serve_mcp_tool_only_mode_and_no_answer_key(corpus, key, prepared, monkeypatch) -> None:
    """Without ``--task`` the client picks the task on the address (``?task=``), each MCP
    session is a record of its own; the command never reads the answer key (it is not loaded),
    and the question, never its answer, is what the server says about a task."""
    from layerlab.cli import main
    from layerlab.corpus import build as corpus_mod
    from layerlab.harness.targets.mcp import Interactive
    from layerlab.harness.targets.mcphost import Host

    def no_key(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("serve mcp read the answer key")

    monkeypatch.setattr(corpus_mod, "load_answer_key", no_key)
    monkeypatch.setattr("sys.stdin", open(__import__("os").devnull))  # noqa: SIM115
    assert main(["serve", "mcp", "--scenario", "clean", "--task", TASK, "--stdio"]) == 0

    task = _task(corpus)
    tools = Interactive(corpus.tasks, prepared["partial_timeout"], "strict")
    host = Host(tools.server(), lambda t: t == tools.token, stateless=False)
    url = f"{host.url}/mcp/{tools.token}"

    async def use(address: str) -> Any:
        async with Client(address, mode="legacy") as client:  # a session of its own
            try:
                return await client.call_tool(SEARCH, {"query": task.question})
            except MCPError as exc:  # a protocol error: no record was touched
                return exc

    try:
        missing = asyncio.run(use(url))
        assert isinstance(missing, MCPError) and "?task=<task_id>" in str(missing)
        assert not tools.records
        first, second = (asyncio.run(use(f"{url}?task={TASK}")) for _ in range(2))
    finally:
        host.close()
    assert first.structured_content == second.structured_content  # two sessions, two records
    assert first.structured_content["error"]["code"] == "timeout"
    assert len(tools.records) == 2 and all(len(t.calls) == 1 for t in tools.records.values())
    said = Interactive(corpus.tasks, prepared["clean"], "strict", task).instructions()
    assert task.question in said and key[TASK].expected_answer not in said


def test_serve_mcp_without_task_gives_each_sessions_question(corpus, key, prepared) -> None:
    """Issue 46: without --task the instructions (one string per server) held no question; each
    session's question is the resource ``layerlab://question`` and the prompt ``question`` of
    the task its address picks (never its answer); no task picked is an MCP error."""
    from layerlab.harness.targets.mcp import QUESTION, QUESTION_URI, Interactive
    from layerlab.harness.targets.mcphost import Host

    a, b = corpus.tasks[0], corpus.tasks[5]
    tools = Interactive(corpus.tasks, prepared["clean"], "strict")
    host = Host(tools.server(), lambda t: t == tools.token, stateless=False)
    url = f"{host.url}/mcp/{tools.token}"

    async def use(address: str) -> Any:
        async with Client(address, mode="legacy") as client:
            try:
                res = await client.read_resource(QUESTION_URI)
                got = await client.get_prompt(QUESTION)
            except MCPError as exc:
                return exc
            listed = (await client.list_resources()).resources
            assert [(r.name, str(r.uri)) for r in listed] == [(QUESTION, QUESTION_URI)]
            return client.instructions, res.contents[0].text, got.messages[0].content.text

    try:
        said = {t.task_id: asyncio.run(use(f"{url}?task={t.task_id}")) for t in (a, b)}
        missing = asyncio.run(use(url))
    finally:
        host.close()
    for t in (a, b):
        instructions, text, prompt = said[t.task_id]
        assert text == prompt == t.question
        assert QUESTION_URI in instructions and t.question not in instructions
        blob = "".join(said[t.task_id])
        assert key[t.task_id].expected_answer not in blob
        assert not any(d in blob for d in key[t.task_id].required_doc_ids)
    assert isinstance(missing, MCPError) and "?task=<task_id>" in str(missing)
    assert not tools.records  # reading the question is no tool call of a record

    async def pinned() -> str:  # --task, in memory: the same resource gives its question
        async with Client(Interactive(corpus.tasks, prepared["clean"], "strict", a).server()) as c:
            return (await c.read_resource(QUESTION_URI)).contents[0].text

    assert asyncio.run(pinned()) == a.question


def test_serve_mcp_with_task_refuses_another_tasks_address(corpus, prepared) -> None:
    """Issue 46: with --task, ``?task=<another>`` was ignored (the client got --task's record
    while it asked for another task); it is refused with one line, no record touched."""
    from layerlab.harness.targets.mcp import Interactive
    from layerlab.harness.targets.mcphost import Host

    other = next(t.task_id for t in corpus.tasks if t.task_id != TASK)
    tools = Interactive(corpus.tasks, prepared["clean"], "strict", _task(corpus))
    host = Host(tools.server(), lambda t: t == tools.token, stateless=False)
    url = f"{host.url}/mcp/{tools.token}"

    async def use(address: str) -> Any:
        async with Client(address, mode="legacy") as client:
            try:
                return await client.call_tool(SEARCH, {"query": "purchase approval"})
            except MCPError as exc:
                return exc

    try:
        refused = asyncio.run(use(f"{url}?task={other}"))
        assert isinstance(refused, MCPError), refused
        assert f"?task={other}: this server serves only task {TASK}" in str(refused)
        assert not tools.records
        same = asyncio.run(use(f"{url}?task={TASK}"))
        assert not isinstance(same, MCPError) and len(tools.records) == 1
    finally:
        host.close()


def test_serve_mcp_exits_143_on_sigterm(tmp_path) -> None:
    """SIGTERM stops ``serve mcp`` with the documented 143 (it exited 0), the summary on stderr."""
    import signal

    cmd = [sys.executable, "-m", "layerlab", "serve", "mcp", "--scenario", "clean", "--task", TASK]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)  # fmt: skip
    try:
        assert proc.stdout is not None and "http://127.0.0.1:" in proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert err.startswith("stopped (SIGTERM): 0 record(s)"), err


BLOCKER = """
import asyncio, pathlib
from mcp import Client

async def answer(req):
    async with Client(req.mcp_url) as tools:
        await tools.call_tool("search", {"query": req.question})
        pathlib.Path(req.settings["marker"]).write_text(req.mcp_url)
        await asyncio.sleep(120)  # a session open while Ctrl-C arrives
"""


def test_ctrl_c_during_a_target_run_with_open_mcp_sessions(corpus, key, tmp_path, monkeypatch):
    """Ctrl-C while records hold MCP sessions open: the run stops promptly (a partial archive,
    as any interrupted run), the MCP server's thread has ended and its port is closed."""
    import os
    import signal

    (tmp_path / "blocker.py").write_text(BLOCKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    marker = tmp_path / "in-flight"
    scen = {"clean": load_scenarios()["clean"]}
    target = parse_target("python:blocker:answer", settings={"marker": str(marker)})
    cfg = live.LiveConfig(models=(), scenarios=("clean",), task_ids=("finance-01-q1",),
                          target=target)  # fmt: skip
    before = set(threading.enumerate())
    sent: list[float] = []

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(RunInterrupted) as stopped:  # Ctrl-C's error (the CLI's exit 130)
        live.run_live(corpus, key, scen, cfg, tmp_path / "run", cache_dir=tmp_path / "cache",
                      scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    assert sent and time.monotonic() - sent[0] < 15, "the run did not stop promptly"
    assert stopped.value.records == 0
    assert not [t for t in set(threading.enumerate()) - before
                if t.is_alive() and t.name == "layerlab-mcp"]  # fmt: skip
    port = int(marker.read_text().split(":")[2].split("/")[0])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_an_http_target_gets_its_records_mcp_address_in_the_body(corpus, key, tmp_path) -> None:
    """An HTTP service gets ``mcp_url`` beside ``tools_url``: one address per record, and its
    calls over MCP are the record's (the target table logs them)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    bodies: list[dict[str, Any]] = []

    async def ask(url: str, question: str) -> dict[str, Any]:
        async with Client(url) as client:
            return (await client.call_tool(SEARCH, {"query": question})).structured_content

    class Service(BaseHTTPRequestHandler):
        def log_message(self, *_a: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            obs = asyncio.run(ask(body["mcp_url"], body["question"]))
            reply = {"status": "abstained", "reason": obs["error"]["code"]}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    scen = {"permission_denied": load_scenarios()["permission_denied"]}
    try:
        cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=(TASK,),
                              target=f"http://127.0.0.1:{httpd.server_address[1]}/answer")  # fmt: skip
        r = live.run_live(corpus, key, scen, cfg, tmp_path / "run", cache_dir=tmp_path / "cache",
                          scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.complete and len(bodies) == 2
    urls = [b["mcp_url"] for b in bodies]
    assert len(set(urls)) == 2 and all(u.startswith("http://127.0.0.1:") for u in urls)
    assert all("tools_url" in b and "tools_token" in b for b in bodies)
    rows = agentlog.read_table(tmp_path / "run", target=True)
    assert [c["outcome"] for row in rows for c in row["calls"]] == ["denied", "denied"]


def test_without_the_mcp_extra_a_record_has_no_mcp_address(corpus, prepared, monkeypatch, capsys):
    """No MCP SDK: no address (``mcp_url`` is None), nothing started; the tools still work;
    ``serve mcp`` says which extra brings it."""
    from layerlab.harness.targets import mcp

    monkeypatch.setattr(mcp, "available", lambda: False)
    service = McpService()
    service.start()
    request = TargetRequest(ToolBox(_task(corpus), prepared["clean"], "strict"))
    _MCP[request] = service
    assert request.mcp_url is None and not service.started
    assert request.search("purchase approval")["status"] == "ok"
    end_record(request)
    service.close()
    from layerlab.cli import main

    assert main(["serve", "mcp", "--scenario", "clean"]) == 2
    assert "pip install 'layerlab[mcp]'" in capsys.readouterr().err


LC_FACTORY = """
import asyncio, json
from langchain_core.runnables import RunnableLambda
from mcp import Client
from layerlab.harness.targets.langchain import mcp_url

SEEN = []

def factory(retriever, tool):
    async def over_mcp(url, question):
        async with Client(url) as client:
            return (await client.call_tool("search", {"query": question})).structured_content

    def answer(inp):
        url = mcp_url()
        SEEN.append(url)
        obs = asyncio.run(over_mcp(url, inp["question"]))
        if obs["status"] in ("error", "refused"):
            return {"answer": "", "source_documents": []}
        best = obs["results"][0]
        return {"answer": best["text"][:20], "source_documents": [best]}

    return RunnableLambda(answer)
"""


def test_a_langchain_chain_reads_its_records_mcp_address(corpus, key, tmp_path, monkeypatch):
    (tmp_path / "lc_mcp.py").write_text(LC_FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    scen = {"permission_denied": load_scenarios()["permission_denied"]}
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=(TASK,),
                          target="langchain:lc_mcp:factory")  # fmt: skip
    r = live.run_live(corpus, key, scen, cfg, tmp_path / "run", cache_dir=tmp_path / "cache",
                      scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    import lc_mcp

    assert r.complete and len(set(lc_mcp.SEEN)) == 2  # one address per record
    rows = agentlog.read_table(tmp_path / "run", target=True)
    assert [c["outcome"] for row in rows for c in row["calls"]] == ["denied", "denied"]

"""Transport faults reach every kind of target as it would meet them: an in-process target's tools
raise the matching exception, the tool server answers an HTTP caller with the real status,
header, reset, stall or cut body, the MCP endpoint with an MCP tool error; a run over them is
byte-identical on every rerun (scenarios_transport.yaml, layerlab/faults/transport.py)."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import paths
from layerlab.corpus.spec import spec_hash
from layerlab.faults import transport as tr
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.prepare import prepare
from layerlab.harness.targets import TargetRequest, parse_target
from layerlab.harness.targets.toolserver import ToolServer
from layerlab.harness.tools import ToolBox

TASK = "finance-01-q1"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")
EXC = {"rate_limited": tr.RateLimited, "server_error": tr.ServiceUnavailable,
       "connection_reset": tr.ConnectionReset, "stalled_call": tr.TimedOut,
       "truncated_body": tr.TruncatedBody, "auth_expired": tr.AuthExpired,
       "service_outage": tr.ServiceUnavailable}  # fmt: skip


@pytest.fixture(scope="module")
def scen() -> Any:
    return load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)


@pytest.fixture(scope="module")
def prepared(corpus, scen) -> dict[str, Any]:
    return {name: prepare(corpus, s) for name, s in scen.items()}


def _box(corpus, prep: Any, clock: tr.Clock | None = None) -> ToolBox:
    tools = ToolBox(next(t for t in corpus.tasks if t.task_id == TASK), prep, "strict")
    tools.clock = clock or tr.Clock(sleep=lambda s: None)
    return tools


def test_an_in_process_target_meets_each_fault_as_its_exception(corpus, prepared) -> None:
    for name, exc in EXC.items():
        tools = _box(corpus, prepared[name])
        req = TargetRequest(tools)
        with pytest.raises(exc) as info:
            req.search(req.question)
        assert info.value.event == prepared[name].scenario.transport_event(
            prepared[name].tool_context(tools.task, 0)
        )
        with pytest.raises(exc):  # the retriever door too (a record's first call)
            TargetRequest(_box(corpus, prepared[name])).retriever(req.question)
    # 429 twice (lasts: 2), with Retry-After; the third call answers
    req = TargetRequest(_box(corpus, prepared["rate_limited"]))
    for _ in range(2):
        with pytest.raises(ConnectionError) as info:
            req.search(req.question)
        assert isinstance(info.value, tr.RateLimited) and info.value.retry_after == 1.5
    assert req.search(req.question)["status"] == "ok"
    # a slow call answers, after its delay (on the record's clock, bounded)
    clock = tr.Clock(sleep=lambda s: None, max_delay_s=0.3)
    req = TargetRequest(_box(corpus, prepared["slow_tool"], clock))
    assert req.search(req.question)["status"] == "ok"
    assert 0.2 <= clock.slept <= 0.3
    stalled = tr.Clock(sleep=lambda s: None, max_delay_s=0.05)
    req = TargetRequest(_box(corpus, prepared["stalled_call"], stalled))
    with pytest.raises(TimeoutError):
        req.search(req.question)
    assert stalled.slept == 0.05  # a 30 s stall, bounded


def test_a_refusal_after_failed_calls_is_returned_not_raised(corpus, prepared) -> None:
    from layerlab.mitigations import load_mitigations

    arm = load_mitigations(paths.TRANSPORT_MITIGATION_SPEC).arm("transport_retry")
    for name, refused_after in (("service_outage", 4), ("auth_expired", 1)):
        tools = ToolBox(next(t for t in corpus.tasks if t.task_id == TASK), prepared[name], arm)
        tools.clock = tr.Clock(sleep=lambda s: None)
        obs = TargetRequest(tools).search("expense limit")  # the arm's answer: no exception
        assert obs["status"] == "refused" and obs["error"]["code"] == "refused"
        assert tools.last_event is None and tools.calls[-1].payloads == refused_after


def _raw_post(url: str, token: str, body: dict[str, Any], timeout: float = 5.0) -> Any:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    data = json.dumps(body).encode()
    conn.request("POST", "/search", data, {"Authorization": f"Bearer {token}",
                                            "Content-Type": "application/json"})  # fmt: skip
    try:
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_an_http_caller_meets_each_fault_on_the_wire(corpus, prepared) -> None:
    server = ToolServer(clock=tr.Clock(max_delay_s=0.5))
    try:

        def post(name: str, timeout: float = 5.0) -> Any:
            tools = _box(corpus, prepared[name])
            req = TargetRequest(tools)
            with server.serving(req) as (url, token):
                return _raw_post(url, token, {"query": req.question, "top_k": 3}, timeout)

        status, headers, body = post("rate_limited")
        err = json.loads(body)["error"]
        assert (status, headers["Retry-After"]) == (429, "2")  # whole seconds, rounded up
        assert (err["code"], err["retry_after"]) == ("rate_limited", 1.5)
        status, _, body = post("server_error")
        assert status == 503 and json.loads(body)["error"]["code"] == "server_error"
        status, headers, body = post("auth_expired")
        assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]
        assert json.loads(body)["error"]["code"] == "auth_expired"
        with pytest.raises(ConnectionError):  # closed unanswered (RemoteDisconnected or RST)
            post("connection_reset")
        with pytest.raises(http.client.IncompleteRead):  # Content-Length says more than sent
            post("truncated_body")
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):  # the stall outlasts the caller's timeout
            post("stalled_call", timeout=0.2)
        assert time.monotonic() - t0 < 2
        t0 = time.monotonic()
        status, _, body = post("slow_tool")
        assert status == 200 and json.loads(body)["status"] == "ok"
        assert time.monotonic() - t0 >= 0.2  # really slept: the delay, bounded
    finally:
        server.close()


def test_an_mcp_client_meets_each_fault_as_a_tool_error(corpus, prepared) -> None:
    pytest.importorskip("mcp")
    from mcp import Client

    from layerlab.harness.targets.mcp import record_caller, tool_server

    async def first_call(name: str, clock: tr.Clock) -> Any:
        req = TargetRequest(_box(corpus, prepared[name]))
        caller = record_caller(req, threading.Lock(), clock)
        async with Client(tool_server(lambda _ctx: caller)) as client:
            return await client.call_tool("search", {"query": req.question, "top_k": 3})

    clock = tr.Clock(sleep=lambda s: None, max_delay_s=1.0)
    for name, exc in EXC.items():
        res = asyncio.run(first_call(name, clock))
        kind = prepared[name].scenario.transport_event(prepared[name].tool_context(
            _box(corpus, prepared[name]).task, 0)).kind  # fmt: skip
        assert res.is_error and res.structured_content["error"]["code"] == kind, name
        assert tr.EXCEPTIONS[kind] is exc
    res = asyncio.run(first_call("rate_limited", clock))
    assert res.structured_content["error"]["retry_after"] == 1.5
    res = asyncio.run(first_call("slow_tool", clock))
    assert not res.is_error and res.structured_content["status"] == "ok"
    assert clock.slept >= 0.2 + 1.0  # the stall (bounded) and the slow call


class Resilient:
    """A team's in-process system that retries a failed call (honouring Retry-After, without
    really sleeping) at most twice, and abstains when the service stays down."""

    def answer(self, req: TargetRequest) -> dict[str, Any]:
        from layerlab.corpus.extract import extract

        for attempt in range(3):
            try:
                obs = req.search(req.question)
                break
            except tr.AuthExpired:
                return {"status": "abstained", "reason": "credential expired"}
            except (ConnectionError, TimeoutError) as exc:
                _ = getattr(exc, "retry_after", None) or 0.1 * 2**attempt  # the wait it honours
        else:
            return {"status": "abstained", "reason": "search service unavailable"}
        for res in obs.get("results") or ():
            span = extract(req.question, req.answer_kind, res["text"])
            if span is not None:
                return {"status": "answered", "answer": span, "citations": [res["doc_id"]]}
        return {"status": "abstained", "reason": "nothing found"}


def naive(req: TargetRequest) -> dict[str, Any]:
    """A system that never expects a failed call: the exception escapes."""
    docs = req.retriever(req.question)
    return {
        "status": "answered",
        "answer": docs[0].page_content[:20],
        "citations": [docs[0].doc_id],
    }


def _run(corpus, key, scen, out: Path, ref: str) -> pd.DataFrame:
    spec = parse_target(f"python:tests.harness.targets.test_transport_delivery:{ref}", ref, "1", {})
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=spec)
    r = live.run_live(corpus, key, scen, cfg, out, cache_dir=out.parent / f"{out.name}-cache",
                      scenario_hash=spec_hash(paths.TRANSPORT_SCENARIO_SPEC))  # fmt: skip
    assert r.complete
    return pd.read_parquet(out / "records.parquet")


def test_a_target_run_over_transport_faults_is_byte_identical(corpus, key, scen, tmp_path,
                                                              monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr(tr.CLOCK, "sleep", lambda s: None)  # the run's delays, not waited here
    runs = [_run(corpus, key, scen, tmp_path / f"r{i}", "Resilient") for i in range(3)]
    blobs = [(tmp_path / f"r{i}" / "records.parquet").read_bytes() for i in range(3)]
    assert blobs[0] == blobs[1] == blobs[2]
    df = runs[0].set_index("scenario")
    # the retrying system recovers from every transient fault and abstains on the lasting ones
    for name in ("slow_tool", "rate_limited", "server_error", "connection_reset",
                 "stalled_call", "truncated_body", "model_rate_limited"):  # fmt: skip
        assert df.loc[[name], "success"].all(), name
    assert df.loc[["auth_expired", "service_outage"], "safe_resolution"].all()
    # a system that does not catch them fails those records as provider errors, not silently
    bad = _run(corpus, key, scen, tmp_path / "naive", "naive").set_index("scenario")
    assert (bad.drop(index=["slow_tool", "model_rate_limited"]).diagnostic
            == "provider_error").all()  # fmt: skip


class _Service(BaseHTTPRequestHandler):
    """A team's HTTP service: it searches through the tool server, retries a failed call (a 429
    after its Retry-After, without really waiting here) at most twice, abstains on a 401."""

    seen: list[tuple[str, str]] = []  # noqa: RUF012 - (question, what its calls met)

    def log_message(self, *a: Any) -> None:
        pass

    def _search(self, q: dict[str, Any]) -> tuple[str, Any]:
        host, port = q["tools_url"].removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        body = json.dumps({"session_id": q["session_id"], "query": q["question"], "top_k": 3})
        try:
            conn.request("POST", "/search", body, {"Authorization": f"Bearer {q['tools_token']}"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status == 429:
                return f"429 retry-after {resp.getheader('Retry-After')}", None
            return str(resp.status), json.loads(data)
        except http.client.IncompleteRead:
            return "incomplete body", None
        except (ConnectionError, TimeoutError) as exc:
            return type(exc).__name__, None
        finally:
            conn.close()

    def do_POST(self) -> None:  # noqa: N802
        from layerlab.corpus.extract import extract

        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply: dict[str, Any] = {"status": "abstained", "reason": "search service unavailable"}
        for _ in range(3):
            met, obs = self._search(q)
            self.seen.append((q["question"], met))
            if met == "401":
                reply = {"status": "abstained", "reason": "credential expired"}
                break
            if met == "200":
                reply = {"status": "abstained", "reason": "nothing found"}
                for res in obs.get("results") or ():
                    span = extract(q["question"], q["answer_kind"], res["text"])
                    if span is not None:
                        reply = {"status": "answered", "answer": span,
                                 "citations": [res["doc_id"]]}  # fmt: skip
                        break
                break
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_an_http_target_meets_each_fault_through_the_tool_server(corpus, key, scen, tmp_path,
                                                                 monkeypatch) -> None:  # fmt: skip
    monkeypatch.setattr(tr.CLOCK, "max_delay_s", 0.05)  # the run's delays, bounded small here
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Service.seen.clear()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/answer"
        spec = parse_target(url, "team-service", "1", {})
        cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=spec)
        out = tmp_path / "run"
        r = live.run_live(corpus, key, scen, cfg, out, cache_dir=tmp_path / "cache",
                          scenario_hash=spec_hash(paths.TRANSPORT_SCENARIO_SPEC))  # fmt: skip
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.complete
    met = {m for _, m in _Service.seen}
    assert {"429 retry-after 2", "503", "401", "incomplete body", "200"} <= met
    assert met & {"RemoteDisconnected", "ConnectionResetError"}  # the reset and the stall
    df = pd.read_parquet(out / "records.parquet").set_index("scenario")
    for name in ("slow_tool", "rate_limited", "server_error", "connection_reset",
                 "stalled_call", "truncated_body"):  # fmt: skip
        assert df.loc[[name], "success"].all(), name  # its retries recovered
    assert df.loc[["auth_expired", "service_outage"], "safe_resolution"].all()

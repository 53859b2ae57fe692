"""The team's own spans per record (issue 42, item 3): an instrumented Python target, a LangChain
chain under OpenInference's instrumentor and an HTTP service exporting over OTLP/HTTP each have
their spans in that record's private sample-log entry and under the record in the viewer, never in
the run folder."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from layerlab import paths
from layerlab.archive import samplelog
from layerlab.corpus.spec import spec_hash
from layerlab.harness import live
from layerlab.harness.targets import parse_target
from layerlab.harness.targets.otlp import Receiver
from layerlab.harness.targets.spans import STORE, record_trace, span_dict, within
from layerlab.reporting.records import viewer

pytest.importorskip("opentelemetry.sdk")
FIXTURES = Path(__file__).parents[2] / "fixtures"
TASKS = ("finance-01-q1", "pto-01-q1")
SCENARIOS = ("clean", "permission_denied", "stale_index")


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _run(corpus: Any, key: Any, tmp: Path, target: Any) -> tuple[Path, list[dict[str, Any]]]:
    from layerlab.faults.scenario import load_scenarios

    scen = load_scenarios()
    out, log = tmp / "run", tmp / "private" / "samples.jsonl"
    cfg = live.LiveConfig(models=(), scenarios=SCENARIOS, task_ids=TASKS, target=target,
                          mitigations=("strict",))  # fmt: skip
    sink = samplelog.SampleLog(samplelog.check_path(log, out))
    try:
        r = live.run_live(corpus, key, scen, cfg, out, samples=sink,
                          scenario_hash=spec_hash(paths.SCENARIO_SPEC), cache_dir=tmp / "cache")  # fmt: skip
    finally:
        sink.close()
    assert r.complete
    entries = samplelog.read(log)
    assert len(entries) == len(TASKS) * len(SCENARIOS)
    return out, entries


def _no_spans_in(out: Path, *needles: bytes) -> None:
    for f in out.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert not any(n in data for n in needles), f


def test_python_target_spans_per_record(corpus, key, tmp_path: Path) -> None:
    out, entries = _run(corpus, key, tmp_path, "python:otel_targets:traced")
    traces = set()
    for e in entries:
        spans = {s["name"]: s for s in e["spans"]}
        assert set(spans) == {"team.answer", "team.retrieve"}, e["scenario"]
        top, ret = spans["team.answer"], spans["team.retrieve"]
        assert top["parent"] is None and ret["parent"] == top["span_id"]
        # each record has its own spans: the query is that record's question
        assert ret["attributes"]["team.query"] == e["question"]
        assert ret["attributes"]["team.api_key"] == "(secret: not stored)"
        assert 0 <= top["start_ms"] <= ret["start_ms"]
        assert top["duration_ms"] >= ret["duration_ms"] >= 0
        traces.add(top["span_id"])
        if e["scenario"] == "permission_denied":  # refused: the team's KeyError, in its span
            assert ret["status"] == "error" and "KeyError" in (ret["message"] or "")
            assert e["outcome"] == "failed" and "KeyError" in e["target_error"]
        else:
            assert ret["status"] == "unset"
            ids = [d for c in e["tool_calls"] for d in c["doc_ids"]]
            assert ret["attributes"]["team.doc_ids"] == ids
    assert len(traces) == len(entries)
    assert not STORE.open  # every record's trace was closed
    _no_spans_in(out, b"team.retrieve", b"team.answer", b"sk-TEAMSECRET")


def test_langchain_chain_under_openinference_spans_in_the_viewer(corpus, key, tmp_path) -> None:
    pytest.importorskip("openinference.instrumentation.langchain")
    out, entries = _run(corpus, key, tmp_path, "langchain:otel_targets:lc_traced")
    for e in entries:
        kinds = {s["attributes"].get("openinference.span.kind") for s in e["spans"]}
        assert {"CHAIN", "RETRIEVER", "LLM"} <= kinds, (e["scenario"], kinds)
        roots = [s for s in e["spans"] if s["parent"] is None]
        assert len(roots) == 1 and roots[0]["attributes"]["openinference.span.kind"] == "CHAIN"
        assert e["question"] in roots[0]["attributes"]["input.value"]
        llm = next(s for s in e["spans"] if s["attributes"].get("openinference.span.kind") == "LLM")
        assert "Answer from the documents only." in json.dumps(llm["attributes"])  # the prompt
        ret = next(s for s in e["spans"]
                   if s["attributes"].get("openinference.span.kind") == "RETRIEVER")  # fmt: skip
        a = ret["attributes"]  # OpenInference keeps each document's metadata (doc_id in it)
        got = [json.loads(a[f"retrieval.documents.{i}.document.metadata"])["doc_id"]
               for i in range(8) if f"retrieval.documents.{i}.document.metadata" in a]  # fmt: skip
        delivered = [d for c in e["tool_calls"] for d in c["doc_ids"]]
        assert got == delivered, (e["scenario"], got, delivered)
        if e["scenario"] == "permission_denied":  # the retriever raised ToolException
            assert ret["status"] == "error" and not got
    _no_spans_in(out, b"openinference", b"Answer from the documents only.")
    # the viewer shows each record's spans under it
    html = viewer.build([tmp_path / "private" / "samples.jsonl"])
    data = json.loads(html.split('<script type="application/json" id="records">')[1]
                      .split("</script>")[0].replace("<\\/", "</"))  # fmt: skip
    assert len(data) == len(entries) and all(len(r["spans"]) >= 4 for r in data)
    assert "function spansView(r)" in html and "+ spansView(r)" in html
    assert 'class="private"' in html


class _Service(BaseHTTPRequestHandler):
    """An instrumented service: continues the caller's trace (traceparent), exports its spans
    with the SDK's OTLP/HTTP protobuf exporter to the address in the request body."""

    headers_seen: list[str | None] = []

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.headers_seen.append(self.headers.get("traceparent"))
        provider = TracerProvider(resource=Resource.create({"service.name": "team-service"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(body["otlp_traces_url"])))
        tracer = provider.get_tracer("team.service")
        ctx = TraceContextTextMapPropagator().extract({"traceparent": self.headers["traceparent"]})
        with tracer.start_as_current_span("service.answer", context=ctx) as span:
            span.set_attribute("input.value", body["question"])
            req = urllib.request.Request(
                body["tools_url"] + "/search", method="POST",
                data=json.dumps({"session_id": body["session_id"], "query": body["question"],
                                 "top_k": 3}).encode(),
                headers={"Authorization": f"Bearer {body['tools_token']}",
                         "Content-Type": "application/json"})  # fmt: skip
            with tracer.start_as_current_span("service.search"):
                obs = json.loads(urllib.request.urlopen(req).read())  # noqa: S310
        provider.shutdown()
        ids = [r["doc_id"] for r in obs.get("results") or ()]
        reply = {"status": "abstained", "reason": f"saw {len(ids)}"}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_http_service_spans_through_traceparent_and_otlp(corpus, key, tmp_path) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Service.headers_seen.clear()
    try:
        spec = parse_target(f"http://127.0.0.1:{httpd.server_address[1]}/answer", "svc", "1",
                            {"otel_wait": "10"})  # fmt: skip
        out, entries = _run(corpus, key, tmp_path, spec)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(set(_Service.headers_seen)) == len(entries)  # one trace per record
    assert all(re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01", h or "") for h in _Service.headers_seen)
    for e in entries:
        spans = {s["name"]: s for s in e["spans"]}
        assert set(spans) == {"service.answer", "service.search"}
        assert spans["service.answer"]["parent"] is None
        assert spans["service.search"]["parent"] == spans["service.answer"]["span_id"]
        assert spans["service.answer"]["attributes"]["input.value"] == e["question"]
        assert spans["service.answer"]["attributes"]["service.name"] == "team-service"
    _no_spans_in(out, b"service.answer")


def test_receiver_reads_otlp_json_and_refuses_what_is_not(tmp_path: Path) -> None:
    got: list[dict[str, Any]] = []

    class Sink:
        def add(self, tid: int, make: Any) -> None:
            got.append(make(record_trace("x")))

    rx = Receiver(0, Sink(), span_dict)
    try:
        body = {"resourceSpans": [{"resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeSpans": [{"spans": [{
                "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
                "name": "llm", "kind": 3, "startTimeUnixNano": "1", "endTimeUnixNano": "2000001",
                "attributes": [{"key": "llm.token_count.prompt", "value": {"intValue": "12"}},
                               {"key": "tags", "value": {"arrayValue": {"values": [
                                   {"stringValue": "a"}, {"stringValue": "b"}]}}}],
                "status": {"code": 2, "message": "boom"}}]}]}]}  # fmt: skip

        def post(data: bytes, kind: str, url: str = rx.url) -> int:
            req = urllib.request.Request(url, data=data, method="POST",
                                         headers={"Content-Type": kind})  # fmt: skip
            try:
                return urllib.request.urlopen(req).status  # noqa: S310
            except urllib.error.HTTPError as exc:
                return exc.code

        assert post(json.dumps(body).encode(), "application/json") == 200
        assert post(b"not json", "application/json") == 400
        assert post(b"\xff\x00garbage", "application/x-protobuf") == 400
        assert post(b"{}", "application/json", rx.url.replace("/v1/traces", "/v1/logs")) == 404
    finally:
        rx.close()
    (s,) = got
    assert s["name"] == "llm" and s["kind"] == "client" and s["status"] == "error"
    assert s["message"] == "boom" and s["duration_ms"] == 2.0
    assert s["attributes"] == {"llm.token_count.prompt": 12, "service.name": "svc",
                               "tags": ["a", "b"]}  # fmt: skip


def test_within_sets_the_record_context_in_threads_and_coroutines() -> None:
    from opentelemetry import trace

    t = record_trace("ident")
    seen: list[int] = []

    def sync() -> int:
        return trace.get_current_span().get_span_context().trace_id

    async def coro() -> int:
        return trace.get_current_span().get_span_context().trace_id

    import asyncio

    box: list[Any] = []
    th = threading.Thread(target=lambda: box.append(within(t, sync)()))
    th.start()
    th.join()
    seen.append(box[0])
    seen.append(asyncio.run(within(t, coro)()))
    assert seen == [t.trace_id, t.trace_id]
    assert trace.get_current_span().get_span_context().trace_id != t.trace_id  # left again

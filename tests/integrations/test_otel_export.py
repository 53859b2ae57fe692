"""layerlab's records as traces (issue 42, item 4): GenAI-convention spans with the fault and the
arm, a ``gen_ai.evaluation.result`` event per score, only the archive's fields unless the private
log is given; sent over OTLP/HTTP (a receiver here, a real Phoenix server in the slow test)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from layerlab import archive, paths
from layerlab.cli import main
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.targets.otlp import Receiver
from layerlab.harness.targets.spans import record_trace, span_dict
from layerlab.integrations.otel import export
from layerlab.integrations.otel.traces import SCORES

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
RUN = paths.ROOT / "data" / "archives" / "user_pipelines" / "my-rag-chain"
FIXTURES = Path(__file__).parents[1] / "fixtures"
PRIVATE_KEYS = ("input.value", "output.value", "layerlab.expected", "layerlab.reply")


class Sink:
    """Every span an OTLP receiver gets, as the sample log would keep it, with its trace id."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def add(self, tid: int, make: Any) -> None:
        self.spans.append({**make(record_trace("sink")), "trace_id": tid})


def test_each_record_is_a_trace_with_its_fault_arm_and_scores() -> None:
    manifest, partial, plan = export.plan(RUN)
    records = sorted(archive.read_records(RUN / archive.ARCHIVE), key=archive.sort_key)
    assert not partial and len(plan) == len(records) == len({tid for tid, _ in plan})
    scen = load_scenarios()
    for rec, (_tid, spans) in zip(records, plan, strict=True):
        root, *rest = spans
        assert root.name == f"invoke_agent target/{rec.model}" and root.parent_id is None
        a = root.attributes
        assert a["gen_ai.operation.name"] == "invoke_agent"
        assert (a["layerlab.task_id"], a["layerlab.scenario"], a["layerlab.mitigation.arm"]) == (
            rec.task_id, rec.scenario, rec.mitigation)  # fmt: skip
        assert (root.error is None) == bool(rec.safe_resolution)
        scores = {e[2]["gen_ai.evaluation.name"]: e[2]["gen_ai.evaluation.score.value"]
                  for e in root.events if e[0] == "gen_ai.evaluation.result"}  # fmt: skip
        want = {n: float(getattr(rec, f)) for n, f in SCORES if getattr(rec, f) is not None}
        assert scores == want and {"S", "E", "R", "G", "V", "safe_resolution"} <= set(scores)
        tools = [s for s in rest if s.attributes["gen_ai.operation.name"] == "execute_tool"]
        assert tools and all(s.parent_id == root.span_id for s in rest)
        ops = [f.op for f in scen[rec.scenario].spec.faults]
        for s in tools:  # each tool call carries the fault and the arm
            t = s.attributes
            assert t["layerlab.fault.scenario"] == rec.scenario
            assert t["layerlab.fault.layer"] == scen[rec.scenario].spec.layer
            assert t["layerlab.fault.seed"] == scen[rec.scenario].seed
            assert t["layerlab.mitigation.arm"] == rec.mitigation
            tool_ops = [o for o in ops if o not in ("serve_superseded", "inject_conflict",
                                                    "corrupt_metadata")]  # fmt: skip
            assert t.get("layerlab.fault.operator", []) == tool_ops, (rec.scenario, t)
            assert len(t.get("layerlab.fault.intensity", [])) == len(tool_ops)
        # archive-only: nothing the allowlist does not hold (no question, reply, ids)
        for s in spans:
            assert not set(PRIVATE_KEYS) & set(s.attributes), s.name
            assert not any("document" in k for k in s.attributes)


def test_export_round_trip_over_otlp(tmp_path: Path) -> None:
    sink = Sink()
    rx = Receiver(0, sink, span_dict)
    try:
        sent = export.send(RUN, rx.url.removesuffix("/v1/traces"), project="p1")
    finally:
        rx.close()
    _m, _p, plan = export.plan(RUN)
    assert sent.records == len(plan) and sent.spans == sum(len(s) for _, s in plan)
    assert len(sink.spans) == sent.spans
    assert {s["trace_id"] for s in sink.spans} == {tid for tid, _ in plan}
    roots = [s for s in sink.spans if s["name"].startswith("invoke_agent")]
    assert len(roots) == len(plan)
    assert all(s["attributes"]["service.name"] == "layerlab" for s in sink.spans)
    evals = [e for s in roots for e in s["events"] if e["name"] == "gen_ai.evaluation.result"]
    assert {e["attributes"]["gen_ai.evaluation.name"] for e in evals} >= {"S", "E", "R", "G", "V"}
    errors = sum(s["status"] == "error" for s in roots)
    recs = archive.read_records(RUN / archive.ARCHIVE)
    assert errors == sum(not r.safe_resolution for r in recs) > 0


def test_export_with_the_private_log_carries_the_team_spans(
    corpus, key, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    out, log = tmp_path / "run", tmp_path / "private" / "s.jsonl"
    args = ["run", "live", "--target", "python:otel_targets:traced", "--tasks", "pto-01-q1",
            "--scenario", "clean", "--scenario", "permission_denied", "--mode", "strict",
            "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "c"),
            "--sample-log", str(log), "--max-error-rate", "1"]  # fmt: skip
    sink = Sink()
    rx = Receiver(0, sink, span_dict)
    try:
        assert main([*args, "--otel-endpoint", rx.url]) == 0
        public = list(sink.spans)
        sink.spans.clear()
        assert main(["export", "otel", str(out), "--endpoint", rx.url, "--sample-log", str(log)]) == 0
    finally:
        rx.close()
    assert public and not any(set(PRIVATE_KEYS) & set(s["attributes"]) for s in public)
    team = [s for s in sink.spans if s["attributes"].get("layerlab.team_span")]
    assert sorted(s["name"] for s in team) == ["team.answer"] * 2 + ["team.retrieve"] * 2
    roots = {s["trace_id"]: s for s in sink.spans if s["name"].startswith("invoke_agent")}
    for s in team:  # under their record's root (team.answer) or team.answer (team.retrieve)
        assert s["trace_id"] in roots
    failing = [r for r in roots.values() if r["status"] == "error"]
    assert len(failing) == 1 and "KeyError" in failing[0]["attributes"]["layerlab.target_error"]
    assert failing[0]["attributes"]["input.value"]  # the question, private


def test_bad_endpoints_are_one_line_usage_errors(tmp_path: Path, capsys) -> None:
    for url, said in (("ftp://h/x", "expected an OTLP/HTTP address"),
                      ("http://u:pw@127.0.0.1:4318", "carries a credential")):  # fmt: skip
        assert main(["export", "otel", str(RUN), "--endpoint", url]) == 2
        err = capsys.readouterr().err
        assert said in err and "pw" not in err
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["export", "otel", str(RUN), "--endpoint", f"http://127.0.0.1:{port}"]) == 1
    assert "did not accept the spans" in capsys.readouterr().err


# --- a real collector: Phoenix on loopback -------------------------------------------------------


def _phoenix_python() -> str | None:
    """The interpreter of a Phoenix install: $LAYERLAB_PHOENIX_PYTHON (make test-slow's venv),
    else this one if it has Phoenix."""
    given = os.environ.get("LAYERLAB_PHOENIX_PYTHON")
    if given:
        return given
    import importlib.util

    return sys.executable if importlib.util.find_spec("phoenix.server") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def phoenix(tmp_path: Path) -> Any:
    python = _phoenix_python()
    if python is None:
        pytest.skip("no Phoenix server: make test-slow builds one (LAYERLAB_PHOENIX_PYTHON)")
    pytest.importorskip("phoenix.client")
    port, grpc = _free_port(), _free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc), "PHOENIX_HOST": "127.0.0.1",
           "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{tmp_path / 'phoenix.db'}",
           "PHOENIX_TELEMETRY_ENABLED": "false", "DO_NOT_TRACK": "1"}  # fmt: skip
    log = open(tmp_path / "phoenix.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([python, "-m", "phoenix.server.main", "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=2)  # noqa: S310
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("Phoenix did not start: " + (tmp_path / "phoenix.log").read_text()[-2000:])
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _small_run(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A target run of an instrumented Python target on a few records, with its private log."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    out, log = tmp / "run", tmp / "private" / "s.jsonl"
    assert main(["run", "live", "--target", "python:otel_targets:traced", "--tasks",
                 "pto-01-q1,finance-01-q1", "--scenario", "clean", "--scenario",
                 "permission_denied", "--scenario", "stale_index", "--mode", "strict",
                 "--out", str(out), "--no-progress", "--cache-dir", str(tmp / "c"),
                 "--sample-log", str(log), "--max-error-rate", "1"]) == 0  # fmt: skip
    return out, log


@pytest.mark.slow
def test_a_run_exported_to_phoenix_reads_back_span_for_span(
    phoenix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from phoenix.client import Client

    run, log = _small_run(tmp_path, monkeypatch)
    assert main(["export", "otel", str(run), "--endpoint", phoenix + "/v1/traces",
                 "--project", "layerlab-test", "--sample-log", str(log)]) == 0  # fmt: skip
    _m, _p, plan = export.plan(run, log)
    want = {(f"{tid:032x}", f"{s.span_id:016x}"): s for tid, spans in plan for s in spans}
    assert any(s.attributes.get("layerlab.team_span") for s in want.values())
    client = Client(base_url=phoenix)
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 180
    while len(got) < len(want) and time.monotonic() < deadline:
        time.sleep(1)
        got = client.spans.get_spans(project_identifier="layerlab-test", limit=len(want) + 10)
    assert len(got) == len(want)
    for s in got:
        ctx = s["context"]
        p = want[(ctx["trace_id"], ctx["span_id"])]
        assert s["name"] == p.name
        assert (s.get("parent_id") or None) == (None if p.parent_id is None else f"{p.parent_id:016x}")
        attrs = {**s["attributes"], "openinference.span.kind": s["span_kind"]}  # its own field
        wrong = {k: (attrs.get(k), v) for k, v in p.attributes.items() if attrs.get(k) != v}
        assert not wrong, (p.name, wrong)
        assert (s["status_code"] == "ERROR") == (p.error is not None)
        names = [e["name"] for e in s.get("events") or ()]
        assert names.count("gen_ai.evaluation.result") == sum(
            e[0] == "gen_ai.evaluation.result" for e in p.events)  # fmt: skip

"""Targets: the user's own RAG system as the system under test (Python, LangChain, HTTP).

Each kind runs end to end on the fault matrix (9 scenarios x strict/repair on three tasks) and
every fault must reach the target at its layer: what the target's tool calls returned (its
target-table row, and what the target itself saw), not just the records' scores."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import archive, paths
from layerlab.cli import main
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.live import agentlog
from layerlab.harness.targets import (
    TargetError,
    TargetRequest,
    parse_target,
    read_reply,
)
from layerlab.harness.targets.toolserver import ToolServer
from layerlab.harness.tools import ToolBox
from tests.test_plugins import _TABLE10, _python, site  # noqa: F401  (site: a fixture)

FIXTURES = Path(__file__).parent / "fixtures"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    return load_scenarios()


def _run(corpus, key, scen, tmp: Path, target: Any, **kw: Any) -> tuple[Path, live.LiveResult]:
    out = tmp / "run"
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=target)
    r = live.run_live(corpus, key, scen, cfg, out, scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                      cache_dir=tmp / "cache", **kw)  # fmt: skip
    return out, r


def _check_layers(out: Path, key: Any) -> pd.DataFrame:
    """Each fault reached the target's tool calls at its layer; returns the records."""
    recs = pd.read_parquet(out / "records.parquet")
    assert len(recs) == 9 * 2 * len(TASKS) and set(recs.provider) == {"target"}
    rows = {(r["scenario"], r["mitigation"], r["task_id"]): r
            for r in agentlog.read_table(out, target=True)}  # fmt: skip
    assert len(rows) == len(recs)
    for (s, arm, task), row in rows.items():
        calls = row["calls"]
        assert row["tool_calls"] == len(calls) >= 1, (s, arm, task)
        outcomes = {c["outcome"] for c in calls}
        seen = {d for c in calls for d in c["doc_ids"]}
        required = set(key[task].required_doc_ids)
        if s == "permission_denied":
            assert outcomes == {"denied"}, (s, arm, outcomes)
        elif s == "missing_tool_output":
            assert outcomes == {"unavailable"}, (s, arm, outcomes)
        elif s == "schema_drift":
            assert outcomes == ({"rejected"} if arm == "strict" else {"ok"}), (s, arm, outcomes)
        elif s == "stale_index":
            assert seen and not seen & required, (task, seen)  # only superseded versions
        elif s == "wrong_session":
            assert seen and all("~" in d for d in seen), seen  # another tenant's documents
        elif s == "clean":
            assert outcomes == {"ok"} and required <= seen
    clean = recs[recs.scenario == "clean"]
    assert clean.success.all()  # the extractive target solves these tasks without a fault
    assert not recs[recs.scenario.isin(["stale_index", "wrong_session"])].success.any()
    strict = recs[(recs.scenario == "schema_drift") & (recs.mitigation == "strict")]
    assert (strict.diagnostic == "tool_contract").all()
    return recs


def _seen_by_target(seen: list[dict[str, Any]]) -> dict[str, set[str]]:
    """What the target's own code saw: the statuses, error codes and evidence sessions."""
    got: dict[str, set[str]] = {"status": set(), "codes": set(), "foreign": set()}
    for s in seen:
        obs = s["obs"]
        got["status"].add(obs["status"])
        if obs.get("error") and isinstance(obs["error"], dict):
            got["codes"].add(obs["error"].get("code", ""))
        for r in obs.get("results") or ():
            if r.get("session_id") not in (None, s["session_id"]):
                got["foreign"].add(r["doc_id"])
    return got


def test_python_target_on_the_fault_matrix(corpus, key, scen, tmp_path: Path) -> None:
    import user_targets

    user_targets.SEEN.clear()
    out, r = _run(corpus, key, scen, tmp_path, "python:user_targets:extractive")
    assert r.complete
    _check_layers(out, key)
    got = _seen_by_target(user_targets.SEEN)
    # the tool's errors reached the function as the tool's answers, never as exceptions
    assert {"denied", "unavailable", "invalid_payload"} <= got["codes"]
    assert got["foreign"] and all("~" in d for d in got["foreign"])  # wrong_session: foreign
    table = pd.read_parquet(out / agentlog.TARGET_TABLE)
    assert set(table.reply) == {"structured"} and set(table.protocol) == {"target:python"}


def test_langchain_target_on_the_fault_matrix(corpus, key, scen, tmp_path: Path) -> None:
    import user_targets

    user_targets.SEEN.clear()
    out, r = _run(corpus, key, scen, tmp_path, "langchain:user_targets:lc_factory")
    assert r.complete
    recs = _check_layers(out, key)
    assert set(recs.model) == {"lc_factory"}
    # a failed tool call reaches a LangChain retriever as no documents
    assert any(s["obs"]["status"] == "empty" for s in user_targets.SEEN)
    assert _seen_by_target(user_targets.SEEN)["foreign"]


class _Service(BaseHTTPRequestHandler):
    """A user's RAG service in 'another language': it only speaks HTTP to the tool server."""

    foreign_refused: list[int] = []  # noqa: RUF012

    def log_message(self, *a: Any) -> None:
        pass

    def _post(self, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        req = urllib.request.Request(url, json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def do_POST(self) -> None:  # noqa: N802
        from layerlab.corpus.extract import extract

        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tools = q["tools_url"]
        code, _ = self._post(f"{tools}/search", {"session_id": "s-00000000", "query": "x"})
        self.foreign_refused.append(code)
        _, obs = self._post(f"{tools}/search", {"session_id": q["session_id"],
                                                "query": q["question"], "top_k": 3})  # fmt: skip
        reply: dict[str, Any] = {"status": "abstained", "reason": "nothing found"}
        for res in obs.get("results") or ():
            span = extract(q["question"], q["answer_kind"], res["text"])
            if span is not None:
                reply = {"status": "answered", "answer": span, "citations": [res["doc_id"]]}
                break
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def service() -> Any:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Service.foreign_refused.clear()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/answer"
    httpd.shutdown()
    httpd.server_close()


def test_http_target_on_the_fault_matrix(corpus, key, scen, tmp_path: Path, service: str) -> None:
    spec = parse_target(service, "my-service", "2.0", {"api_token": "tok-SECRET-123"})
    out, r = _run(corpus, key, scen, tmp_path, spec)
    assert r.complete
    recs = _check_layers(out, key)
    assert set(recs.model) == {"my-service"}
    # every record's service tried another session's id: always refused
    assert _Service.foreign_refused and set(_Service.foreign_refused) == {403}
    man = archive.read_manifest(out)
    assert man["target"]["ref"] == "local" and man["target"]["version"] == "2.0"
    assert man["target"]["settings"]["api_token"] == "(secret: not stored)"
    for f in out.iterdir():  # no secret and no host:port in any file of the run folder
        text = f.read_bytes()
        assert b"tok-SECRET-123" not in text and service.encode() not in text, f


def test_tool_server_refuses_other_sessions_and_describes_itself(corpus, scen) -> None:
    from layerlab.harness.prepare import prepare

    task = corpus.tasks[0]
    tools = ToolBox(task, prepare(corpus, scen["clean"]), "strict")
    server = ToolServer()
    try:
        with urllib.request.urlopen(f"{server.url}/openapi.json", timeout=5) as resp:
            api = json.loads(resp.read())
        assert api["openapi"].startswith("3.") and {"/search", "/open_document"} <= set(
            api["paths"]
        )

        def post(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            req = urllib.request.Request(f"{server.url}{path}", json.dumps(body).encode(),
                                         method="POST")  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        request = TargetRequest(tools)
        body = {"session_id": request.session_id, "query": task.question}
        assert post("/search", body)[0] == 403  # not in flight yet
        with server.serving(request):
            code, obs = post("/search", body)
            assert code == 200 and obs["status"] == "ok" and obs["results"]
            assert post("/search", {**body, "session_id": "s-ffffffff"}) == (
                403, {"error": "session_id is not that of a record in flight"})  # fmt: skip
            assert post("/search", {**body, "top_k": 99})[1]["error"]["code"] == "invalid_call"
            assert post("/nope", body)[0] == 404
        assert post("/search", body)[0] == 403  # no longer in flight
        assert [c.outcome for c in tools.calls] == ["ok", "invalid"]
    finally:
        server.close()


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("foo:bar:baz", "unknown kind 'foo'"),
        ("python:no_such_module_x:f", "no module named 'no_such_module_x'"),
        ("python:user_targets:nothing", "has no attribute 'nothing'"),
        ("python:user_targets:not_callable", "is not callable"),
        ("http://", "expected an http(s) URL"),
        ("python:user_targets", "expected python:MODULE:ATTR"),
        ("http://me:pw@localhost:8000/a", "carries credentials"),
        ("http://127.0.0.1:9/answer", "nothing answers there"),
    ],
)
def test_bad_target_specs_are_one_line_exit_2(
    spec: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(["run", "live", "--target", spec, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and says in err, err
    assert "pw" not in err or "me:pw" not in err  # credentials are never echoed
    assert not out.exists()


def test_target_and_model_together_are_refused(tmp_path: Path, capsys) -> None:
    code = main(["run", "live", "--target", "python:user_targets:extractive", "-m",
                 "layerlab/extractive", "--out", str(tmp_path / "r")])  # fmt: skip
    assert code == 2 and "--target replaces -m/--model" in capsys.readouterr().err


def test_cli_target_run_provenance_free_text_and_resume(tmp_path: Path, capsys) -> None:
    out, log = tmp_path / "run", tmp_path / "samples.jsonl"
    args = ["run", "live", "--target", "python:user_targets:free_text", "--target-name", "prose",
            "--target-version", "0.3", "--target-setting", "api_key=sk-DONOTSTORE",
            "--target-setting", "top_k=3", "--tasks", ",".join(TASKS), "--scenario", "clean",
            "--scenario", "stale_index", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main([*args, "--sample-log", str(log)]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "target: prose 0.3 (python: user_targets:free_text), the system under test" in said
    assert json.loads((out / "results.json").read_text())["target"]["name"] == "prose"
    html = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(html)]) == 0
    page = html.read_text()
    assert "prose 0.3 (python: user_targets:free_text), the system under test" in page
    man = archive.read_manifest(out)
    t = man["target"]
    assert man["models"] == ["target/prose"]
    assert (t["kind"], t["name"], t["version"], t["ref"]) == ("python", "prose", "0.3",
                                                              "user_targets:free_text")  # fmt: skip
    assert t["settings"] == {"api_key": "(secret: not stored)", "top_k": "3"}
    assert len(t["settings_sha256"]) == 64 and t["table_sha256"]
    for f in out.iterdir():
        assert b"sk-DONOTSTORE" not in f.read_bytes(), f
    table = pd.read_parquet(out / agentlog.TARGET_TABLE)
    assert set(table.reply) == {"free_text"}  # labelled as such, never passed off as structured
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert {e["reply_format"] for e in entries} == {"free_text"}
    assert all(e["tool_calls"] for e in entries)
    recs = pd.read_parquet(out / "records.parquet")
    assert recs[recs.scenario == "clean"].success.all()  # ids cited in prose are parsed
    # resume: nothing left to do, nothing re-run; another version is another run
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err
    assert archive.read_manifest(out)["run_id"] == man["run_id"]
    other = [a if a != "0.3" else "0.4" for a in args]
    assert main(other) == 1 and "already holds a run" in capsys.readouterr().err


def test_a_failing_target_is_a_provider_error(corpus, key, scen, tmp_path: Path) -> None:
    out, r = _run(corpus, key, {"clean": scen["clean"]}, tmp_path, "python:user_targets:broken")
    recs = pd.read_parquet(out / "records.parquet")
    assert set(recs.diagnostic) == {"provider_error"} and not recs.safe_resolution.any()
    assert r.over_error_rate == ("target/broken",)


def test_reply_reading() -> None:
    known = ["hr-05-b", "hr-05-a", "finance-01~fabrikam"]
    out = read_reply("It is 12 months (hr-05-b).", known)
    assert out.format == "free_text" and out.out.citations == ("hr-05-b",)
    assert out.out.answer == "It is 12 months ."
    js = read_reply(
        '{"status": "answered", "answer": "12 months", "citations": ["hr-05-b"]}', known
    )
    assert js.format == "structured" and js.out.answer == "12 months"
    assert read_reply({"answer": "", "citations": []}, known).out.status == "abstained"
    assert read_reply(42, known).failure == "malformed_reply"
    assert (
        read_reply({"status": "answered", "citations": ["x"]}, known).failure == "malformed_reply"
    )


def test_target_spec_names_and_run_config(corpus, tmp_path: Path) -> None:
    from layerlab.harness import runconfig

    with pytest.raises(TargetError, match="--target-name"):
        parse_target("python:a.b:c", name="bad name!")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("target: {spec: 'python:user_targets:extractive', version: '1'}\nlimit: 2\n")
    spec = runconfig.load_run_config(cfg, list(load_scenarios()), ["strict", "repair"], [])
    (group,) = runconfig.plan(spec, ["clean"], corpus.tasks)
    assert group.config.models == ("target/extractive",) and group.config.target.version == "1"
    cfg.write_text("target: {spec: 'ftp:x'}\nmodels: [{model: layerlab/extractive}]\n")
    with pytest.raises(Exception, match="target") as exc:
        runconfig.load_run_config(cfg, ["clean"], ["strict"], [])
    assert "unknown kind 'ftp'" in str(exc.value)


def test_a_plugin_guard_runs_with_a_target_and_gets_its_table10_row(
    site: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A team's own guard (an installed plug-in) on its own target: the run takes the arm, and
    Table 10's builder takes the target archive."""
    run = tmp_path / "run"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from layerlab.cli import main; "
        "sys.exit(main(sys.argv[2:]))"
    )
    res = _python(code, site, str(FIXTURES), "run", "live", "--target",
                  "python:user_targets:extractive", "--mitigation", "strict", "--mitigation",
                  "toy_guard", "--limit", "16", "--out", str(run), "--no-progress",
                  "--cache-dir", str(tmp_path / "cache"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert archive.read_manifest(run)["mitigations"] == ["strict", "toy_guard"]
    t10 = _python(_TABLE10, site, str(run))
    assert t10.returncode == 0, t10.stderr
    row = json.loads(t10.stdout.split("ROW ", 1)[1])
    assert row["layer(s)"] == "completeness" and row["target scenario(s)"] == "partial_timeout"

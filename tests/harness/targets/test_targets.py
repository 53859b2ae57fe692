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
from layerlab.harness.targets.toolserver import MAX_BODY, ToolServer
from layerlab.harness.tools import TOOLS_VERSION, ToolBox
from tests.test_plugins import _TABLE10, _python, site  # noqa: F401  (site: a fixture)

FIXTURES = Path(__file__).parents[2] / "fixtures"
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


@pytest.fixture(scope="module")
def scen() -> dict[str, Any]:
    return load_scenarios()


def _run(corpus, key, scen, tmp: Path, target: Any, mitigations: tuple[str, ...] | None = None,
         **kw: Any) -> tuple[Path, live.LiveResult]:  # fmt: skip
    out = tmp / "run"
    arms = {} if mitigations is None else {"mitigations": mitigations}
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=target, **arms)
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
    # a failed tool call reaches a LangChain retriever as a ToolException carrying the code
    got = _seen_by_target(user_targets.SEEN)
    assert {"denied", "unavailable", "invalid_payload"} <= got["codes"], got["codes"]
    assert got["foreign"]
    # the documents say the tool's status; a partial result's error is {code, message}
    partial = [s["obs"] for s in user_targets.SEEN if s["obs"]["status"] == "partial"]
    assert partial and all(r["tool_error"]["code"] == "timeout" for o in partial
                           for r in o["results"])  # fmt: skip


def _post(url: str, body: Any, token: str | None = None,
          raw: bytes | None = None) -> tuple[int, dict[str, Any]]:  # fmt: skip
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class _Service(BaseHTTPRequestHandler):
    """A user's RAG service in 'another language': it only speaks HTTP to the tool server."""

    foreign_refused: list[tuple[int, int, int]] = []  # noqa: RUF012
    tokens: list[str] = []  # noqa: RUF012

    def log_message(self, *a: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        from layerlab.corpus.extract import extract

        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        tools, token = q["tools_url"], q["tools_token"]
        self.tokens.append(token)
        mine = {"session_id": q["session_id"], "query": q["question"], "top_k": 3}
        # what another local process could try: no token, a guessed one, another session's id
        self.foreign_refused.append((
            _post(f"{tools}/search", mine)[0],
            _post(f"{tools}/search", mine, "s-00000000-guessed")[0],
            _post(f"{tools}/search", {**mine, "session_id": "s-00000000"}, token)[0],
        ))  # fmt: skip
        _, obs = _post(f"{tools}/search", mine, token)
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
    _Service.tokens.clear()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/answer"
    httpd.shutdown()
    httpd.server_close()


def test_http_target_on_the_fault_matrix(corpus, key, scen, tmp_path: Path, service: str) -> None:
    spec = parse_target(service, "my-service", "2.0", {"api_token": "tok-SECRET-123"})
    out, r = _run(corpus, key, scen, tmp_path, spec)
    assert r.complete
    recs = _check_layers(out, key)
    assert set(recs.model) == {"my-service"}
    # every record's service called without a token, with a guessed one, with another
    # session's id: always refused (401, 403, 403), and none of those calls reached a record
    assert _Service.foreign_refused and set(_Service.foreign_refused) == {(401, 403, 403)}
    assert len(set(_Service.tokens)) == len(_Service.tokens) == len(recs)  # one per record
    assert all(len(t) >= 32 for t in _Service.tokens)
    table = pd.read_parquet(out / agentlog.TARGET_TABLE)
    assert set(table.tool_calls) == {1}  # only the service's own call of each record
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
        assert api["info"]["version"] == TOOLS_VERSION

        request = TargetRequest(tools)
        body = {"session_id": request.session_id, "query": task.question}
        url = f"{server.url}/search"
        with server.serving(request) as (tools_url, token):
            assert tools_url == server.url and len(token) >= 32
            assert _post(url, body)[0] == 401  # no token
            assert _post(url, body, "not-the-token")[0] == 403
            code, obs = _post(url, body, token)
            assert code == 200 and obs["status"] == "ok" and obs["results"]
            assert _post(url, {"query": task.question}, token)[0] == 200  # the token says who
            assert _post(url, {**body, "session_id": "s-ffffffff"}, token) == (
                403, {"error": "session_id is not that of the token's record"})  # fmt: skip
            assert _post(url, {**body, "top_k": 99}, token)[1]["error"]["code"] == "invalid_call"
            assert _post(f"{server.url}/nope", body, token)[0] == 404
            big = b'{"query": "' + b"x" * (MAX_BODY + 1) + b'"}'
            assert _post(url, None, token, raw=big)[0] == 413
            assert _post(url, None, token, raw=b"[1, 2]")[0] == 400
            with server.serving(request) as (_, second):  # the same session twice in flight
                assert second != token and _post(url, body, second)[0] == 200
        assert _post(url, body, token)[0] == 403  # no longer in flight
        # the refused calls never reached the record: only the four accepted ones did
        assert [c.outcome for c in tools.calls] == ["ok", "ok", "invalid", "ok"]
    finally:
        server.close()


def test_tool_server_backlog_and_disconnects(corpus, scen, capfd) -> None:
    """Many callers at once are all accepted (the backlog holds them); callers that hang up
    before their answer are one counted line, not a traceback each."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    from layerlab.harness.prepare import prepare

    server = ToolServer()
    try:
        sock = server._httpd.socket
        assert server._httpd.request_queue_size >= 1024 and sock.getsockopt(
            socket.SOL_SOCKET, socket.SO_ACCEPTCONN)  # fmt: skip
        task = corpus.tasks[0]
        request = TargetRequest(ToolBox(task, prepare(corpus, scen["clean"]), "strict"))
        with server.serving(request) as (url, token):
            with ThreadPoolExecutor(64) as pool:
                codes = list(pool.map(lambda _: _post(f"{url}/search", {"query": "leave"},
                                                       token)[0], range(256)))  # fmt: skip
            assert codes == [200] * 256
            for _ in range(5):  # send a call and hang up at once
                with socket.create_connection(("127.0.0.1", server._httpd.server_address[1])) as c:
                    data = json.dumps({"query": "leave " * 2000}).encode()
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00"
                                 b"\x00\x00\x00\x00")  # close with RST
                    c.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                              + token.encode() + b"\r\nContent-Length: "
                              + str(len(data)).encode() + b"\r\n\r\n" + data)  # fmt: skip
            import time

            for _ in range(100):
                if server.disconnects >= 5:
                    break
                time.sleep(0.05)
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert server.disconnects >= 1
    (line,) = [x for x in err.splitlines() if x.startswith("tool server:")]
    assert f"{server.disconnects} caller(s) disconnected" in line


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
    # a target run's own lines only: no reply cache, no provider calls or cache hits, and the
    # error line counts the records the complete line counts
    n = len(archive.read_records(out / archive.ARCHIVE))
    assert "reply cache" not in said and "provider calls" not in said and "cache hit" not in said
    assert f"complete: {n} records, each one asked of the target" in said.splitlines()
    assert (f"provider errors (the target raised or timed out): target/prose 0 of {n} records "
            "(0.0%)") in said.splitlines()  # fmt: skip
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


def test_a_target_that_raises_after_a_refusal_is_a_counted_error(
    corpus, key, scen, tmp_path: Path
) -> None:
    """A target's exception is a provider error even when a mitigation refused the call it
    made (never the refusal's safe abstention), and the run's counts cover every record."""
    two = {s: scen[s] for s in ("clean", "permission_denied")}
    out, r = _run(corpus, key, two, tmp_path, "python:user_targets:crash_on_error",
                  mitigations=("strict", "access_abstention"))  # fmt: skip
    recs = pd.read_parquet(out / "records.parquet")
    denied = recs[recs.scenario == "permission_denied"]
    assert set(denied.diagnostic) == {"provider_error"}, denied.diagnostic
    assert not denied.safe_resolution.any() and not denied.abstained.any()
    assert "refused" in set(denied.stage)  # the arm refused; the target's crash is what counts
    assert recs[recs.scenario == "clean"].success.all()
    errors = archive.read_manifest(out)["errors"]["target/crash_on_error"]
    assert errors == {"called": len(recs), "provider_error": len(denied), "malformed_reply": 0}
    assert r.over_error_rate == ("target/crash_on_error",)
    assert (f"provider errors (the target raised or timed out): target/crash_on_error "
            f"{len(denied)} of {len(recs)} records") in r.message  # fmt: skip


def _walk(roots: dict[str, Any], depth: int = 8) -> list[tuple[str, Any]]:
    """Every object reachable from ``roots`` by attribute paths (``dir`` and ``vars`` names,
    items of containers, closures' cells, bound methods' ``__self__``/``__func__``): what a
    target's code can get at without going looking in modules, classes or the interpreter
    (``__globals__``, ``gc``). Dunder names other than those are the type's, not the object's."""
    import types
    import warnings

    follow = {"__closure__", "cell_contents", "__self__", "__func__", "__wrapped__", "__dict__",
              "__slots__", "__weakref__", "__defaults__", "__kwdefaults__"}  # fmt: skip
    atoms = (str, bytes, int, float, bool, type(None), types.ModuleType, type, types.CodeType)
    seen: set[int] = set()
    found: list[tuple[str, Any]] = []
    stack = [(v, k, 0) for k, v in roots.items()]
    while stack:
        obj, path, d = stack.pop()
        if id(obj) in seen or d > depth:
            continue
        seen.add(id(obj))
        found.append((path, obj))
        if isinstance(obj, atoms):
            continue
        kids: list[tuple[Any, str]] = []
        if isinstance(obj, dict):
            kids += [(v, f"{path}[{k!r}]") for k, v in obj.items()] + [(k, path) for k in obj]
        elif isinstance(obj, (list, tuple, set, frozenset)):
            kids += [(v, f"{path}[{i}]") for i, v in enumerate(obj)]
        names = {n for n in dir(obj) if not n.startswith("__") or n in follow}
        try:
            names |= set(vars(obj))
        except TypeError:
            pass
        for name in sorted(names):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # pydantic's deprecated instance attributes
                    kids.append((getattr(obj, name), f"{path}.{name}"))
            except Exception:  # noqa: S112 - an attribute that cannot be read leads nowhere
                continue
        stack += [(v, p, d + 1) for v, p in kids]
    return found


def test_a_target_request_reaches_no_scenario_and_no_index(corpus, scen) -> None:
    """No attribute path from what a target gets (the request; a LangChain factory's retriever
    and tools) leads to the scenario, its name, its index or the ToolBox."""
    from layerlab.corpus.build import Corpus, Document
    from layerlab.faults.scenario import Scenario
    from layerlab.harness.prepare import PreparedScenario, prepare
    from layerlab.harness.targets.langchain import components

    task = corpus.tasks[0]
    prep = prepare(corpus, scen["stale_index"])
    tools = ToolBox(task, prep, "strict")
    request = TargetRequest(tools, {"top_k": "3"})
    retriever, search, open_document = components()
    roots = {"req": request, "retriever": retriever, "search": search, "open": open_document}
    found = _walk(roots)
    assert len(found) > 100  # the walk went somewhere
    private = (ToolBox, PreparedScenario, Scenario, Corpus, Document)
    leaks = [p for p, o in found if isinstance(o, private)]
    leaks += [p for p, o in found if isinstance(o, str) and "stale_index" in o]
    assert not leaks, leaks[:5]
    with pytest.raises(AttributeError):
        request._tools  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(TypeError):
        vars(request)
    # the tools still work through the request
    assert request.search(task.question)["status"] == "ok" and len(tools.calls) == 1


def test_a_copied_request_is_the_request(corpus, key, scen, tmp_path) -> None:
    """Frameworks deep-copy their inputs (Haystack's pipelines): a copy of the request works
    while its record runs (it is the request) and calls no tool after it."""
    import copy

    from layerlab.harness.prepare import prepare
    from layerlab.harness.targets.base import end_record

    tools = ToolBox(corpus.tasks[0], prepare(corpus, scen["clean"]), "strict")
    request = TargetRequest(tools, {"top_k": "3"})
    assert copy.copy(request) is request and copy.deepcopy([request])[0] is request
    assert copy.deepcopy(request).search(request.question)["status"] == "ok"
    end_record(request)
    with pytest.raises(RuntimeError, match="its record has ended"):
        copy.deepcopy(request).search("anything")
    import user_targets

    user_targets.SEEN.clear()
    _, r = _run(corpus, key, {"clean": scen["clean"]}, tmp_path, "python:user_targets:deep_copies")
    recs = pd.read_parquet(tmp_path / "run" / "records.parquet")
    assert r.complete and len(user_targets.SEEN) == len(recs) > 0  # every copy searched
    assert recs["exact_match"].all()


def test_a_kept_request_calls_no_tools_after_its_record(corpus, key, scen, tmp_path) -> None:
    import user_targets

    user_targets.KEPT.clear()
    _, r = _run(corpus, key, {"clean": scen["clean"]}, tmp_path, "python:user_targets:keeps")
    assert r.complete and user_targets.KEPT
    with pytest.raises(RuntimeError, match="its record has ended"):
        user_targets.KEPT[0].search("anything")

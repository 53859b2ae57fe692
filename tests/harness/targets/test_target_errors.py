"""Errors a team can fix (issue 42 item 1, issue 46 item 4): a target's or a store's exception
is said with its type, message and the team's own frame; the full traceback goes to the run's
private error log; a run that measured nothing fails; a resume after a fix works as the README
says (refused naming the code change, continued with --accept-code-change)."""

from __future__ import annotations

import json
import re
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from layerlab import archive
from layerlab.cli import main
from layerlab.harness.targets.failures import ERROR_LOG

ONE = ["--tasks", "hr-01-q1,hr-01-q2", "--scenario", "clean", "--no-progress"]
SECRET = "sk-abcdefghijklmnopqrstuvwx"

CRASHING = '''\
from layerlab.corpus.extract import extract


def answer(req):
    obs = req.search(req.question, top_k=3)
    top = obs["results"][0]
    value = extract(req.question, req.answer_kind, top["text"])
    return {"status": "answered", "answer": value, "citations": [top["doc_id"]]}
'''
FIXED = CRASHING.replace(
    '    top = obs["results"][0]\n',
    '    if obs["status"] not in ("ok", "partial") or not obs["results"]:\n'
    '        return {"status": "abstained", "reason": "no results"}\n'
    '    top = obs["results"][0]\n',
)
STORES = f'''\
import sys, time


class Good:
    def index(self, documents):
        self.docs = list(documents)

    def search(self, query, top_k):
        return [d.id for d in self.docs[:top_k]]


class FailIndex(Good):
    def index(self, documents):
        raise ConnectionError("cannot reach postgres://admin:hunter2pw@db:5432/vec {SECRET}")


class FailSearch(Good):
    def search(self, query, top_k):
        raise ConnectionError("vector db down, key {SECRET}")


class ExitIndex(Good):
    def index(self, documents):
        sys.exit(0)


class ExitSearch(Good):
    def search(self, query, top_k):
        sys.exit(0)


class InterruptIndex(Good):
    def index(self, documents):
        raise KeyboardInterrupt


class Slow(Good):
    timeout = 0.05

    def search(self, query, top_k):
        time.sleep(0.5)
        return super().search(query, top_k)
'''
REPLIES = '''\
class Obj:
    pass


def an_object(req):
    return {"status": "answered", "answer": Obj(), "citations": []}


def a_set(req):
    return {"status": "answered", "answer": "45 days", "citations": {"pto-01-a"}}


def some_bytes(req):
    return {"status": "answered", "answer": b"45 days", "citations": []}
'''


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A team's folder (the current one, on the path), its modules forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("team_"):
            del sys.modules[name]


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(text)
    sys.modules.pop(name, None)  # a new process would import the file as it is now


def _live(*args: str) -> list[str]:
    return ["run", "live", *args]


def test_a_crashing_target_names_its_frame_and_count_and_resumes_after_the_fix(here, capsys):
    _write(here, "team_rag", CRASHING)
    out = here / "runs" / "mine"
    base = _live("--target", "python:team_rag:answer", "--out", str(out), "--limit", "4",
                 "--scenario", "clean", "--scenario", "missing_tool_output", "--no-progress")
    assert main(base) == 4
    o, e = capsys.readouterr()
    # per kind: the count and one example with the team's file:line
    kinds = [ln for ln in o.splitlines() if ln.startswith("  - KeyError:")]
    assert len(kinds) == 1, o
    assert re.search(r"KeyError: \d+ record\(s\), e\.g\. \S+: KeyError: 'results' at "
                     r"team_rag\.py:6 in answer$", kinds[0]), kinds[0]
    n = int(kinds[0].split()[2])
    assert n == 8  # missing_tool_output: 4 tasks x 2 arms, each a refused search
    assert f"full tracebacks: {out / ERROR_LOG}" in o
    last = e.strip().splitlines()[-1]
    assert ERROR_LOG in last and "--accept-code-change" in last and "a bug" not in e
    log = out / ERROR_LOG
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert text.count("Traceback (most recent call last)") == n
    assert 'top = obs["results"][0]' in text  # the full traceback, the team's line quoted
    assert ERROR_LOG not in json.dumps(archive.read_manifest(out))  # no archive file names it

    _write(here, "team_rag", FIXED)
    assert main([*base, "--resume", "--retry-errors"]) == 1
    _o, e = capsys.readouterr()
    assert re.search(r"made with other code: the target's module team_rag \(module_sha256 "
                     r"\w{12} → \w{12}\); to go on under the new code add --accept-code-change",
                     e), e
    assert main([*base, "--resume", "--retry-errors", "--accept-code-change"]) == 0
    o, _e = capsys.readouterr()
    m = archive.read_manifest(out)
    assert m["complete"] and m["errors"]["target/answer"]["provider_error"] == 0
    changes = m["target"]["code_changes"]
    assert len(changes) == 1 and len(changes[0]["records"]) == n
    assert all("/missing_tool_output/" in r for r in changes[0]["records"])
    assert changes[0]["code"]["target"]["module_sha256"] != m["target"]["code"]["module_sha256"]
    assert "full tracebacks" not in o  # nothing failed in this invocation
    # the same code again: no flag needed
    assert main([*base, "--resume"]) == 0
    capsys.readouterr()
    assert main(["archive", "check", str(out)]) == 0


def test_accept_code_change_only_with_resume(here, capsys):
    _write(here, "team_rag2", FIXED)
    out = here / "r"
    assert main(_live("--target", "python:team_rag2:answer", "--out", str(out), *ONE,
                      "--accept-code-change")) == 1  # fmt: skip
    assert "--accept-code-change: only with --resume" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("FailIndex", r"--retriever python:team_stores:FailIndex: index\(\) of \d+ documents "
                      r"failed \(ConnectionError: cannot reach postgres://\(secret: not stored\)"
                      r"@db:5432/vec \(secret: not stored\) at team_stores\.py:14 in index\)$"),
        ("ExitIndex", r"the store called sys\.exit\(0\) \(SystemExit\) while it was made or "
                      r"indexed"),
        ("ExitSearch", r"the store called sys\.exit\(0\) \(SystemExit\) in search\("),
        ("InterruptIndex", r"the store raised KeyboardInterrupt while it was made or indexed"),
    ],
)  # fmt: skip
def test_a_store_that_cannot_serve_is_one_line_of_its_own(here, capsys, store, said):
    _write(here, "team_stores", STORES)
    _write(here, "team_rag3", FIXED)
    out = here / "r"
    rc = main(_live("--target", "python:team_rag3:answer", "--out", str(out), *ONE,
                    "--retriever", f"python:team_stores:{store}"))  # fmt: skip
    o, e = capsys.readouterr()
    lines = e.strip().splitlines()
    assert rc == 1 and len(lines) == 1, (rc, e)  # not 0, not 130 (no Ctrl-C was pressed)
    assert re.search(said, lines[0]), lines[0]
    assert "a bug" not in e and "Traceback" not in o + e and SECRET not in o + e
    if store.endswith("Index"):  # made and indexed before anything is written
        assert not out.exists()
    else:  # a search is asked when its record is made: the records before it are kept
        assert "records kept as a partial archive" in lines[0]
        assert (out / "manifest.json").exists()


def test_a_store_failing_every_search_fails_the_run_and_its_tracebacks_are_logged(here, capsys):
    _write(here, "team_stores", STORES)
    _write(here, "team_rag4", FIXED)
    out = here / "r"
    rc = main(_live("--target", "python:team_rag4:answer", "--out", str(out), *ONE,
                    "--retriever", "python:team_stores:FailSearch"))  # fmt: skip
    o, e = capsys.readouterr()
    assert rc == 4, e
    assert SECRET not in o + e and SECRET not in (out / ERROR_LOG).read_text()
    assert re.search(r"store --retriever python:team_stores:FailSearch: (\d+) of \1 searches "
                     r"failed", e), e  # fmt: skip
    assert "at team_stores.py:19 in search" in o
    assert "team_stores.py\", line 19, in search" in (out / ERROR_LOG).read_text()


def test_a_store_search_has_a_timeout(here):
    from layerlab.corpus import build
    from layerlab.system.retrieval import external

    _write(here, "team_stores", STORES)
    docs = build.load().documents[:5]
    r = external.make("python:team_stores:Slow", docs)
    ranking = r.search(["how long?"], k=2)
    assert ranking.error(0) == "search('how long?', top_k=2) timeout: no reply within 0.05 s"
    assert external.store_timeout(type("S", (), {"timeout": "soon"})()) == external.STORE_TIMEOUT_S


@pytest.mark.parametrize(
    ("fn", "why"),
    [("an_object", "a value JSON cannot encode (Object of type Obj"),
     ("a_set", "citations is of type set"),
     ("some_bytes", "a value JSON cannot encode (Object of type bytes")],
)  # fmt: skip
def test_a_reply_json_cannot_encode_is_malformed_and_fails_the_run(here, capsys, fn, why):
    _write(here, "team_replies", REPLIES)
    out, log = here / "r", here / "samples.jsonl"
    args = _live("--target", f"python:team_replies:{fn}", "--out", str(out), *ONE,
                 "--sample-log", str(log))  # fmt: skip
    assert main(args) == 4  # every reply malformed: the run measured nothing
    _o, e = capsys.readouterr()
    assert "malformed_reply 4 of 4 records" in e and "a bug" not in e
    entries = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert len(entries) == 4 and all(why in x["target_error"] for x in entries)
    before = (out / "records.parquet").read_bytes()
    assert main([*args, "--resume"]) == 4  # every record done: nothing fails, nothing re-made
    _o, e = capsys.readouterr()
    assert "a bug" not in e and (out / "records.parquet").read_bytes() == before


class _Service(BaseHTTPRequestHandler):
    mode = "ok"

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.mode == "slow":
            import time

            time.sleep(1.5)
        if self.mode == "500":
            body = f"upstream failed, api_key={SECRET}".encode()
            self.send_response(500)
        else:
            body = b'{"status": "answered", "answer": '
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            if self.mode == "slowbody":  # the headers at once, the body past the timeout
                import time

                self.wfile.write(body[:5])
                self.wfile.flush()
                time.sleep(1.5)
            self.wfile.write(body)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("mode", "said"),
    [("slow", "timeout: no reply within 0.5 s"),
     ("slowbody", "timeout: no reply within 0.5 s"),  # not "TimeoutError: timed out"
     ("500", "the service answered HTTP 500: upstream failed, api_key=(secret: not stored)"),
     ("broken", "the service said application/json but sent no valid JSON (Expecting value")],
)  # fmt: skip
def test_an_http_target_says_what_failed(here, capsys, mode, said):
    handler = type("H", (_Service,), {"mode": mode})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/answer"
        out, log = here / "r", here / "samples.jsonl"
        main(_live("--target", url, "--target-setting", "timeout=0.5", "--out", str(out), *ONE,
                   "--sample-log", str(log)))  # fmt: skip
        o, e = capsys.readouterr()
    finally:
        httpd.shutdown()
    errors = {json.loads(ln).get("target_error") for ln in log.read_text().splitlines()}
    assert errors == {said} or all(x and x.startswith(said) for x in errors), errors
    assert SECRET not in o + e + log.read_text()


def test_a_user_module_needing_a_missing_extra_names_its_install_line(here, monkeypatch):
    from layerlab._code import import_attr

    _write(here, "team_needs", "import mcp\n\ndef answer(req):\n    return 'x'\n")
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=r"'team_needs' needs mcp \(pip install 'layerlab\[mcp\]'\)"):
        import_attr("team_needs:answer", "--target python:team_needs:answer", ValueError)

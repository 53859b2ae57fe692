"""The target's code in the run identity (issue 31, item 4; layerlab/harness/targets/identity.py):
module and package hashes for Python/LangChain targets, the reported version for an HTTP service
(else a warning), in the manifest and the run id; ``--resume`` across an edited target is
refused."""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from layerlab.cli import main
from layerlab.harness.targets import parse_target
from layerlab.harness.targets.identity import NOT_RECORDED, fingerprint, with_code

TARGET = textwrap.dedent(
    """
    from layerlab.corpus.extract import extract


    def answer(req):
        obs = req.search(req.question, top_k=3)
        for top in obs.get("results") or []:
            span = extract(req.question, req.answer_kind, top["text"])
            if span is not None:
                return {"status": "answered", "answer": span, "citations": [top["doc_id"]]}
        return {"status": "abstained", "reason": "no answer"}
    """
)


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package ``teamrag_<n>`` (fresh name: nothing cached in sys.modules) with a helper."""
    name = f"teamrag_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "app.py").write_text(TARGET)
    (pkg / "helpers.py").write_text("TOP_K = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield pkg
    for m in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[m]


def test_python_fingerprint_follows_the_module_and_its_package(team: Path) -> None:
    spec = parse_target(f"python:{team.name}.app:answer")
    first = fingerprint(spec)
    assert first["module"] == f"{team.name}.app" and first["package"] == team.name
    assert len(first["module_sha256"]) == 64 and len(first["package_sha256"]) == 64
    (team / "helpers.py").write_text("TOP_K = 5\n")  # another file of the package
    second = fingerprint(spec)
    assert second["module_sha256"] == first["module_sha256"]
    assert second["package_sha256"] != first["package_sha256"]
    (team / "app.py").write_text(TARGET + "\n# edited\n")
    third = fingerprint(spec)
    assert third["module_sha256"] != first["module_sha256"]
    coded = with_code(spec)
    assert coded.manifest()["code"] == third and coded.run_identity()["code"] == third
    assert coded.identity() == spec.identity()  # the per-record request hash is unchanged
    assert "TOP_K" not in json.dumps(coded.manifest())  # hashes only, never code


class _Service(BaseHTTPRequestHandler):
    version: Any = None

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/version" or self.version is None:
            self.send_response(404)
            self.end_headers()
            return
        body = json.dumps({"version": self.version}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("version", ["2.4.1+git.abc123", None])
def test_http_fingerprint_is_the_reported_version_or_a_warning(version: str | None) -> None:
    handler = type("H", (_Service,), {"version": version})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = parse_target(f"http://127.0.0.1:{server.server_address[1]}/answer")
        said: list[str] = []
        coded = with_code(spec, said.append)
    finally:
        server.shutdown()
        server.server_close()
    if version is None:
        assert dict(coded.code) == {"code": NOT_RECORDED}
        assert len(said) == 1 and "its code is not recorded in the run id" in said[0]
    else:
        assert dict(coded.code) == {"service_version": version} and said == []


def test_resume_across_an_edited_target_is_refused(team: Path, tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "run"
    args = ["run", "live", "--target", f"python:{team.name}.app:answer", "--tasks", "finance-01-q1",
            "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    code = manifest["target"]["code"]
    assert code["module"] == f"{team.name}.app" and len(code["package_sha256"]) == 64
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # unchanged: the same run, nothing to do
    assert "2 of 2 records done" in capsys.readouterr().err
    (team / "helpers.py").write_text("TOP_K = 9\n")
    before = (out / "records.parquet").read_bytes()
    assert main([*args, "--resume"]) == 1  # refused, naming the change and the flag
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made with other code: the target's package" in err, err
    assert "package_sha256" in err and "--accept-code-change" in err, err
    assert (out / "records.parquet").read_bytes() == before  # nothing touched

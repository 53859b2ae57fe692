"""The target snippets of docs/targets.md ("Test your own RAG system"), executed: each target
kind's code block runs as a target on every scenario under every mitigation arm of the committed spec, without
an error (no provider error, no malformed reply; the HTTP block's curl calls all succeed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from layerlab import paths
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.mitigations import load_mitigations

TARGETS_DOC = Path(__file__).parents[3] / "docs" / "targets.md"  # the targets page of the docs
TASKS = ("finance-01-q1",)


def _blocks() -> dict[str, str]:
    """The section's code blocks by the kind their first line names."""
    text = TARGETS_DOC.read_text(encoding="utf-8")
    assert text.startswith("# Test your own RAG system\n"), "docs/targets.md lost its title"
    section = text.split("\n## ", 1)[0]  # the page, up to a subsection of its own
    out: dict[str, str] = {}
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", section, flags=re.S):
        kind = re.match(r"# --target (python|langchain|http)", body)
        assert kind, f"a docs/targets.md target block names no kind: {body[:60]!r}"
        out[kind.group(1)] = body
        assert lang == ("bash" if kind.group(1) == "http" else "python")
    assert set(out) == {"python", "langchain", "http"}, sorted(out)
    return out


# what the snippets leave to the user: their LLM, their prompt
PREAMBLE = {
    "python": "def my_llm(question, text):\n    return text.split('.')[0]\n\n",
    "langchain": (
        "from langchain_core.prompts import ChatPromptTemplate\n"
        "from langchain_core.runnables import RunnableLambda as _L\n"
        "prompt = ChatPromptTemplate.from_template('{context}\\n\\nQuestion: {question}')\n"
        "llm = _L(lambda p: \"I don't know\")\n\n"
    ),
}


def _run(corpus, key, tmp: Path, target: str) -> tuple[pd.DataFrame, live.LiveResult]:
    scen = load_scenarios()
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=TASKS, target=target,
                          mitigations=tuple(load_mitigations().arms))  # fmt: skip
    r = live.run_live(corpus, key, scen, cfg, tmp / "run",
                      scenario_hash=spec_hash(paths.SCENARIO_SPEC), cache_dir=tmp / "cache")  # fmt: skip
    return pd.read_parquet(tmp / "run" / "records.parquet"), r


def _clean(recs: pd.DataFrame, r: live.LiveResult) -> None:
    arms = load_mitigations().arms
    assert r.complete and len(recs) == len(load_scenarios()) * len(arms) * len(TASKS)
    assert set(recs.mitigation) == set(arms)
    bad = recs[recs.diagnostic.isin(["provider_error", "malformed_reply"])]
    assert bad.empty, bad[["scenario", "mitigation", "diagnostic"]].to_string()
    assert not r.over_error_rate


@pytest.mark.parametrize("kind", ["python", "langchain"])
def test_a_docs_python_snippet_runs_under_every_arm(
    kind: str, corpus, key, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = f"docs_{kind}"
    (tmp_path / f"{mod}.py").write_text(PREAMBLE[kind] + _blocks()[kind], encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    attr = "answer" if kind == "python" else "factory"
    recs, r = _run(corpus, key, tmp_path, f"{kind}:{mod}:{attr}")
    _clean(recs, r)
    if kind == "python":  # it answers the clean question from the evidence
        assert recs[recs.scenario == "clean"].answered.any()


def test_the_docs_http_snippet_runs_under_every_arm(corpus, key, tmp_path: Path) -> None:
    """A service that runs the page's shell block for every question it gets (with the
    request's tools_url, tools_token and session_id) and then abstains."""
    script = _blocks()["http"]
    runs: list[tuple[int, str, str]] = []

    class Service(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            env = {**os.environ, "tools_url": q["tools_url"], "tools_token": q["tools_token"],
                   "session_id": q["session_id"]}  # fmt: skip
            p = subprocess.run(["bash", "-e", "-c", script], env=env, capture_output=True,
                               text=True, timeout=30, check=False)  # fmt: skip
            runs.append((p.returncode, p.stdout, p.stderr))
            data = json.dumps({"status": "abstained", "reason": "docs snippet"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        recs, r = _run(corpus, key, tmp_path, f"http://127.0.0.1:{httpd.server_address[1]}/answer")
    finally:
        httpd.shutdown()
        httpd.server_close()
    _clean(recs, r)
    assert len(runs) == len(recs)
    for code, out, err in runs:
        assert code == 0, err
        first = json.JSONDecoder().raw_decode(out)[0]  # the search's observation
        assert first["status"] in ("ok", "partial", "error", "refused"), out[:200]

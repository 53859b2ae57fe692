"""Archived records show the evidence their reader saw, recomputed from the corpus and checked
against what the archive kept (issue 35 item 2): the prompt hash of a single-call record, the
tool calls of a target's or agent's; never a reply, never the answer key."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from layerlab import archive, paths
from layerlab.corpus import build as corpus_mod
from layerlab.reporting.records import evidence, viewer

QWEN = paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b"
PIPELINE = paths.USER_PIPELINES / "my-rag-chain"
AGENT = paths.LOCAL_MODEL_AGENT / "qwen2.5-coder-1.5b"


def _records(folder: Path) -> list[archive.Record]:
    return archive.read_records(folder / archive.ARCHIVE)


def _blob(html: str, element: str) -> Any:
    text = html.split(f'id="{element}">')[1].split("</script>")[0]
    return json.loads(text.replace("<\\/", "</"))


@pytest.fixture(scope="module")
def qwen_page() -> str:
    return viewer.build([QWEN])


@pytest.fixture(scope="module")
def qwen() -> evidence.Recomputer:
    return evidence.Recomputer(archive.read_manifest(QWEN))


def _stale_grounded_wrong() -> list[archive.Record]:
    return [
        r
        for r in _records(QWEN)
        if r.scenario == "stale_index" and r.grounded and not r.success and r.answered
    ]


def test_the_recomputed_prompt_hash_is_the_committed_records(qwen: evidence.Recomputer) -> None:
    recs = _stale_grounded_wrong()
    assert len(recs) >= 100  # the real model's stale-index grounded false positives
    for r in recs:
        path = qwen.path(r.scenario, r.mitigation, r.task_id)
        assert path["prompt_hash"] == r.prompt_hash, r.task_id
        assert qwen.record(r.__dict__)["status"] == "match"
    # the whole archive agrees: every prompt, and every record that ended before a reader
    got = {qwen.record(r.__dict__)["status"] for r in _records(QWEN)}
    assert got == {"match"}


def test_an_archive_records_page_shows_the_recomputed_path_and_no_reply(qwen_page: str) -> None:
    rows, shared = _blob(qwen_page, "records"), _blob(qwen_page, "evidence")
    assert shared["label"] == evidence.LABEL == "recomputed from the corpus"
    row = next(
        r for r in rows if r["scenario"] == "stale_index" and r["outcome"] == "grounded_wrong"
    )
    assert "reply" not in row and "parsed" not in row  # no reply text exists
    x = row["recomputed"]
    assert x["status"] == "match" and "prompt_hash" in shared["checks"][x["check"]]
    path = shared["paths"][x["path"]]
    reader = shared["parts"][path["reader"]]
    faults = shared["parts"][path["faults"]]
    assert "serve_superseded()" in faults and reader["evidence"]
    assert all(e["status"] != "current" for e in reader["evidence"])  # what misled the model
    text = shared["texts"][reader["evidence"][0]["text"]]
    corpus = corpus_mod.load()
    assert text in {d.text for d in corpus.documents}  # the corpus's own words
    assert path["accepted"] is not None and path["received"] is not None
    # the page's script renders it, labelled; the old "no evidence is kept" line is for
    # records without a recomputation only
    js = qwen_page.split("<script>\n", 1)[1]
    assert "recomputed(r.recomputed, r)" in js and "EV.label" in js
    assert "recomputed from the corpus" in qwen_page.split("<script>")[0]  # the page's banner


def test_the_notebook_explorer_shows_the_same_path_when_a_record_is_shown() -> None:
    from layerlab.reporting.records import explore

    rows = explore.select(explore.load_rows(QWEN), scenario="stale_index", outcome="grounded_wrong")
    assert rows and all("recomputed" not in r for r in rows)  # computed when shown, not loaded
    html = explore.record_html(rows[0])
    plain = unescape(re.sub(r"<[^>]+>", " ", html))
    assert evidence.LABEL in plain and "what reached the reader" in plain
    assert "equals the record's prompt_hash" in plain and "raw reply" not in plain
    assert "no reply is kept" in plain and "serve_superseded()" in plain
    assert "as received (before the contract)" in plain and "after the contract" in plain
    r = rows[0]
    command = (f"layerlab explore --task {r['task_id']} --scenario stale_index --mitigation "
               f"{r['mitigation']} --retriever tfidf_domain_validity")  # fmt: skip
    assert command in plain  # the same path in a terminal


@pytest.mark.skipif(shutil.which("node") is None, reason="no node here")
def test_the_page_script_renders_the_recomputed_path(qwen_page: str, tmp_path: Path) -> None:
    js = qwen_page.split("<script>\n", 1)[1].split("\n</script>", 1)[0]
    records, shared, options = (
        json.dumps(qwen_page.split(f'id="{e}">')[1].split("</script>")[0].replace("<\\/", "</"))
        for e in ("records", "evidence", "scenario-options")
    )
    stub = (
        f"const TEXTS = {{records: {records}, evidence: {shared}, 'scenario-options': {options}}};\n"
        "function el(id) { return {textContent: TEXTS[id] || '', innerHTML: '', value: '', "
        "options: [], addEventListener() {}, insertAdjacentHTML() {}, "
        "querySelector() { return null; }}; }\n"
        "const ELS = {};\n"
        "const document = {getElementById: (id) => (ELS[id] = ELS[id] || el(id)), "
        "addEventListener() {}};\nconst window = {addEventListener() {}, scrollTo() {}};\n"
        "const location = {hash: ''};\n"
    )
    tail = (
        "\nconst r = DATA.find(r => r.scenario === 'stale_index' && r.outcome === 'grounded_wrong');"
        "\nconsole.log(card(r));\n"
    )
    f = tmp_path / "card.js"
    f.write_text(stub + js + tail)
    out = subprocess.run(["node", str(f)], capture_output=True, text=True, timeout=120, check=True)
    plain = unescape(re.sub(r"<[^>]+>", " ", out.stdout))
    assert "recomputed from the corpus" in plain and "what reached the reader" in plain
    assert "serve_superseded()" in plain and "no reply is kept" in plain
    assert "superseded" in plain and "raw reply" not in plain
    assert "layerlab explore --task " in plain and "--retriever tfidf_domain_validity" in plain


def test_other_settings_than_recorded_are_said_not_shown() -> None:
    manifest = archive.read_manifest(QWEN)
    recs = [r for r in _records(QWEN) if r.reached_reader][:200]
    other = evidence.Recomputer({**manifest, "retriever": "bm25"})  # not the run's retriever
    out = [other.record(r.__dict__) for r in recs]
    wrong = [x for x in out if x["status"] == "mismatch"]
    assert wrong and all(x["path"] is None for x in wrong)
    assert all(
        "does not match" in x["check"] and "no evidence is shown" in x["check"] for x in wrong
    )
    prov = {**manifest["provenance"], "mitigations": "0" * 64}
    stale = evidence.Recomputer({**manifest, "provenance": prov})
    x = stale.record(recs[0].__dict__)
    assert x["status"] == "unchecked" and x["path"] is None and "mitigations" in x["check"]


def test_a_targets_calls_are_replayed_and_what_cannot_be_is_said() -> None:
    for folder in (PIPELINE, AGENT):
        rc = evidence.for_archive(folder)
        calls = evidence.calls_of(folder)
        assert rc is not None and calls
        seen = set()
        for r in _records(folder)[::7]:
            x = rc.record(r.__dict__, calls[archive.sort_key(r)])
            seen.add(x["status"])
            if x["status"] == "match":
                assert len(x["path"]["calls"]) == len(calls[archive.sort_key(r)])
                for c, kept in zip(x["path"]["calls"], calls[archive.sort_key(r)], strict=True):
                    assert c["outcome"] == kept["outcome"]
                    assert [d["doc_id"] for d in c.get("docs", [])] == kept["doc_ids"] or (
                        not kept["valid"]
                    )
            else:  # an agent's own query: its evidence is not recoverable, and says so
                assert x["status"] == "partial" and x["path"]["reader"] is None
                assert "not recoverable" in x["check"]
        assert "match" in seen
        if folder == AGENT:
            assert "partial" in seen


def test_no_answer_key_reaches_a_recomputed_path(qwen: evidence.Recomputer) -> None:
    key = corpus_mod.load_answer_key()
    for r in _records(QWEN)[::9]:
        x = qwen.record(r.__dict__)
        x["reasons"] = evidence.reasons(r.__dict__, x["path"])
        blob = json.dumps(x)
        answer = key[r.task_id].expected_answer
        assert f'"{answer}"' not in blob and "expected_answer" not in blob
        assert "required_doc_ids" not in blob


def test_view_without_evidence_keeps_labels_only(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from layerlab.cli import app

    out = tmp_path / "v.html"
    res = CliRunner().invoke(app, ["view", str(AGENT), "--out", str(out), "--no-evidence"])
    assert res.exit_code == 0, res.output
    rows = _blob(out.read_text(), "records")
    assert rows and all("recomputed" not in r for r in rows)


def test_the_explorer_lists_every_committed_archive() -> None:
    from layerlab.reporting.records import explore

    listed = [p.resolve() for p in explore.default_sources()]
    committed = sorted(p.parent.resolve() for p in paths.ARCHIVES.rglob(archive.ARCHIVE))
    assert sorted(listed) == committed and len(listed) == len(set(listed))
    assert listed[0] == QWEN.resolve()  # the real model first


def test_the_same_archive_gives_the_same_page() -> None:
    # the shared tables are filled in record order, whatever was memoised before
    assert viewer.build([AGENT]) == viewer.build([AGENT])

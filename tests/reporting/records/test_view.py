"""The record viewer pages through every record, follows the address after load (Back works) and
says which filter excludes everything; the notebook explorer pages too and leaves a static copy
in exported HTML (issue 24)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from layerlab import archive, paths
from layerlab.archive import samplelog
from layerlab.reporting.records import viewer

QWEN = paths.ARCHIVES / "local_models" / "qwen2.5-coder-1.5b"
CHROMIUM = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


@pytest.fixture(scope="module")
def page_html() -> str:
    return viewer.build([QWEN])


def _script(html: str) -> str:
    return html.split("<script>\n", 1)[1].split("\n</script>", 1)[0]


def test_every_record_is_in_the_page_with_a_pager(page_html: str) -> None:
    data = json.loads(
        page_html.split('id="records">')[1].split("</script>")[0].replace("<\\/", "</")
    )
    n = len(archive.read_records(QWEN / archive.ARCHIVE))
    assert len(data) == n > viewer.PAGE_SIZE  # all records, not the first few
    assert 'id="pager-top"' in page_html and 'id="pager-bottom"' in page_html
    js = _script(page_html)
    assert f"const PAGE = {viewer.PAGE_SIZE};" in js and "%PAGE%" not in js
    # the address is followed after load, and choices are history entries (Back works)
    assert "addEventListener('hashchange'" in js and "location.hash = next" in js
    assert "replaceState" not in js
    # an empty filter says which filter excludes everything and offers to clear it
    assert "function emptyState" in js and "data-clear" in js and "clear all filters" in js
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page_html)


@pytest.mark.skipif(shutil.which("node") is None, reason="no node here")
def test_the_script_parses(page_html: str, tmp_path: Path) -> None:
    js = tmp_path / "v.js"
    js.write_text(_script(page_html))
    subprocess.run(["node", "--check", str(js)], check=True, capture_output=True, timeout=60)


def _dom(url: str) -> str:
    return subprocess.run(
        [
            str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--virtual-time-budget=3000", "--dump-dom", url,
        ],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip


def _count(dom: str) -> str:
    return re.sub(r"<[^>]+>", " ", dom.split('<div id="count">')[1].split("</div>")[0])


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here")
def test_paging_hashchange_back_and_empty_state_in_chromium(page_html: str, tmp_path: Path) -> None:
    rows, _ = viewer.load([QWEN])
    stale = [r for r in rows if r["scenario"] == "stale_index"]
    clean = [r for r in rows if r["scenario"] == "clean"]
    f = tmp_path / "v.html"
    f.write_text(page_html)
    dom = _dom(f"file://{f}#scenario=stale_index&page=3")
    lo, hi = 2 * viewer.PAGE_SIZE + 1, min(len(stale), 3 * viewer.PAGE_SIZE)
    assert f"{len(stale)} of {len(rows)} records (showing {lo}–{hi})" in _count(dom)
    pages = -(-len(stale) // viewer.PAGE_SIZE)
    assert f"page 3 of {pages}" in dom
    listing = dom.split('<div id="list">')[1].split('<div id="pager-bottom"')[0]
    assert listing.count('<details class="rec"') == hi - lo + 1
    # an empty filter: which one excludes everything, and what clearing each would show
    empty = _count(
        _dom(f"file://{f}#scenario=stale_index&outcome=safe_non_answer&mitigation=repair")
    )
    assert f"0 of {len(rows)} records." in empty
    n_outcome = sum(r["mitigation"] == "repair" for r in stale)
    assert f"clear outcome ({n_outcome} records)" in empty and "clear all filters" in empty
    assert "No record has scenario = bogus." in _count(_dom(f"file://{f}#scenario=bogus"))
    # the address changes after load (a link, Back): the view follows
    moved = tmp_path / "moved.html"
    moved.write_text(
        page_html.replace(
            "</body>",
            "<script>setTimeout(() => { location.hash = 'scenario=clean'; }, 50);"
            "setTimeout(() => { location.hash = 'scenario=clean&outcome=success'; }, 150);"
            "setTimeout(() => { history.back(); }, 300);</script></body>",
        )
    )
    assert f"{len(clean)} of {len(rows)} records" in _count(_dom(f"file://{moved}"))


# --- the notebook explorer ---------------------------------------------------------------------


def test_explorer_pages_through_every_match_and_exports_a_static_copy() -> None:
    from layerlab.reporting.records import explore

    every = explore.load_rows(QWEN)
    # it opens on a failure, not a success: the source's first failure outcome
    assert explore.first_failure(every) == {"outcome": "grounded_wrong"}
    rows = explore.select(every, outcome="grounded_wrong")
    ui = explore.browser([QWEN], shown=12)
    source, grid, pager, view = ui.children
    prev, where, nxt, clear = pager.children
    assert {b.description: b.value for b in grid.children}["outcome"] == "grounded_wrong"
    pages = -(-len(rows) // 12)
    assert where.value == f"page 1 of {pages}" and prev.disabled and not nxt.disabled
    first = view.value
    nxt.click()
    assert (
        where.value == f"page 2 of {pages}"
        and f"{len(rows)} record(s) (showing 13–24)" in view.value
    )
    shown = re.findall(r"<code>([^<]+)</code>", view.value)
    assert shown[0] == rows[12]["task_id"] and view.value.count('<details class="rec"') == 12
    prev.click()
    assert view.value == first
    # a page exported without widget state (nbconvert, GitHub) shows the current page as HTML
    bundle = ui._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "live kernel" in bundle["text/html"] and first in bundle["text/html"]
    # an empty selection says which filter excludes everything, and clearing restores the records
    by = {b.description: b for b in grid.children}
    by["scenario"].value = "stale_index"
    by["outcome"].value = "safe_non_answer"
    if not explore.select(every, scenario="stale_index", outcome="safe_non_answer"):
        n = len(explore.select(every, scenario="stale_index"))
        assert "0 of 1440 records" in view.value and "together" in view.value
        assert f"clearing outcome shows {n}" in view.value
    clear.click()
    assert all(b.value == "" for b in grid.children)
    assert f"{len(every)} record(s) (showing the first 12)" in view.value


def test_empty_state_names_the_filter_no_record_has() -> None:
    from layerlab.reporting.records import explore

    rows = explore.load_rows(QWEN)
    html = explore.empty_state(rows, {"scenario": "bogus", "outcome": "success"})
    assert "0 of 1440 records" in html and "no record has scenario = bogus" in html
    n = len(explore.select(rows, outcome="success"))
    assert f"clearing scenario shows {n}" in html
    # the committed notebook's static view keeps its exact output (nbval compares it)
    assert "(showing the first 3)" in explore.records_html(rows, 3)


# --- agent records: the whole transcript, step by step, verdict first -------------------------


@pytest.fixture(scope="module")
def agent_logs(tmp_path_factory) -> dict[str, Path]:
    """Sample logs of agent runs (tests/agentruns.py): the reference agent (json_action, every
    scenario), the fake server's ``badtools`` and ``endless`` (native), and a single-call run."""
    import agentruns

    root = tmp_path_factory.mktemp("agentview")
    agentruns.make(root)
    return {name: root / f"{name}.jsonl" for name in ("ref", "single", "badtools", "endless")}


def test_agent_entries_are_versioned_and_single_call_entries_unchanged(agent_logs) -> None:
    from layerlab.archive import samplelog
    from layerlab.archive.agenttable import SUMMARY
    from layerlab.harness.live.agentlog import read_table

    single = samplelog.read(agent_logs["single"])
    assert single and all(
        e["v"] == 2 and "agent" not in e and "transcript" not in e for e in single
    )
    ref = samplelog.read(agent_logs["ref"])
    assert {e["v"] for e in ref} == {samplelog.AGENT_ENTRY_VERSION}
    rows = {
        tuple(r[k] for k in archive.KEYS): r for r in read_table(agent_logs["ref"].parent / "ref")
    }
    for e in ref:
        row = rows[tuple(e[k] for k in archive.KEYS)]
        assert e["agent"] == {k: row[k] for k in (*SUMMARY, "calls")}
        assert e["transcript"][0]["role"] == "system"
    # a log may hold both kinds: an agent run appends to a single-call log
    assert samplelog.not_a_sample_log(agent_logs["single"]) is None
    assert samplelog.not_a_sample_log(agent_logs["ref"]) is None


def test_the_viewer_shows_an_agent_records_steps_verdict_first(agent_logs, tmp_path) -> None:
    rows, private = viewer.load(list(agent_logs.values()))
    assert private
    agent = [r for r in rows if r["model"].endswith("+agent")]
    assert agent and all("transcript" not in r and r["steps"] is not None for r in agent)
    by = {(r["model"], r["scenario"], r["mitigation"], r["task_id"]): r for r in agent}
    # json_action: a transient fault, a retry, then an abstention
    r = by[("extractive+agent", "missing_tool_output", "strict", "hr-05-q1")]
    assert r["agent"]["retries_after_fault"] == 1 and r["agent"]["protocol"] == "json_action"
    first, second = (t["calls"][0] for t in r["steps"])
    assert first["tool"] == "search" and '"top_k":3' in first["args"]
    assert (first["status"], first["after_fault"], second["after_fault"]) == (
        "unavailable",
        False,
        True,
    )
    assert r["final"]["parse"] == "final reply" and r["final"]["step"] == 3
    # the documents delivered, with their metadata and only a short excerpt of their text
    ok = by[("extractive+agent", "clean", "strict", "hr-05-q1")]
    docs = ok["steps"][0]["calls"][0]["docs"]
    assert [d["doc_id"] for d in docs][:1] == ["hr-05-b"] and docs[0]["status"] == "current"
    assert all(len(d["excerpt"]) <= 160 for d in docs)
    full = next(e for e in json.loads(agent_logs["ref"].read_text().splitlines()[0])["transcript"]
                if e["role"] == "user" and "Tool result" in e["content"])["content"]  # fmt: skip
    longest = max((d["text"] for d in json.loads(full.split("\n", 1)[1])["results"]), key=len)
    html = viewer.build(list(agent_logs.values()))
    assert len(longest) > 160 and longest not in html  # never the whole evidence text
    # native, invalid calls: an unknown tool, then bad arguments
    bad = by[("badtools+agent", "clean", "strict", "hr-05-q1")]
    assert bad["diagnostic"] == "tool_misuse" and bad["agent"]["invalid_calls"] == 2
    c1, c2 = bad["steps"][0]["calls"][0], bad["steps"][1]["calls"][0]
    assert (c1["tool"], c1["valid"], c1["status"]) == ("delete_index", False, "invalid_call")
    assert (c2["tool"], c2["valid"], c2["args"]) == ("search", False, '{"query":"","top_k":99}')
    assert c2["message"] == "query must be a non-empty string"
    # native, the step limit: still calling a tool when told to answer
    end = by[("endless+agent", "clean", "strict", "hr-05-q1")]
    assert end["diagnostic"] == "step_limit" and end["outcome"] == "failed"
    assert end["agent"]["step_limit"] and len(end["steps"]) == 2 and end["final"]["step"] == 3
    assert end["final"]["parse"] == "still calling search (no final reply)"
    assert "tool call search(" in end["final"]["reply"]


def test_the_viewer_shows_an_archived_agent_runs_steps(agent_logs) -> None:
    rows, private = viewer.load([agent_logs["badtools"].parent / "badtools"])
    assert not private and rows
    for r in rows:
        assert r["agent"]["invalid_calls"] == 2 and r["diagnostic"] == "tool_misuse"
        calls = [c for t in r["steps"] for c in t["calls"]]
        assert [c["valid"] for c in calls][:2] == [False, False]
        assert all("docs" not in c and "args" not in c for c in calls)  # the archive keeps neither
    # V's reason is scoring's (v_reason): the invalid calls named, as in the sample log
    logged = {tuple(e[k] for k in archive.KEYS): e["reasons"]["V"]
              for e in samplelog.read(agent_logs["badtools"])}  # fmt: skip
    for r in rows:
        said = r["recomputed"]["reasons"]["V"]
        assert said == "✗ " + logged[tuple(r[k] for k in archive.KEYS)].removeprefix("False: ")
        assert "2 tool call(s) with arguments that broke the tool's schema" in said


@pytest.mark.skipif(shutil.which("node") is None, reason="no node here")
def test_the_agent_script_parses(agent_logs, tmp_path: Path) -> None:
    js = tmp_path / "v.js"
    js.write_text(_script(viewer.build(list(agent_logs.values()))))
    subprocess.run(["node", "--check", str(js)], check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here")
def test_agent_records_render_and_filter_by_the_new_diagnostics(agent_logs, tmp_path) -> None:
    rows, _ = viewer.load(list(agent_logs.values()))
    f = tmp_path / "v.html"
    f.write_text(viewer.build(list(agent_logs.values())))
    for diag, says in (("step_limit", "step limit reached"), ("tool_misuse", "invalid call")):
        n = sum(r["diagnostic"] == diag for r in rows)
        dom = _dom(f"file://{f}#diagnostic={diag}")
        assert n and f"{n} of {len(rows)} records" in _count(dom)
        first = dom.split('<details class="rec"')[1].split('<details class="rec"')[0]
        assert says in first
        # verdict first: the verdict, the agent's step fields, each step, then the final reply
        at = [first.index(s) for s in ("Verdict", "<b>agent</b>", "Steps: ", "still calling"
                                        if diag == "step_limit" else "final reply")]  # fmt: skip
        assert at == sorted(at)


def test_the_explorer_lists_filters_and_shows_agent_records(agent_logs) -> None:
    from layerlab.reporting.records import explore

    rows = [r for p in agent_logs.values() for r in explore.load_rows(p)]
    assert {"step_limit", "tool_misuse"} <= set(explore.choices(rows, "diagnostic"))
    ended = explore.select(rows, diagnostic="step_limit")
    assert ended and all(r["model"] == "endless+agent" for r in ended)
    html = explore.records_html(ended)
    assert "step limit reached" in html and "still calling search (no final reply)" in html
    html = explore.records_html(explore.select(rows, diagnostic="tool_misuse"))
    assert "<code>delete_index {}</code>" in html and "invalid call" in html
    # a run folder: the archived per-call log (tools and outcomes only)
    folder = explore.load_rows(agent_logs["badtools"].parent / "badtools")
    html = explore.records_html(explore.select(folder, diagnostic="tool_misuse"))
    assert "2 invalid" in html and "<code>delete_index</code> → " in html

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
from layerlab.reporting import viewer

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
    from layerlab.reporting import explore

    rows = explore.load_rows(QWEN)
    ui = explore.browser([QWEN], shown=12)
    source, grid, pager, view = ui.children
    prev, where, nxt, clear = pager.children
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
    if not explore.select(rows, scenario="stale_index", outcome="safe_non_answer"):
        n = len(explore.select(rows, scenario="stale_index"))
        assert "0 of 1440 records" in view.value and "together" in view.value
        assert f"clearing outcome shows {n}" in view.value
    clear.click()
    assert all(b.value == "" for b in grid.children) and view.value == first


def test_empty_state_names_the_filter_no_record_has() -> None:
    from layerlab.reporting import explore

    rows = explore.load_rows(QWEN)
    html = explore.empty_state(rows, {"scenario": "bogus", "outcome": "success"})
    assert "0 of 1440 records" in html and "no record has scenario = bogus" in html
    n = len(explore.select(rows, outcome="success"))
    assert f"clearing scenario shows {n}" in html
    # the committed notebook's static view keeps its exact output (nbval compares it)
    assert "(showing the first 3)" in explore.records_html(rows, 3)

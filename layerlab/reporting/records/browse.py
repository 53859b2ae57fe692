"""The notebook explorer: records of an archive, a run folder or a private sample log, in
JupyterLab.

The same rows as ``layerlab view`` (:func:`layerlab.reporting.records.viewer.load`), rendered in Python so
that a notebook shows them without a script: each record a collapsible block whose summary is the
verdict (outcome, S/E/R/G/V, diagnostic), the reasons next, and the path (question, evidence,
contract, mitigation actions, raw reply; an archived record's evidence recomputed from the corpus,
:mod:`layerlab.reporting.records.evidence`) in a collapsed block below. :func:`browser` adds widgets:
the source, run, model, scenario, mitigation, outcome and diagnostic, and a pager over every
matching record; exported to HTML without a kernel, it shows a static copy of its first page. An
empty selection says which filter excludes everything. :mod:`layerlab.reporting.records.explore` re-exports
these names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from layerlab.reporting.records.viewer import first_failure  # the page's, shared

FILTERS = ("run_id", "model", "scenario", "mitigation", "outcome", "diagnostic")
SHOWN = 12  # records rendered at once in the notebook (the count of all matches is shown)
_VERDICT_LABELS = (
    ("S", "success"),
    ("E", "exact_match"),
    ("R", "retrieval_ok"),
    ("G", "citation_ok"),
    ("V", "schema_ok"),
)
_GOOD = frozenset({"success", "safe_non_answer"})
_STYLE = """<style>
.llx { font: 13px/1.45 system-ui, "DejaVu Sans", sans-serif; color: #1d2330; }
.llx details.rec { border: 1px solid #d9dee7; border-radius: 6px; padding: 4px 10px; margin: 6px 0; }
.llx summary { cursor: pointer; line-height: 1.9; }
.llx .b { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
  border: 1px solid #d9dee7; background: #f5f7fa; margin-right: 2px; }
.llx .ok { color: #1a7f37; border-color: #1a7f37; } .llx .bad { color: #b42318; border-color: #b42318; }
.llx .muted { color: #5b6475; } .llx .verdict { margin: 4px 0 0 16px; }
.llx .path { margin: 6px 0 4px 16px; } .llx table { border-collapse: collapse; margin: 4px 0; }
.llx th, .llx td { border: 1px solid #d9dee7; padding: 2px 6px; text-align: left; }
.llx pre { background: #f5f7fa; padding: 6px; white-space: pre-wrap; }
.llx .recomputed { border-left: 4px solid #2f5fa7; padding: 2px 0 2px 10px; margin: 6px 0; }
.llx .rc { color: #2f5fa7; border-color: #2f5fa7; }
</style>"""


def default_sources() -> list[Path]:
    """Every committed record archive: the real model's (single call, the mitigation matrix,
    sampled replicates, agent mode, the intensity surface), the user pipelines, the reference agents, the mitigation
    matrix, the reference agents' surface, then the retired ones (out of every table, kept for the record). The focused study's
    archive is no record archive (it has its own table, notebook 08)."""
    from layerlab import paths

    return [
        *paths.archives_in(paths.LOCAL_MODEL_ARCHIVES),
        *paths.archives_in(paths.LOCAL_MODEL_MITIGATIONS),
        *paths.archives_in(paths.LOCAL_MODEL_REPLICATES),
        *paths.archives_in(paths.LOCAL_MODEL_AGENT),
        *paths.archives_in(paths.LOCAL_MODEL_SURFACE),
        *paths.archives_in(paths.USER_PIPELINES),
        paths.ARCHIVES / "reference_agents",
        paths.ARCHIVES / "mitigations",
        paths.REFERENCE_SURFACE,
        *paths.archives_in(paths.RETIRED_ARCHIVES),
    ]


def load_rows(source: Path | str) -> list[dict[str, Any]]:
    """The rows of one archive, run folder or sample log, as the viewer reads them; an archived
    row's evidence is recomputed when it is shown (:func:`recomputed`), not all at once."""
    from layerlab.reporting.records import viewer

    rows, private = viewer.load([Path(source)], recompute=False)
    if not private:
        for r in rows:
            r["source"] = str(source)
    return rows


@lru_cache(maxsize=8)
def _archive_state(source: str) -> tuple[Any, dict[tuple[Any, ...], Any], Any]:
    """One archive's recomputer, records by key and recorded tool calls (memoised per source)."""
    from layerlab import archive
    from layerlab.reporting.records import evidence

    p = Path(source)
    recs = archive.read_records(p / archive.ARCHIVE if p.is_dir() else p)
    return evidence.for_archive(p), {archive.sort_key(r): r for r in recs}, evidence.calls_of(p)


def recomputed(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """An archived row's evidence recomputed from the corpus (as the viewer's page carries it,
    unpacked), or ``None`` for a sample-log row or when the corpus cannot be loaded."""
    if "recomputed" in row:
        return dict(row["recomputed"])
    if "source" not in row or "reply" in row:
        return None
    from layerlab import archive
    from layerlab.reporting.records import evidence

    rc, recs, calls = _archive_state(row["source"])
    key = tuple(row[k] for k in archive.KEYS)
    if rc is None or key not in recs or (calls is not None and key not in calls):
        return None
    d = recs[key].__dict__
    x = rc.record(d, calls[key] if calls is not None else None)
    x["reasons"] = evidence.reasons(d, x["path"]) if x["path"] is not None else None
    return x


def unit_of(row: Mapping[str, Any]) -> str:
    return f"{row['provider']}/{row['model']}"


def _value(row: Mapping[str, Any], field: str) -> str:
    return unit_of(row) if field == "model" else str(row.get(field))


def choices(rows: Sequence[Mapping[str, Any]], field: str) -> list[str]:
    """The values of a filter field among ``rows`` (sorted)."""
    return sorted({_value(r, field) for r in rows})


def select(rows: Sequence[Mapping[str, Any]], **want: str | None) -> list[Mapping[str, Any]]:
    """Rows matching every given filter (``run_id``, ``model`` as provider/model, ``scenario``,
    ``mitigation``, ``outcome``, ``diagnostic``); ``None`` or ``""`` means any."""
    bad = sorted(set(want) - set(FILTERS))
    if bad:
        raise KeyError(f"unknown filter(s) {bad}; known: {list(FILTERS)}")
    return [r for r in rows if all(not v or _value(r, f) == v for f, v in want.items())]


def _chip(name: str, v: Any) -> str:
    return f'<span class="b {"ok" if v else "bad"}">{name} {"✓" if v else "✗"}</span>'


def record_html(row: Mapping[str, Any], open_: bool = False) -> str:
    """One record as a collapsible block: the verdict first, the path below (collapsed)."""
    from layerlab.reporting.format.page import esc

    v = row.get("verdict", {})
    outcome = str(row.get("outcome"))
    head = (
        f'<span class="b {"ok" if outcome in _GOOD else "bad"}">{esc(outcome)}</span> '
        + " ".join(_chip(n, v.get(k)) for n, k in _VERDICT_LABELS)
        + f' <span class="b">{esc(row.get("diagnostic"))}</span> <code>{esc(row["task_id"])}</code> '
        + (f'<span class="muted">rep {row["replicate"]}</span> ' if row.get("replicate") else "")
        + f'<span class="muted">{esc(unit_of(row))} · {esc(row["scenario"])} · {esc(row["mitigation"])}</span>'
    )
    verdict = ['<div class="verdict"><b>Verdict</b><ul>']
    again = recomputed(row)
    reasons_ = row.get("reasons") or (again or {}).get("reasons") or {}
    for k in ("S", "E", "R", "G", "V", "grounded", "answer"):
        if k in reasons_:
            verdict.append(f"<li><b>{k}</b> {esc(reasons_[k])}</li>")
    verdict.append(
        "<li>"
        + " · ".join(
            f"{label} {esc(v.get(k))}"
            for label, k in (
                ("grounded", "grounded"),
                ("grounded (cited)", "grounded_cited"),
                ("GF", "grounded_false_positive"),
                ("contained", "contained"),
                ("token F1", "token_f1"),
                ("safe resolution", "safe_resolution"),
                ("answered", "answered"),
                ("abstained", "abstained"),
            )
        )
        + (
            f" · scenario {'answerable' if row['answerable'] else 'unsafe'}"
            if row.get("answerable") is not None
            else ""
        )
        + "</li></ul>"
    )
    parsed = row.get("parsed")
    if parsed:
        verdict.append(
            f"<p><b>reply</b>: {esc(parsed.get('status'))}"
            + (
                f" — answer <code>{esc(parsed['answer'])}</code>"
                if parsed.get("answer") is not None
                else ""
            )
            + f" — citations {esc(', '.join(parsed.get('citations') or []) or 'none')}"
            + (f" — reason: {esc(parsed['reason'])}" if parsed.get("reason") else "")
            + "</p>"
        )
    if "expected" in row:
        verdict.append(f"<p><b>expected</b>: <code>{esc(row['expected'])}</code></p>")
    if row.get("agent"):
        verdict.append(_agent_line(row["agent"]))
    verdict.append("</div>")
    if row.get("steps") is not None:
        verdict.append(_steps_html(row))
    contract = row.get("contract")
    path = [
        f'<details class="path"><summary>Path: stage {esc(row.get("stage"))}'
        + (f", contract {esc(contract['outcome'])}" if contract else "")
        + "</summary>"
    ]
    if row.get("question"):
        path.append(f"<p><b>question</b>: {esc(row['question'])}</p>")
    path.append(
        f"<p>policy <code>{esc(row.get('policy_id'))}</code> · domain {esc(row.get('domain'))} · run "
        f"<code>{esc(row.get('run_id'))}</code>"
        + (f" · tool status {esc(row['tool_status'])}" if row.get("tool_status") else "")
        + "</p>"
    )
    if contract:
        if contract.get("edits"):
            path.append("<p>repair edits: " + "; ".join(map(esc, contract["edits"])) + "</p>")
        if contract.get("problems"):
            path.append(
                "<p>contract problems: " + "; ".join(map(esc, contract["problems"])) + "</p>"
            )
    if row.get("mitigation_actions"):
        path.append("<p>mitigation: " + "; ".join(map(esc, row["mitigation_actions"])) + "</p>")
    evidence = row.get("evidence")
    if evidence:
        cols = (
            "rank",
            "doc_id",
            "domain",
            "status",
            "effective_year",
            "version",
            "session_id",
            "truncated",
        )
        path.append(
            "<table><tr>"
            + "".join(f"<th>{c}</th>" for c in cols)
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{esc(e.get(c))}</td>" for c in cols) + "</tr>"
                for e in evidence
            )
            + "</table>"
        )
    elif evidence is not None:
        path.append('<p class="muted">no evidence reached the reader</p>')
    if row.get("reply") is not None:
        path.append(
            f"<details><summary>raw reply</summary><pre>{esc(row['reply'])}</pre></details>"
        )
    if "reply" not in row and again is not None:
        from layerlab.reporting.records.evidence import html as recomputed_html

        path.append(recomputed_html(again, row))
        path.append('<p class="muted">archive record: no reply is kept (run with --sample-log '
                    "to see it)</p>")  # fmt: skip
    elif "reply" not in row:
        path.append(
            '<p class="muted">archive record: no reply or evidence is kept (run with '
            "--sample-log to see them)</p>"
        )
    path.append("</details>")
    return (
        f'<details class="rec"{" open" if open_ else ""}><summary>{head}</summary>'
        + "".join(verdict)
        + "".join(path)
        + "</details>"
    )


def _agent_line(a: Mapping[str, Any]) -> str:
    """An agent record's step fields, one line (as the viewer shows them)."""
    from layerlab.reporting.format.page import esc

    return (
        f"<p><b>agent</b>: {esc(a['protocol'])} · {a['steps']} step(s) · {a['tool_calls']} tool "
        f"call(s) · {a['invalid_calls']} invalid · {a['retries_after_fault']} retr(ies) after a "
        "fault · " + ("step limit reached" if a["step_limit"] else "within the step limit") + "</p>"
    )


def _steps_html(row: Mapping[str, Any]) -> str:
    """An agent record's steps (:mod:`layerlab.reporting.records.transcript`), collapsed: per turn each
    action, its outcome and the documents delivered, then the final reply and its parse."""
    from layerlab.reporting.format.page import esc

    items = []
    for t in row["steps"]:
        calls = []
        for c in t["calls"]:
            said = c["status"] if c["outcome"] == c["status"] else f"{c['status']} · {c['outcome']}"
            line = (
                f"<code>{esc(c['tool'])}{' ' + esc(c['args']) if 'args' in c else ''}</code> → "
                f'<span class="b {"ok" if c["valid"] and c["outcome"] == "ok" else "bad"}">'
                f"{esc(said)}</span>"
                + ("" if c["valid"] else " <b>invalid call</b>")
                + (' <span class="muted">(after a fault)</span>' if c["after_fault"] else "")
                + (f' <span class="muted">{esc(c["message"])}</span>' if c.get("message") else "")
            )
            if "n_docs" in c:
                line += f" · {c['n_docs']} document(s)"
            if c.get("docs"):
                line += " · " + ", ".join(
                    f"<code>{esc(d['doc_id'])}</code> ({esc(d['status'])}, {esc(d['effective_year'])}"
                    + (", truncated" if d["truncated"] else "")
                    + ")"
                    for d in c["docs"]
                )
            calls.append(line)
        items.append(
            f'<li value="{t["step"]}">'
            + ("<br>".join(calls) or '<span class="muted">no tool call</span>')
            + "</li>"
        )
    final = row.get("final")
    if final:
        items.append(
            f'<li value="{final["step"]}"><b>{esc(final["parse"])}</b>'
            + (
                f"<details><summary>raw reply</summary><pre>{esc(final['reply'])}</pre></details>"
                if final.get("reply") is not None
                else ""
            )
            + "</li>"
        )
    n = sum(len(t["calls"]) for t in row["steps"])
    return (
        f'<details class="path"><summary>Steps: {len(row["steps"])} tool-calling turn(s), '
        f"{n} call(s)</summary><ol>" + "".join(items) + "</ol></details>"
    )


def records_html(rows: Sequence[Mapping[str, Any]], shown: int = SHOWN, start: int = 0) -> str:
    """Matching records as an HTML fragment: a count line, then ``shown`` records from ``start``
    (the first one open)."""
    from collections import Counter

    counts = Counter(str(r.get("outcome")) for r in rows)
    end = min(len(rows), start + shown)
    window = (
        f" (showing {start + 1}–{end})"
        if start
        else (f" (showing the first {shown})" if len(rows) > shown else "")
    )
    line = (
        f"{len(rows)} record(s)"
        + window
        + (" — " + ", ".join(f"{k} {counts[k]}" for k in sorted(counts)) if counts else "")
    )
    body = "".join(record_html(r, open_=i == 0) for i, r in enumerate(rows[start:end]))
    private = any("reply" in r for r in rows)
    warn = (
        '<p class="bad"><b>Private</b>: from a per-sample log (replies and expected answers); '
        "do not publish this output.</p>"
        if private
        else ""
    )
    return f'{_STYLE}<div class="llx">{warn}<p class="muted">{line}</p>{body}</div>'


def empty_state(rows: Sequence[Mapping[str, Any]], want: Mapping[str, str | None]) -> str:
    """Why no record matches ``want``: the filter value no record has, or the filters that match
    nothing together, and how many records clearing each filter would show."""
    from layerlab.reporting.format.page import esc

    active = {f: v for f, v in want.items() if v}
    absent = [f for f, v in active.items() if not any(_value(r, f) == v for r in rows)]
    said = [f"{f.replace('_id', '')} = {v}" for f, v in active.items()]
    if absent:
        why = "no record has " + " or ".join(
            f"{f.replace('_id', '')} = {active[f]}" for f in absent
        )
    elif len(said) > 1:
        why = f"no record has {', '.join(said[:-1])} and {said[-1]} together"
    else:
        why = f"no record has {''.join(said)}" if said else "the source holds no records"
    clear = [
        f"clearing {f.replace('_id', '')} shows {n}"
        for f in active
        if (n := len(select(rows, **{g: v for g, v in active.items() if g != f})))
    ]
    tip = (f"; {', '.join(clear)}" if clear else "") + (
        "; or set every filter back to “all”" if active else ""
    )
    return f'{_STYLE}<div class="llx"><p><b>0 of {len(rows)} records</b>: {esc(why)}{esc(tip)}.</p></div>'


def browser(sources: Sequence[Path | str] | None = None, shown: int = SHOWN, **want: str) -> Any:
    """The notebook explorer: choose the archive or sample log, then run, model, scenario and
    mitigation; filter by outcome and diagnostic; page through every match ``shown`` at a time.
    Each record shows its verdict first and its path below, collapsed. ipywidgets controls in a
    live kernel, with the first page as static HTML for a page exported without widget state;
    without ipywidgets, the static HTML of the first source filtered by ``want``."""
    srcs = [Path(s) for s in (sources or default_sources())]
    if not srcs:
        raise ValueError("no archive or sample log to explore")
    cache: dict[Path, list[dict[str, Any]]] = {}

    def rows_of(p: Path) -> list[dict[str, Any]]:
        if p not in cache:
            cache[p] = load_rows(p)
        return cache[p]

    try:
        import ipywidgets as w
    except ImportError:  # pragma: no cover - ipywidgets is in the lock
        from IPython.display import HTML

        rows = rows_of(srcs[0])
        return HTML(records_html(select(rows, **(want or first_failure(rows))), shown))
    from layerlab import paths

    def label(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(paths.ROOT))
        except ValueError:
            return str(p)

    layout = w.Layout(width="auto")
    source = w.Dropdown(
        options=[(label(p), p) for p in srcs], description="source", layout=w.Layout(width="60%")
    )
    boxes = {f: w.Dropdown(description=f.replace("_id", ""), layout=layout) for f in FILTERS}
    view = w.HTML()
    prev, nxt = w.Button(description="‹ previous"), w.Button(description="next ›")
    where = w.Label()
    clear = w.Button(description="clear filters")
    state = {"page": 0}

    def refill(*_: Any) -> None:
        rows = rows_of(source.value)
        start = dict(want) or first_failure(rows)  # no filter given: open on a failure
        for f, box in boxes.items():
            opts = [("all", "")] + [(v, v) for v in choices(rows, f)]
            keep = box.value if box.value in dict(opts).values() and box.value else start.get(f, "")
            box.unobserve(redraw, names="value")
            box.options = opts
            box.value = keep if keep in dict(opts).values() else ""
            box.observe(redraw, names="value")
        redraw()

    def redraw(*_: Any, page: int = 0) -> None:
        rows = rows_of(source.value)
        chosen = {f: b.value for f, b in boxes.items()}
        hits = select(rows, **chosen)
        pages = max(1, -(-len(hits) // shown))
        state["page"] = min(max(page, 0), pages - 1)
        view.value = (
            records_html(hits, shown, start=state["page"] * shown)
            if hits
            else empty_state(rows, chosen)
        )
        where.value = f"page {state['page'] + 1} of {pages}"
        prev.disabled, nxt.disabled = state["page"] == 0, state["page"] >= pages - 1

    def clear_all(*_: Any) -> None:
        for box in boxes.values():
            box.unobserve(redraw, names="value")
            box.value = ""
            box.observe(redraw, names="value")
        redraw()

    for box in boxes.values():
        box.observe(redraw, names="value")
    source.observe(refill, names="value")
    prev.on_click(lambda _: redraw(page=state["page"] - 1))
    nxt.on_click(lambda _: redraw(page=state["page"] + 1))
    clear.on_click(clear_all)
    refill()
    grid = w.GridBox(
        list(boxes.values()),
        layout=w.Layout(grid_template_columns="repeat(3, minmax(180px, 1fr))", grid_gap="4px 10px"),
    )
    return _with_fallback(w, [source, grid, w.HBox([prev, where, nxt, clear]), view], view)


def _with_fallback(w: Any, children: list[Any], view: Any) -> Any:
    """A VBox whose display also carries ``text/html``: the view's current page as static HTML,
    which a notebook exported without widget state (nbconvert, GitHub) shows instead of nothing."""

    class Browser(w.VBox):  # type: ignore[misc,name-defined]
        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            data = super()._repr_mimebundle_(**kwargs)
            if data is not None:
                data["text/html"] = (
                    '<p style="color:#5b6475">A static copy of the current page: the filters and '
                    "the pager need a live kernel with ipywidgets.</p>" + view.value
                )
            return data

    return Browser(children)


def show(source: Path | str | None = None, shown: int = 3, **want: str) -> Any:
    """A static view (no widgets) of one source's records matching ``want``, for a notebook
    cell whose output is checked: the first committed archive by default."""
    from IPython.display import HTML

    src = Path(source) if source is not None else default_sources()[0]
    return HTML(records_html(select(load_rows(src), **want), shown))

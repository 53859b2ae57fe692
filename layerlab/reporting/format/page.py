"""Self-contained HTML pages: one file, no CDN, no network — tables, embedded PNG figures, details.

Shared by the run report (:mod:`layerlab.reporting.run.report`) and the per-sample viewer
(:mod:`layerlab.reporting.records.viewer`). Everything a page needs (style, script, images as ``data:`` URIs) is
inline, so the file opens offline and can be mailed or archived next to a paper. Output is
deterministic: the same inputs give the same bytes (no timestamps, no random ids).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bg:#ffffff; --soft:#f5f7fa;
  --ok:#1a7f37; --bad:#b42318; --warn:#9a6700; --accent:#2f5fa7; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 32px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; } h3 { font-size: 15px; margin: 20px 0 6px; }
p.lead, .muted { color: var(--muted); }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.partial { border-left: 4px solid var(--bad); padding: 6px 0 6px 14px; background: #fff4f2; }
.baseline { border-left: 4px solid var(--warn); padding: 4px 0 4px 14px; background: #fffbf0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 12px;
  background: var(--soft); border: 1px solid var(--line); }
.badge.ok { color: var(--ok); border-color: var(--ok); } .badge.bad { color: var(--bad); border-color: var(--bad); }
figure { margin: 12px 0 20px; } figure img { max-width: 100%; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13px; }
details { margin: 6px 0; } summary { cursor: pointer; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
pre { background: var(--soft); padding: 8px; overflow-x: auto; white-space: pre-wrap; }
nav.toc a { margin-right: 14px; }
table.nowrap td { white-space: nowrap; } div.scroll { overflow-x: auto; }
"""


def esc(x: Any) -> str:
    """HTML-escaped text of ``x``."""
    return html.escape(str(x), quote=True)


def document(title: str, body: str, script: str = "", extra_css: str = "") -> str:
    """A complete HTML document with inline style and script."""
    js = f"<script>\n{script}\n</script>\n" if script else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}{extra_css}</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n{js}</body>\n</html>\n"
    )


def partial_banner(paths_: Iterable[Path | str]) -> str:
    """The banner of a page built from unfinished runs: one line per run folder whose run did
    not finish (running, killed or stopped; ``archive check`` says PARTIAL), naming it, how many
    of its records exist and how to continue it; ``""`` when every run folder is complete."""
    from layerlab import archive

    lines = []
    for p in map(Path, paths_):
        if not p.is_dir():
            continue
        try:
            rep = archive.check_path(p)
        except archive.ArchiveError:
            continue  # the page's own reading reports it
        if not rep.get("partial"):
            continue
        want = rep.get("expected_records")
        of = f" of {want:,}" if isinstance(want, int) else ""
        lines.append(
            f"<b>PARTIAL</b> {esc(p)}: {rep.get('records', 0):,}{of} records (the run has not "
            "finished: running, killed or stopped; the same command with --resume continues "
            "it). Every rate on this page covers the records so far."
        )
    if not lines:
        return ""
    return '<div class="partial" role="alert">' + "<br>".join(lines) + "</div>"


def section(sid: str, title: str, *parts: str) -> str:
    """A ``<section id=...>`` with an ``<h2>`` heading."""
    return f'<section id="{esc(sid)}">\n<h2>{esc(title)}</h2>\n' + "\n".join(parts) + "\n</section>"


def para(text: str, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<p{c}>{esc(text)}</p>"


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def table(df: pd.DataFrame, caption: str = "", floats: str = "{:.3f}", nowrap: bool = False) -> str:
    """A DataFrame as an HTML table (no index; floats formatted; numbers right-aligned);
    ``nowrap`` keeps each cell on one line (rates with intervals), scrolling sideways if needed."""
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                txt = "–" if v != v else floats.format(v)
            else:
                txt = str(v)
            cls = ' class="num"' if _is_num(v) else ""
            cells.append(f"<td{cls}>{esc(txt)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    cls = ' class="nowrap"' if nowrap else ""
    t = f"<table{cls}>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<div class="scroll">{t}</div>' if nowrap else t


def kv_table(items: Iterable[tuple[str, Any]]) -> str:
    """A two-column key/value table."""
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
    return f"<table><tbody>{rows}</tbody></table>"


def png_data_uri(fig: Any) -> str:
    """A matplotlib figure as a ``data:image/png;base64,...`` URI (deterministic bytes); closes it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def figure(fig: Any, caption: str, alt: str) -> str:
    """An embedded figure with a caption."""
    return (
        f'<figure><img alt="{esc(alt)}" src="{png_data_uri(fig)}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


def details(summary: str, inner: str, open_: bool = False) -> str:
    o = " open" if open_ else ""
    return f"<details{o}><summary>{esc(summary)}</summary>\n{inner}\n</details>"


def toc(entries: Sequence[tuple[str, str]]) -> str:
    """A one-line table of contents of ``(id, title)`` entries."""
    return '<nav class="toc">' + "".join(f'<a href="#{esc(i)}">{esc(t)}</a>' for i, t in entries) + "</nav>"

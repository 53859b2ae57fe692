"""The one exporter for generated tables: CSV, Markdown and LaTeX, deterministic bytes.

Every paper table goes through :func:`write_table`, so number formats, row order and file names
are decided in one place and re-running an export changes no byte.

The LaTeX fits the page by construction (:func:`layout`): the largest font size at which the table
fits the text width, unwrapped if it can be, else with ragged fixed-width columns no narrower than
their longest unbreakable word; a ``longtable`` when it is taller than most of a page; a landscape
page when nothing fits a portrait one. Widths are estimated from Computer Modern's metrics with a
margin, and ``make paper`` checks the result (no overfull box). The preamble must load booktabs,
array, longtable, ragged2e and pdflscape (``paper/main.tex`` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from layerlab import paths
from layerlab._io import atomic_write_text
from layerlab.analysis import units

FLOAT_FORMAT = "{:.3f}"


def _cell(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "" if v != v else FLOAT_FORMAT.format(v)  # NaN -> empty cell
    return "" if v is None else str(v)


def to_markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines) + "\n"


_TEX_ESCAPE = {
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\\": r"\textbackslash{}",
    # the default (OT1) text font has no < > |: math mode prints them
    "<": r"\ensuremath{<}",
    ">": r"\ensuremath{>}",
    "|": r"\ensuremath{|}",
    # non-ASCII the library writes, as LaTeX (pdflatex has no glyph for them in text mode)
    "−": r"\ensuremath{-}",
    "×": r"\ensuremath{\times}",
    "→": r"\ensuremath{\rightarrow}",
    "≥": r"\ensuremath{\geq}",
    "≤": r"\ensuremath{\leq}",
    "±": r"\ensuremath{\pm}",
    "∧": r"\ensuremath{\wedge}",
    "¬": r"\ensuremath{\neg}",
    "–": "--",
    "—": "---",
    "…": r"\ldots{}",
    "’": "'",
    "‘": "`",
    "“": "``",
    "”": "''",
}


def _breaks_after(s: str, i: int) -> bool:
    """Whether a wrapped cell may break after ``s[i]``: after ``_`` and ``/`` (ids such as
    ``tfidf_domain_validity``, ``layerlab/extractive``) and a ``+`` joining words
    (``freshness+metadata``), never inside a number such as ``+97.5``."""
    ch = s[i]
    if ch in "_/":
        return True
    return ch == "+" and 0 < i < len(s) - 1 and s[i - 1].isalpha() and s[i + 1].isalpha()


def _tex(s: str, breakable: bool = False) -> str:
    """``s`` escaped for LaTeX; ``breakable`` also marks where a wrapped cell may break."""
    out = []
    for i, ch in enumerate(s):
        out.append(_TEX_ESCAPE.get(ch, ch))
        if breakable and _breaks_after(s, i):
            out.append(r"\allowbreak{}")
    return "".join(out)


# --- fitting a table to the text width ---------------------------------------------------------
# The manuscript's text width (11pt article, 1in margins: 6.5in) and height. Column widths are
# written as fractions of \linewidth, so the table follows the document; these numbers only decide
# how much must wrap and when a table is long enough to break across pages.
TEXT_WIDTH_PT = 469.0
TEXT_HEIGHT_PT = 650.0
# font sizes tried in turn (LaTeX command, size in pt at 11pt base); widths scale with the size
_SIZES = ((r"\small", 10.0), (r"\footnotesize", 9.0), (r"\scriptsize", 8.0))
_TABCOLSEP_PT = 4.0
_TIGHT_TABCOLSEP_PT = 2.0  # the last resorts of a wide table on a landscape page: tight gaps,
_LAST_SIZE = (r"\tiny", 7.0)  # then the smallest size (cmr6 is wider than cmr10 at 6pt)
_SAFETY = 1.10  # estimated widths are cmr10 advance widths; smaller sizes are a little wider
# advance widths of Computer Modern Roman 10pt (cmr10), in pt
_CMR10 = {
    **dict.fromkeys("bdhnpu", 5.56),
    **dict.fromkeys("cez", 4.44),
    **dict.fromkeys("kqvx", 5.28),
    **dict.fromkeys("ago", 5.0),
    **dict.fromkeys("fj", 3.06),
    **dict.fromkeys("il", 2.78),
    "m": 8.33, "r": 3.92, "s": 3.94, "t": 3.89, "w": 7.22, "y": 5.28,
    **dict.fromkeys("0123456789", 5.0),
    **dict.fromkeys(".,:;'!`", 2.78),
    **dict.fromkeys("()", 3.89),
    **dict.fromkeys("[]", 2.78),
    "-": 3.33, " ": 3.33, "/": 5.0, "%": 8.33, "+": 7.78, "=": 7.78, "<": 7.78, ">": 7.78,
    "*": 5.0, "_": 5.0, "#": 8.33, "$": 5.0, "&": 7.78, '"': 5.0, "|": 2.78, "?": 4.72,
    "I": 3.61, "J": 5.14, "M": 9.17, "W": 10.28,
}  # fmt: skip
_WIDE = 7.5  # other capitals
_OTHER = 7.78  # symbols printed in math mode, non-ASCII


def _width(s: str, size: float) -> float:
    """Estimated printed width of ``s`` in pt at font size ``size``."""
    w = sum(_CMR10.get(ch, _WIDE if ch.isupper() else _OTHER) for ch in s)
    return w * size / 10.0 * _SAFETY


def _tokens(s: str) -> list[str]:
    """The pieces of ``s`` no line break can split (words, cut where :func:`_breaks_after`)."""
    out: list[str] = []
    for word in s.split():
        cur = ""
        for i, ch in enumerate(word):
            cur += ch
            if _breaks_after(word, i):
                out.append(cur)
                cur = ""
        if cur:
            out.append(cur)
    return out or [""]


@dataclass(frozen=True)
class Layout:
    """How :func:`to_latex` sets a table: font size, column widths (pt; ``None``: natural, no
    wrapping), whether it breaks across pages (``longtable``) and whether it needs a landscape
    page."""

    size: str
    widths: tuple[float, ...] | None
    long: bool
    landscape: bool = False
    colsep: float = _TABCOLSEP_PT


def layout(
    header: list[str],
    rows: list[list[str]],
    width: float = TEXT_WIDTH_PT,
    height: float = TEXT_HEIGHT_PT,
    notes: str = "",
) -> Layout:
    """The largest font size at which the table fits ``width``: unwrapped if its natural width
    fits, else with wrapped columns (every column at least as wide as its longest unbreakable
    token; the widest columns give way first). A table that fits no portrait width even at the
    smallest size goes on a landscape page, with narrower column gaps if it must. Tables taller
    than most of a page (their ``notes`` under them included) break across pages.
    """
    cols = list(zip(header, *rows, strict=True)) if rows else [(h,) for h in header]
    tries = (
        (False, width, height, _TABCOLSEP_PT, _SIZES),
        (True, height, width, _TABCOLSEP_PT, _SIZES),
        (True, height, width, _TIGHT_TABCOLSEP_PT, (*_SIZES, _LAST_SIZE)),
    )
    for landscape, w, h, sep, sizes in tries:
        avail = w - 2 * sep * (len(cols) - 1)  # @{} at both ends: no outer padding
        for cmd, size in sizes:
            natural = [max(_width(c, size) for c in col) for col in cols]
            if sum(natural) <= avail:
                tall = _too_tall(header, rows, size, None, h, _lines(notes, size, w))
                return Layout(cmd, None, tall, landscape, sep)
            minimum = [max(_width(t, size) for c in col for t in _tokens(c)) for col in cols]
            if sum(minimum) <= avail:
                widths = _water_fill(natural, minimum, avail - 2.0)  # 2pt slack: rounding
                tall = _too_tall(header, rows, size, widths, h, _lines(notes, size, w))
                return Layout(cmd, widths, tall, landscape, sep)
    # nothing fits even on a landscape page at the smallest size: wrap as far as tokens allow
    # (the build's overfull-box check then names the table)
    cmd, size = _LAST_SIZE
    minimum = [max(_width(t, size) for c in col for t in _tokens(c)) for col in cols]
    tall = _too_tall(header, rows, size, tuple(minimum), width, _lines(notes, size, height))
    return Layout(cmd, tuple(minimum), tall, True, _TIGHT_TABCOLSEP_PT)


def _lines(text: str, size: float, width: float) -> int:
    """Lines ``text`` takes set in a paragraph ``width`` wide at ``size`` (a table's notes are set
    in the table's font size)."""
    return math.ceil(_width(text, size) / width) if text else 0


def _too_tall(
    header: list[str],
    rows: list[list[str]],
    size: float,
    widths: tuple[float, ...] | None,
    page_height: float,
    notes_lines: int = 0,
) -> bool:
    """Whether the table (caption, notes and wrapped rows included, roughly) needs most of a
    page."""
    lines = 2 + len(rows) + notes_lines
    if widths is not None:
        lines = (
            1
            + notes_lines
            + sum(
                max(
                    math.ceil(_width(c, size) / max(w, 1.0)) for c, w in zip(r, widths, strict=True)
                )
                for r in [header, *rows]
            )
        )
    return lines * 1.25 * size + 60.0 > 0.8 * page_height


def _water_fill(natural: list[float], minimum: list[float], avail: float) -> tuple[float, ...]:
    """Column widths summing to ``avail``: a common cap on the widest columns, never below a
    column's minimum; columns narrower than the cap keep their natural width."""
    lo, hi = 0.0, max(natural)
    for _ in range(60):
        cap = (lo + hi) / 2
        total = sum(min(n, max(m, cap)) for n, m in zip(natural, minimum, strict=True))
        lo, hi = (cap, hi) if total < avail else (lo, cap)
    ws = [min(n, max(m, lo)) for n, m in zip(natural, minimum, strict=True)]
    # hand what rounding left to the wrapped columns, so the table spans the text width
    wrapped = [i for i, (w, n) in enumerate(zip(ws, natural, strict=True)) if w < n]
    spare = avail - sum(ws)
    for i in wrapped:
        ws[i] += spare / len(wrapped)
    return tuple(ws)


def _numeric(df: pd.DataFrame, c: object) -> bool:
    return bool(pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]))


# The block labels of per-block tables, compact in the PDF (a label is repeated on every row; the
# manuscript states once what each block is); the CSV and Markdown keep the full label.
BLOCK_COLUMN = "block"
BLOCK_SHORT = {
    units.BLOCK_MODELS: "models",
    units.BLOCK_REFERENCE: "agents",
    units.BLOCK_TARGETS: "targets",  # in a narrow column it took three lines a row
}


def _short(df: pd.DataFrame) -> pd.DataFrame:
    if BLOCK_COLUMN not in df.columns:
        return df
    return df.assign(**{BLOCK_COLUMN: df[BLOCK_COLUMN].map(lambda b: BLOCK_SHORT.get(b, b))})


def to_latex(df: pd.DataFrame, caption: str, label: str, notes: str = "") -> str:
    """``df`` as a booktabs table that fits the text width (see :func:`layout`): numbers right,
    text left; wrapped columns as fixed-width ragged columns; long tables as a ``longtable``.
    ``notes`` (what the intervals assume, say) go under the table in its font size, so the
    caption stays short (a long table's in its last foot, on the page of its last rows); a
    ``block`` column gets its compact labels (:data:`BLOCK_SHORT`)."""
    df = _short(df)
    header = [str(c) for c in df.columns]
    rows = [[_cell(v) for v in row] for row in df.itertuples(index=False)]
    lay = layout(header, rows, notes=notes)
    numeric = [_numeric(df, c) for c in df.columns]
    page = TEXT_HEIGHT_PT if lay.landscape else TEXT_WIDTH_PT  # what \linewidth is there
    if lay.widths is None:
        spec = "".join("r" if n else "l" for n in numeric)
    else:
        spec = "".join(
            (r">{\raggedleft\arraybackslash}" if n else r">{\RaggedRight\arraybackslash}")
            + f"p{{{w / page:.4f}\\linewidth}}"
            for n, w in zip(numeric, lay.widths, strict=True)
        )
    wrap = lay.widths is not None
    head = " & ".join(_tex(h, wrap) for h in header) + r" \\"
    body = [" & ".join(_tex(c, wrap) for c in r) + r" \\" for r in rows]
    sep = rf"\setlength{{\tabcolsep}}{{{lay.colsep:g}pt}}"
    if lay.long:
        lines = [
            r"\begingroup",
            lay.size,
            sep,
            rf"\begin{{longtable}}{{@{{}}{spec}@{{}}}}",
            rf"\caption{{{_tex(caption)}}}\label{{{label}}}\\",
            r"\toprule",
            head,
            r"\midrule",
            r"\endfirsthead",
            r"\toprule",
            head,
            r"\midrule",
            r"\endhead",
            r"\bottomrule",
            r"\endfoot",
            # a wrapped table (as wide as the page) has its notes in the last page's foot:
            # longtable keeps them with the last rows, never alone on the next page
            *(
                [r"\bottomrule", rf"\multicolumn{{{len(header)}}}{{@{{}}p{{0.98\linewidth}}@{{}}}}"
                 rf"{{\RaggedRight\textit{{Notes.}} {_tex(notes)}}} \\", r"\endlastfoot"]
                if notes and wrap
                else []
            ),  # fmt: skip
            *body,
            r"\end{longtable}",
            # a table at its natural width (narrower than the page): the notes under it
            *([rf"{{\noindent\textit{{Notes.}} {_tex(notes)}\par}}"] if notes and not wrap else []),
            r"\endgroup",
        ]
    else:
        lines = [
            r"\begin{table}[!htbp]",
            r"\centering",
            lay.size,
            sep,
            rf"\caption{{{_tex(caption)}}}",
            rf"\label{{{label}}}",
            rf"\begin{{tabular}}{{@{{}}{spec}@{{}}}}",
            r"\toprule",
            head,
            r"\midrule",
            *body,
            r"\bottomrule",
            r"\end{tabular}",
            *(
                [rf"\par\smallskip{{\RaggedRight\textit{{Notes.}} {_tex(notes)}\par}}"]
                if notes
                else []
            ),
            r"\end{table}",
        ]
    if lay.landscape:
        lines = [r"\begin{landscape}", *lines, r"\end{landscape}"]
    return "\n".join(lines) + "\n"


def label(name: str) -> str:
    """The LaTeX label of the table written as ``name`` (``\\ref{tab:name}``)."""
    return f"tab:{name}"


def write_table(
    df: pd.DataFrame, name: str, caption: str, out_dir: Path = paths.TABLES
) -> list[Path]:
    """Write ``df`` as ``name.csv``, ``name.md`` and ``name.tex`` into ``out_dir``; return the paths.
    The table's notes (``df.attrs['notes']``) follow the table in the Markdown and LaTeX."""
    out_dir = Path(out_dir or paths.TABLES)
    csv = df.to_csv(index=False, float_format="%.4f", lineterminator="\n")
    notes = str(df.attrs.get("notes") or "")
    md_notes = f"\n*Notes.* {notes}\n" if notes else ""
    written = []
    for suffix, text in (
        ("csv", csv),
        ("md", f"**{caption}**\n\n" + to_markdown(df) + md_notes),
        ("tex", to_latex(df, caption, label(name), notes)),
    ):
        p = out_dir / f"{name}.{suffix}"
        atomic_write_text(p, text)
        written.append(p)
    return written


def write_reproduction(comparison: pd.DataFrame, path: Path | None = None) -> str:
    """Write ``paper/REPRODUCTION.md``: the paper's stated figures beside ours (generated).

    The introduction is derived from what the archives hold (``comparison.attrs['blocks']``,
    see :func:`layerlab.reporting.paper.tables.paper_comparison`): which units, how many records, and what they are.
    """
    from layerlab.analysis import stats

    path = Path(path or paths.REPRODUCTION)
    blocks = comparison.attrs.get("blocks", {})
    what = {
        stats.BLOCK_MODELS: "real language models run offline through the live harness (file hashes "
        "and runtime in each archive's manifest); the paper's models are larger hosted ones, so "
        "their rates are not expected to match — the question is whether the paper's *structure* "
        "holds for them",
        stats.BLOCK_REFERENCE: "deterministic baselines run through the live harness, not models: "
        "they reproduce the paper's *structure* by construction, not its model-specific rates",
    }
    lines = [
        f"- **{b}**: {', '.join(f'`{u}`' for u in v['units'])} — {v['records']} records, "
        f"{v['tasks']} tasks; {what.get(b, '')}."
        for b, v in blocks.items()
    ]
    text = (
        "# Reproduction report\n\n"
        "Generated by `notebooks/06_bootstrap_intervals.ipynb` (run `make reproduce`); do not edit by hand.\n\n"
        "Every figure stated in the paper's text (`data/reference/paper_figures.yaml`) beside ours, one\n"
        "column per kind of unit, each computed on its own (never pooled):\n\n"
        + "\n".join(lines)
        + "\n\nRetriever and corpus figures come from our own `enterprise_v2` corpus and involve no model.\n\n"
        + to_markdown(comparison)
    )
    atomic_write_text(path, text)
    return "paper/REPRODUCTION.md"

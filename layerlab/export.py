"""The one exporter for generated tables: CSV, Markdown and LaTeX, deterministic bytes.

Every paper table goes through :func:`write_table`, so number formats, row order and file names
are decided in one place and re-running an export changes no byte.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from layerlab import paths
from layerlab._io import atomic_write_text

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
}


def _tex(s: str) -> str:
    return "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)


def to_latex(df: pd.DataFrame, caption: str, label: str) -> str:
    align = "".join(
        "r"
        if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        else "l"
        for c in df.columns
    )
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{_tex(caption)}}}",
        rf"\label{{{label}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(_tex(str(c)) for c in df.columns) + r" \\",
        r"\midrule",
    ]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(_tex(_cell(v)) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(
    df: pd.DataFrame, name: str, caption: str, out_dir: Path = paths.TABLES
) -> list[Path]:
    """Write ``df`` as ``name.csv``, ``name.md`` and ``name.tex`` into ``out_dir``; return the paths."""
    out_dir = Path(out_dir)
    csv = df.to_csv(index=False, float_format="%.4f", lineterminator="\n")
    written = []
    for suffix, text in (
        ("csv", csv),
        ("md", f"**{caption}**\n\n" + to_markdown(df)),
        ("tex", to_latex(df, caption, f"tab:{name}")),
    ):
        p = out_dir / f"{name}.{suffix}"
        atomic_write_text(p, text)
        written.append(p)
    return written

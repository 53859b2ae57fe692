"""What a value in the paper's prose is made of (:mod:`layerlab.reporting.paper.papervalues`
writes the macros; its parts, :mod:`~layerlab.reporting.paper.surfacevalues` and
:mod:`~layerlab.reporting.paper.convvalues`, use these too): the number words the prose may not
spell out by hand, a count as a word, an identifier as a macro-name part, plain text as LaTeX, a
rate's digits, a generated table read, and the error of a value that cannot be given."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

NUMBER_WORDS = (
    "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty thirty forty fifty hundred thousand dozen"
).split()
"""Number words the prose may not spell out by hand ("one" is also a pronoun, so it may)."""

_WORDS = ("zero", "one", *NUMBER_WORDS[:19])


class ValuesError(RuntimeError):
    """A value the prose needs is missing from the tables or archives (one line)."""


def word(n: int) -> str:
    """``n`` as an English word (0-20), else its digits."""
    return _WORDS[n] if 0 <= n < len(_WORDS) else str(n)


def camel(ident: str) -> str:
    """An identifier as a macro-name part: ``stale_index`` -> ``StaleIndex``."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", ident) if p)


def tex(text: str) -> str:
    """Plain text as LaTeX: the table's minus and percent signs, underscores."""
    text = text.replace("\\", "\\textbackslash{}")
    text = re.sub(r"(?<![\w.])[−-](?=\d)", "\\\\ensuremath{-}", text)  # a minus, not a hyphen
    return text.replace("%", "\\%").replace("_", "\\_").replace("&", "\\&")


def rate(x: float) -> str:
    """A rate as the prose gives it: three decimals."""
    return f"{x:.3f}"


def csv_table(tables: Path, name: str) -> pd.DataFrame:
    """The generated table ``name`` (its CSV, every cell text); :class:`ValuesError` when the
    tables have not been made."""
    path = tables / f"{name}.csv"
    if not path.exists():
        raise ValuesError(f"{path}: missing (the prose quotes it; run `layerlab reproduce`)")
    return pd.read_csv(path, dtype=str, keep_default_na=False)


__all__ = ["NUMBER_WORDS", "ValuesError", "camel", "csv_table", "rate", "tex", "word"]

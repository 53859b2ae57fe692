"""The text of the prose's macros (:mod:`layerlab.reporting.paper.papervalues` and
:mod:`layerlab.reporting.paper.convvalues` share it): number words, LaTeX escaping, macro names in
camel case, a rate's digits, reading a generated table; and the one error a missing value raises."""

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


def _camel(ident: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", ident) if p)


def _tex(text: str) -> str:
    """Plain text as LaTeX: the table's minus and percent signs, underscores."""
    text = text.replace("\\", "\\textbackslash{}")
    text = re.sub(r"(?<![\w.])[−-](?=\d)", "\\\\ensuremath{-}", text)  # a minus, not a hyphen
    return text.replace("%", "\\%").replace("_", "\\_").replace("&", "\\&")


def _rate(x: float) -> str:
    return f"{x:.3f}"


def _csv(tables: Path, name: str) -> pd.DataFrame:
    path = tables / f"{name}.csv"
    if not path.exists():
        raise ValuesError(f"{path}: missing (the prose quotes it; run `layerlab reproduce`)")
    return pd.read_csv(path, dtype=str, keep_default_na=False)


__all__ = ["NUMBER_WORDS", "ValuesError", "word"]

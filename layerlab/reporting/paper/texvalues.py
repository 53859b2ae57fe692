"""What a value in the paper's prose is made of (:mod:`layerlab.reporting.paper.papervalues`
writes the macros; its parts, such as :mod:`layerlab.reporting.paper.surfacevalues`, use these
too): the number words the prose may not spell out by hand, a count as a word, an identifier as
a macro-name part, plain text as LaTeX, and the error of a value that cannot be given."""

from __future__ import annotations

import re

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

"""Text normalisation shared by spec validation, the reader and the scorer.

One definition of "the same answer" for the whole package: SQuAD-style normalisation
(Unicode NFKC, lower case, punctuation and the articles a/an/the dropped, whitespace
collapsed). Thousands separators vanish with punctuation, so "$1,500" == "1500".
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_PUNCT = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WS = re.compile(r"\s+")
_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=16384)  # pure; the scorer and reader normalise the same passages again and again
def normalize_answer(text: str) -> str:
    """Normalise an answer string for exact-match comparison."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = text.replace("-", " ")
    text = _PUNCT.sub("", text)
    text = _ARTICLES.sub(" ", text)
    return _WS.sub(" ", text).strip()


def answer_tokens(text: str) -> list[str]:
    """Tokens of the normalised answer."""
    return list(_tokens(text))


@lru_cache(maxsize=16384)
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(normalize_answer(text).split())


def states_value(prose: str, value: str) -> bool:
    """True when ``value`` appears in ``prose`` as a contiguous run of whole tokens."""
    needle = _tokens(value)
    hay = _tokens(prose)
    if not needle:
        return False
    n = len(needle)
    return any(hay[i : i + n] == needle for i in range(len(hay) - n + 1))


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words (used for cue matching)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def clear_caches() -> None:
    """Forget the memoised normalisations (benchmarks time runs from a cold cache)."""
    normalize_answer.cache_clear()
    _tokens.cache_clear()

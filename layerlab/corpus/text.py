"""Text normalisation shared by spec validation, the reader and the scorer.

One definition of "the same answer" for the whole package: SQuAD-style normalisation
(Unicode NFKC, lower case, punctuation and the articles a/an/the dropped, whitespace
collapsed). Thousands separators vanish with punctuation, so "$1,500" == "1500".

Exact match (:func:`normalize_answer` equality) is the strict answer check; :func:`token_f1`
(SQuAD's token-overlap F1) and :func:`states_value` used as answer containment (RGB's check, on
whole normalised tokens) are lenient secondary measures over the same normalisation.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
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


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD's token F1 of ``prediction`` against ``reference`` over normalised tokens.

    The harmonic mean of token precision and recall (tokens counted with multiplicity); when
    either side has no token, 1.0 if both have none, else 0.0 (SQuAD v2's convention). E.g.
    "$7,500 per month" vs "$7,500": tokens ``7500 per month`` vs ``7500``, precision 1/3,
    recall 1, F1 0.5.
    """
    pred, ref = _tokens(prediction), _tokens(reference)
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def words(text: str) -> list[str]:
    """Lower-case alphanumeric words (used for cue matching)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def clear_caches() -> None:
    """Forget the memoised normalisations (benchmarks time runs from a cold cache)."""
    normalize_answer.cache_clear()
    _tokens.cache_clear()

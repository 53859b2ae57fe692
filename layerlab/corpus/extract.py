"""Typed span extraction: find a value of a given answer kind in a passage.

Used by the deterministic extractive reader and by the local reference agents. It knows the
*shape* of an answer kind (a duration, an amount of money, a role name, ...), never the answer.
"""

from __future__ import annotations

import re
from functools import lru_cache

from layerlab.corpus.text import states_value, words

_NUM_WORDS = r"\d[\d,]*(?:\.\d+)?"
_DURATION_UNIT = (
    r"(?:business |calendar |working )?(?:minutes?|hours?|days?|weeks?|months?|years?|quarters?)"
)
_PATTERNS: dict[str, re.Pattern[str]] = {
    "duration": re.compile(rf"\b{_NUM_WORDS} {_DURATION_UNIT}\b", re.IGNORECASE),
    "money": re.compile(r"(?:\$|USD ?|€|£)\d[\d,]*(?:\.\d+)?(?: (?:million|thousand))?"),
    "percent": re.compile(r"\b\d+(?:\.\d+)?(?: ?%| percent\b)"),
    # a number followed by the noun it counts; four-digit years are excluded below
    "count": re.compile(r"\b\d[\d,]*(?:\.\d+)? [a-z][a-z-]*\b"),
    # a run of capitalised words, allowing short connectives inside ("Head of Legal")
    "role": re.compile(r"\b[A-Z][\w&/-]*(?: (?:of|and|for|the|&) [A-Z][\w&/-]*| [A-Z][\w&/-]*)*"),
}
_PATTERNS["system"] = _PATTERNS["role"]
_YEAR = re.compile(r"^(19|20)\d\d\b")
_SENT = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9$])")
_STOP = frozenset(
    "a an the of to in on for and or is are be by with what which who how many much does do "
    "our we us at as it its this that from when can may must under any per after before".split()
)


def sentences(text: str) -> list[str]:
    """Split prose into sentences (policy prose is plain declarative text)."""
    return [s.strip() for s in _SENT.split(text.strip()) if s.strip()]


def _content(text: str) -> set[str]:
    return {w for w in words(text) if w not in _STOP and not w.isdigit()}


def candidates(kind: str, sentence: str) -> list[str]:
    """Spans of ``kind`` in ``sentence``, in order of appearance."""
    pat = _PATTERNS[kind]
    out: list[str] = []
    for m in pat.finditer(sentence):
        span = m.group(0).strip()
        if kind == "count" and _YEAR.match(span):
            continue
        if kind == "duration" and _YEAR.match(span):
            continue
        if kind in {"role", "system"} and m.start() == 0:
            # the first word of a sentence is capitalised for grammar, not as a name:
            # drop it and keep any name that follows it in the same run
            head, _, rest = span.partition(" ")
            if not rest or not rest[0].isupper():
                continue
            span = rest
        out.append(span)
    return out


@lru_cache(maxsize=16384)  # pure: a task's question meets the same passages in every scenario and arm
def extract(question: str, kind: str, passage: str) -> str | None:
    """Best span of ``kind`` in ``passage`` for ``question``, or ``None`` when there is none.

    Sentences are tried in order of content-word overlap with the question (ties: earlier
    first); within a sentence, spans that the question itself states are skipped.
    """
    if kind not in _PATTERNS:
        raise ValueError(f"unknown answer kind {kind!r}; expected one of {sorted(_PATTERNS)}")
    q = _content(question)
    ranked = sorted(
        enumerate(sentences(passage)), key=lambda it: (-len(q & _content(it[1])), it[0])
    )
    for _, sent in ranked:
        spans = candidates(kind, sent)
        fresh = [s for s in spans if not states_value(question, s)]
        if fresh:
            return fresh[0]
        if spans and kind not in {"role", "system"}:
            return spans[0]
    return None

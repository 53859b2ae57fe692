"""Query-derived domain cues: which domain a question's own words point to, if any.

The reported retriever uses this instead of the task's labelled domain. A question resolves
to a domain when its words hit that domain's cue words strictly more often than any other
domain's; otherwise it is unresolved (``None``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from layerlab.corpus.text import words


class CueMatcher:
    """Resolve questions to domains from the DSL's cue words."""

    def __init__(self, cue_words: Mapping[str, Sequence[str]]):
        self._owner: dict[str, str] = {}
        for domain, cues in cue_words.items():
            for w in cues:
                self._owner[w] = domain
        self.domains = sorted(cue_words)

    def hits(self, question: str) -> dict[str, int]:
        """Cue-word hits per domain (only domains with at least one hit)."""
        out: dict[str, int] = {}
        for w in words(question):
            d = self._owner.get(w)
            if d is not None:
                out[d] = out.get(d, 0) + 1
        return out

    def resolve(self, question: str) -> str | None:
        """The domain the question's cue words point to, or ``None`` when unresolved."""
        hits = self.hits(question)
        if not hits:
            return None
        best = max(hits.values())
        top = [d for d, n in hits.items() if n == best]
        return top[0] if len(top) == 1 else None

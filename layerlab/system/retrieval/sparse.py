"""Sparse text scorers: TF-IDF cosine (the paper's family) and Okapi BM25 (bm25s).

Each is registered as the text scorer of a :attr:`RetrieverConfig.kind`
(:func:`~layerlab.system.retrieval.base.text_scorer`): fitted once on an index's texts, it scores
every query against every document in one sparse matrix product; nothing loops over documents
in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.feature_extraction.text import TfidfVectorizer

from layerlab.system.retrieval.base import RetrieverConfig, text_scorer


@text_scorer("tfidf")
class TfidfScorer:
    """TF-IDF cosine: English stop words, sublinear tf, uni- and bigrams."""

    def __init__(self, config: RetrieverConfig, texts: Sequence[str]) -> None:
        self._vectorizer = TfidfVectorizer(
            stop_words="english", sublinear_tf=True, ngram_range=(1, 2), min_df=1
        )
        self._matrix = self._vectorizer.fit_transform(list(texts))

    def __call__(self, questions: Sequence[str]) -> NDArray[np.float64]:
        q = self._vectorizer.transform(list(questions))
        return np.asarray((q @ self._matrix.T).todense(), dtype=np.float64)


@text_scorer("bm25")
class Bm25Scorer:
    """Okapi BM25 through bm25s (k1=1.5, b=0.75, English stop words)."""

    def __init__(self, config: RetrieverConfig, texts: Sequence[str]) -> None:
        self._index = _bm25_index(texts)

    def __call__(self, questions: Sequence[str]) -> NDArray[np.float64]:
        import bm25s

        tokens = bm25s.tokenize(list(questions), stopwords="en", return_ids=False,
                                show_progress=False)  # fmt: skip
        return np.vstack([self._index.get_scores(t) for t in tokens]).astype(np.float64)


def _bm25_index(texts: Sequence[str]) -> Any:
    try:
        import bm25s
    except ImportError:  # an optional dependency (the study extra)
        raise ImportError(
            "the bm25 retriever needs bm25s: pip install 'layerlab[langchain]' (make installs it)"
        ) from None
    index = bm25s.BM25(k1=1.5, b=0.75)
    index.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False),
                show_progress=False)  # fmt: skip
    return index

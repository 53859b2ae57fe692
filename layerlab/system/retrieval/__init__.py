"""Retrieval, the first stage of the search tool: one module per kind of retriever.

* :mod:`~layerlab.system.retrieval.base`: :class:`RetrieverConfig`, the registry
  (:func:`register`, :func:`get`, :data:`REGISTRY`), the fitted :class:`Retriever` and its
  :class:`Ranking`; a configuration's ``kind`` picks its text scorer (:data:`SCORERS`,
  registered with :func:`text_scorer`);
* :mod:`~layerlab.system.retrieval.sparse`: the ``tfidf`` and ``bm25`` text scorers;
* :mod:`~layerlab.system.retrieval.dense`: the ``dense`` text scorer (bundled wordllama
  embeddings, offline; retrievers ``dense`` and ``dense_validity``).

The paper's reported retriever is ``tfidf_domain_validity`` (:data:`REPORTED`); its ablations
are :func:`paper_retrievers`.
"""

from __future__ import annotations

from layerlab.system.retrieval import dense, sparse
from layerlab.system.retrieval.base import (
    REGISTRY,
    REPORTED,
    SCORERS,
    TOP_K,
    Ranking,
    Retriever,
    RetrieverConfig,
    ScorerFactory,
    TextScorer,
    get,
    index_text,
    make,
    paper_retrievers,
    register,
    text_scorer,
)

__all__ = [
    "REGISTRY",
    "REPORTED",
    "SCORERS",
    "TOP_K",
    "Ranking",
    "Retriever",
    "RetrieverConfig",
    "ScorerFactory",
    "TextScorer",
    "base",
    "dense",
    "get",
    "index_text",
    "make",
    "paper_retrievers",
    "register",
    "sparse",
    "text_scorer",
]

"""Retrieval, the first stage of the search tool: one module per kind of retriever.

* :mod:`~layerlab.system.retrieval.base`: :class:`RetrieverConfig`, the registry
  (:func:`register`, :func:`get`, :data:`REGISTRY`), the fitted :class:`Retriever` and its
  :class:`Ranking`; a configuration's ``kind`` picks its text scorer (:data:`SCORERS`,
  registered with :func:`text_scorer`);
* :mod:`~layerlab.system.retrieval.sparse`: the ``tfidf`` and ``bm25`` text scorers;
* :mod:`~layerlab.system.retrieval.dense`: the ``dense`` text scorer (bundled wordllama
  embeddings, offline; retrievers ``dense`` and ``dense_validity``);
* :mod:`~layerlab.system.retrieval.external`: a team's own retriever or vector store
  (``python:MODULE:FACTORY``, ``langchain:MODULE:FACTORY``: the adapters
  :mod:`~layerlab.system.retrieval.python` and :mod:`~layerlab.system.retrieval.langchain`),
  indexed once per distinct scenario index; :class:`StoreDocument` is what it receives.

:class:`Principal` is who a search is for (tenant, session, scopes): layerlab's own
retrievers filter by its tenant and session, a team's store gets it when its ``search`` takes it.

:func:`make` builds either from a retriever spec (a registered name or an external spec);
:func:`check` refuses a bad spec in one line.

The paper's reported retriever is ``tfidf_domain_validity`` (:data:`REPORTED`); its ablations
are :func:`paper_retrievers`.
"""

from __future__ import annotations

from collections.abc import Sequence

from layerlab.corpus.build import Document
from layerlab.system.retrieval import dense, external, langchain, python, sparse
from layerlab.system.retrieval.base import (
    REGISTRY,
    REPORTED,
    SCORERS,
    TOP_K,
    Principal,
    Ranking,
    Retriever,
    RetrieverConfig,
    ScorerFactory,
    Searcher,
    TextScorer,
    get,
    index_text,
    paper_retrievers,
    register,
    text_scorer,
)
from layerlab.system.retrieval.base import make as make_registered
from layerlab.system.retrieval.external import (
    ExternalRetriever,
    RetrieverError,
    StoreDocument,
    is_external,
)


def make(
    spec: str, documents: Sequence[Document], cue_words: dict[str, tuple[str, ...]]
) -> Searcher:
    """The retriever ``spec`` fitted on ``documents``: a registered name (``KeyError`` when
    unknown) or a team's ``KIND:MODULE:FACTORY`` (cached per distinct index; ``RetrieverError``)."""
    if is_external(spec):
        return external.make(spec, documents)
    return make_registered(spec, documents, cue_words)


def check(spec: str, where: str = "--retriever") -> None:
    """Refuse a retriever spec that names nothing usable: :class:`RetrieverError`, one line
    starting with ``where`` (the flag or field), before any run starts."""
    if is_external(spec):
        external.check(spec, where)
        return
    try:
        get(spec)
    except KeyError as exc:
        raise RetrieverError(f"{where}: {exc.args[0]}") from None


def report(spec: str) -> str:
    """One line on what a team's retriever did in this process (indexes built, searches, failed
    searches with the first one's reason), or ``""`` for a registered retriever."""
    return external.stats(spec).line(spec) if is_external(spec) else ""


def code(spec: str) -> dict[str, str]:
    """The fingerprint of an external retriever's code (module and package SHA-256), or
    ``{}`` for a registered one (its code is layerlab's own, in the run's version)."""
    return external.fingerprint(spec) if is_external(spec) else {}


__all__ = [
    "REGISTRY",
    "ExternalRetriever",
    "Principal",
    "RetrieverError",
    "Searcher",
    "StoreDocument",
    "check",
    "code",
    "external",
    "is_external",
    "langchain",
    "make_registered",
    "python",
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
    "report",
    "sparse",
    "text_scorer",
]

"""Retriever configurations, their registry, and the fitted retriever over one index.

A configuration's ``kind`` names its text scorer, one module of this package per kind
(:mod:`~layerlab.system.retrieval.sparse`: ``tfidf`` and ``bm25``); :func:`text_scorer` registers
one. The cue and validity signals below are added on top of whatever the text scorer returns.

``tfidf_domain_validity`` is the paper's reported retriever. Its ablations switch the two
signals off (``tfidf``, ``tfidf_domain``, ``tfidf_validity``); ``explicit_domain_filter`` is a
sensitivity condition that *does* see each task's labelled domain and keeps only documents whose
domain label matches it. Every retriever scores all queries against all documents in one
matrix product; nothing loops over documents in Python.

Scores are additive: the text similarity (TF-IDF cosine for the paper's family), plus
``domain_weight`` when a document's domain label equals the domain the query's cue words resolve
to, plus a validity term
``status_weight * [status == "current"] + year_weight * (year scaled to [0, 1])``. The
validity weights are small next to topical similarity across policies but decide between two
versions of the same policy, whose prose scores alike.

A search made for a request carries its :class:`Principal` (tenant, session, access scopes):
layerlab's own retrievers filter by tenant and session like a vector store's metadata filter
(:meth:`Principal.sees`), so another tenant's documents in the index (the ``wrong_session_store``
scenario) are never among their results; access scopes stay the tool's business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from layerlab.corpus.build import Document
from layerlab.corpus.cues import CueMatcher
from layerlab.registry import Registry

TOP_K = 3


@dataclass(frozen=True)
class Principal:
    """Who a search is for: the ``tenant`` whose documents it may return, the request's
    ``session_id`` and its access ``scopes`` (``None``: unrestricted)."""

    tenant: str
    session_id: str | None = None
    scopes: frozenset[str] | None = None

    def sees(self, doc: Document) -> bool:
        """Whether a tenant/session filter lets ``doc`` through: this tenant's document, shared
        (no session) or of this session."""
        return doc.tenant == self.tenant and doc.session_id in (None, self.session_id)


@dataclass(frozen=True)
class RetrieverConfig:
    """What a retriever uses. Register new ones with :func:`register`."""

    name: str
    domain_cues: bool = False
    validity: bool = False
    explicit_domain: bool = False
    domain_weight: float = 0.15
    status_weight: float = 0.30
    year_weight: float = 0.05
    top_k: int = TOP_K
    description: str = ""
    # the text scorer (:data:`SCORERS`): "tfidf" (the paper's family: TF-IDF cosine, plus the
    # flags above) or "bm25" (Okapi BM25 through the bm25s library, what many deployed
    # pipelines use); a new kind is one module of this package that registers its scorer
    kind: str = "tfidf"


class TextScorer(Protocol):
    """A text scorer fitted on one index's texts: ``(n_queries, n_documents)`` similarities."""

    def __call__(self, questions: Sequence[str]) -> NDArray[np.float64]: ...


ScorerFactory = Callable[[RetrieverConfig, Sequence[str]], TextScorer]
"""``(config, the index's texts) -> a fitted scorer``: what a kind's module registers."""

SCORERS: Registry[ScorerFactory] = Registry("retriever kind")


def text_scorer(kind: str) -> Callable[[ScorerFactory], ScorerFactory]:
    """Register the decorated factory (a class or function) as the text scorer of ``kind``."""

    def deco(factory: ScorerFactory) -> ScorerFactory:
        return SCORERS.register(factory, kind)

    return deco


REGISTRY: Registry[RetrieverConfig] = Registry("retriever", lambda c: c.name)


def register(config: RetrieverConfig) -> RetrieverConfig:
    """Add a retriever configuration to the registry under its name."""
    return REGISTRY.register(config)


REPORTED = register(
    RetrieverConfig(
        "tfidf_domain_validity",
        domain_cues=True,
        validity=True,
        description="reported: TF-IDF + query-derived domain cues + status/year validity",
    )
)
register(RetrieverConfig("tfidf", description="TF-IDF only"))
register(RetrieverConfig("tfidf_domain", domain_cues=True, description="TF-IDF + domain cues"))
register(RetrieverConfig("tfidf_validity", validity=True, description="TF-IDF + validity"))
register(
    RetrieverConfig(
        "explicit_domain_filter",
        validity=True,
        explicit_domain=True,
        description="sensitivity: filter to the task's labelled domain + validity",
    )
)


register(
    RetrieverConfig(
        "bm25",
        kind="bm25",
        description="BM25 (bm25s, k1=1.5, b=0.75, English stop words), no cues or validity: "
        "a first stage teams deploy, for user pipelines (not one of the paper's ablations)",
    )
)


def paper_retrievers() -> list[str]:
    """The paper's retriever and its ablations (Table 3): the registered TF-IDF family."""
    return [n for n in REGISTRY if REGISTRY[n].kind == "tfidf"]


def get(name: str) -> RetrieverConfig:
    return REGISTRY.lookup(name)


@dataclass(frozen=True)
class Ranking:
    """Top-k result of a batch search: ``indices[i, j]`` is the j-th document for query i
    (``-1``: none). ``errors[i]``, when given, is why query i's search failed (``""``: it did
    not): an external retriever's bad reply or exception, which the tool reports as an error."""

    indices: NDArray[np.int64]
    scores: NDArray[np.float64]
    documents: tuple[Document, ...]
    errors: tuple[str, ...] = ()

    def doc_ids(self, i: int) -> list[str]:
        return [self.documents[j].doc_id for j in self.indices[i] if j >= 0]

    def docs(self, i: int) -> list[Document]:
        return [self.documents[j] for j in self.indices[i] if j >= 0]

    def error(self, i: int) -> str:
        """Why query ``i``'s search failed, or ``""``."""
        return self.errors[i] if self.errors else ""


def top_k(scores: NDArray[np.float64], k: int, documents: tuple[Document, ...]) -> Ranking:
    """The top ``k`` of a ``(n_queries, n_documents)`` score matrix (ties broken by index
    order; ``-inf``, filtered out, dropped)."""
    k = min(k, scores.shape[1])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, order, axis=1)
    order = np.where(np.isneginf(top), -1, order)
    return Ranking(order.astype(np.int64), top, documents)


class Searcher(Protocol):
    """What the tool's first stage is: a registered :class:`Retriever` or an external one
    (:class:`~layerlab.system.retrieval.external.ExternalRetriever`), fitted on one index."""

    config: RetrieverConfig
    documents: tuple[Document, ...]

    def score(
        self, questions: Sequence[str], labelled_domains: Sequence[str] | None = None
    ) -> NDArray[np.float64]: ...

    def search(
        self,
        questions: Sequence[str],
        labelled_domains: Sequence[str] | None = None,
        k: int | None = None,
        principal_scopes: frozenset[str] | None = None,
        principals: Sequence[Principal] | None = None,
    ) -> Ranking: ...

    def rank(self, scores: NDArray[np.float64], k: int | None = None) -> Ranking: ...


class Retriever:
    """A fitted retriever over one index (a sequence of documents, possibly faulted)."""

    def __init__(
        self,
        config: RetrieverConfig,
        documents: Sequence[Document],
        cue_words: dict[str, tuple[str, ...]],
    ):
        self.config = config
        self.documents = tuple(documents)
        self.matcher = CueMatcher(cue_words)
        texts = [index_text(d) for d in self.documents]
        self._text: TextScorer | None = (
            SCORERS.lookup(config.kind)(config, texts) if texts else None
        )
        self._domains = np.array([d.domain for d in self.documents], dtype=object)
        years = np.array([d.effective_year for d in self.documents], dtype=np.float64)
        span = float(years.max() - years.min()) if len(years) else 0.0
        year_norm = (years - years.min()) / span if span > 0 else np.zeros_like(years)
        current = np.array([d.status == "current" for d in self.documents], dtype=np.float64)
        self._validity = config.status_weight * current + config.year_weight * year_norm

    def score(
        self, questions: Sequence[str], labelled_domains: Sequence[str] | None = None
    ) -> NDArray[np.float64]:
        """Dense ``(n_queries, n_documents)`` score matrix (``-inf`` = filtered out)."""
        n_q, n_d = len(questions), len(self.documents)
        if n_d == 0:
            return np.full((n_q, 0), -np.inf)
        scores = self._text_scores(questions)
        cfg = self.config
        if cfg.domain_cues:
            cued = np.array([self.matcher.resolve(x) or "" for x in questions], dtype=object)
            scores += cfg.domain_weight * (cued[:, None] == self._domains[None, :])
        if cfg.validity:
            scores += self._validity[None, :]
        if cfg.explicit_domain:
            if labelled_domains is None:
                raise ValueError(f"retriever {cfg.name!r} needs the tasks' labelled domains")
            labels = np.asarray(list(labelled_domains), dtype=object)
            scores = np.where(labels[:, None] == self._domains[None, :], scores, -np.inf)
        return scores

    def _text_scores(self, questions: Sequence[str]) -> NDArray[np.float64]:
        """``(n_queries, n_documents)`` text similarity from the kind's scorer."""
        assert self._text is not None  # an empty index is handled by :meth:`score`
        return np.array(self._text(questions), dtype=np.float64)

    def search(
        self,
        questions: Sequence[str],
        labelled_domains: Sequence[str] | None = None,
        k: int | None = None,
        principal_scopes: frozenset[str] | None = None,
        principals: Sequence[Principal] | None = None,
    ) -> Ranking:
        """Top-k documents per question (``k``: default the config's ``top_k``; ties broken by
        index order; filtered docs dropped). ``principals`` (one per question) filter by tenant
        and session (:meth:`Principal.sees`); ``principal_scopes`` is not used: access control
        filters the results after the search (:func:`~layerlab.system.contract.search_payload`)."""
        scores = self.score(questions, labelled_domains)
        if principals is not None and not self._all_seen(principals):
            seen = np.array([[p.sees(d) for d in self.documents] for p in principals], dtype=bool)
            scores = np.where(seen.reshape(scores.shape), scores, -np.inf)
        return self.rank(scores, k)

    def _all_seen(self, principals: Sequence[Principal]) -> bool:
        """Whether every principal sees every document (an index of their one tenant, no
        session-scoped documents: the filter changes nothing and is skipped)."""
        tenants = {d.tenant for d in self.documents} | {p.tenant for p in principals}
        return len(tenants) <= 1 and all(d.session_id is None for d in self.documents)

    def rank(self, scores: NDArray[np.float64], k: int | None = None) -> Ranking:
        """Top-k of an already computed score matrix (see :meth:`score`)."""
        return top_k(scores, self.config.top_k if k is None else k, self.documents)


def index_text(doc: Document) -> str:
    """What a retriever indexes of a document: its title and its prose."""
    return f"{doc.title}. {doc.text}"


def make(
    name: str, documents: Sequence[Document], cue_words: dict[str, tuple[str, ...]]
) -> Retriever:
    """Build the registered retriever ``name`` over ``documents``."""
    return Retriever(get(name), documents, cue_words)

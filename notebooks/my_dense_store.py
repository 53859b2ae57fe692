"""A team's own dense retriever over a real vector store, written the way teams write one: the
worked example of ``layerlab run live --retriever python:my_dense_store:DenseStore``
(docs/dense.md, notebook 14).

Nothing here is layerlab's: wordllama embeddings (``l2_supercat``, 256 dims, the files its wheel
bundles), an in-memory Qdrant collection (``qdrant-client`` local mode: no server), one point per
document with the document's metadata as the payload, and the metadata filter a team puts in
front of its vector search: only documents labelled ``status == "current"`` (LangChain users
write the same as ``search_kwargs={"filter": ...}``). layerlab hands ``index`` the documents of
the scenario's index (``id``, ``text``, ``metadata``) — the faulted index as it is: a stale
index's superseded versions, a corrupted index's swapped labels, conflicting evidence's three
versions — and asks ``search(query, top_k)`` for ids, best first.

``DenseStore`` is the store with the filter; ``UnfilteredDenseStore`` the same store without
it (what a chain that "checks no metadata" runs), so the filter's own effect can be read off
the retriever audit (Table 3's extra rows).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import numpy as np

COLLECTION = "policies"
FILTER_STATUS = "current"  # the team's freshness rule, applied inside the store


def load_embedder() -> Any:
    """wordllama from the files its wheel bundles, offline (``load()`` alone tries to download:
    it looks for the tokenizer under ``tokenizer/`` while the wheel ships ``tokenizers/``)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    from wordllama import WordLlama  # its __init__ calls logging.basicConfig(level=INFO)

    root.handlers[:], root.level = handlers, level  # keep the host's logging as it was
    folder = Path(next(iter(importlib.util.find_spec("wordllama").submodule_search_locations)))
    return WordLlama.load(cache_dir=folder, disable_download=True)


_EMBEDDER: Any = None


def embedder() -> Any:
    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = load_embedder()
    return _EMBEDDER


class DenseStore:
    """wordllama vectors in an in-memory Qdrant collection; search keeps current documents."""

    only_current = True

    def __init__(self, location: str = ":memory:") -> None:
        from qdrant_client import QdrantClient

        self.client = QdrantClient(location=location)  # local mode: no server, no network
        self.ids: list[str] = []

    def index(self, documents: list[Any]) -> None:
        """One point per document: its vector, and its id and metadata as the payload."""
        from qdrant_client import models

        if self.client.collection_exists(COLLECTION):
            self.client.delete_collection(COLLECTION)
        self.client.create_collection(
            COLLECTION,
            vectors_config=models.VectorParams(size=256, distance=models.Distance.COSINE),
        )
        self.ids = [d.id for d in documents]
        if not documents:
            return
        vectors = np.asarray(embedder().embed([d.text for d in documents], norm=True))
        self.client.upsert(
            COLLECTION,
            points=[
                models.PointStruct(id=i, vector=v.tolist(), payload={**d.metadata, "doc_id": d.id})
                for i, (d, v) in enumerate(zip(documents, vectors, strict=True))
            ],
        )

    def query_filter(self) -> Any:
        """The team's metadata filter: documents whose label says they are current."""
        from qdrant_client import models

        if not self.only_current:
            return None
        return models.Filter(
            must=[models.FieldCondition(key="status", match=models.MatchValue(value=FILTER_STATUS))]
        )

    def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """``(id, cosine)`` best first, at most ``top_k``, through the metadata filter."""
        if not self.ids:
            return []
        vector = np.asarray(embedder().embed([query], norm=True))[0]
        hits = self.client.query_points(
            COLLECTION, query=vector.tolist(), limit=top_k, query_filter=self.query_filter()
        ).points
        return [(str(h.payload["doc_id"]), float(h.score)) for h in hits]


class UnfilteredDenseStore(DenseStore):
    """The same store and embeddings with no metadata filter."""

    only_current = False

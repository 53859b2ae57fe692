"""``--retriever python:my_rag:MyRetriever``: a team's retriever as a Python object.

``MyRetriever`` is a class or a zero-argument callable; what it returns has
``index(documents)`` (a list of :class:`~layerlab.system.retrieval.external.StoreDocument`:
``id``, ``text``, ``metadata``) and ``search(query, top_k)``, which returns ids best first,
``(id, score)`` pairs, or mappings with ``id`` (or ``doc_id``) and an optional ``score``::

    class MyRetriever:
        def index(self, documents):
            self.docs = list(documents)

        def search(self, query, top_k):
            words = set(query.lower().split())
            hits = sorted(self.docs, key=lambda d: -len(words & set(d.text.lower().split())))
            return [d.id for d in hits[:top_k]]

One object is made, and ``index`` called once, per distinct scenario index. A ``search`` that
takes a ``principal_scopes`` keyword also gets the requesting principal's access scopes (a
frozenset; ``None``: unrestricted), so the store's own filter can act on each document's
``access_scope``; layerlab's access control applies after it all the same. Each search has
``timeout`` seconds (the object's ``timeout`` attribute, else 30 s: ``STORE_TIMEOUT_S``); one
that takes longer fails as a tool error (``timeout: no reply within S s``).
"""

from __future__ import annotations

import inspect
from typing import Any

from layerlab.system.retrieval.external import (
    Adapter,
    RetrieverError,
    Search,
    StoreDocument,
    adapter,
    error_text,
    store_timeout,
)


def _check(obj: Any, where: str) -> None:
    if not callable(obj):
        raise RetrieverError(
            f"{where}: names a {type(obj).__name__}, not a class or a zero-argument factory"
        )


def _build(factory: Any, documents: tuple[StoreDocument, ...], where: str) -> Search:
    name = getattr(factory, "__name__", "the factory")
    try:
        store = factory()
    except Exception as exc:
        raise RetrieverError(f"{where}: {name}() failed ({error_text(exc)})") from None
    for method in ("index", "search"):
        if not callable(getattr(store, method, None)):
            raise RetrieverError(
                f"{where}: what {name}() returns (a {type(store).__name__}) has no {method}() "
                "method (expected index(documents) and search(query, top_k))"
            )
    try:
        store.index(list(documents))
    except Exception as exc:
        raise RetrieverError(
            f"{where}: index() of {len(documents)} documents failed ({error_text(exc)})"
        ) from None
    limit = store_timeout(store)
    if _takes_scopes(store.search):
        return Search(lambda q, k, scopes: store.search(q, k, principal_scopes=scopes), True, limit)
    return Search(lambda q, k, _scopes: store.search(q, k), timeout=limit)


def _takes_scopes(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "principal_scopes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


adapter(
    Adapter("python", _check, _build, "an object with index(documents) and search(query, top_k)")
)

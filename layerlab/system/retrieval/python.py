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
takes them by keyword also gets the requesting principal: ``tenant`` (whose documents it may
return), ``session_id`` (the request's session) and ``principal_scopes`` (its access scopes, a
frozenset; ``None``: unrestricted) — each one the signature names, all three for ``**kwargs`` —
so the store's own filter can act on each document's ``tenant``, ``session_id`` and
``access_scope`` metadata::

        def search(self, query, top_k, tenant=None, session_id=None):
            mine = [d for d in self.docs if tenant is None or (d.metadata["tenant"] == tenant
                    and d.metadata.get("session_id") in (None, session_id))]
            ...

A ``search`` that names ``transport`` (``def search(self, query, top_k, transport=None)``) meets
the transport faults (``scenarios_transport.yaml``) in its own call path: under such a scenario
it gets a callable to call where it makes each request to its service; the call raises the
fault's exception (``RateLimited``, a ``ConnectionError``, ``TimedOut``, ...: see
``layerlab.faults.transport``), so its own retry or error handling decides what it returns
(without transport faults it gets ``None``)::

        def search(self, query, top_k, transport=None):
            for attempt in range(3):
                try:
                    if transport is not None:
                        transport()  # the request to the store's service
                    return self._rank(query, top_k)
                except ConnectionError:
                    continue
            return []

Layerlab's access control applies after the search all the same; nothing filters by tenant or
session after it (the ``wrong_session_store`` scenario tests the store's own filter).
Each search has ``timeout`` seconds (the object's ``timeout`` attribute, else 30 s:
``STORE_TIMEOUT_S``); one that takes longer fails as a tool error (``timeout: no reply within
S s``).
"""

from __future__ import annotations

import inspect
from typing import Any

from layerlab.system.retrieval.external import (
    PRINCIPAL_KEYWORDS,
    TRANSPORT_KEYWORD,
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
    return Search(lambda q, k, kw: store.search(q, k, **dict(kw)), _takes(store.search),
                  store_timeout(store))


def _takes(fn: Any) -> tuple[str, ...]:
    """Which of :data:`PRINCIPAL_KEYWORDS` ``fn`` accepts by name (all of them: ``**kwargs``),
    and :data:`TRANSPORT_KEYWORD` when it names it (``**kwargs`` alone does not: a store meets
    transport faults only where it says it calls them)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    wire = (TRANSPORT_KEYWORD,) if TRANSPORT_KEYWORD in named else ()
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return PRINCIPAL_KEYWORDS + wire
    return tuple(k for k in PRINCIPAL_KEYWORDS if k in named) + wire


adapter(
    Adapter("python", _check, _build, "an object with index(documents) and search(query, top_k)")
)

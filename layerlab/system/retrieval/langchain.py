"""``--retriever langchain:my_rag:make_store``: a team's LangChain vector store or retriever.

``make_store(documents)`` receives a list of ``langchain_core.documents.Document`` (the
:class:`~layerlab.system.retrieval.external.StoreDocument` values as ``page_content``,
``metadata`` plus ``metadata["doc_id"]``, and ``id``) and returns a ``VectorStore`` (searched
with ``similarity_search_with_score(query, k=top_k)`` where the store implements it, else
``similarity_search``) or a ``BaseRetriever`` (``invoke(query)``, its first ``top_k``
documents: a retriever has no ``k`` argument). A result's id is its ``Document.id``, else its
``metadata["doc_id"]``::

    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.vectorstores import InMemoryVectorStore

    def make_store(documents):
        return InMemoryVectorStore.from_documents(documents, DeterministicFakeEmbedding(size=64))

The factory is called once per distinct scenario index. The request's principal (tenant, session,
scopes) is not passed (a LangChain filter's form is the store's own): layerlab's access control
filters the results by scope, and nothing filters by tenant or session, so under
``wrong_session_store`` such a store returns what it indexed of another tenant's; wrap it in a
``python:`` retriever whose ``search`` takes ``tenant`` and ``session_id`` to test its filter.
Needs ``langchain-core`` (the ``langchain`` extra).
"""

from __future__ import annotations

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


def _core() -> Any:
    try:
        from langchain_core import documents, retrievers, vectorstores
    except ImportError:
        raise RetrieverError(
            "--retriever langchain:...: needs langchain-core: pip install 'layerlab[langchain]'"
        ) from None
    return documents, retrievers, vectorstores


def _check(obj: Any, where: str) -> None:
    _core()
    if not callable(obj):
        raise RetrieverError(
            f"{where}: names a {type(obj).__name__}, not a factory of documents -> a VectorStore "
            "or BaseRetriever"
        )


def _result(doc: Any, score: Any = None) -> dict[str, Any]:
    """A LangChain document as a reply item: its id (``Document.id``, else ``doc_id`` in its
    metadata; none: ``parse_reply`` says so) and the store's score."""
    ident = getattr(doc, "id", None)
    if ident is None:
        ident = (getattr(doc, "metadata", None) or {}).get("doc_id")
    return {"id": ident, "score": score}


def _build(factory: Any, documents: tuple[StoreDocument, ...], where: str) -> Search:
    docs_mod, retr_mod, vs_mod = _core()
    lc = [
        docs_mod.Document(page_content=d.text, metadata={**d.metadata, "doc_id": d.id}, id=d.id)
        for d in documents
    ]
    name = getattr(factory, "__name__", "the factory")
    try:
        store = factory(lc)
    except Exception as exc:
        raise RetrieverError(
            f"{where}: {name}(documents) failed for {len(lc)} documents ({error_text(exc)})"
        ) from None
    if isinstance(store, vs_mod.VectorStore):
        with_score = type(store).similarity_search_with_score is not (
            vs_mod.VectorStore.similarity_search_with_score
        )

        def search(query: str, k: int, _kw: Any) -> Any:
            if with_score:
                return [_result(d, s) for d, s in store.similarity_search_with_score(query, k=k)]
            return [_result(d) for d in store.similarity_search(query, k=k)]

        return Search(search, timeout=store_timeout(store))
    if isinstance(store, retr_mod.BaseRetriever):

        def invoke(query: str, k: int, _kw: Any) -> Any:
            return [_result(d) for d in store.invoke(query)[:k]]

        return Search(invoke, timeout=store_timeout(store))
    raise RetrieverError(
        f"{where}: {name}(documents) returned a {type(store).__name__} (expected a LangChain "
        "VectorStore or BaseRetriever)"
    )


adapter(
    Adapter("langchain", _check, _build, "a factory of documents -> a VectorStore or BaseRetriever")
)

"""Bring your own retriever: a team's retriever or vector store as the search tool's first stage.

``--retriever python:my_rag:MyRetriever`` or ``--retriever langchain:my_rag:make_store`` (the
same string in a run configuration's ``retriever:`` and ``LiveConfig.retriever``) names the
team's code; one adapter module per kind registers itself here (:func:`adapter`):

* ``python`` (:mod:`~layerlab.system.retrieval.python`): ``MyRetriever()`` gives an object with
  ``index(documents)`` and ``search(query, top_k)``;
* ``langchain`` (:mod:`~layerlab.system.retrieval.langchain`): ``make_store(documents)`` returns
  a LangChain ``VectorStore`` or ``BaseRetriever`` over ``langchain_core`` documents.

Per scenario the store is handed the documents the scenario's index holds, as
:class:`StoreDocument` values (id, the text layerlab's own retrievers index, the tool payload's
metadata; nothing of the answer key), and indexes them once per distinct index (cached by the
documents' SHA-256 in this process, :func:`make`). Its reply to each query is checked
(:func:`parse_reply`): ids best first, ``(id, score)`` pairs or mappings with ``id``/``doc_id``
and an optional ``score``; an unknown id, a duplicate, more than ``top_k`` results, a wrong type
or an exception is a failed search — one line, counted (:func:`stats`), and the tool's reply is
an error (the contract then finds the tool unavailable) — never a crash of the run. Everything
after the search is layerlab's: access control, the tool-stage faults, the contract, the arm's
mitigations and the reader or target.

A search is made for a request's :class:`~layerlab.system.retrieval.base.Principal`; a store
whose ``search`` takes them gets its :data:`PRINCIPAL_KEYWORDS` (``tenant``, ``session_id``,
``principal_scopes``), so its own metadata filter can act (the ``wrong_session_store`` scenario
puts another tenant's documents in the index; nothing removes them after the store). A store
whose ``search`` names :data:`TRANSPORT_KEYWORD` meets a transport fault in its own call path:
under a scenario with transport faults it is asked anew for each tool call, with a
:class:`~layerlab.faults.transport.Wire` to call for each request to its service, which raises
the fault's exception (:meth:`ExternalRetriever.search_wired`); its own retry or error handling
decides the reply. A store is asked only what a run reads: each task's question when the task is run, and an agent's own
queries when it makes them; each distinct ``(query, top_k, the keywords it takes)`` once per
index.
"""

from __future__ import annotations

import hashlib
import math
import os
import queue
import re
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from layerlab._code import import_attr, module_code, user_frame
from layerlab._io import canonical_json
from layerlab._secrets import redact
from layerlab.corpus.build import Document
from layerlab.faults.transport import TransportError, Wire
from layerlab.registry import Registry
from layerlab.system.retrieval.base import (
    TOP_K,
    Principal,
    Ranking,
    RetrieverConfig,
    index_text,
    top_k,
)

SHAPES = "python:MODULE:FACTORY or langchain:MODULE:FACTORY"
METADATA = ("title", "domain", "status", "effective_year", "version", "owner", "access_scope",
            "tenant", "session_id")  # fmt: skip
"""The metadata a store receives: the search tool payload's fields (a ``None`` is left out:
vector stores such as Chroma refuse null metadata)."""
_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
CACHED_INDEXES = 32
"""Indexed stores kept per process (a run needs one per distinct scenario index)."""


class RetrieverError(ValueError):
    """A retriever that cannot be used (spec, module, attribute, factory, index): one line."""


@dataclass(frozen=True)
class StoreDocument:
    """One document as a team's store receives it: ``id`` (what its search returns), ``text``
    (the title and prose, as layerlab's own retrievers index them) and ``metadata``
    (:data:`METADATA`: the scenario's labels — a faulted index's labels as faulted)."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


def store_document(doc: Document) -> StoreDocument:
    """What the store receives of ``doc``: public fields only (no answer, no policy key)."""
    meta = {k: getattr(doc, k) for k in METADATA if getattr(doc, k) is not None}
    return StoreDocument(doc.doc_id, index_text(doc), meta)


def documents_sha256(docs: Iterable[StoreDocument]) -> str:
    """The index's identity: SHA-256 of the canonical JSON of every document, in order."""
    rows = [[d.id, d.text, dict(d.metadata)] for d in docs]
    return hashlib.sha256(canonical_json(rows).encode()).hexdigest()


# --- specs and adapters ---------------------------------------------------------------------

Scopes = frozenset[str] | None
PRINCIPAL_KEYWORDS = ("tenant", "session_id", "principal_scopes")
"""What a store's ``search`` may take of the request's principal, by keyword: its tenant, its
session id and its access scopes (a frozenset; ``None``: unrestricted)."""
Keywords = tuple[tuple[str, Any], ...]
TRANSPORT_KEYWORD = "transport"
"""The keyword a store's ``search`` names (explicitly: ``**kwargs`` does not take it) to meet the
transport faults in its own call path: a :class:`~layerlab.faults.transport.Wire` (or None
without transport faults), called once per request to its service."""


STORE_TIMEOUT_S = 30.0
"""How long one search of a team's store may take, unless the store's object says otherwise
(its ``timeout`` attribute: seconds, or None for no limit); a search past it fails
(``timeout: no reply within S s``, a tool error) and the run goes on."""
TRACES_KEPT = 20
"""Failed searches whose full traceback is kept for the run's error log (the first ones)."""


def store_timeout(store: Any) -> float | None:
    """The search timeout of ``store`` (its ``timeout`` attribute when a positive number or
    None, else :data:`STORE_TIMEOUT_S`)."""
    t = getattr(store, "timeout", STORE_TIMEOUT_S)
    if t is None or (isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0):
        return None if t is None else float(t)
    return STORE_TIMEOUT_S


@dataclass(frozen=True)
class Search:
    """A store's search: ``ask(query, top_k, keywords)`` -> its raw reply (checked by
    :func:`parse_reply`), ``keywords`` the principal's fields among ``takes`` (a subset of
    :data:`PRINCIPAL_KEYWORDS`, in that order: what the store's search accepts; the rest are
    not part of what it is asked), and its timeout."""

    ask: Callable[[str, int, Keywords], Any]
    takes: tuple[str, ...] = ()
    timeout: float | None = STORE_TIMEOUT_S

    @property
    def wired(self) -> bool:
        """Whether the search takes :data:`TRANSPORT_KEYWORD` (meets transport faults itself)."""
        return TRANSPORT_KEYWORD in self.takes


def keywords(takes: Sequence[str], principal: Principal | None, scopes: Scopes = None) -> Keywords:
    """The ``takes`` fields of ``principal`` as ``(keyword, value)`` pairs (no principal: no
    tenant, no session, ``scopes``)."""
    values: dict[str, Any] = {"tenant": None, "session_id": None, "principal_scopes": scopes}
    if principal is not None:
        values = {"tenant": principal.tenant, "session_id": principal.session_id,
                  "principal_scopes": principal.scopes}  # fmt: skip
    return tuple((k, values[k]) for k in PRINCIPAL_KEYWORDS if k in takes)


def error_text(exc: BaseException) -> str:
    """What a store's exception says, in one redacted line: its type, its message (cut after
    it is redacted) and where the team's code raised it (``stores.py:14 in search``)."""
    frame = user_frame(exc)
    text = redact(" ".join(str(exc).split()))[:200]
    return f"{type(exc).__name__}: {text}" + (f" at {frame}" if frame else "")


def _exit_words(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) (SystemExit)"
    return f"raised {type(exc).__name__}"


class _StoreThread:
    """A store's calls, one at a time, in a daemon thread of their own: a search has its
    timeout, and whatever the store's code raises (``sys.exit``, ``KeyboardInterrupt``
    included) comes back as its result instead of ending the run, while a real Ctrl-C still
    reaches the thread that waits. A thread stuck past a timeout is left behind (a daemon). A
    forked process (a live run's worker) inherits no thread: its first call starts its own."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Any] | None = None
        self._pid = -1  # the process whose thread serves ``_jobs``

    def _start(self) -> queue.SimpleQueue[Any]:
        jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def work() -> None:
            while True:
                fn, box, done = jobs.get()
                try:
                    box.append((True, fn()))
                except BaseException as exc:  # noqa: BLE001 - the store's, returned as a value
                    box.append((False, exc))
                done.set()

        threading.Thread(target=work, daemon=True, name="layerlab-store").start()
        return jobs

    def run(self, fn: Callable[[], Any], timeout: float | None) -> tuple[bool, Any]:
        """(True, fn()) or (False, what it raised); :class:`TimeoutError` past ``timeout``."""
        if self._jobs is None or self._pid != os.getpid():  # none yet, or one of the parent's
            self._jobs, self._pid = self._start(), os.getpid()
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if not done.wait(timeout):
            self._jobs = None  # that thread is stuck: the next call gets a new one
            raise TimeoutError
        return box[0]


@dataclass(frozen=True)
class Adapter:
    """One kind of external retriever: ``check(obj, where)`` refuses a factory that cannot be
    one (before a run starts); ``build(obj, documents, where)`` indexes the documents and
    returns the store's search."""

    kind: str
    check: Callable[[Any, str], None]
    build: Callable[[Any, tuple[StoreDocument, ...], str], Search]
    describe: str = ""


ADAPTERS: Registry[Adapter] = Registry("external retriever kind", lambda a: a.kind)


def adapter(a: Adapter) -> Adapter:
    """Register an external retriever kind (one module of this package per kind)."""
    return ADAPTERS.register(a)


def is_external(spec: str) -> bool:
    """Whether ``spec`` names a team's retriever (``KIND:MODULE:ATTR``), not a registered one."""
    return ":" in spec


def split(spec: str, where: str = "--retriever") -> tuple[str, str]:
    """``(kind, module:attr)`` of an external spec; :class:`RetrieverError` when malformed."""
    kind, _, ref = spec.strip().partition(":")
    if kind not in ADAPTERS:
        raise RetrieverError(
            f"{where} {spec}: unknown retriever kind {kind!r} (expected a registered retriever "
            f"name or {SHAPES})"
        )
    if not _REF.fullmatch(ref):
        raise RetrieverError(
            f"{where} {spec}: expected {kind}:MODULE:FACTORY, e.g. {kind}:my_rag:make_store"
        )
    return kind, ref


def load(spec: str, where: str = "--retriever") -> tuple[Adapter, Any]:
    """The kind's adapter and the factory the spec names (imported, checked, not called)."""
    kind, ref = split(spec, where)
    a = ADAPTERS.lookup(kind)
    obj = import_attr(ref, f"{where} {spec}", RetrieverError)
    a.check(obj, f"{where} {spec}")
    return a, obj


def check(spec: str, where: str = "--retriever") -> None:
    """Refuse, in one line naming ``where``, a spec whose module, attribute or kind is wrong."""
    load(spec, where)


def fingerprint(spec: str) -> dict[str, str]:
    """What a run's identity keeps of the retriever's code: its module's and package's SHA-256
    (``_code.module_code``, as targets have), so a changed retriever is another run."""
    load(spec)
    return module_code(split(spec)[1].partition(":")[0])


# --- the reply ------------------------------------------------------------------------------


class ReplyError(ValueError):
    """A store's reply that is not a ranking of indexed ids (the message says what is wrong)."""


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    return float(x) if math.isfinite(float(x)) else None


def _item(r: Any, i: int) -> tuple[Any, Any]:
    if isinstance(r, str):
        return r, None
    if isinstance(r, Mapping):
        ident = r.get("id") if r.get("id") is not None else r.get("doc_id")
        if ident is None:
            raise ReplyError(f"result {i} has no 'id' or 'doc_id'")
        return ident, r.get("score")
    if isinstance(r, (tuple, list)) and len(r) == 2:
        return r[0], r[1]
    raise ReplyError(
        f"result {i} is a {type(r).__name__} (expected an id, an (id, score) pair or a mapping "
        "with 'id' or 'doc_id')"
    )


def parse_reply(reply: Any, k: int, known: Mapping[str, int]) -> list[tuple[int, float | None]]:
    """``[(document position, score or None)]`` best first from a store's reply to a search
    for ``k`` results over the documents ``known`` (id -> position); :class:`ReplyError`."""
    if isinstance(reply, (str, bytes, Mapping)) or not isinstance(reply, Iterable):
        raise ReplyError(f"returned a {type(reply).__name__} (expected a list of results)")
    out: list[tuple[int, float | None]] = []
    seen: set[str] = set()
    for i, r in enumerate(reply):
        if i >= k:
            raise ReplyError(f"returned more than top_k={k} results")
        ident, score = _item(r, i)
        if not isinstance(ident, str):
            raise ReplyError(f"result {i}'s id is a {type(ident).__name__} (expected a string)")
        if ident not in known:
            raise ReplyError(f"returned the unknown id {ident[:80]!r} (not a document it indexed)")
        if ident in seen:
            raise ReplyError(f"returned {ident!r} twice")
        seen.add(ident)
        value = None if score is None else _number(score)
        if score is not None and value is None:
            raise ReplyError(f"result {i}'s score is {score!r} (expected a finite number)")
        out.append((known[ident], value))
    return out


# --- the fitted retriever -------------------------------------------------------------------


class ExternalRetriever:
    """A team's retriever fitted (indexed) on one index; searched one query at a time.

    Its :meth:`search` keeps the store's order (best first, whatever its scores mean: a
    similarity or a distance); a result without a score gets ``1 / rank``. :meth:`score` (what
    the retriever audit ranks) asks for every document and scores the reply's order."""

    def __init__(self, spec: str, documents: Sequence[Document], a: Adapter, factory: Any):
        self.config = RetrieverConfig(spec, kind=a.kind, description=f"external: {spec}")
        self.documents = tuple(documents)
        self.store_documents = tuple(store_document(d) for d in self.documents)
        self._known = {d.doc_id: j for j, d in enumerate(self.documents)}
        started = time.perf_counter()
        self._thread = _StoreThread()
        where = f"--retriever {spec}"
        ok, got = self._thread.run(lambda: a.build(factory, self.store_documents, where), None)
        if not ok:
            if isinstance(got, (SystemExit, KeyboardInterrupt)):
                raise RetrieverError(
                    f"{where}: the store {_exit_words(got)} while it was made or indexed (a "
                    "store returns or raises; it must not end the process)"
                ) from None
            raise got
        self._search: Search = got
        self.index_seconds = time.perf_counter() - started
        self.searches = 0
        self.failures: list[str] = []
        self._asked: dict[tuple[str, int, Keywords], tuple[list[tuple[int, float | None]], str]] = {}
        self._lock = threading.Lock()
        self._asking: dict[tuple[str, int, Keywords], threading.Lock] = {}
        self.traces: list[tuple[str, str]] = []  # (line, traceback) of the first failures

    def _one(
        self, query: str, k: int, kw: Keywords = ()
    ) -> tuple[list[tuple[int, float | None]], str]:
        """The store's checked reply to ``(query, k)`` with the principal's keywords it takes,
        asked once per index (the search is a function of the index and what it is asked, as
        layerlab's own retrievers are: a retry of the tool re-sends its reply, it does not
        search again). Records in flight on other threads that need the same search wait for
        the one asking; different searches go to the store side by side."""
        ck = (query, k, kw)
        with self._lock:
            if ck in self._asked:
                return self._asked[ck]
            one = self._asking.setdefault(ck, threading.Lock())
        with one:
            if ck not in self._asked:  # else another thread asked it while this one waited
                got = self._ask(*ck)
                with self._lock:
                    self._asked[ck] = got
                    self._asking.pop(ck, None)
        return self._asked[ck]

    @property
    def wired(self) -> bool:
        """Whether the store meets transport faults in its own call path (its ``search`` takes
        :data:`TRANSPORT_KEYWORD`)."""
        return self._search.wired

    def search_wired(
        self, query: str, k: int, principal: Principal | None, scopes: Scopes, wire: Wire
    ) -> tuple[Ranking, TransportError | None]:
        """One search asked anew (never cached: what it meets depends on the call), ``wire`` as
        its ``transport`` keyword: the ranking of what it returned (a failure: its error), and
        the transport fault's exception when the store let it escape (None: it answered, or
        failed otherwise)."""
        kw = (*keywords(self._search.takes, principal, scopes), (TRANSPORT_KEYWORD, wire))
        escaped: list[TransportError] = []
        got, err = self._ask(query, k, kw, escaped) if self.documents else ([], "")
        idx = np.full((1, k), -1, dtype=np.int64)
        scores = np.full((1, k), -np.inf)
        for j, (pos, s) in enumerate(got):
            idx[0, j], scores[0, j] = pos, 1.0 / (j + 1) if s is None else s
        return Ranking(idx, scores, self.documents, (err,)), (escaped[0] if escaped else None)

    def _ask(
        self, query: str, k: int, kw: Keywords, escaped: list[TransportError] | None = None
    ) -> tuple[list[tuple[int, float | None]], str]:
        """The store asked once: its checked reply, or ``[]`` and the failure's line (a transport
        fault's exception that escaped it is also appended to ``escaped``)."""
        with self._lock:
            self.searches += 1
        trace = ""
        shown = query if len(query) <= 60 else query[:57] + "..."
        try:
            ok, got = self._thread.run(lambda: self._search.ask(query, k, kw),
                                       self._search.timeout)  # fmt: skip
            if ok:
                return parse_reply(got, k, self._known), ""
            if isinstance(got, (SystemExit, KeyboardInterrupt)):
                raise RetrieverError(
                    f"--retriever {self.config.name}: the store {_exit_words(got)} in "
                    f"search({shown!r}) (a store returns or raises; it must not end the process)"
                )
            raise got
        except TimeoutError:
            why = f"timeout: no reply within {self._search.timeout:g} s"
        except ReplyError as exc:
            why = redact(str(exc))
        except RetrieverError:
            raise
        except Exception as exc:  # the team's code failed: a tool error, never a crash
            why = f"raised {error_text(exc)}"
            if isinstance(exc, TransportError) and escaped is not None:
                escaped.append(exc)
            trace = redact("".join(traceback.format_exception(exc)))
        message = f"search({shown!r}, top_k={k}) {why}"
        self.failures.append(message)
        if len(self.traces) < TRACES_KEPT:
            self.traces.append((message, trace))
        return [], message

    def search(
        self,
        questions: Sequence[str],
        labelled_domains: Sequence[str] | None = None,
        k: int | None = None,
        principal_scopes: Scopes = None,
        principals: Sequence[Principal] | None = None,
    ) -> Ranking:
        """Each question's results in the store's order (``labelled_domains`` is not used: a
        store sees only the question). The principal (``principals``, one per question, else
        ``principal_scopes`` alone) reaches a store whose ``search`` takes its keywords."""
        k = TOP_K if k is None else k
        n = len(questions)
        idx = np.full((n, k), -1, dtype=np.int64)
        scores = np.full((n, k), -np.inf)
        errors = []
        for i, q in enumerate(questions):
            p = principals[i] if principals is not None else None
            kw = keywords(self._search.takes, p, principal_scopes)
            got, err = self._one(q, k, kw) if self.documents else ([], "")
            errors.append(err)
            for j, (pos, s) in enumerate(got):
                idx[i, j], scores[i, j] = pos, 1.0 / (j + 1) if s is None else s
        return Ranking(idx, scores, self.documents, tuple(errors))

    def score(
        self, questions: Sequence[str], labelled_domains: Sequence[str] | None = None
    ) -> NDArray[np.float64]:
        """``(n_queries, n_documents)``: ``1 / rank`` for every document the store returned
        when asked for all of them, ``-inf`` for the rest (a failed search: all ``-inf``)."""
        n_d = len(self.documents)
        out = np.full((len(questions), n_d), -np.inf)
        kw = keywords(self._search.takes, None)  # the audit asks for no one in particular
        for i, q in enumerate(questions):
            got, _ = self._one(q, n_d, kw) if n_d else ([], "")
            for j, (pos, _s) in enumerate(got):
                out[i, pos] = 1.0 / (j + 1)
        return out

    def rank(self, scores: NDArray[np.float64], k: int | None = None) -> Ranking:
        return top_k(scores, self.config.top_k if k is None else k, self.documents)


_CACHE: OrderedDict[tuple[str, int, str], ExternalRetriever] = OrderedDict()


def make(spec: str, documents: Sequence[Document]) -> ExternalRetriever:
    """The team's retriever indexed on ``documents``: built (the factory called, ``index``
    run) once per distinct index in this process, then reused (by the documents' SHA-256)."""
    a, factory = load(spec)
    digest = documents_sha256(store_document(d) for d in documents)
    ck = (spec, id(factory), digest)
    if ck in _CACHE:
        _CACHE.move_to_end(ck)
        return _CACHE[ck]
    r = ExternalRetriever(spec, documents, a, factory)
    _CACHE[ck] = r
    while len(_CACHE) > CACHED_INDEXES:
        _CACHE.popitem(last=False)
    return r


@dataclass(frozen=True)
class Stats:
    """What a team's retriever did in this process: indexes built, their time, searches made,
    failed searches and the first failure's line."""

    indexes: int
    index_seconds: float
    searches: int
    failed: int
    first_failure: str = ""
    traces: tuple[tuple[str, str], ...] = ()  # (line, traceback) of the first failed searches

    def line(self, spec: str) -> str:
        out = (f"retriever {spec}: {self.indexes} index(es) built in {self.index_seconds:.2f} s, "
               f"{self.searches} searches")  # fmt: skip
        if self.failed:
            out = (f"warning: {out}, {self.failed} failed (each a tool error, found unavailable; "
                   f"first: {self.first_failure})")  # fmt: skip
        return out


def stats(spec: str) -> Stats:
    """:class:`Stats` over every index of ``spec`` cached in this process."""
    rs = [r for (s, _, _), r in _CACHE.items() if s == spec]
    fails = [m for r in rs for m in r.failures]
    return Stats(len(rs), sum(r.index_seconds for r in rs), sum(r.searches for r in rs),
                 len(fails), fails[0] if fails else "",
                 tuple(t for r in rs for t in r.traces)[:TRACES_KEPT])  # fmt: skip


def clear() -> None:
    """Forget every indexed store (tests, or to free a large store's memory)."""
    _CACHE.clear()

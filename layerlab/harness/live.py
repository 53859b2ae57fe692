"""The live harness: the deterministic pipeline with a model (through litellm) as the reader.

Same tasks, scenarios, mitigation arms, retriever and scorer as :mod:`layerlab.harness.deterministic`. What it
adds is what a provider run needs to be trustworthy:

* a hard **budget** on provider calls (retries included), checked before every attempt;
* a **preflight**: the first call of every model/endpoint must succeed before any record is
  written, so a misspelt model, a missing key or a dead endpoint is a one-line setup error,
  not a run of ``provider_error`` records;
* a **response cache** keyed by model, request parameters and prompt hash, so a rerun or a
  rescoring makes no new calls. It holds model replies, so it lives outside the run folder (a
  user cache directory by default, :func:`default_cache_dir`) and never reaches an archive;
* **retries** of 429s, 5xx and timeouts with seeded, jittered exponential backoff honouring
  ``Retry-After``, then a labelled failure record; the error rate per model is reported and a
  run above ``max_error_rate`` is flagged (the CLI exits non-zero);
* an append-only progress log with a **checksum per line** and **atomic** final writes, so a
  run killed at any moment (SIGKILL included) resumes with ``resume=True`` to exactly one
  record per cell and task; damaged or tampered lines are dropped, reported and recomputed;
* a **run manifest** whose ``run_id`` is a hash of everything that determines the records, so
  merged archives never count a run twice and a resume with different settings is refused. It
  carries the provenance hashes and cumulative call counts, and names the endpoint only as
  local or remote (never credentials or a host name).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import hashlib
import ipaddress
import json
import os
import random
import re
import time
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from layerlab import __version__, mitigations
from layerlab._io import atomic_write_text, canonical_json
from layerlab.analysis import results
from layerlab.archive import archive, samplelog
from layerlab.archive.archive import Record
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.faults.scenario import Scenario
from layerlab.harness import deterministic as harness
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import Reading, RecordContext, RecordStep, gate
from layerlab.models import local as models_mod
from layerlab.models.llm import ProviderSettings, import_litellm, retry_after_of
from layerlab.system import prompt, retrieval

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})
FATAL_STATUS = frozenset({401, 403, 404})
DEFAULT_MAX_ERROR_RATE = 0.2
"""Share of a model's provider calls that may end in ``provider_error`` before the run is
flagged: above it the archive is still written (it is data) but the run counts as failed."""



class LiveRunError(RuntimeError):
    """A run that cannot go on (bad settings, fatal provider error, resume mismatch)."""


@dataclass(frozen=True)
class LiveConfig:
    """Everything that determines a live run's records (budget and concurrency do not)."""

    models: tuple[str, ...]
    scenarios: tuple[str, ...]
    mitigations: tuple[str, ...] = harness.MODES
    task_ids: tuple[str, ...] | None = None
    settings: ProviderSettings = field(default_factory=ProviderSettings)
    retriever: str = retrieval.REPORTED.name
    # Each cell is an independent draw: one call per record, ``replicates`` records per cell.
    replicates: int = 1
    # Share one reply between records whose prompts are identical: it forces every difference
    # between arms on an unchanged prompt to zero. ``None`` (the default) shares exactly when
    # decoding is greedy (temperature 0), where a reply is a function of its prompt: a server's
    # floating-point noise (prompt-prefix reuse, batch shapes) is then not read as an effect.
    share_replies: bool | None = None
    # "json_schema": ask the server to constrain decoding to the reply contract (REPLY_SCHEMA).
    response_format: Literal["none", "json_schema"] = "none"
    # Base of the per-record seeds sent to servers that honour one (local models always get
    # one, base 0 unless given; other providers only when it is given).
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.replicates < 1:
            raise ValueError("replicates must be >= 1")
        settings = self.settings
        if settings.temperature is None and self.models and all(map(models_mod.is_local, self.models)):
            # local models decode greedily unless a run says otherwise (llama.cpp's server
            # would otherwise sample at its own default of 0.8)
            settings = dataclasses.replace(settings, temperature=0.0)
            object.__setattr__(self, "settings", settings)
        if self.share_replies is None:
            object.__setattr__(self, "share_replies", settings.temperature == 0)
        if self.response_format not in ("none", "json_schema"):
            raise ValueError("response_format must be 'none' or 'json_schema'")


def sampling(config: LiveConfig) -> dict[str, Any]:
    """How replies were decoded, for the manifest and every caption of real-model numbers."""
    s = config.settings
    return {
        "decoding": s.decoding,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": config.seed,
        "replicates": config.replicates,
        "share_replies": config.share_replies,
    }


@dataclass
class Counters:
    records: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    failures: int = 0
    skipped_done: int = 0
    # successful calls of this invocation: seconds from request sent to reply (queue time not
    # included) and the token counts the server reported; summarised in the manifest only
    latencies: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def usage(self) -> dict[str, Any]:
        """Latency quantiles and token totals of this invocation's answered calls."""
        if not self.latencies:
            return {"answered_calls": 0}
        q = pd.Series(self.latencies).quantile([0.5, 0.9])
        n = len(self.latencies)
        return {
            "answered_calls": n,
            "latency_s_median": round(float(q[0.5]), 3),
            "latency_s_p90": round(float(q[0.9]), 3),
            "prompt_tokens_mean": round(self.prompt_tokens / n, 1),
            "completion_tokens_mean": round(self.completion_tokens / n, 1),
        }


@dataclass(frozen=True)
class LiveResult:
    out: Path
    manifest: dict[str, Any]
    counters: Counters
    complete: bool
    message: str
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    over_error_rate: tuple[str, ...] = ()
    """Models whose provider-error rate exceeded ``max_error_rate``: the run counts as failed."""
    cache_dir: Path | None = None


def split_model(model: str) -> tuple[str, str]:
    """(provider, model name) of a litellm model string like ``openai/gpt-4o-mini``."""
    if "/" in model:
        provider, name = model.split("/", 1)
        return provider, name
    return "unknown", model


# --- redaction: what a manifest may say about an endpoint ------------------------------------


def endpoint_for_hashing(api_base: str | None) -> str | None:
    """``api_base`` without ``user:password@``, query or fragment (what :func:`redact` also
    removes from messages)."""
    if not api_base:
        return None
    u = urllib.parse.urlsplit(api_base)
    try:
        port = u.port
    except ValueError:
        port = None
    netloc = (u.hostname or "") + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, "", ""))


def endpoint_label(api_base: str | None) -> str | None:
    """``local`` (loopback) or ``remote``: all a manifest records about an endpoint."""
    if not api_base:
        return None
    host = (urllib.parse.urlsplit(api_base).hostname or "").strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return "local"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "remote"
    return "local" if ip.is_loopback or ip.is_unspecified else "remote"


def redact(text: str, api_base: str | None = None) -> str:
    """``text`` with any ``scheme://user:secret@`` credentials and the raw endpoint removed."""
    text = re.sub(r"(\w+://)[^/\s@]+@", r"\1", text)
    if api_base:
        text = text.replace(api_base, "<api-base>")
        bare = endpoint_for_hashing(api_base)
        if bare:
            text = text.replace(bare, "<api-base>")
    return text


def api_base_problem(api_base: str) -> str | None:
    """Why ``api_base`` is not a usable endpoint URL, or None."""
    u = urllib.parse.urlsplit(api_base)
    if u.scheme not in ("http", "https") or not u.hostname:
        return "expected an http(s) URL such as http://127.0.0.1:8080/v1"
    try:
        u.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return "the port is not a number in 1-65535"
    return None


def default_cache_dir() -> Path:
    """Where replies are cached unless told otherwise: ``$LAYERLAB_CACHE_DIR``, else ``replies/``
    in the user cache (:func:`layerlab.paths.user_cache`: ``$LAYERLAB_CACHE``, else
    ``$XDG_CACHE_HOME/layerlab``, else ``~/.cache/layerlab``). Never inside a run folder: the
    cache holds model replies (answers and cited document ids)."""
    from layerlab import paths

    env = os.environ.get("LAYERLAB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return paths.user_cache() / "replies"


WRITER_POLL_S = 0.02
"""How often the reply cache's writer thread looks for queued replies."""

CACHE_DB = "replies.sqlite3"
"""The reply cache's database file inside the cache folder."""
_FORKED_AWAY: list[Any] = []  # connections a forked process inherited and must not touch


class ResponseCache:
    """Model replies keyed by (model, params, prompt hash, record), in one SQLite database.

    ``<folder>/replies.sqlite3`` (write-ahead log; several runs and worker processes may share
    it). Writes go to a background thread that commits what has queued up in one transaction (a
    file per reply cost 0.36 ms of CPU each on ext4, most of a cached call's cost; a batched
    insert costs 0.01 ms); :meth:`get` sees a pending write at once, and :meth:`flush` waits for
    them. A write lost to a kill only costs a repeated call. Entries of the older layout (one
    JSON file per reply, ``<folder>/<key[:2]>/<key>.json``) are still read. Where SQLite cannot
    open the database (some network file systems), replies are written in that older layout.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        # replies the preflight asked for in this invocation: their records count them as
        # calls, not cache hits
        self.preflighted: set[str] = set()
        self._made: set[str] = set()  # shard folders known to exist (older layout)
        self._listed: dict[str, set[str]] = {}  # shard -> entry file names seen or written
        self._legacy: bool | None = None  # whether the folder holds older-layout entries
        self._pending: dict[str, str] = {}
        self._queue: Any = None
        self._pid = -1  # the process whose writer thread this is (a forked worker starts its own)
        self._stop: Any = None
        self._thread: Any = None
        self._db: Any = None  # this process's reading connection (not carried across a fork)
        self._db_pid = -1
        self._db_failed = False

    @staticmethod
    def key(
        model: str, params: Mapping[str, Any], phash: str, record: Sequence[Any] = ()
    ) -> str:
        """Key of one reply: model, request parameters, prompt hash and the record's identity
        (scenario, mode, task, replicate), so that each record is its own draw; ``record=()``
        shares one reply between identical prompts (``share_replies``)."""
        ident: dict[str, Any] = {"m": model, "p": dict(params), "h": phash}
        if record:
            ident["r"] = list(record)
        return hashlib.sha256(canonical_json(ident).encode()).hexdigest()

    def _connect(self) -> Any:
        """A new connection to the database (created if missing), or None where SQLite cannot
        use the folder."""
        import sqlite3

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(
                self.folder / CACHE_DB, timeout=60, isolation_level=None, check_same_thread=False
            )
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")  # a lost entry costs a call, never a record
            con.execute(
                "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL) "
                "WITHOUT ROWID"
            )
            return con
        except (sqlite3.Error, OSError, ValueError):  # ValueError: a path SQLite cannot take
            return None

    def _reader(self) -> Any:
        if self._db_pid != os.getpid():
            if self._db is not None:  # opened before a fork: SQLite forbids using (or closing)
                _FORKED_AWAY.append(self._db)  # it in the child, so it is kept, untouched
            self._db, self._db_pid = (None if self._db_failed else self._connect()), os.getpid()
            self._db_failed = self._db is None
        return self._db

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], f"{key}.json")

    def _known(self, key: str) -> bool:
        """Whether ``key`` may be on disk in the older layout: each shard folder is listed once
        (a failed ``open`` per record costs more than the listing on slow file systems)."""
        if self._legacy is None:
            try:
                self._legacy = any(
                    e.is_dir() and len(e.name) == 2 for e in os.scandir(self.folder)
                )
            except OSError:
                self._legacy = False
        if not self._legacy and not self._db_failed:
            return False
        shard = key[:2]
        names = self._listed.get(shard)
        if names is None:
            try:
                names = {e.name for e in os.scandir(os.path.join(self.folder, shard))}
            except OSError:
                names = set()
            self._listed[shard] = names
        return f"{key}.json" in names

    def get(self, key: str) -> str | None:
        import sqlite3

        pending = self._pending.get(key)
        if pending is not None:
            return pending
        db = self._reader()
        if db is not None:
            try:
                row = db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
            except sqlite3.Error:
                row = None
            if row is not None:
                return str(row[0])
        if not self._known(key):
            return None
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                return str(json.loads(fh.read())["reply"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, reply: str) -> None:
        """Queue one reply for the writer thread (started on first use in each process)."""
        if self._pid != os.getpid():
            import collections
            import threading

            self._pid, self._pending, self._queue = os.getpid(), {}, collections.deque()
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._writer, args=(self._queue, self._stop), daemon=True
            )
            self._thread.start()
        self._pending[key] = reply
        self._queue.append(key)  # no wake-up: the writer polls (a notify per reply costs more)

    def flush(self) -> None:
        """Wait until every queued reply is on disk."""
        if self._queue is not None and self._pid == os.getpid():
            while self._pending:
                time.sleep(WRITER_POLL_S / 4)

    def close(self) -> None:
        """Write what is queued and stop this process's writer thread (woken at once, not at its
        next poll); a later :meth:`put` starts another."""
        if self._queue is not None and self._pid == os.getpid():
            self._stop.set()
            self._thread.join()
            self._pid = -1

    def _writer(self, q: Any, stop: Any) -> None:
        db = None if self._db_failed else self._connect()
        self._db_failed = db is None
        try:
            while True:
                if not q:
                    if stop.is_set():
                        return
                    stop.wait(WRITER_POLL_S)
                    continue
                batch: dict[str, str] = {}
                while q:
                    key = q.popleft()
                    reply = self._pending.get(key)
                    if reply is not None:  # None: an earlier item of the same key wrote it
                        batch[key] = reply
                try:
                    self._write_batch(db, batch)
                except Exception:  # noqa: BLE001 - a cache entry not written only costs a call
                    pass
                finally:
                    for key, reply in batch.items():
                        if self._pending.get(key) is reply:  # not replaced by a later put
                            self._pending.pop(key, None)
        finally:
            if db is not None:
                db.close()

    def _write_batch(self, db: Any, batch: Mapping[str, str]) -> None:
        if db is None:
            for key, reply in batch.items():
                self.write(key, reply)
            return
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?)", batch.items())
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def write(self, key: str, reply: str) -> None:
        """Write one reply now in the older layout, atomically (a temporary file renamed over
        the entry): the fallback where SQLite cannot open the folder. A lost entry only costs a
        repeated call, so there is no fsync."""
        shard = key[:2]
        if shard not in self._made:
            os.makedirs(os.path.join(self.folder, shard), exist_ok=True)
            self._made.add(shard)
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"  # one writer per key per process (inflight dedupe)
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(json.dumps({"reply": reply}))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        names = self._listed.get(shard)
        if names is not None:  # a shard not listed yet is listed (with this entry) when read
            names.add(f"{key}.json")


class Budget:
    """Hard cap on provider calls; ``None`` means unlimited."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit


@dataclass
class _Endpoint:
    """One server of a model; ``slots`` bounds the requests it is sent at once."""

    api_base: str | None
    slots: asyncio.Semaphore
    busy: int = 0


@dataclass
class Route:
    """How the calls of one ``-m`` model are made: litellm model, endpoints, request shape."""

    model: str  # litellm model string
    endpoints: list[_Endpoint]
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a local server's placeholder key
    merge_system: bool = False
    response_format: dict[str, Any] | None = None
    seed_base: int | None = None

    def request(self, msgs: list[dict[str, str]], seed: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(self.extra)
        kwargs["messages"] = prompt.merge_system(msgs) if self.merge_system else msgs
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        if seed is not None:
            kwargs["seed"] = seed
        return kwargs

    @contextlib.asynccontextmanager
    async def endpoint(self, affinity: str | None = None) -> AsyncIterator[_Endpoint]:
        """An endpoint, once it has a free slot (time queued there is not request time).

        With an ``affinity`` key (the prompt hash), the same prompt always goes to the same
        server, so a server that caches the previous prompt's prefix (llama.cpp, vLLM) reads
        the repeated prompt of a record's strict and repair arms once; otherwise the least busy.
        """
        if affinity is not None and len(self.endpoints) > 1:
            ep = self.endpoints[int(affinity[:8], 16) % len(self.endpoints)]
        else:
            ep = min(self.endpoints, key=lambda e: e.busy)
        ep.busy += 1
        try:
            async with ep.slots:
                yield ep
        finally:
            ep.busy -= 1


def response_format_for(kind: str, local: bool) -> dict[str, Any] | None:
    """The ``response_format`` that asks a server to follow the reply contract.

    llama-cpp-python's server takes ``{"type": "json_object", "schema": ...}`` (a grammar);
    OpenAI-style structured outputs, vLLM and litellm's Ollama/Gemini mappings take
    ``{"type": "json_schema", ...}``.
    """
    if kind == "none":
        return None
    if local:
        return {"type": "json_object", "schema": prompt.REPLY_SCHEMA}
    return {
        "type": "json_schema",
        "json_schema": {"name": "layerlab_reply", "schema": prompt.REPLY_SCHEMA, "strict": True},
    }


def record_seed(base: int, model: str, scenario: str, mode: str, task_id: str, rep: int) -> int:
    """A per-record seed (stable across runs), so a rerun without the cache can reproduce replies."""
    ident = canonical_json([base, model, scenario, mode, task_id, rep])
    return int(hashlib.sha256(ident.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def routes_for(
    config: LiveConfig, concurrency: int, local: Mapping[str, Sequence[str]] | None = None
) -> dict[str, Route]:
    """A :class:`Route` per model. ``local`` maps a ``local/NAME`` model to its servers' URLs."""
    from layerlab.models import local as models_mod

    local = local or {}
    routes: dict[str, Route] = {}
    for m in config.models:
        if m in local:
            spec = models_mod.lookup(m)
            routes[m] = Route(
                model=f"openai/{spec.name}",
                endpoints=[_Endpoint(b, asyncio.Semaphore(1)) for b in local[m]],
                extra={"api_key": models_mod.PLACEHOLDER_KEY},
                merge_system=spec.system_prompt == "merge",
                response_format=response_format_for(config.response_format, local=True),
                seed_base=config.seed if config.seed is not None else 0,
            )
        else:
            bases: Sequence[str | None] = config.settings.api_bases or (None,)
            routes[m] = Route(
                model=m,
                endpoints=[_Endpoint(b, asyncio.Semaphore(concurrency)) for b in bases],
                response_format=response_format_for(config.response_format, local=False),
                seed_base=config.seed,
            )
    return routes


def _status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "status_code", None)
    return int(code) if isinstance(code, int) else None


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in {
        "Timeout",
        "APIConnectionError",
        "RateLimitError",
        "InternalServerError",
        "ServiceUnavailableError",
        "BadGatewayError",
    }:
        return True
    code = _status_of(exc)
    return code in RETRYABLE_STATUS if code is not None else False


def run_id_for(config: LiveConfig, corpus: Corpus, scenario_hash: str) -> str:
    ident = {
        "v": __version__,
        "corpus": corpus.spec_hash,
        "scenarios_spec": scenario_hash,
        "config": {**asdict(config), "settings": config.settings.as_dict()},
        "prompt": prompt.PROMPT_VERSION,
    }
    if config.response_format != "none":
        ident["reply_schema"] = prompt.REPLY_SCHEMA_VERSION
    return "live-" + hashlib.sha256(canonical_json(ident).encode()).hexdigest()[:16]


def _manifest(
    config: LiveConfig, corpus: Corpus, scenario_hash: str, n_tasks: int
) -> dict[str, Any]:
    settings = {
        **config.settings.as_dict(),
        # where the model was served, only as local or remote: never a host, user or key
        "endpoints": [endpoint_label(b) for b in config.settings.api_bases],
    }
    task_ids = config.task_ids if config.task_ids is not None else [t.task_id for t in corpus.tasks]
    return {
        "run_id": run_id_for(config, corpus, scenario_hash),
        "kind": "live",
        "layerlab_version": __version__,
        "corpus": corpus.name,
        "provenance": archive.provenance_for(corpus, scenario_hash, task_ids),
        "models": list(config.models),
        "scenarios": list(config.scenarios),
        "mitigations": list(config.mitigations),
        "n_tasks": n_tasks,
        "retriever": config.retriever,
        "settings": settings,
        "prompt_version": prompt.PROMPT_VERSION,
        "replicates": config.replicates,
        "share_replies": config.share_replies,
        "sampling": sampling(config),
        "response_format": config.response_format,
        **(
            {"reply_schema": prompt.REPLY_SCHEMA_VERSION}
            if config.response_format != "none"
            else {}
        ),
        "seed": config.seed,
        "seeds": "per record, derived from (seed, model, scenario, mode, task, replicate); "
        "sent to local models always (seed 0 unless given), to other providers only when given",
        "expected_records": len(config.models)
        * len(config.scenarios)
        * len(config.mitigations)
        * n_tasks
        * config.replicates,
    }


# --- the progress log: one checksummed JSON line per record ------------------------------------

_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Record)}


def _line_sum(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(row)).encode()).hexdigest()[:16]


def progress_line(rec: Record) -> str:
    """One log line: the record's fields plus ``sum``, a checksum over them."""
    row = {name: getattr(rec, name) for name in _FIELD_TYPES}  # flat: no deep-copying asdict
    return json.dumps({**row, "sum": _line_sum(row)}, sort_keys=True) + "\n"


def _typed(row: Mapping[str, Any]) -> bool:
    if set(row) != set(_FIELD_TYPES):
        return False
    for name, kind in _FIELD_TYPES.items():
        v = row[name]
        ok = {
            "bool": isinstance(v, bool),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "str": isinstance(v, str),
            "str | None": v is None or isinstance(v, str),
            "bool | None": v is None or isinstance(v, bool),
            "float | None": v is None or (isinstance(v, float) and 0.0 <= v <= 1.0),
        }.get(str(kind), False)
        if not ok:
            return False
    return True


_V2_ADDED = ("answerable", "domain")  # record fields archive schema 3 added
_V3_ADDED = ("grounded_cited", "contained", "token_f1")  # record fields archive schema 4 added


def _from_v2(row: dict[str, Any], answerable: Mapping[str, bool]) -> dict[str, Any] | None:
    """A schema-2 progress line in the schema-3 layout (a run resumed across the upgrade), or
    ``None`` when it is not one; ``answerable`` comes from the run's scenarios."""
    if row.get("schema_version") != 2 or set(row) != set(_FIELD_TYPES) - set(_V2_ADDED) - set(
        _V3_ADDED
    ):
        return None
    if row.get("scenario") not in answerable or not isinstance(row.get("policy_id"), str):
        return None
    return {
        **row,
        "schema_version": 3,
        "answerable": answerable[row["scenario"]],
        "domain": archive.domain_of(row["policy_id"]),
        "prompt_hash": row.get("prompt_hash") or None,
    }


def _from_v3(row: dict[str, Any]) -> dict[str, Any] | None:
    """A schema-3 progress line in the current layout, or ``None`` when it is not one: the
    labels schema 4 added, as far as the old ones determine them (:func:`archive.v4_labels`;
    the rest null, not recorded: the log holds no reply text)."""
    if row.get("schema_version") != 3 or set(row) != set(_FIELD_TYPES) - set(_V3_ADDED):
        return None
    if not all(isinstance(row.get(k), bool) for k in ("answered", "success", "exact_match", "grounded")):
        return None
    return {**row, **archive.v4_labels(row), "schema_version": archive.SCHEMA_VERSION}


def _upgrade_line(row: dict[str, Any], answerable: Mapping[str, bool] | None) -> dict[str, Any] | None:
    """An older progress line in the current layout (schema 2 needs ``answerable``), or None."""
    if row.get("schema_version") == 2:
        v3 = _from_v2(row, answerable) if answerable is not None else None
        return _from_v3(v3) if v3 is not None else None
    return _from_v3(row)


def parse_progress_line(raw: bytes, answerable: Mapping[str, bool] | None = None) -> Record | str:
    """A record, or why the line is unusable: ``damaged`` (bytes, JSON, fields or types) or
    ``tampered`` (well-formed, but the checksum does not match its fields). With ``answerable``
    (scenario -> bool), a line written before archive schema 3 is upgraded after its checksum is
    verified; a schema-3 line is upgraded without it."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "damaged"
    if not isinstance(row, dict):
        return "damaged"
    got = row.pop("sum", None)
    upgraded = _upgrade_line(row, answerable) if not _typed(row) else None
    if upgraded is not None and not _typed(upgraded):
        upgraded = None
    if upgraded is None and not _typed(row):
        return "damaged"
    if got != _line_sum(row):  # the checksum covers the line as it was written
        return "tampered"
    return Record(**(upgraded or row))


@dataclass
class ProgressReport:
    """What reading a progress log dropped (those cells are asked again)."""

    damaged: int = 0
    tampered: int = 0
    foreign: int = 0
    retried: int = 0

    @property
    def dropped(self) -> int:
        return self.damaged + self.tampered + self.foreign + self.retried

    def describe(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.damaged, "damaged"),
                (self.tampered, "tampered (checksum mismatch)"),
                (self.foreign, "from another run"),
                (self.retried, "provider_error, asked again (--retry-errors)"),
            )
            if n
        ]
        return "progress log: dropped " + ", ".join(parts) + " line(s); those cells are recomputed"


def read_progress(
    path: Path,
    run_id: str | None = None,
    drop_errors: bool = False,
    answerable: Mapping[str, bool] | None = None,
) -> tuple[dict[tuple[Any, ...], Record], ProgressReport]:
    """Records already written, first valid line per key. A torn last line (killed mid-write) is
    ignored silently; any other unusable line is dropped and counted in the report."""
    done: dict[tuple[Any, ...], Record] = {}
    report = ProgressReport()
    if not path.exists():
        return done, report
    lines = path.read_bytes().split(b"\n")
    for raw in lines[:-1]:  # the last piece has no newline: empty, or a torn write
        if not raw.strip():
            continue
        rec = parse_progress_line(raw, answerable)
        if isinstance(rec, str):
            setattr(report, rec, getattr(report, rec) + 1)
        elif run_id is not None and rec.run_id != run_id:
            report.foreign += 1
        elif drop_errors and rec.diagnostic == "provider_error":
            report.retried += 1
        else:
            done.setdefault(archive.sort_key(rec), rec)
    return done, report


def _rewrite_progress(path: Path, done: Mapping[tuple[Any, ...], Record]) -> None:
    """Replace the log by its usable lines (atomically), so dropped lines are not met again."""
    atomic_write_text(path, "".join(progress_line(r) for r in done.values()))


def _trim_torn_tail(path: Path) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)


@dataclass(frozen=True)
class _Cell:
    model: str
    scenario: str
    mode: str
    task: Task
    replicate: int = 0


def ident_of(cell: _Cell) -> tuple[str, str, str, str, int]:
    return (cell.model, cell.scenario, cell.mode, cell.task.task_id, cell.replicate)


ProgressHook = Callable[[Counters, int], None]
SampleHook = Callable[[dict[str, Any]], None]  # receives samplelog.entry(...) per record


def setup_problem(exc: BaseException) -> str | None:
    """Why ``exc`` says the run is set up wrong (no retry can help), or None for errors that
    may be transient. A missing key is one even where litellm reports it as a 500."""
    code = _status_of(exc)
    name = type(exc).__name__
    text = str(exc)
    if code in (401, 403) or name in {"AuthenticationError", "PermissionDeniedError"}:
        return "authentication failed: check that the provider's API key is set in the environment"
    if "missing credentials" in text.lower() or "api_key client option must be set" in text:
        return (
            "no API key: set the provider's key in the environment (a local OpenAI-compatible "
            "server needs a placeholder, e.g. OPENAI_API_KEY=sk-local)"
        )
    if "credentials encoded in URL" in text:
        return (
            "--api-base carries credentials (user:password@) that clash with the API key "
            "header; drop them from the URL and pass the key through the environment"
        )
    if code == 404 or name == "NotFoundError":
        return "not found (404): check the model name and --api-base"
    if "LLM Provider NOT provided" in text:
        return "unknown provider: write the model as provider/name, e.g. openai/gpt-4o-mini"
    if name == "BadRequestError" and "model" in text.lower():
        return "the server refused the request (400) naming the model: check the model name"
    return None


def _describe_error(exc: BaseException, api_base: str | None) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    code = _status_of(exc)
    what = f"{type(exc).__name__}" + (f", status {code}" if code is not None else "")
    return redact(f"{what}: {first[:160]}", api_base)


INLINE_DISPATCH_PROVIDERS = frozenset({"openai", "layerlab"})
"""litellm providers whose ``completion()``, called by ``acompletion``, only builds the request
coroutine (no I/O). litellm hands that call to the event loop's default executor: a thread
hand-off per call, after which the call waits behind every other ready task. For these providers
the live harness's loop (:class:`_Loop`) runs it at once on the loop thread: +9% calls/s
without latency, +0.05 of the ideal wall time at 200 ms. Other providers (some fetch credentials
there) keep the thread."""

_INLINE_DISPATCH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "layerlab_inline_dispatch", default=False
)


class _Loop(asyncio.SelectorEventLoop):
    """The live harness's event loop: ``run_in_executor(None, f)`` from a call marked by
    :data:`_INLINE_DISPATCH` runs ``f`` at once and returns a finished future."""

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> Any:
        if executor is not None or not _INLINE_DISPATCH.get():
            return super().run_in_executor(executor, func, *args)
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except Exception as exc:  # delivered to the awaiting caller, as from a thread
            fut.set_exception(exc)
        return fut


def _arun(coro: Any) -> Any:
    """``asyncio.run`` on a :class:`_Loop`."""
    with asyncio.Runner(loop_factory=_Loop) as runner:
        return runner.run(coro)


async def _call(
    litellm: Any,
    route: Route,
    msgs: list[dict[str, str]],
    seed: int | None,
    settings: ProviderSettings,
    budget: Budget,
    counters: Counters,
    rng: random.Random | None = None,
    last_error: list[str] | None = None,
    affinity: str | None = None,
) -> tuple[str | None, str | None]:
    """(reply text, None) or (None, failure label) or (None, None) when the budget ran out.

    A setup error (bad key, unknown model, 404) raises :class:`LiveRunError`: it is no data.
    ``last_error`` (if given) receives a redacted description of the last failure.
    ``affinity`` is the prompt hash when the caller has it (see :meth:`Route.endpoint`).
    """
    rng = rng or random.Random(0)
    request = route.request(msgs, seed)
    if affinity is None and len(route.endpoints) > 1:
        affinity = prompt.prompt_hash(msgs)
    for attempt in range(1, settings.attempts + 1):
        if not budget.take():
            return None, None
        counters.calls += 1
        base: str | None = None
        try:
            async with route.endpoint(affinity if attempt == 1 else None) as ep:
                base = ep.api_base
                kwargs: dict[str, Any] = dict(
                    model=route.model,
                    timeout=settings.timeout_s,
                    num_retries=0,
                    max_retries=0,
                    **settings.request_params(),
                    **request,
                )
                if ep.api_base:
                    kwargs["api_base"] = ep.api_base
                t0 = time.perf_counter()
                inline = _INLINE_DISPATCH.set(
                    split_model(route.model)[0] in INLINE_DISPATCH_PROVIDERS
                )
                try:
                    resp = await asyncio.wait_for(
                        litellm.acompletion(**kwargs), timeout=settings.timeout_s + 5
                    )
                finally:
                    _INLINE_DISPATCH.reset(inline)
                counters.latencies.append(time.perf_counter() - t0)
            usage = getattr(resp, "usage", None)
            counters.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
            counters.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            return str(resp.choices[0].message.content or ""), None
        except Exception as exc:  # provider errors are data here, not crashes
            problem = setup_problem(exc)
            if problem is not None:
                raise LiveRunError(
                    f"{route.model}: {problem} ({_describe_error(exc, base)})"
                ) from None
            if last_error is not None:
                last_error[:] = [_describe_error(exc, base)]
            if not _retryable(exc) or attempt == settings.attempts:
                break
            counters.retries += 1
            await asyncio.sleep(settings.delay(attempt, rng, retry_after_of(exc)))
    return None, "provider_error"


def _reply_key(config: LiveConfig, model: str, phash: str, ident: Sequence[Any]) -> str:
    """The cache key of one record's reply (shared by identical prompts with ``share_replies``)."""
    params = {
        **config.settings.request_params(),
        "response_format": config.response_format,
        "seed": config.seed,
    }
    if config.response_format != "none":  # a new reply schema asks again
        params["reply_schema"] = prompt.REPLY_SCHEMA_VERSION
    return ResponseCache.key(model, params, phash, () if config.share_replies else tuple(ident))


def _first_cell(
    corpus: Corpus,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    tasks: Sequence[Task],
    prepared: dict[str, PreparedScenario] | None = None,
) -> tuple[tuple[str, str, str, int], list[dict[str, str]]] | None:
    """The first cell of the matrix that reaches the reader, as (scenario, mitigation, task id,
    replicate) and its prompt (prompts do not depend on the model), or None. The scenarios it
    prepares are kept in ``prepared``."""
    prepared = {} if prepared is None else prepared
    for name in config.scenarios:
        if name not in prepared:
            prepared[name] = prepare(corpus, scenarios[name], config.retriever)
        prep = prepared[name]
        for t in tasks:
            for mode in config.mitigations:
                g = gate(t, prep, mode)
                if g.inp is not None:
                    return (name, mode, t.task_id, 0), prompt.messages(g.inp)
    return None


async def _preflight(
    litellm: Any,
    config: LiveConfig,
    models: Sequence[str],
    first: tuple[tuple[str, str, str, int], list[dict[str, str]]],
    routes: Mapping[str, Route],
    cache: ResponseCache,
    budget: Budget,
    counters: Counters,
    rng: random.Random,
    beside: Callable[[], None] | None = None,
) -> None:
    """Ask every model its first record's prompt before any record exists. A setup error, or a
    call that fails even after its retries, stops the run with one line (nothing is written).
    The reply is cached under that record's key, so the run does not ask again; a cached reply
    skips the call. ``beside`` (the run's remaining set-up) runs in a thread meanwhile, so
    the call's latency hides it."""
    side = asyncio.ensure_future(asyncio.to_thread(beside)) if beside is not None else None
    ident, msgs = first
    phash = prompt.prompt_hash(msgs)
    try:
        for model in models:
            ckey = _reply_key(config, model, phash, ident)
            if cache.get(ckey) is not None:
                continue
            route = routes[model]
            seed = None if route.seed_base is None else record_seed(route.seed_base, model, *ident)
            last: list[str] = []
            reply, failure = await _call(
                litellm, route, msgs, seed, config.settings, budget, counters, rng, last
            )
            if reply is not None:
                cache.put(ckey, reply)
                cache.preflighted.add(ckey)
            elif failure is not None:
                where = sorted({endpoint_label(e.api_base) or "" for e in route.endpoints} - {""})
                raise LiveRunError(
                    f"{model}: preflight call failed after {config.settings.attempts} attempt(s)"
                    + (f" at the {'/'.join(where)} --api-base" if where else "")
                    + f" ({last[0] if last else 'no reply'}); nothing written"
                )
            # failure None and reply None: the budget is spent, so no call will be made at all
    finally:
        cache.close()  # the preflight's replies on disk (and no writer thread) in any case
        if side is not None:
            await side


class _SharedBudget(Budget):
    """A :class:`Budget` whose count lives in shared memory, for worker processes."""

    def __init__(self, limit: int | None, used: Any):
        super().__init__(limit)
        self._used = used  # multiprocessing.Value("q")

    def take(self) -> bool:
        with self._used.get_lock():
            if self.limit is not None and self._used.value >= self.limit:
                return False
            self._used.value += 1
            return True

    @property
    def spent(self) -> bool:
        return self.limit is not None and self._used.value >= self.limit


class _Engine:
    """Turns cells into records: gate, ask (cache, then the provider), parse, score.

    One per event loop (the run's process, or each worker process). ``emit`` receives each record
    with its progress-log line, already serialised, and the sample-log entry (or None).
    """

    def __init__(
        self,
        corpus: Corpus,
        key: AnswerKey,
        config: LiveConfig,
        prepared: Mapping[str, PreparedScenario],
        cache: ResponseCache,
        budget: Budget,
        counters: Counters,
        rng: random.Random,
        routes: Mapping[str, Route],
        run_id: str,
        want_samples: bool,
    ):
        self.corpus, self.key, self.config, self.prepared = corpus, key, config, prepared
        self.cache, self.budget, self.counters, self.rng = cache, budget, counters, rng
        self.routes, self.run_id, self.want_samples = routes, run_id, want_samples
        self.litellm = import_litellm()
        # the arms once, not a spec lookup per record
        self.arms = {m: mitigations.arm(m) for m in config.mitigations}
        self.stopped = False
        self.inflight: dict[str, asyncio.Future[tuple[str | None, str | None]]] = {}

    async def ask(
        self, cell: _Cell, msgs: list[dict[str, str]], phash: str
    ) -> tuple[str | None, str | None, bool]:
        """(reply, failure, from_cache); (None, None, _) when the budget stopped the run."""
        route = self.routes[cell.model]
        ident = (cell.scenario, cell.mode, cell.task.task_id, cell.replicate)
        ckey = _reply_key(self.config, cell.model, phash, ident)
        reply = self.cache.get(ckey)
        if reply is not None:
            return reply, None, ckey not in self.cache.preflighted
        if ckey in self.inflight:  # only with share_replies: the same prompt is being asked
            reply, failure = await self.inflight[ckey]
            return reply, failure, False
        if self.stopped:
            return None, None, False
        fut: asyncio.Future[tuple[str | None, str | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self.inflight[ckey] = fut
        reply, failure = None, None
        try:
            seed = None if route.seed_base is None else record_seed(route.seed_base, *ident_of(cell))
            reply, failure = await _call(
                self.litellm, route, msgs, seed, self.config.settings, self.budget,
                self.counters, self.rng, affinity=phash,
            )  # fmt: skip
            if reply is not None:
                self.cache.put(ckey, reply)
        finally:
            fut.set_result((reply, failure)) if not fut.done() else None
            del self.inflight[ckey]
        if reply is None and failure is None:
            self.stopped = True  # budget spent: leave this cell for --resume
        return reply, failure, False

    async def record(self, cell: _Cell) -> tuple[Record, dict[str, Any] | None] | None:
        """The cell's record and sample entry, or None when the budget stopped the run."""
        provider, name = split_model(cell.model)
        step = RecordStep(cell.task, self.prepared[cell.scenario], self.arms[cell.mode])
        ctx = RecordContext(self.corpus, self.key, provider, name, self.run_id)
        reply, reading = None, None
        if step.inp is not None:
            msgs = prompt.messages(step.inp)
            phash = prompt.prompt_hash(msgs)
            reply, failure, cached = await self.ask(cell, msgs, phash)
            if reply is None and failure is None:
                return None
            if cached:
                self.counters.cache_hits += 1
            out = None
            if reply is not None:
                try:
                    out = prompt.parse_reply(reply)
                except prompt.MalformedReply:
                    failure = "malformed_reply"
            if failure:
                self.counters.failures += 1
            reading = Reading(out, phash, failure)
        done = step.finish(ctx, reading, replicate=cell.replicate)
        if not self.want_samples:
            return done.record, None
        answer = self.key[cell.task.task_id]
        return done.record, samplelog.entry(done.record, cell.task, answer, done.gate, reply, done.out)

    async def drain(
        self,
        cells: Sequence[_Cell],
        concurrency: int,
        emit: Callable[[Record, str, dict[str, Any] | None], None],
    ) -> None:
        """Process ``cells`` with ``concurrency`` tasks, emitting each record as it is scored."""
        todo = iter(cells)

        async def worker() -> None:
            for cell in todo:  # a shared iterator: each cell is taken once
                done = await self.record(cell)
                if done is None:
                    continue
                rec, sample = done
                emit(rec, progress_line(rec), sample)

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))


def _todo_cells(
    corpus: Corpus, config: LiveConfig, done: Mapping[tuple[Any, ...], Record], counters: Counters
) -> tuple[list[_Cell], int]:
    """The cells still to compute and the matrix size; counts those done.

    Cells come in matrix order (model, scenario, task), but the arms and replicates of one
    task come in a seeded random order (:func:`arm_order`): a server that reuses the previous
    prompt's prefix evaluates a repeated prompt differently (llama.cpp re-reads only its last
    token), so a fixed order would give one arm that position every time and make the arms'
    draws not exchangeable."""
    wanted = None if config.task_ids is None else set(config.task_ids)
    tasks = [t for t in corpus.tasks if wanted is None or t.task_id in wanted]
    split = {m: split_model(m) for m in config.models}
    total = 0
    todo = []
    for m in config.models:
        provider, name = split[m]
        for s in config.scenarios:
            for t in tasks:
                for mode, r in arm_order(config, m, s, t.task_id):
                    total += 1
                    if (provider, name, s, mode, t.task_id, r) in done:
                        counters.skipped_done += 1
                    else:
                        todo.append(_Cell(m, s, mode, t, r))
    counters.records = counters.skipped_done
    return todo, total


def arm_order(config: LiveConfig, model: str, scenario: str, task_id: str) -> list[tuple[str, int]]:
    """The (arm, replicate) pairs of one task in the order they are asked: a permutation
    seeded by (run seed, model, scenario, task), so each arm is as often first as second."""
    pairs = [(mode, r) for mode in config.mitigations for r in range(config.replicates)]
    if len(pairs) > 1:
        ident = canonical_json(["arm-order", config.seed or 0, model, scenario, task_id])
        random.Random(hashlib.sha256(ident.encode()).digest()).shuffle(pairs)
    return pairs


FLUSH_EVERY_S = 0.05
"""Progress-log lines reach the OS within this long of being written (a ``write`` system call
per record cost more than the rest of a record's bookkeeping); a kill loses at most the last
ones, which ``--resume`` computes again from the reply cache."""


class _ProgressLog:
    """The progress log's single writer: appends lines, flushes at most every
    :data:`FLUSH_EVERY_S` (and on :meth:`close`, with an fsync)."""

    def __init__(self, path: Path):
        self.fh = open(path, "a", encoding="utf-8")
        self.dirty = False
        self.last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: str) -> None:
        self.fh.write(line)
        self.dirty = True
        self.tick()

    def tick(self) -> None:
        """Flush if a line is waiting and the interval has passed; else (in an event loop)
        make sure a flush is scheduled, so a line never waits for the next one."""
        if not self.dirty:
            return
        wait = FLUSH_EVERY_S - (time.monotonic() - self.last)
        if wait <= 0:
            self.flush()
            return
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # the caller ticks again (the writer of worker processes)
            self._timer = loop.call_later(wait, self._timed)

    def _timed(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        if self.dirty:
            self.fh.flush()
            self.dirty = False
        self.last = time.monotonic()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()


WORKER_BATCH = 64
"""A worker process sends its records to the writer in batches of at most this many."""

PROGRESS_EVERY_S = 0.1
"""The progress hook is called at most this often (and once at the end), not per record."""


class _Throttle:
    def __init__(self, hook: ProgressHook | None, counters: Counters, total: int):
        self.hook, self.counters, self.total, self.last = hook, counters, total, 0.0

    def __call__(self, final: bool = False) -> None:
        if self.hook is None:
            return
        now = time.monotonic()
        if final or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.hook(self.counters, self.total)


def worker_processes(config: LiveConfig, local: Mapping[str, Sequence[str]], cells: int) -> int:
    """How many worker processes a run uses: one per core, or 1 (in process) where sharing a
    process is what the run needs: a local model's servers take one request each at a time
    (their slots are per process), shared replies dedupe identical prompts in flight, and a
    platform without ``fork`` (or ``LAYERLAB_WORKERS=1``) gets no workers."""
    import multiprocessing

    env = os.environ.get("LAYERLAB_WORKERS")
    if env is not None and env.strip().isdigit():
        wanted = max(1, int(env))
    else:
        wanted = os.cpu_count() or 1
    if local or config.share_replies or cells < 2 * wanted:
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return wanted


async def _run(
    corpus: Corpus,
    key: AnswerKey,
    config: LiveConfig,
    out: Path,
    cache: ResponseCache,
    budget: Budget,
    concurrency: int,
    run_id: str,
    done: dict[tuple[str | int, ...], Record],
    progress: ProgressHook | None,
    counters: Counters,
    local: Mapping[str, Sequence[str]],
    rng: random.Random,
    prepared: Mapping[str, PreparedScenario],
    written: dict[tuple[Any, ...], Record],
    samples: SampleHook | None = None,
) -> bool:
    """The run in this process: one event loop, ``concurrency`` tasks, this process writes the
    progress log and puts each record it writes into ``written``. Returns False when the budget
    stopped the run."""
    from layerlab.models import agents

    agents.register()
    todo, total = _todo_cells(corpus, config, done, counters)
    engine = _Engine(
        corpus, key, config, prepared, cache, budget, counters, rng,
        routes_for(config, concurrency, local), run_id, samples is not None,
    )  # fmt: skip
    tick = _Throttle(progress, counters, total)
    log = _ProgressLog(out / archive.PROGRESS)

    def emit(rec: Record, line: str, sample: dict[str, Any] | None) -> None:
        log.write(line)
        written[archive.sort_key(rec)] = rec
        counters.records += 1
        if samples is not None and sample is not None:
            samples(sample)
        tick()

    try:
        await engine.drain(todo, concurrency, emit)
    finally:
        cache.close()
        log.close()
        tick(final=True)
    return not engine.stopped


def _share_concurrency(concurrency: int, n: int, i: int) -> int:
    return max(1, concurrency // n + (1 if i < concurrency % n else 0))


def _run_workers(
    n_workers: int,
    corpus: Corpus,
    key: AnswerKey,
    config: LiveConfig,
    out: Path,
    cache: ResponseCache,
    budget: Budget,
    concurrency: int,
    run_id: str,
    done: dict[tuple[str | int, ...], Record],
    progress: ProgressHook | None,
    counters: Counters,
    rng: random.Random,
    prepared: Mapping[str, PreparedScenario],
    written: dict[tuple[Any, ...], Record],
    samples: SampleHook | None = None,
) -> bool:
    """The run over ``n_workers`` forked worker processes, this process the single writer.

    Each worker owns every ``n_workers``-th cell, runs its own event loop with its share of
    ``concurrency`` and sends each record's progress-log line here; only this process appends
    to the progress log (flushed per line, as in-process runs), so the log stays single-writer,
    checksummed and kill-safe. The call budget is one counter in shared memory. A worker whose
    parent dies is killed with it (Linux) or stops at its next record.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    from layerlab.models import agents

    agents.register()
    todo, total = _todo_cells(corpus, config, done, counters)
    ctx = multiprocessing.get_context("fork")
    shared = _SharedBudget(budget.limit, ctx.Value("q", budget.used))
    seeds = [rng.randrange(2**63) for _ in range(n_workers)]
    procs: list[Any] = []
    conns: dict[Any, int] = {}  # receiving end of each worker's pipe -> worker index
    for i in range(n_workers):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=_worker_main,
            args=(send, corpus, key, config, prepared, cache, shared, todo[i::n_workers],
                  _share_concurrency(concurrency, n_workers, i), run_id, samples is not None,
                  seeds[i]),
            daemon=True,
        )  # fmt: skip
        p.start()
        send.close()
        procs.append(p)
        conns[recv] = i
    snapshots = [Counters() for _ in range(n_workers)]
    base = dataclasses.replace(counters, latencies=list(counters.latencies))  # the preflight's
    tick = _Throttle(progress, counters, total)
    stopped: bool = False
    fatal: str | None = None
    finished = set()
    log = _ProgressLog(out / archive.PROGRESS)
    try:
        while conns:
            log.tick()
            ready: list[Any] = wait(list(conns), timeout=FLUSH_EVERY_S)
            for conn in ready:
                i = conns[conn]
                try:
                    msg: Any = conn.recv()
                except EOFError:
                    del conns[conn]
                    if i not in finished and fatal is None:
                        procs[i].join(5)
                        fatal = f"worker process {i} ended unexpectedly (exit code {procs[i].exitcode})"
                    continue
                kind = msg[0]
                if kind == "recs":
                    _, batch, snap = msg
                    for line, rec, sample in batch:
                        log.write(line)
                        written[archive.sort_key(rec)] = rec
                        counters.records += 1
                        if samples is not None and sample is not None:
                            samples(sample)
                    snapshots[i] = snap
                    _sum_counters(counters, [base, *snapshots])
                    tick()
                elif kind == "done":
                    finished.add(i)
                    snapshots[i] = msg[1]
                    stopped = stopped or msg[2]
                elif kind == "fatal":
                    finished.add(i)
                    snapshots[i] = msg[2]
                    fatal = fatal or msg[1]
                    for p in procs:  # as in process: the other in-flight calls are abandoned
                        if p.is_alive():
                            p.terminate()
    finally:
        for p in procs:
            if p.is_alive() and (fatal is not None or len(finished) < n_workers):
                p.terminate()
            p.join()
        log.close()
        _sum_counters(counters, [base, *snapshots], latencies=True)
        budget.used = shared._used.value
        tick(final=True)
    if fatal is not None:
        raise LiveRunError(fatal)
    return not stopped


def _sum_counters(into: Counters, parts: Sequence[Counters], latencies: bool = False) -> None:
    for name in ("calls", "cache_hits", "retries", "failures", "prompt_tokens", "completion_tokens"):
        setattr(into, name, sum(getattr(p, name) for p in parts))
    if latencies:
        into.latencies = [x for p in parts for x in p.latencies]


def _worker_main(
    conn: Any,
    corpus: Corpus,
    key: AnswerKey,
    config: LiveConfig,
    prepared: Mapping[str, PreparedScenario],
    cache: ResponseCache,
    budget: Budget,
    cells: Sequence[_Cell],
    concurrency: int,
    run_id: str,
    want_samples: bool,
    seed: int,
) -> None:
    """A worker process: its share of the cells, records sent to the writer as they come."""
    _die_with_parent()
    counters = Counters()
    engine = _Engine(
        corpus, key, config, prepared, cache, budget, counters, random.Random(seed),
        routes_for(config, concurrency), run_id, want_samples,
    )  # fmt: skip
    light = Counters()  # what progress needs, without the latency list
    batch: list[tuple[str, Record, dict[str, Any] | None]] = []
    timer: list[asyncio.TimerHandle] = []

    def send() -> None:
        """Send the batched records (a pipe write per record cost a fifth of a worker's time);
        they reach the writer within FLUSH_EVERY_S, like the log's own lines."""
        timer.clear()
        if batch:
            for name in ("calls", "cache_hits", "retries", "failures"):
                setattr(light, name, getattr(counters, name))
            conn.send(("recs", list(batch), light))
            batch.clear()

    def emit(rec: Record, line: str, sample: dict[str, Any] | None) -> None:
        batch.append((line, rec, sample))
        if len(batch) >= WORKER_BATCH:
            send()
        elif not timer:
            timer.append(asyncio.get_running_loop().call_later(FLUSH_EVERY_S, send))

    try:
        try:
            _arun(engine.drain(cells, concurrency, emit))
        finally:
            send()  # what was scored is written, whatever ended the run
            cache.close()  # (a record in the log never needs its reply again)
    except LiveRunError as exc:
        conn.send(("fatal", str(exc), counters))
    except BrokenPipeError:
        pass  # the writer is gone (killed): nothing to report to
    else:
        conn.send(("done", counters, engine.stopped))
    finally:
        conn.close()


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a ``kill -9`` of the run)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the worker stops when it next writes to the closed pipe


def _run_coroutine(coro: Any) -> Any:
    """``asyncio.run`` that also works where a loop is already running (Jupyter, papermill)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _arun(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_arun, coro).result()


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def error_summary(
    records: Sequence[Record], models: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Per model: records that asked it (``called``), and how many ended in ``provider_error``
    or ``malformed_reply``."""
    out: dict[str, dict[str, int]] = {}
    for m in models:
        provider, name = split_model(m)
        mine = [r for r in records if (r.provider, r.model) == (provider, name) and r.prompt_hash]
        out[m] = {
            "called": len(mine),
            "provider_error": sum(r.diagnostic == "provider_error" for r in mine),
            "malformed_reply": sum(r.diagnostic == "malformed_reply" for r in mine),
        }
    return out


def _error_line(errors: Mapping[str, Mapping[str, int]]) -> str:
    parts = []
    for m, e in errors.items():
        rate = e["provider_error"] / e["called"] if e["called"] else 0.0
        parts.append(f"{m} {e['provider_error']}/{e['called']} ({rate:.1%})")
    return "provider errors: " + ", ".join(parts)


def run_live(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    config: LiveConfig,
    out: Path,
    *,
    scenario_hash: str,
    budget: int | None = None,
    concurrency: int = 8,
    resume: bool = False,
    retry_errors: bool = False,
    cache_dir: Path | None = None,
    progress: ProgressHook | None = None,
    local_servers: int = 1,
    say: Callable[[str], None] = lambda _m: None,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    seed: int = 0,
    preflight: bool = True,
    samples: SampleHook | None = None,
    workers: int | None = None,
) -> LiveResult:
    """Run (or resume) a live matrix into ``out``; see the module docstring.

    ``local/NAME`` models are fetched if needed and served by ``local_servers`` llama.cpp
    servers each for the duration of the run. Everything that can be checked is checked before
    the run folder is touched: settings, the folder, the cache location and (``preflight``) one
    call per model. ``seed`` seeds the retry jitter; ``retry_errors`` (with ``resume``) asks
    ``provider_error`` cells again. ``workers`` worker processes share the cells (default:
    :func:`worker_processes`, one per core where the run allows it); this process stays the
    only writer of the run folder.
    """
    from layerlab._io import writable_folder_problem
    from layerlab.models import agents

    out = Path(out)
    problem = writable_folder_problem(out)
    if problem:
        raise LiveRunError(f"--out {out}: {problem}")
    if budget is not None and budget < 0:
        raise LiveRunError(f"--budget: expected a number of calls >= 0, got {budget}")
    if not 0.0 <= max_error_rate <= 1.0:
        raise LiveRunError(f"--max-error-rate: expected a share in [0, 1], got {max_error_rate}")
    if retry_errors and not resume:
        raise LiveRunError("--retry-errors: only with --resume (it re-asks a run's error cells)")
    for base in config.settings.api_bases:
        bad = api_base_problem(base)
        if bad:
            raise LiveRunError(f"--api-base: {bad}")
    unknown = [s for s in config.scenarios if s not in scenarios]
    if unknown:
        raise LiveRunError(f"--scenario: unknown scenario(s) {unknown}; known: {sorted(scenarios)}")
    if config.task_ids is not None:
        if not config.task_ids:
            raise LiveRunError("--tasks: no task ids given (expected ids like hr-01-q1)")
        known = {t.task_id for t in corpus.tasks}
        bad_ids = [t for t in config.task_ids if t not in known]
        if bad_ids:
            raise LiveRunError(f"--tasks: unknown task id(s) {bad_ids[:5]}")
    for m in config.models:
        if split_model(m)[0] == agents.PROVIDER:
            try:
                agents.check_name(m)
            except ValueError as exc:
                raise LiveRunError(f"--model: {exc}") from None
    cache_folder = Path(cache_dir) if cache_dir else default_cache_dir()
    if _inside(cache_folder, out):
        raise LiveRunError(
            f"--cache-dir {cache_folder}: inside the run folder; the cache holds model replies "
            "and must stay outside what is shared"
        )
    n_tasks = len(config.task_ids) if config.task_ids is not None else len(corpus.tasks)
    manifest = _manifest(config, corpus, scenario_hash, n_tasks)
    mpath = out / archive.MANIFEST
    plog = out / archive.PROGRESS
    old: dict[str, Any] | None = None
    if mpath.exists() or plog.exists():
        if not resume:
            raise LiveRunError(
                f"{out} already holds a run; pass --resume to continue it or choose another --out"
            )
        try:
            old = archive.read_manifest(out) if mpath.exists() else None
        except archive.ArchiveError as exc:
            raise LiveRunError(str(exc)) from None
        if (
            old is not None
            and old.get("response_format", "none") == manifest["response_format"] != "none"
            and old.get("reply_schema") != manifest.get("reply_schema")
        ):
            raise LiveRunError(
                f"{out} holds a run made under reply schema "
                f"{old.get('reply_schema') or 'layerlab.reply-schema/1'}; this layerlab asks "
                f"with {manifest.get('reply_schema')}, so its replies would "
                "differ: choose another --out (the old archive stays valid as it is)"
            )
        if old is not None and old["run_id"] != manifest["run_id"]:
            raise LiveRunError(
                f"{out} holds run {old['run_id']} with other settings than this command "
                f"(would be {manifest['run_id']}); resume with the original models, filters and settings"
            )
    answerable = {n: s.spec.answerable for n, s in scenarios.items()}  # lines from schema 2
    done, report = read_progress(plog, manifest["run_id"], drop_errors=retry_errors, answerable=answerable)
    counters = Counters()
    b = Budget(budget)
    rng = random.Random(seed)
    cache = ResponseCache(cache_folder)
    agents.register()
    per_model = manifest["expected_records"] // max(1, len(config.models))
    pending = [  # a model whose records are all done is not asked again
        m for m in config.models if sum(k[:2] == split_model(m) for k in done) < per_model
    ]
    fatal: LiveRunError | None = None
    prepared: dict[str, PreparedScenario] = {}

    def prepare_all() -> None:
        for n in config.scenarios:
            if n not in prepared:
                prepared[n] = prepare(corpus, scenarios[n], config.retriever)

    with _local_servers(config, local_servers, say) as local:
        bases = {m: [s.api_base for s in servers] for m, servers in local.items()}
        if preflight and pending:
            wanted = None if config.task_ids is None else set(config.task_ids)
            tasks = [t for t in corpus.tasks if wanted is None or t.task_id in wanted]
            first = _first_cell(corpus, scenarios, config, tasks, prepared)
            if first is not None:
                routes = routes_for(config, concurrency, bases)
                # the other scenarios are prepared while the preflight call is out
                _run_coroutine(
                    _preflight(
                        import_litellm(), config, pending, first, routes, cache, b, counters,
                        rng, beside=prepare_all,
                    )
                )  # fmt: skip
        prepare_all()
        # from here on the run folder is written
        out.mkdir(parents=True, exist_ok=True)
        archive.write_manifest(out, {**manifest, "complete": False, "records": 0})
        _trim_torn_tail(plog)
        if report.dropped:
            _rewrite_progress(plog, done)
        written: dict[tuple[Any, ...], Record] = {}
        n_workers = workers or worker_processes(
            config, bases, manifest["expected_records"] - len(done)
        )
        args = (
            corpus, key, config, out, cache, b, concurrency, manifest["run_id"], done,
            progress, counters,
        )  # fmt: skip
        try:
            if n_workers > 1 and not bases:
                finished = _run_workers(n_workers, *args, rng, prepared, written, samples)
            else:
                finished = _run_coroutine(_run(*args, bases, rng, prepared, written, samples))
        except LiveRunError as exc:
            fatal, finished = exc, False
        local_prov = {
            m: models_mod.provenance(models_mod.lookup(m), servers) for m, servers in local.items()
        }
    if local_prov:
        manifest["local_models"] = local_prov
    # what the log now holds: the usable lines read at the start and those written since
    records = list({**done, **written}.values())
    complete = finished and len(records) == manifest["expected_records"]
    before = (old or {}).get("calls") or {}
    calls = {
        "made": counters.calls + int(before.get("made", 0)),
        "cache_hits": counters.cache_hits + int(before.get("cache_hits", 0)),
        "retries": counters.retries + int(before.get("retries", 0)),
        "failures": counters.failures + int(before.get("failures", 0)),
        "this_invocation": counters.usage(),
    }
    errors = error_summary(records, config.models)
    final = archive.write_run(
        out, records, {**manifest, "complete": complete, "calls": calls, "errors": errors}
    )
    if records:
        results.write_results(out, records, final)  # per-model rates, next to the archive
    notes = [report.describe()] if report.dropped else []
    if fatal is not None:
        raise LiveRunError(
            f"{fatal}; {len(records)} records kept as a partial archive: fix the cause and "
            "continue with --resume"
        )
    if complete:
        msg = f"complete: {len(records)} records, {counters.calls} provider calls, {counters.cache_hits} cache hits"
    else:
        msg = (
            f"budget spent after {counters.calls} calls: {len(records)} of {manifest['expected_records']} "
            f"records written (a valid partial archive). Continue with the same command plus --resume "
            f"and a new --budget."
        )
    over = [
        m
        for m, e in errors.items()
        if e["called"] and e["provider_error"] / e["called"] > max_error_rate
    ]
    msg = "\n".join([*notes, msg, _error_line(errors)])
    return LiveResult(out, final, counters, complete, msg, errors, tuple(over), cache_folder)


@contextlib.contextmanager
def _local_servers(
    config: LiveConfig, n: int, say: Callable[[str], None]
) -> Iterator[dict[str, list[models_mod.LocalServer]]]:
    """Fetch and start the servers of the run's ``local/`` models; stop them afterwards."""
    wanted = [m for m in config.models if models_mod.is_local(m)]
    if not wanted:
        yield {}
        return
    with contextlib.ExitStack() as stack:
        running: dict[str, list[models_mod.LocalServer]] = {}
        try:
            for m in wanted:
                spec = models_mod.lookup(m)
                models_mod.runtime_version()
                models_mod.fetch(spec, say=say)
                say(f"starting {n} llama.cpp server(s) for {spec.label}")
                running[m] = stack.enter_context(models_mod.serve(spec, n_servers=n))
        except models_mod.ModelError as exc:
            raise LiveRunError(str(exc)) from None
        yield running


def run_matrix(
    models: Sequence[str],
    out: Path | str | None = None,
    scenarios: Sequence[str] | None = None,
    budget: int | None = None,
    concurrency: int = 16,
    resume: bool = False,
    settings: ProviderSettings | None = None,
) -> LiveResult:
    """Convenience for notebooks: run ``models`` over the committed corpus and scenarios.

    ``out=None`` runs into a fresh temporary folder (kept until the process exits).
    """
    import tempfile

    from layerlab import paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios

    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    scen = load_scenarios()
    cache_dir = None
    if out is None:  # a throwaway run gets a throwaway cache, so its counts do not depend on history
        _TMP.append(tempfile.TemporaryDirectory(prefix="layerlab-live-"))
        out = Path(_TMP[-1].name) / "run"
        cache_dir = Path(_TMP[-1].name) / "cache"
    cfg = LiveConfig(
        models=tuple(models),
        scenarios=tuple(scenarios or scen),
        settings=settings or ProviderSettings(),
    )
    return run_live(
        c,
        key,
        scen,
        cfg,
        Path(out),
        scenario_hash=spec_hash(paths.SCENARIO_SPEC),
        budget=budget,
        concurrency=concurrency,
        resume=resume,
        cache_dir=cache_dir,
    )


_TMP: list[Any] = []


def run_overview(result: LiveResult) -> pd.DataFrame:
    """Success by model × scenario × mitigation arm of a finished run (what a notebook shows)."""
    df = pd.DataFrame([r.__dict__ for r in archive.read_records(result.out / archive.ARCHIVE)])
    g = df.groupby(["provider", "model", "scenario", "mitigation"], sort=False)["success"].mean()
    wide = g.unstack("mitigation").reset_index()
    arms = [m for m in config_arms(df) if m in wide]
    return wide[["provider", "model", "scenario", *arms]]


def config_arms(df: pd.DataFrame) -> list[str]:
    """The arms of a records frame, in the order they first appear."""
    return list(dict.fromkeys(df["mitigation"]))


def same_records(a: Path | str, b: Path | str) -> bool:
    """Whether two run folders (or archives) hold the same records, label for label.

    Run ids are ignored: they name the run, not its content.
    """

    def load(p: Path | str) -> list[tuple[Any, ...]]:
        p = Path(p)
        recs = archive.read_records(p / archive.ARCHIVE if p.is_dir() else p)
        return sorted(tuple(v for k, v in r.__dict__.items() if k != "run_id") for r in recs)

    return load(a) == load(b)

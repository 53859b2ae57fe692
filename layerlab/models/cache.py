"""The reply cache: model replies keyed by model, request parameters, prompt hash and record.

A rerun or a rescoring makes no new calls. The cache holds model replies (answers and cited
document ids), so it lives outside every run folder (:func:`default_cache_dir`) and never reaches
an archive. One SQLite database per cache folder, shared by runs and worker processes; where
SQLite cannot open the folder, one JSON file per reply (the older layout, still read).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from layerlab._io import canonical_json, private_dir, private_file, private_opener


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
CACHE_FORMAT = "layerlab.reply-cache/1"
"""The format row (table ``meta``) of a reply cache this layerlab writes."""


def private_files(folder: Path) -> None:
    """The cache folder ``0o700`` and its database ``0o600`` (SQLite gives its ``-wal`` and
    ``-shm`` files the database's mode): created so, or tightened with a one-line message."""
    private_dir(folder)
    private_file(Path(folder) / CACHE_DB)
    for suffix in ("-wal", "-shm"):
        private_file(Path(folder) / (CACHE_DB + suffix), create=False)


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

    ``mode`` is ``rw``; ``ro`` serves the cached replies only (a read-only or locked cache) and
    ``off`` reads nothing from disk: in both, this run's replies are kept in memory only.
    :func:`layerlab.models.cachecheck.open_cache` chooses it after checking the folder.
    """

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL) "
        "WITHOUT ROWID; CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);"
    )

    def __init__(self, folder: Path, mode: str = "rw"):
        if mode not in ("rw", "ro", "off"):
            raise ValueError(f"cache mode {mode!r}: expected rw, ro or off")
        self.folder = Path(folder)
        self.mode = mode
        self._memory: dict[str, str] = {}  # this run's replies where they are not written
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

    def __getstate__(self) -> dict[str, Any]:
        """A pickled cache is its folder and the preflight's replies: the process that loads it
        opens its own connection and writer thread (neither crosses a process boundary)."""
        return {
            "folder": self.folder,
            "preflighted": set(self.preflighted),
            "mode": self.mode,
            "memory": dict(self._memory),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"], state.get("mode", "rw"))  # type: ignore[misc]
        self.preflighted = state["preflighted"]
        self._memory = dict(state.get("memory", {}))

    @staticmethod
    def key(model: str, params: Mapping[str, Any], phash: str, record: Sequence[Any] = ()) -> str:
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

        if self.mode == "off":
            return None
        if self.mode == "ro":
            return self._connect_ro()
        try:
            private_files(self.folder)
            con = sqlite3.connect(
                self.folder / CACHE_DB, timeout=60, isolation_level=None, check_same_thread=False
            )
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")  # a lost entry costs a call, never a record
            con.executescript(self.SCHEMA)
            return con
        except (sqlite3.Error, OSError, ValueError):  # ValueError: a path SQLite cannot take
            return None

    def _connect_ro(self) -> Any:
        """A read-only connection; ``immutable`` where a WAL database's -shm file cannot be made
        (a read-only folder)."""
        import sqlite3

        db = (self.folder / CACHE_DB).resolve()
        for query in ("mode=ro", "immutable=1"):
            try:
                con = sqlite3.connect(
                    f"file:{db}?{query}", uri=True, timeout=5, isolation_level=None,
                    check_same_thread=False,
                )  # fmt: skip
                con.execute("SELECT 1 FROM replies LIMIT 1").fetchall()
                return con
            except sqlite3.Error:
                continue
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
                self._legacy = any(e.is_dir() and len(e.name) == 2 for e in os.scandir(self.folder))
            except OSError:
                self._legacy = False
        if self.mode == "off" or (not self._legacy and not self._db_failed):
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
        if self.mode != "rw":
            mine = self._memory.get(key)
            if mine is not None or self.mode == "off":
                return mine
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
        """Queue one reply for the writer thread (started on first use in each process); kept in
        memory only when the cache is not written (``mode`` ro or off)."""
        if self.mode != "rw":
            self._memory[key] = reply
            return
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
            private_dir(os.path.join(self.folder, shard), tighten=False)
            self._made.add(shard)
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"  # one writer per key per process (inflight dedupe)
        try:
            with open(tmp, "w", encoding="utf-8", opener=private_opener) as fh:
                fh.write(json.dumps({"reply": reply}))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        names = self._listed.get(shard)
        if names is not None:  # a shard not listed yet is listed (with this entry) when read
            names.add(f"{key}.json")

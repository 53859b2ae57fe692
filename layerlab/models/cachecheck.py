"""The reply cache's health: what a run does with a damaged cache, and ``layerlab cache``.

:func:`open_cache` checks a cache folder before a run uses it (a bounded ``PRAGMA quick_check``,
the schema and format row, a test write) and says in one line what is wrong and what the run
does about it:

=================================  ===============================================================
corrupt (not a database, damaged   set aside as ``replies.sqlite3.corrupt-<UTC time>``; its
pages, another schema)             readable replies are salvaged into a fresh cache
cannot be read (permissions)       refused: running would pay again for every reply it holds
read-only (file, folder, or a      used for cached replies only; this run's new replies are not kept
newer format)
locked by another process          waited for (:data:`LOCK_WAIT_S`); if it stays locked, used for
                                   cached replies only, or refused when it cannot even be read
folder cannot be created           run uncached (there is nothing to lose; a resume asks again)
``--cache-dir`` is a file          refused (a mistyped flag, not a reason to pay for calls)
=================================  ===============================================================

:func:`inspect` (``layerlab cache check``), :func:`repair` and :func:`clear` are the commands.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab.models.cache import CACHE_DB, CACHE_FORMAT, ResponseCache

CHECK_S = 2.0
"""At most this long for the quick integrity check when a run opens the cache (a bigger cache is
checked as far as this allows; ``layerlab cache check`` checks all of it)."""
LOCK_WAIT_S = 60.0
"""How long a run waits for a cache another process holds locked."""
PROBE_WAIT_S = 2.0
"""How long a write may wait before the cache counts as locked (a normal commit takes ms)."""
_HEADER = b"SQLite format 3\x00"
_SIDE = ("-wal", "-shm")


class CacheError(Exception):
    """A cache a run must not use (one line: what it is and what to do)."""


@dataclass
class Health:
    """What :func:`diagnose` found: ``state`` ok | missing | corrupt | unreadable | readonly |
    locked | misplaced | uncreatable, and the detail (an error message)."""

    state: str
    detail: str = ""
    readable: bool = True  # locked: whether reads still work (a WAL database's writer lock)


def _connect_uri(db: Path, mode: str, timeout: float) -> sqlite3.Connection:
    """A connection opened with SQLite's URI ``mode`` (rwc, rw, ro) or ``immutable``."""
    query = "immutable=1" if mode == "immutable" else f"mode={mode}"
    return sqlite3.connect(
        f"file:{db.resolve()}?{query}",
        uri=True,
        timeout=timeout,
        isolation_level=None,
        check_same_thread=False,
    )


def _read_header(db: Path) -> bytes:
    with open(db, "rb") as fh:
        return fh.read(len(_HEADER))


def _is_locked(exc: Exception) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _writable(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _unwritable(db: Path) -> str:
    """Which of the database's files (or its folder) cannot be written, if one of them."""
    for f in (db.parent, db, *(Path(f"{db}{side}") for side in _SIDE)):
        if f.exists() and not os.access(f, os.W_OK):
            return f"{f.name if f != db.parent else 'its folder'} is not writable"
    return ""


def _quick_check(con: sqlite3.Connection, seconds: float | None) -> str:
    """``ok``, or the first problem ``PRAGMA quick_check`` reports (within ``seconds``:
    interrupted, the check counts as passed so far)."""
    if seconds is not None:
        deadline = time.monotonic() + seconds
        con.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    try:
        rows = con.execute("PRAGMA quick_check(1)" if seconds else "PRAGMA integrity_check(1)")
        lines = str(rows.fetchone()[0]).splitlines()  # a problem: "*** in database main ***"
        first = next((x for x in lines if not x.startswith("***")), "damaged")  # then what
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            return "ok"
        raise
    finally:
        con.set_progress_handler(None, 0)
    return first


def _schema_problem(con: sqlite3.Connection) -> str:
    cols = [r[1] for r in con.execute("PRAGMA table_info(replies)")]
    if cols and cols != ["key", "reply"]:
        return f"table replies has columns {cols}, not [key, reply]: not a layerlab reply cache"
    return ""


def diagnose(folder: Path, check_s: float | None = CHECK_S, write_probe: bool = True) -> Health:
    """The cache folder's health. Nothing is created (a missing database is ``missing``, or
    ``uncreatable`` where its folder cannot be made); the test write rewrites the format row
    (``write_probe=False``: no write, the database is only read, and a read-only or locked one
    reads ``ok``). ``check_s=None`` runs the full integrity check."""
    folder = Path(folder)
    db = folder / CACHE_DB
    for p in (folder, *folder.parents):
        if p.exists() and not p.is_dir():
            return Health("misplaced", f"{p} is a file, not a folder")
        if p.exists():
            break
    if not db.exists():
        probe = next(p for p in (folder, *folder.parents) if p.exists())
        if not _writable(probe):
            return Health("uncreatable", f"{probe} is not writable")
        return Health("missing")
    if db.is_dir():
        return Health("misplaced", f"{db} is a folder, not a database file")
    try:
        header = _read_header(db)
    except OSError as exc:
        return Health("unreadable", exc.strerror or str(exc), readable=False)
    if header and header != _HEADER:
        return Health("corrupt", "file is not a database (its header is damaged)")
    if not header:
        return Health("ok")  # an empty file: SQLite makes it a database on first write
    h = _check_content(db, "ro" if write_probe else _look_mode(db), check_s)
    if h.state == "unreadable" and "unable to open" in h.detail:
        # a WAL database in a folder where its -shm file cannot be made: readable as immutable
        h = _check_content(db, "immutable", check_s)
        if h.state == "ok":
            return Health("readonly", "its folder cannot be written")
    if h.state != "ok" or not write_probe:
        return h
    return _write_probe(db)


def _look_mode(db: Path) -> str:
    """How to read a database leaving its folder as it was: ``immutable`` (no -shm or -wal file
    is made) unless a -wal file already holds changes only a normal reader sees (``ro``)."""
    return "ro" if Path(f"{db}-wal").exists() else "immutable"


def _check_content(db: Path, mode: str, check_s: float | None) -> Health:
    """Integrity (within ``check_s``), schema and format of a database, read with ``mode``."""
    try:
        con = _connect_uri(db, mode, PROBE_WAIT_S)
    except sqlite3.Error as exc:
        return Health("unreadable", str(exc), readable=False)
    try:
        first = _quick_check(con, check_s)
        if first != "ok":
            return Health("corrupt", first)
        problem = _schema_problem(con)
        if problem:
            return Health("corrupt", problem)
        fmt = _format(con)
    except sqlite3.DatabaseError as exc:
        if _is_locked(exc):
            return Health("locked", "held by another process (reads wait too)", False)
        if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
            return Health("unreadable", str(exc), readable=False)
        return Health("corrupt", str(exc))
    finally:
        con.close()
    if fmt not in (None, CACHE_FORMAT):
        return Health("readonly", f"written in format {fmt}, which this layerlab does not write")
    return Health("ok")


def _format(con: sqlite3.Connection) -> str | None:
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone():
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    return None if row is None else str(row[0])


def _write_probe(db: Path, wait: float | None = None) -> Health:
    """Whether a write goes through (within ``wait``, default :data:`PROBE_WAIT_S`): the
    format row is written."""
    try:
        con = _connect_uri(db, "rw", PROBE_WAIT_S if wait is None else wait)
    except sqlite3.Error as exc:
        return Health("readonly", str(exc))
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            con.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            con.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (CACHE_FORMAT,))
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    except sqlite3.OperationalError as exc:  # not damage (checked before): cannot write here
        if _is_locked(exc):
            return Health("locked", "held by another process (reads still work)")
        return Health("readonly", _unwritable(db) or str(exc))
    except sqlite3.DatabaseError as exc:
        return Health("corrupt", str(exc))
    finally:
        con.close()
    return Health("ok")


def flag_for(cache_dir: Path | None) -> str:
    """What set the cache folder, for messages: the flag, the variable, or the default."""
    if cache_dir is not None:
        return "--cache-dir"
    return "$LAYERLAB_CACHE_DIR" if os.environ.get("LAYERLAB_CACHE_DIR") else "the default cache"


def open_cache(
    folder: Path,
    say: Callable[[str], None],
    flag: str = "--cache-dir",
    lock_wait_s: float | None = None,
) -> ResponseCache:
    """The run's reply cache, checked; each problem is one line through ``say`` naming what it
    is and what the run does (see the module's table), or a :class:`CacheError` when the run
    must not start. Nothing is created in a folder that cannot hold a cache."""
    folder = Path(folder)
    db = folder / CACHE_DB
    where = f"reply cache {db}"
    wait = LOCK_WAIT_S if lock_wait_s is None else lock_wait_s
    h = diagnose(folder)
    if h.state == "misplaced":
        raise CacheError(f"{flag} {folder}: {h.detail}; expected a folder for the reply cache")
    sweep_repairs(folder)  # a killed `cache repair`'s temporary copy
    if h.state == "uncreatable":
        say(
            f"warning: {where}: cannot be created ({h.detail}); running uncached: this run's "
            "replies are not kept, so a resume or rerun asks again"
        )
        return ResponseCache(folder, mode="off")
    if h.state == "unreadable":
        raise CacheError(
            f"{where}: cannot be read ({h.detail}); running would pay again for every reply it "
            f"holds: fix its permissions, or pass another {flag} to run without it"
        )
    if h.state == "corrupt":
        try:
            aside, saved = set_aside_and_salvage(folder)
        except (OSError, sqlite3.Error) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            say(
                f"warning: {where}: corrupt ({h.detail}) and cannot be set aside ({why}); "
                "running uncached: this run's replies are not kept"
            )
            return ResponseCache(folder, mode="off")
        say(
            f"warning: {where}: corrupt ({h.detail}); set aside as {aside.name}, "
            f"{saved} readable replies salvaged into a fresh cache"
        )
        return ResponseCache(folder)
    if h.state == "locked":
        then = (
            "serving its cached replies only (this run's new replies are not kept)"
            if h.readable
            else "stopping"
        )
        say(f"warning: {where}: locked by another process; waiting up to {wait:g} s, then {then}")
        h = _wait_for_lock(db, wait, h)
        if h.state == "locked" and not h.readable:
            raise CacheError(
                f"{where}: still locked by another process after {wait:g} s and cannot be "
                f"read; stop that process, or pass another {flag} to run without it"
            )
        if h.state == "locked":
            return ResponseCache(folder, mode="ro")
        if h.state != "ok":  # released, and found otherwise wrong: act on that
            return open_cache(folder, say, flag, lock_wait_s)
    if h.state == "readonly":
        say(
            f"warning: {where}: read-only ({h.detail}); serving its cached replies only: "
            "this run's new replies are not kept"
        )
        return ResponseCache(folder, mode="ro")
    cache = ResponseCache(folder)
    if h.state == "missing":  # made now, with its format row (where SQLite cannot, the older
        con = cache._connect()  # one-file-per-reply layout is used, as before)
        if con is not None:
            con.close()
            _write_probe(db)
    return cache


def _wait_for_lock(db: Path, wait: float, h: Health) -> Health:
    if h.readable:  # reads work: only a writer lock to wait for
        return _write_probe(db, wait=wait)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        h = diagnose(db.parent)
        if h.state != "locked":
            return h
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return h


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def set_aside(folder: Path) -> Path:
    """Rename the database (and its -wal/-shm files, so it stays readable as it was) to
    ``replies.sqlite3.corrupt-<UTC time>``; return the new path."""
    db = Path(folder) / CACHE_DB
    aside = db.with_name(f"{CACHE_DB}.corrupt-{_stamp()}")
    n = 1
    while aside.exists():
        n += 1
        aside = db.with_name(f"{CACHE_DB}.corrupt-{_stamp()}-{n}")
    os.replace(db, aside)
    for side in _SIDE:
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{db}{side}", f"{aside}{side}")
    return aside


def salvage_rows(db: Path) -> Iterator[tuple[str, str]]:
    """Every (key, reply) SQLite can read from a damaged database: one range scan per
    3-hex-digit key prefix, so a damaged page loses the keys of its range, not the rest."""
    try:
        con = _connect_uri(db, "ro", PROBE_WAIT_S)
        con.execute("PRAGMA writable_schema=ON")  # reads a schema that points past a truncation
    except sqlite3.Error:
        return
    try:
        for i in range(16**3):
            lo, hi = f"{i:03x}", f"{i + 1:03x}" if i + 1 < 16**3 else "g"
            try:
                cur = con.execute(
                    "SELECT key, reply FROM replies WHERE key >= ? AND key < ?", (lo, hi)
                )
                for key, reply in cur:
                    if isinstance(key, str) and isinstance(reply, str) and len(key) == 64:
                        yield key, reply
            except sqlite3.DatabaseError:
                if i == 0 and _no_table(con):
                    return
                continue
    finally:
        con.close()


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``buf[i]``: (value, next offset)."""
    v = 0
    for k in range(9):
        b = buf[i + k]
        if k == 8:
            return (v << 8) | b, i + 9
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            return v, i + k + 1
    raise IndexError  # pragma: no cover


def raw_rows(db: Path) -> Iterator[tuple[str, str]]:
    """(key, reply) cells read straight from the file's index pages (a WITHOUT ROWID table keeps
    rows in its leaf and interior pages), following overflow chains: what a destroyed root or
    interior page, a damaged schema or a truncation leaves out of reach of SQLite's reads."""
    data = db.read_bytes()
    size = int.from_bytes(data[16:18], "big") if data[:16] == _HEADER else 0
    size = 65536 if size == 1 else size
    page = size if size >= 512 and size & (size - 1) == 0 else 4096
    usable = page - (data[20] if data[:16] == _HEADER else 0)
    most, least = (usable - 12) * 64 // 255 - 23, (usable - 12) * 32 // 255 - 23
    for start in range(0, len(data) - page + 1, page):
        base = start + (100 if start == 0 else 0)
        if data[base] not in (0x0A, 0x02):  # an index leaf or interior page
            continue
        head, skip = (8, 0) if data[base] == 0x0A else (12, 4)  # interior: child page numbers
        for c in range(int.from_bytes(data[base + 3 : base + 5], "big")):
            try:
                ptr = base + head + 2 * c
                at = start + skip + int.from_bytes(data[ptr : ptr + 2], "big")
                n, at = _varint(data, at)
                k = least + (n - least) % (usable - 4)
                local = n if n <= most else (k if k <= most else least)
                payload, nxt = data[at : at + local], at + local
                if local < n:  # the rest is in a chain of overflow pages
                    ovf, rest = int.from_bytes(data[nxt : nxt + 4], "big"), [payload]
                    while ovf and sum(map(len, rest)) < n:
                        o = (ovf - 1) * page
                        rest.append(data[o + 4 : o + usable])
                        ovf = int.from_bytes(data[o : o + 4], "big")
                    payload = b"".join(rest)[:n]
                row = _record(payload)
            except (IndexError, ValueError):
                continue
            if row is not None:
                yield row


def _record(payload: bytes) -> tuple[str, str] | None:
    """A (key, reply) record of two text columns, or None."""
    hsize, i = _varint(payload, 0)
    t1, i = _varint(payload, i)
    t2, i = _varint(payload, i)
    if i != hsize or t1 != 13 + 2 * 64 or t2 < 13 or t2 % 2 == 0:
        return None
    n2 = (t2 - 13) // 2
    key = payload[hsize : hsize + 64].decode("ascii")
    body = payload[hsize + 64 : hsize + 64 + n2]
    if len(body) != n2 or not all(ch in "0123456789abcdef" for ch in key):
        return None
    return key, body.decode("utf-8")


def _no_table(con: sqlite3.Connection) -> bool:
    try:
        return con.execute("SELECT 1 FROM sqlite_master WHERE name = 'replies'").fetchone() is None
    except sqlite3.DatabaseError:
        return True


def set_aside_and_salvage(folder: Path) -> tuple[Path, int]:
    """Build a fresh database from the damaged one's readable replies (in a temporary file renamed
    into place), set the damaged one aside; return where it went and how many replies were kept."""
    folder = Path(folder)
    db = folder / CACHE_DB
    tmp = folder / f".{CACHE_DB}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    saved = 0
    try:  # created owner-only before SQLite opens it (its journal takes the same mode)
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.executescript(ResponseCache.SCHEMA)
            con.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (CACHE_FORMAT,))
            con.execute("BEGIN")
            con.executemany("INSERT OR REPLACE INTO replies VALUES (?, ?)", salvage_rows(db))
            # what SQLite could not reach; a row it did read wins over a stale copy in a page
            con.executemany("INSERT OR IGNORE INTO replies VALUES (?, ?)", raw_rows(db))
            con.execute("COMMIT")
            saved = int(con.execute("SELECT count(*) FROM replies").fetchone()[0])
        finally:
            con.close()
        shutil.copymode(db, tmp)  # the rebuilt cache is as private as the damaged one was
        aside = set_aside(folder)
        os.replace(tmp, db)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return aside, saved


_REPAIR_TMP = re.compile(rf"\.{re.escape(CACHE_DB)}\.(\d+)\.tmp(-journal|-wal|-shm)?")


def sweep_repairs(folder: Path) -> list[Path]:
    """Remove what a killed :func:`set_aside_and_salvage` left in ``folder``: its
    ``.replies.sqlite3.<pid>.tmp`` (and journal) when that process is gone; return them."""
    gone: list[Path] = []
    with contextlib.suppress(OSError):
        for p in Path(folder).iterdir():
            m = _REPAIR_TMP.fullmatch(p.name)
            if m is None or p.is_symlink() or not p.is_file():
                continue
            pid = int(m.group(1))
            if pid != os.getpid():
                try:
                    os.kill(pid, 0)
                    continue  # that repair may still be running
                except ProcessLookupError:
                    pass
                except OSError:
                    continue  # another user's live process
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone


# ``layerlab cache check | repair | clear``


def legacy_entries(folder: Path) -> list[Path]:
    """Replies of the older layout: ``<folder>/<key[:2]>/<key>.json``."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [
        f
        for d in folder.iterdir()
        if d.is_dir() and len(d.name) == 2
        for f in d.glob("*.json")
        if f.name.startswith(d.name)
    ]


def inspect(folder: Path, write_probe: bool = True) -> dict[str, Any]:
    """Location, health (a full integrity check), entries and size of a cache folder
    (``write_probe=False``: the cache is only read, as ``cache clear`` does before it asks)."""
    folder = Path(folder)
    db = folder / CACHE_DB
    h = diagnose(folder, check_s=None, write_probe=write_probe)
    if h.state == "uncreatable":  # nothing there to check
        h = Health("missing")
    entries: int | None = None
    if h.state in ("ok", "readonly") or (h.state == "locked" and h.readable):
        try:
            con = _connect_uri(db, "ro" if write_probe else _look_mode(db), PROBE_WAIT_S)
            try:
                entries = int(con.execute("SELECT count(*) FROM replies").fetchone()[0])
            finally:
                con.close()
        except sqlite3.Error:
            entries = 0  # no replies table yet (an empty or new file)
    legacy = legacy_entries(folder) if h.state != "misplaced" else []
    files = [Path(f"{db}{s}") for s in ("", *_SIDE)] + legacy
    size = sum(f.stat().st_size for f in files if f.is_file())
    aside = sorted(folder.glob(f"{CACHE_DB}.corrupt-*")) if folder.is_dir() else []
    return {
        "folder": folder,
        "state": h.state,
        "detail": h.detail,
        "entries": entries,
        "legacy_entries": len(legacy),
        "bytes": size,
        "set_aside": [p for p in aside if not p.name.endswith(_SIDE)],
        "leftovers": sorted(p for p in folder.iterdir() if _REPAIR_TMP.fullmatch(p.name))
        if folder.is_dir()
        else [],
    }


def repair(folder: Path) -> dict[str, Any]:
    """Salvage a damaged cache's readable replies into a fresh one and set the damaged one aside
    (``repaired``); a healthy or missing cache is left as it is. :class:`CacheError` for a cache
    that cannot be repaired here (unreadable, locked, read-only, misplaced)."""
    folder = Path(folder)
    h = diagnose(folder, check_s=None)
    if folder.is_dir():
        sweep_repairs(folder)  # an earlier repair's, killed
    if h.state in ("ok", "missing", "uncreatable"):
        return {"repaired": False, "state": h.state}
    if h.state != "corrupt":
        raise CacheError(f"{folder / CACHE_DB}: {h.state} ({h.detail}); nothing changed")
    try:
        aside, saved = set_aside_and_salvage(folder)
    except OSError as exc:
        raise CacheError(
            f"{folder}: cannot write the repaired cache ({exc.strerror or exc})"
        ) from None
    return {"repaired": True, "state": h.state, "detail": h.detail, "aside": aside, "saved": saved}


def clear(folder: Path) -> int:
    """Delete the cache's database, its older-layout entries and damaged copies set aside;
    return how many files were deleted. Refused (:class:`CacheError`) while another process
    holds the database."""
    folder = Path(folder)
    db = folder / CACHE_DB
    h = diagnose(folder)
    if h.state == "misplaced":
        raise CacheError(f"{folder}: {h.detail}")
    if h.state == "locked":
        raise CacheError(f"{db}: in use by another process; stop it first (nothing deleted)")
    victims = [Path(f"{db}{s}") for s in ("", *_SIDE)]
    if folder.is_dir():
        victims += sorted(folder.glob(f"{CACHE_DB}.corrupt-*")) + legacy_entries(folder)
    n = len(sweep_repairs(folder))  # a killed repair's temporary copy goes too
    for f in victims:
        try:
            f.unlink()
            n += 1
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            continue
    for d in {f.parent for f in victims if f.parent != folder}:
        with contextlib.suppress(OSError):
            d.rmdir()  # an emptied shard folder
    return n

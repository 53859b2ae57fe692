"""Small I/O helpers shared by every writer: atomic writes, canonical JSON and file modes.

Shareable outputs (archives, manifests, results, reports, tables, figures) are written with the
mode a plain ``open`` would give them (``0o666`` less the umask: :func:`shared_mode`); private
files, those that hold model replies or expected answers (reply caches, sample logs, a viewer
page built from one), are created ``0o600`` in ``0o700`` folders (:func:`private_dir`,
:func:`private_file`, :func:`private_opener`), and existing ones readable by others are
tightened with a one-line message.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` deterministically (sorted keys, no spaces, UTF-8 text)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def atomic_write_bytes(
    path: Path, data: bytes, durable: bool = True, mode: int | None = None
) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The bytes go to a temporary file in the same folder, are flushed (and, when ``durable``,
    fsynced) and the temporary file is renamed over ``path`` (atomic on POSIX file systems).
    A killed process can leave no torn file either way; ``durable`` also survives power loss.
    The file gets ``mode`` (default :func:`shared_mode`, what ``open`` would give it; the
    temporary file itself is created owner-only).
    """
    path = Path(path)
    if path.is_dir():  # refused by its own name, before a temporary file is made beside it
        raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file path", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, shared_mode() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, durable: bool = True, mode: int | None = None) -> None:
    """Atomically write UTF-8 ``text`` to ``path`` (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable, mode)


def write_jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Atomically write one canonical JSON object per line."""
    atomic_write_text(path, "".join(canonical_json(dict(r)) + "\n" for r in rows))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file; a bad line raises ``ValueError`` naming the file and line."""
    rows: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from exc
    return rows


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def writable_folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be used as an output folder, or None. Nothing is created: the nearest
    existing ancestor must be a writable folder (checked by creating and removing a probe)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        return "is an existing file, expected a folder"
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, expected a folder"
    try:
        fd, tmp = tempfile.mkstemp(prefix=".layerlab-probe-", dir=probe)
    except OSError as exc:
        return f"cannot write in {probe} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(tmp)
    return None


def writable_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as an output file, or None (nothing is created)."""
    path = Path(path)
    if path.is_dir():
        return "is a folder, expected a file path"
    problem = writable_folder_problem(path.parent)
    if problem == "is an existing file, expected a folder":
        return f"{path.parent} is a file, expected a folder"
    return problem


# the temporary names atomic_write_bytes gives: ".NAME." + mkstemp's 8 random characters + ".tmp"
_TMP_NAME = re.compile(r"\.(?P<name>[^/]+)\.[A-Za-z0-9_]{8}\.tmp")


def stale_temporaries(folder: Path, before: float) -> list[Path]:
    """Remove the temporary files :func:`atomic_write_bytes` left in ``folder`` (a writer killed
    mid-write, SIGKILL or power loss, cannot remove its own) that were last modified before
    ``before`` (a time.time(): the start of the run that owns the folder, so a file being
    written now is never touched); return those removed."""
    gone: list[Path] = []
    try:
        entries = list(Path(folder).iterdir())
    except OSError:
        return gone
    for p in entries:
        if not _TMP_NAME.fullmatch(p.name):
            continue
        try:
            if p.is_file() and p.stat().st_mtime < before:
                p.unlink()
                gone.append(p)
        except OSError:
            continue
    return gone


# --- file modes: shareable outputs honour the umask, private files are the owner's -----------

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux's
    ``/proc/self/status``), else set and restored at once under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            m = re.search(r"^Umask:\s*([0-7]+)\s*$", fh.read(), re.MULTILINE)
        if m:
            return int(m.group(1), 8)
    except OSError:
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def shared_mode() -> int:
    """The mode of a shareable output: what ``open(path, "w")`` would create (0o666 & ~umask)."""
    return 0o666 & ~current_umask()


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")


def _tighten(path: Path, what: str, say: Any) -> None:
    """Take group and other permissions off ``path`` (its owner's are kept: a read-only cache
    stays read-only), saying so in one line."""
    old = stat.S_IMODE(os.stat(path).st_mode)
    if not old & 0o077:
        return
    want = old & ~0o077
    try:
        os.chmod(path, want)
    except OSError as exc:
        say(
            f"{path}: readable by others (mode {old:04o}) and cannot be tightened "
            f"({exc.strerror or exc}); it holds {what}: move it somewhere private"
        )
        return
    say(f"{path}: was readable by others (mode {old:04o}); now {want:04o} (it holds {what})")


def private_dir(
    path: Path, what: str = "model replies", tighten: bool = True, say: Any = _stderr
) -> Path:
    """Make ``path`` a folder only its owner can enter: the folders created are ``0o700``;
    an existing ``path`` readable by others is tightened (``tighten``) with a one-line ``say``
    (stderr by default) naming it and what it holds. Existing parents are left as they are."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for p in reversed(missing):
        try:
            p.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made meanwhile by another process
            continue
        os.chmod(p, PRIVATE_DIR)  # whatever the umask
    if path.is_dir() and tighten and path not in missing:
        _tighten(path, what, say)
    return path


def private_file(
    path: Path, what: str = "model replies", create: bool = True, say: Any = _stderr
) -> Path:
    """Create ``path`` empty and ``0o600`` if it is missing (``create``; one that exists is
    never truncated), or tighten an existing file readable by others with a one-line ``say``."""
    path = Path(path)
    try:
        if not create:
            raise FileExistsError
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        with contextlib.suppress(FileNotFoundError):
            if path.is_file():
                _tighten(path, what, say)
        return path
    os.close(fd)
    return path


def private_opener(path: str, flags: int) -> int:
    """An ``opener`` for :func:`open` that creates files ``0o600`` (owner only)."""
    return os.open(path, flags, PRIVATE_FILE)

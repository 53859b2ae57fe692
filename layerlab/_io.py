"""Small I/O helpers shared by every writer: atomic writes and canonical JSON."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` deterministically (sorted keys, no spaces, UTF-8 text)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half.

    The bytes go to a temporary file in the same folder, are flushed (and, when ``durable``,
    fsynced) and the temporary file is renamed over ``path`` (atomic on POSIX file systems).
    A killed process can leave no torn file either way; ``durable`` also survives power loss.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, durable: bool = True) -> None:
    """Atomically write UTF-8 ``text`` to ``path`` (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable)


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

"""Small I/O helpers shared by every writer: atomic writes and canonical JSON."""

from __future__ import annotations

import hashlib
import json
import os
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

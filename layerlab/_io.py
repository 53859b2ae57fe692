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
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


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


def folder_names(out: Path) -> tuple[str | None, list[str]]:
    """Whether a command may consider replacing the folder ``out``: (why not, []) for a symbolic
    link or a file, else (None, the names it holds, sorted; [] when missing or empty). What a
    non-empty folder must hold to be replaced is the caller's rule (a corpus, a merge)."""
    out = Path(out)
    if out.is_symlink():
        return "is a symbolic link, expected a folder", []
    if not out.exists():
        return None, []
    if not out.is_dir():
        return "is an existing file, expected a folder", []
    return None, sorted(p.name for p in out.iterdir())


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


# --- output folders written whole: a sibling temporary, renamed into place -------------------


class FolderRefused(OSError):
    """An output folder a command will not replace: the message names it and why, and says that
    nothing changed."""


def _leftovers(out: Path) -> tuple[list[Path], list[Path]]:
    """The temporaries :func:`replace_folder` leaves beside ``out`` when killed: (``.NAME.xxxx/``
    being filled, ``.NAME.old.xxxx/`` holding the replaced folder as ``x``), by name and shape
    (a flat folder of files; a folder holding only ``x``), never anything else."""
    fresh, old = [], []
    pat = re.compile(rf"\.{re.escape(out.name)}\.(old\.)?[A-Za-z0-9_]{{8}}")
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return fresh, old
    for p in siblings:
        m = pat.fullmatch(p.name)
        if not m or p.is_symlink() or not p.is_dir():
            continue
        with contextlib.suppress(OSError):
            inside = list(p.iterdir())
            if m.group(1) and [q.name for q in inside] in ([], ["x"]):
                old.append(p)
            elif not m.group(1) and all(q.is_file() and not q.is_symlink() for q in inside):
                fresh.append(p)
    return sorted(fresh), sorted(old)


def sweep_leftovers(out: Path) -> list[Path]:
    """Remove what a killed :func:`replace_folder` left beside ``out``; when ``out`` itself is
    missing, the folder it was replacing (``.NAME.old.xxxx/x``) is first put back as ``out``.
    Return the temporaries removed."""
    import shutil

    out = Path(out)
    fresh, old = _leftovers(out)
    for p in old:
        if not out.exists() and (p / "x").is_dir():
            (p / "x").rename(out)  # the kill came between the two renames: restore
    for p in [*fresh, *old]:
        shutil.rmtree(p, ignore_errors=True)
    return [*fresh, *old]


def replace_folder(out: Path, fill: Callable[[Path], T], refuse: Callable[[Path], str | None]) -> T:
    """Write the folder ``out`` whole: ``fill`` writes into a new sibling ``.NAME.xxxx/``, which
    is then renamed to ``out`` (a folder ``out`` that was there is moved aside first, removed
    after). ``refuse(out)`` says why ``out`` may not be replaced (None: it may), raised as
    :class:`FolderRefused` before anything is written. On any exit (an error, Ctrl-C, SIGTERM)
    the temporaries are removed and ``out`` is as it was; a SIGKILL's are swept by the next call
    (:func:`sweep_leftovers`). Returns what ``fill`` returns."""
    import shutil

    out = Path(out)
    sweep_leftovers(out)
    problem = refuse(out)
    if problem:
        raise FolderRefused(errno.EEXIST, f"{out}: {problem}; nothing changed")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    old = None
    try:
        result = fill(tmp)
        tmp.chmod(0o777 & ~current_umask())
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            out.rename(old / "x")
        tmp.rename(out)
    except BaseException:
        if old is not None and (old / "x").exists() and not out.exists():
            (old / "x").rename(out)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return result


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


# --- bounded reading of YAML and JSON files (specs, run configs, corpus imports) ---------------
# A hostile or mistaken file is refused in one line naming the file (and line): no reader lets an
# alias bomb, a huge file, a device or a deep nesting run for minutes or exhaust memory.

MAX_FILE_BYTES = 16 * 2**20  # a spec, run configuration or gate file
MAX_IMPORT_BYTES = 256 * 2**20  # a corpus import file (documents' text)
MAX_NODES = 2_000_000  # YAML nodes once aliases are expanded (what a loader's consumers visit)
MAX_DEPTH = 100  # nesting of YAML collections or JSON arrays/objects
MAX_PROBLEM_LINES = 20  # problem lines printed before the rest is only counted


class BoundedReadError(ValueError):
    """A file refused by a bound: ``path[:line]: message``, one line."""

    def __init__(self, path: Path | str, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def read_text_bounded(path: Path | str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (a leading BOM dropped), refused in one line
    when it is not a regular file (a folder, a device or FIFO, also behind a symlink), larger
    than ``max_bytes``, or not UTF-8 (the line of the first bad byte)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise BoundedReadError(path, None, f"cannot read file ({exc.strerror or exc})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            what = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
            raise BoundedReadError(path, None, f"is {what}, expected a regular file")
        raise BoundedReadError(
            path, None, f"is {_mib(st.st_size)}, over the {_mib(max_bytes)} a file may hold"
        )
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while being read
        raise BoundedReadError(path, None, f"is over the {_mib(max_bytes)} a file may hold")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BoundedReadError(
            path, line, f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None


def json_depth(obj: Any) -> int:
    """How deeply arrays and objects nest in ``obj`` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict | list):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:  # no need to look deeper than the cap
                stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def loads_json_bounded(
    text: str, path: Path | str, line: int | None, hook: Callable[[Any], Any] | None = None
) -> Any:
    """``json.loads`` (``object_pairs_hook=hook``) refusing nesting deeper than
    :data:`MAX_DEPTH` as ``path:line``; :class:`json.JSONDecodeError` passes through."""
    try:
        data = json.loads(text, object_pairs_hook=hook)
    except RecursionError:
        data = None
        deep = True
    else:
        deep = json_depth(data) > MAX_DEPTH
    if deep:
        raise BoundedReadError(path, line, f"nested deeper than {MAX_DEPTH} levels")
    return data


def load_yaml_bounded(text: str, path: Path | str) -> tuple[Any, Any]:
    """(node, data) of one YAML document: the composed node (for line numbers) and the data
    constructed from it, refused as ``path:line`` when collections nest deeper than
    :data:`MAX_DEPTH` or, counting each alias as the node it repeats, the document holds more
    than :data:`MAX_NODES` nodes (an alias bomb). :class:`yaml.YAMLError` passes through."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise BoundedReadError(
                        path, mark.line + 1, f"nested deeper than {MAX_DEPTH} levels"
                    )
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        expanded = _expanded_nodes(node, path)
        if expanded > MAX_NODES:
            raise BoundedReadError(
                path,
                node.start_mark.line + 1,
                f"holds over {MAX_NODES:,} nodes once its aliases are expanded (an alias bomb?)",
            )
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def _expanded_nodes(root: Any, path: Path | str) -> int:
    """Nodes of a composed YAML graph with every alias expanded, each node visited once
    (memoised by identity); an alias inside the collection it names is refused."""
    import yaml

    size: dict[int, int] = {}
    open_: set[int] = set()  # collections whose children are being counted
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in size:
            continue
        if not done and id(n) in open_:
            raise BoundedReadError(
                path, n.start_mark.line + 1, "an alias refers to the collection that holds it"
            )
        if isinstance(n, yaml.MappingNode):
            kids = [c for kv in n.value for c in kv]
        elif isinstance(n, yaml.SequenceNode):
            kids = list(n.value)
        else:
            size[id(n)] = 1
            continue
        if done:
            size[id(n)] = min(1 + sum(size[id(c)] for c in kids), MAX_NODES + 1)
            open_.discard(id(n))
        else:
            open_.add(id(n))
            stack.append((n, True))
            stack.extend((c, False) for c in kids if id(c) not in size)
    return size[id(root)]


def capped_lines(lines: Sequence[str], what: str, cap: int = MAX_PROBLEM_LINES) -> list[str]:
    """At most ``cap`` of ``lines``, then one line counting the rest."""
    if len(lines) <= cap:
        return list(lines)
    return [*lines[:cap], f"... and {len(lines) - cap:,} more {what} (first {cap} shown)"]

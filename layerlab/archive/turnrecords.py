"""The conversational archive: one row per scored turn (``turns.jsonl``), apart from the record
archive, whose schema (:mod:`layerlab.archive.schema`) does not change.

A :class:`TurnRecord` keeps what the per-turn and per-conversation statistics need and, as a
record does, nothing else: the system, the scenario, the conversation, its cluster (the policy)
and domain, the turn index and the turn's kind, the epoch, the reply's category, what the turn
was served (the history's length, the memory entries, the searches and cache hits, whether a
fault struck it) and the labels of :class:`~layerlab.scoring.turns.TurnLabels`. No prose, no
answer text, no document ids; and, last, the arm (``mitigation``: the session mitigation the
turn was served under, :mod:`layerlab.mitigations.session`; ``none`` for the baseline). Rows are
canonical JSON, sorted by their key (:data:`TURN_KEY`), so the same run gives the same bytes.
``turns.jsonl`` is checked when read: every field present with its type, no other field. Schema
2 added ``mitigation``; a schema-1 row (written before arms existed) is read as the baseline's.

A committed archive keeps the same rows as ``turns.parquet`` (:func:`pack`: Parquet with
deterministic bytes, as the record archives are, and covered by ``data/archives/SHA256SUMS``)
beside the run's ``summary.json`` and ``manifest.json``; the rows' canonical JSON still hashes to
the manifest's checksum of ``turns.jsonl`` (:func:`check_packed`). :func:`read` reads either form.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from layerlab._io import canonical_json, read_jsonl, write_jsonl
from layerlab.scoring.turns import TurnLabels

TURN_SCHEMA_VERSION = 2
TURN_KEY = ("provider", "model", "mitigation", "scenario", "conversation_id", "epoch", "turn")
NONE = "none"  # the baseline arm's name (the conversational spec's baseline)
FILE = "turns.jsonl"
PARQUET = "turns.parquet"  # the committed archive's form of the same rows (:func:`pack`)
PACKED_FILES = (PARQUET, "summary.json", "manifest.json")


@dataclass(frozen=True)
class _Head:
    schema_version: int
    provider: str
    model: str
    scenario: str
    answerable: bool
    conversation_id: str
    policy_id: str
    domain: str
    epoch: int
    turn: int
    kind: str
    category: str
    struck: bool
    history_messages: int
    memory_entries: int
    searches: int
    cache_hits: int


@dataclass(frozen=True)
class TurnRecord(TurnLabels, _Head):
    """One scored turn (module docstring): the head's fields, the labels', then the arm."""

    mitigation: str = NONE


COLUMNS = tuple(f.name for f in fields(TurnRecord))
_TYPES = get_type_hints(TurnRecord)


def row(rec: TurnRecord) -> dict[str, Any]:
    return asdict(rec)


def check_row(obj: Any, where: str) -> TurnRecord:
    """A row read back as a :class:`TurnRecord`; ValueError naming ``where`` and the field."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object per line")
    if obj.get("schema_version") == 1 and "mitigation" not in obj:  # before arms: the baseline
        obj = {**obj, "mitigation": NONE}
    extra = sorted(set(obj) - set(COLUMNS))
    if extra:
        raise ValueError(f"{where}: field {extra[0]!r} is not in the turn schema")
    for name in COLUMNS:
        if name not in obj:
            raise ValueError(f"{where}: field {name!r} missing")
        want = _TYPES[name]
        v = obj[name]
        if want is bool and not isinstance(v, bool) or want is int and (
                isinstance(v, bool) or not isinstance(v, int)) or want is str and not isinstance(
                v, str):  # fmt: skip
            raise ValueError(f"{where}: field {name!r} expected {want.__name__}, got {v!r}")
    if obj["schema_version"] not in (1, TURN_SCHEMA_VERSION):
        raise ValueError(f"{where}: schema_version {obj['schema_version']!r}; expected 1 or "
                         f"{TURN_SCHEMA_VERSION}")  # fmt: skip
    return TurnRecord(**obj)


def sort_key(rec: TurnRecord) -> tuple[Any, ...]:
    return tuple(getattr(rec, k) for k in TURN_KEY)


def write(records: list[TurnRecord], folder: Path) -> Path:
    """Write ``turns.jsonl`` into ``folder`` (sorted by :data:`TURN_KEY`); its path."""
    path = Path(folder) / FILE
    write_jsonl(path, (row(r) for r in sorted(records, key=sort_key)))
    return path


def read(folder: Path | str) -> list[TurnRecord]:
    """The turn records of a conversational run folder (``turns.jsonl``) or committed archive
    (``turns.parquet``), each checked."""
    packed = Path(folder) / PARQUET
    if packed.is_file():
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(packed).to_pylist()
        except (OSError, ValueError) as exc:
            raise ValueError(f"{packed}: not a readable Parquet file ({exc})") from None
        return [check_row(obj, f"{packed}:{i}") for i, obj in enumerate(rows, start=1)]
    path = Path(folder) / FILE
    if not path.is_file():
        raise ValueError(f"{path}: missing (write it: layerlab run conversations --out ...)")
    return [check_row(obj, f"{path}:{i}") for i, obj in enumerate(read_jsonl(path), start=1)]


def _schema() -> Any:
    import pyarrow as pa

    kinds = {bool: pa.bool_(), int: pa.int64(), str: pa.string()}
    return pa.schema([pa.field(n, kinds[_TYPES[n]], nullable=False) for n in COLUMNS])


def jsonl_sha256(records: list[TurnRecord]) -> str:
    """The SHA-256 of the ``turns.jsonl`` these records are written as (:func:`write`)."""
    text = "".join(canonical_json(row(r)) + "\n" for r in sorted(records, key=sort_key))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_packed(folder: Path | str) -> list[TurnRecord]:
    """A packed archive's rows, checked against its manifest: the rows are the run's
    ``turns.jsonl`` (its checksum) and ``summary.json`` is the run's. ValueError naming the file."""
    folder = Path(folder)
    recs = read(folder)
    try:
        files = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{folder / 'manifest.json'}: no conversational run manifest ({exc})") from None
    if jsonl_sha256(recs) != files.get(FILE):
        raise ValueError(f"{folder / PARQUET}: its rows are not the run's {FILE} (checksum differs)")
    summary = hashlib.sha256((folder / "summary.json").read_bytes()).hexdigest()
    if summary != files.get("summary.json"):
        raise ValueError(f"{folder / 'summary.json'}: not the run's (checksum differs)")
    return recs


def pack(run: Path | str, dest: Path | str) -> Path:
    """Copy a conversational run folder into a committed archive folder ``dest``: its rows as
    ``turns.parquet`` (deterministic bytes), its ``summary.json`` and ``manifest.json`` as they
    are; checked with :func:`check_packed`. Returns ``dest``."""
    import shutil

    from layerlab._io import atomic_write_bytes
    from layerlab.archive.io import parquet_bytes

    run, dest = Path(run), Path(dest)
    recs = read(run)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / FILE).unlink(missing_ok=True)  # the archive holds one form of the rows
    import pyarrow as pa

    table = pa.Table.from_pylist([row(r) for r in sorted(recs, key=sort_key)], schema=_schema())
    atomic_write_bytes(dest / PARQUET, parquet_bytes(table))
    for name in ("summary.json", "manifest.json"):
        shutil.copyfile(run / name, dest / name)
    check_packed(dest)
    return dest


__all__ = ["COLUMNS", "FILE", "NONE", "PACKED_FILES", "PARQUET", "TURN_KEY", "TURN_SCHEMA_VERSION",
           "TurnRecord", "check_packed", "check_row", "jsonl_sha256", "pack", "read", "row",
           "write"]  # fmt: skip

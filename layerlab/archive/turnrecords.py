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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_type_hints

from layerlab._io import read_jsonl, write_jsonl
from layerlab.scoring.turns import TurnLabels

TURN_SCHEMA_VERSION = 2
TURN_KEY = ("provider", "model", "mitigation", "scenario", "conversation_id", "epoch", "turn")
NONE = "none"  # the baseline arm's name (the conversational spec's baseline)
FILE = "turns.jsonl"


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
    """The turn records of a conversational archive folder, each checked."""
    path = Path(folder) / FILE
    if not path.is_file():
        raise ValueError(f"{path}: missing (write it: layerlab run conversations --out ...)")
    return [check_row(obj, f"{path}:{i}") for i, obj in enumerate(read_jsonl(path), start=1)]


__all__ = ["COLUMNS", "FILE", "NONE", "TURN_KEY", "TURN_SCHEMA_VERSION", "TurnRecord", "check_row",
           "read", "row", "write"]  # fmt: skip

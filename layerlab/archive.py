"""Privacy-safe record archives: one Parquet row per scored record, allowlisted columns only.

An archive keeps what aggregate recomputation needs — provider, model, scenario, contract mode,
task and policy keys, binary labels, the diagnostic label and the prompt hash — and nothing
else: no prose, no answer text, no document ids, no latency, cost or credentials. The allowlist
is the schema itself; it is checked when an archive is written and again when it is read.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from layerlab._io import atomic_write_bytes

SCHEMA_VERSION = 1

LABELS = (
    "success",
    "exact_match",
    "retrieval_ok",
    "citation_ok",
    "schema_ok",
    "grounded",
    "grounded_false_positive",
    "abstained",
    "answered",
    "safe_resolution",
    "reached_reader",
)
KEYS = ("provider", "model", "scenario", "contract_mode", "task_id")


@dataclass(frozen=True)
class Record:
    """One scored record, exactly the archive's allowlisted columns."""

    schema_version: int
    run_id: str
    provider: str
    model: str
    scenario: str
    contract_mode: str
    task_id: str
    policy_id: str
    variant: int
    stage: str
    reached_reader: bool
    success: bool
    exact_match: bool
    retrieval_ok: bool
    citation_ok: bool
    schema_ok: bool
    grounded: bool
    grounded_false_positive: bool
    abstained: bool
    answered: bool
    safe_resolution: bool
    diagnostic: str
    prompt_hash: str


_TYPES: dict[str, pa.DataType] = {
    "schema_version": pa.int16(),
    "variant": pa.int8(),
    **{name: pa.bool_() for name in LABELS},
}
SCHEMA = pa.schema(
    [pa.field(f.name, _TYPES.get(f.name, pa.string()), nullable=False) for f in fields(Record)],
    metadata={b"layerlab.archive.schema_version": str(SCHEMA_VERSION).encode()},
)
ALLOWLIST = frozenset(SCHEMA.names)


class ArchiveError(ValueError):
    """An archive that is not a valid layerlab archive (message names the file and problem)."""


def sort_key(r: Record) -> tuple[str, ...]:
    return (r.provider, r.model, r.scenario, r.contract_mode, r.task_id)


def to_table(records: Iterable[Record]) -> pa.Table:
    """Records -> Arrow table in the archive schema, rows sorted by the record key."""
    rows = sorted(records, key=sort_key)
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for r in rows:
        for k, v in asdict(r).items():
            cols[k].append(v)
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def validate_table(table: pa.Table, source: str) -> None:
    """Raise :class:`ArchiveError` unless ``table`` is an allowlisted, key-unique archive."""
    extra = sorted(set(table.column_names) - ALLOWLIST)
    if extra:
        raise ArchiveError(f"{source}: columns outside the archive allowlist: {extra}")
    missing = [n for n in SCHEMA.names if n not in table.column_names]
    if missing:
        raise ArchiveError(f"{source}: missing columns {missing}")
    for f in SCHEMA:
        got = table.schema.field(f.name).type
        if got != f.type:
            raise ArchiveError(f"{source}: column {f.name!r} has type {got}, expected {f.type}")
        if table.column(f.name).null_count:
            raise ArchiveError(f"{source}: column {f.name!r} has null values")
    versions = set(table.column("schema_version").to_pylist())
    if versions - {SCHEMA_VERSION}:
        raise ArchiveError(
            f"{source}: schema_version {sorted(versions)} found, this layerlab reads {SCHEMA_VERSION}"
        )
    keys = list(zip(*(table.column(k).to_pylist() for k in KEYS), strict=True))
    if len(set(keys)) != len(keys):
        seen: set[tuple[Any, ...]] = set()
        dup = next(k for k in keys if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ArchiveError(f"{source}: duplicate record key {dict(zip(KEYS, dup, strict=True))}")


def write_records(path: Path, records: Sequence[Record]) -> None:
    """Validate and atomically write ``records`` as a Parquet archive (deterministic bytes)."""
    table = to_table(records)
    validate_table(table, str(path))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def read_table(path: Path) -> pa.Table:
    """Read and validate an archive; raise :class:`ArchiveError` on any problem."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: not a readable Parquet archive ({exc})") from exc
    validate_table(table, str(path))
    return table.cast(SCHEMA)


def read_records(path: Path) -> list[Record]:
    table = read_table(path)
    return [Record(**row) for row in table.to_pylist()]

"""Privacy-safe record archives: one Parquet row per scored record, allowlisted columns only.

An archive keeps what aggregate recomputation needs — provider, model, scenario, mitigation
arm, task and policy keys, the replicate index, binary labels, the diagnostic label and the prompt hash — and nothing
else: no prose, no answer text, no document ids, no latency, cost or credentials. The allowlist
is the schema itself; it is checked when an archive is written and again when it is read.

Schema history: version 1 named the arm column ``contract_mode`` and had no ``replicate``
column. Version 2 renames it ``mitigation`` (values name registered mitigations or stacks; the
strict contract is the baseline) and adds ``replicate`` (0-based; 0 for single runs) to the record
key. Version-1 archives still read: the column is renamed and ``replicate`` set to 0 on read.
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

SCHEMA_VERSION = 2
STUDY_SCHEMA_VERSION = 1  # the focused study's cells have their own, unchanged layout

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
KEYS = ("provider", "model", "scenario", "mitigation", "task_id", "replicate")


@dataclass(frozen=True)
class Record:
    """One scored record, exactly the archive's allowlisted columns."""

    schema_version: int
    run_id: str
    provider: str
    model: str
    scenario: str
    mitigation: str
    task_id: str
    replicate: int
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
    "replicate": pa.int16(),
    **{name: pa.bool_() for name in LABELS},
}
SCHEMA = pa.schema(
    [pa.field(f.name, _TYPES.get(f.name, pa.string()), nullable=False) for f in fields(Record)],
    metadata={b"layerlab.archive.schema_version": str(SCHEMA_VERSION).encode()},
)
ALLOWLIST = frozenset(SCHEMA.names)


class ArchiveError(ValueError):
    """An archive that is not a valid layerlab archive (message names the file and problem)."""


def sort_key(r: Record) -> tuple[str | int, ...]:
    return (r.provider, r.model, r.scenario, r.mitigation, r.task_id, r.replicate)


def to_table(records: Iterable[Record]) -> pa.Table:
    """Records -> Arrow table in the archive schema, rows sorted by the record key."""
    rows = sorted(records, key=sort_key)
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for r in rows:
        for k, v in asdict(r).items():
            cols[k].append(v)
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def validate_table(
    table: pa.Table,
    source: str,
    schema: pa.Schema | None = None,
    keys: Sequence[str] = KEYS,
    version: int = SCHEMA_VERSION,
) -> None:
    """Raise :class:`ArchiveError` unless ``table`` is an allowlisted, key-unique archive."""
    schema = schema or SCHEMA
    allow = frozenset(schema.names)
    extra = sorted(set(table.column_names) - allow)
    if extra:
        raise ArchiveError(f"{source}: columns outside the archive allowlist: {extra}")
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise ArchiveError(f"{source}: missing columns {missing}")
    for f in schema:
        got = table.schema.field(f.name).type
        if got != f.type:
            raise ArchiveError(f"{source}: column {f.name!r} has type {got}, expected {f.type}")
        if table.column(f.name).null_count:
            raise ArchiveError(f"{source}: column {f.name!r} has null values")
    versions = set(table.column("schema_version").to_pylist())
    if versions - {version}:
        raise ArchiveError(
            f"{source}: schema_version {sorted(versions)} found, this layerlab reads {version}"
        )
    rows = list(zip(*(table.column(k).to_pylist() for k in keys), strict=True))
    if len(set(rows)) != len(rows):
        seen: set[tuple[Any, ...]] = set()
        dup = next(k for k in rows if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ArchiveError(f"{source}: duplicate record key {dict(zip(keys, dup, strict=True))}")


def write_records(path: Path, records: Sequence[Record]) -> None:
    """Validate and atomically write ``records`` as a Parquet archive (deterministic bytes)."""
    table = to_table(records)
    validate_table(table, str(path))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def upgrade_v1(table: pa.Table) -> pa.Table:
    """A version-1 record table in the version-2 layout (``contract_mode`` -> ``mitigation``,
    ``replicate`` = 0). Anything else is returned unchanged for validation to judge."""
    names = table.column_names
    if "contract_mode" not in names or "mitigation" in names or "replicate" in names:
        return table
    if "schema_version" not in names or set(table.column("schema_version").to_pylist()) != {1}:
        return table
    table = table.rename_columns(["mitigation" if n == "contract_mode" else n for n in names])
    n = table.num_rows
    table = table.set_column(
        table.column_names.index("schema_version"),
        "schema_version",
        pa.array([SCHEMA_VERSION] * n, pa.int16()),
    )
    table = table.append_column("replicate", pa.array([0] * n, pa.int16()))
    return table.select(SCHEMA.names)


def read_table(
    path: Path,
    schema: pa.Schema | None = None,
    keys: Sequence[str] = KEYS,
    version: int = SCHEMA_VERSION,
) -> pa.Table:
    """Read and validate an archive; raise :class:`ArchiveError` on any problem.

    Record archives of schema version 1 are upgraded on read (see the module docstring).
    """
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: not a readable Parquet archive ({exc})") from exc
    if schema is None:
        table = upgrade_v1(table)
    validate_table(table, str(path), schema, keys, version)
    return table.cast(schema or SCHEMA)


# --- the focused LangChain study's cells ------------------------------------------------------

STUDY_SCHEMA = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        *[
            pa.field(n, pa.string(), nullable=False)
            for n in ("run_id", "provider", "model", "condition", "arm", "task_id", "policy_id")
        ],
        *[
            pa.field(n, pa.bool_(), nullable=False)
            for n in (
                "answerable",
                "success",
                "safe_resolution",
                "answered",
                "abstained",
                "grounded",
                "grounded_false_positive",
                "retry_restored",
            )
        ],
        pa.field("retries", pa.int8(), nullable=False),
        *[
            pa.field(n, pa.string(), nullable=False)
            for n in ("control", "control_layer", "prompt_hash")
        ],
    ],
    metadata={b"layerlab.archive.schema_version": str(STUDY_SCHEMA_VERSION).encode()},
)
STUDY_KEYS = ("provider", "model", "condition", "arm", "task_id")
STUDY_ARCHIVE = "study.parquet"


def write_study(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Validate and atomically write study cells (sorted by key; allowlisted columns only)."""
    rows = sorted(rows, key=lambda r: tuple(r[k] for k in STUDY_KEYS))
    extra = {k for r in rows for k in r} - set(STUDY_SCHEMA.names)
    if extra:
        raise ArchiveError(f"{path}: columns outside the study allowlist: {sorted(extra)}")
    table = pa.Table.from_pydict(
        {n: [r[n] for r in rows] for n in STUDY_SCHEMA.names}, schema=STUDY_SCHEMA
    )
    validate_table(table, str(path), STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    atomic_write_bytes(Path(path), buf.getvalue())


def read_study(path: Path) -> list[dict[str, Any]]:
    """Read and validate a study archive (a file or a study run folder)."""
    path = Path(path)
    return read_table(
        path / STUDY_ARCHIVE if path.is_dir() else path,
        STUDY_SCHEMA,
        STUDY_KEYS,
        STUDY_SCHEMA_VERSION,
    ).to_pylist()


def read_records(path: Path) -> list[Record]:
    table = read_table(path)
    return [Record(**row) for row in table.to_pylist()]


# --- run folders: manifest + archive ---------------------------------------------------------

MANIFEST = "manifest.json"
ARCHIVE = "records.parquet"
PROGRESS = "records.jsonl"
MANIFEST_KEYS = frozenset(
    {
        "archive_schema_version",
        "run_id",
        "kind",
        "layerlab_version",
        "corpus",
        "spec_hashes",
        "models",
        "scenarios",
        "modes",
        "mitigations",
        "n_tasks",
        "retriever",
        "settings",
        "expected_records",
        "records",
        "complete",
        "calls",
        "files",
        "sources",
        "note",
        "arms",
        "conditions",
        "tasks",
        "seed",
        "controls",
        "prompt_version",
        "replicates",
        "share_replies",
        "response_format",
        "seeds",
        "local_models",
    }
)


def write_run(folder: Path, records: Sequence[Record], manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``records.parquet`` then ``manifest.json`` (with the archive's checksum) atomically."""
    import json

    from layerlab._io import atomic_write_text, sha256_file

    folder = Path(folder)
    extra = set(manifest) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(
            f"{folder / MANIFEST}: keys outside the manifest allowlist: {sorted(extra)}"
        )
    write_records(folder / ARCHIVE, records)
    manifest = {
        **manifest,
        "archive_schema_version": SCHEMA_VERSION,
        "records": len(records),
        "files": {ARCHIVE: sha256_file(folder / ARCHIVE)},
    }
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    import json

    p = Path(folder) / MANIFEST
    if not p.exists():
        raise ArchiveError(f"{p}: missing (not a layerlab run folder)")
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{p}: not valid JSON ({exc})") from exc
    if not isinstance(m, dict) or "run_id" not in m:
        raise ArchiveError(f"{p}: not a layerlab manifest (no run_id)")
    extra = set(m) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(f"{p}: keys outside the manifest allowlist: {sorted(extra)}")
    return m


def check_path(path: Path) -> dict[str, Any]:
    """Validate an archive file or a run folder; return a short report or raise ArchiveError."""
    from layerlab._io import sha256_file

    path = Path(path)
    if not path.exists():
        raise ArchiveError(f"{path}: does not exist")
    if path.is_file():
        table = read_table(path)
        return {
            "path": str(path),
            "records": table.num_rows,
            "runs": sorted(set(table.column("run_id").to_pylist())),
        }
    m = read_manifest(path)
    study = m.get("kind") == "langchain_study"
    arch = path / (STUDY_ARCHIVE if study else ARCHIVE)
    if not arch.exists():
        hint = (
            " (an interrupted run: continue it with --resume)" if (path / PROGRESS).exists() else ""
        )
        raise ArchiveError(f"{arch}: missing{hint}")
    want = m.get("files", {}).get(arch.name)
    got = sha256_file(arch)
    if want != got:
        raise ArchiveError(
            f"{arch}: checksum {got[:12]}… differs from manifest {str(want)[:12]}… (modified or truncated)"
        )
    table = (
        read_table(arch, STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION)
        if study
        else read_table(arch)
    )
    if table.num_rows != m.get("records"):
        raise ArchiveError(f"{arch}: {table.num_rows} records, manifest says {m.get('records')}")
    run_ids = set(table.column("run_id").to_pylist())
    allowed = {m["run_id"], *[s["run_id"] for s in m.get("sources", [])]}
    if run_ids - allowed:
        raise ArchiveError(
            f"{arch}: records from runs {sorted(run_ids - allowed)} not named by the manifest"
        )
    return {
        "path": str(path),
        "run_id": m["run_id"],
        "records": table.num_rows,
        "complete": m.get("complete"),
    }


def load_records(paths_: Sequence[Path]) -> list[Record]:
    """Records from archive files or run folders, each checked; a run given twice counts once."""
    seen_runs: set[str] = set()
    out: list[Record] = []
    for p in paths_:
        p = Path(p)
        check_path(p)
        arch = p / ARCHIVE if p.is_dir() else p
        recs = read_records(arch)
        runs = {r.run_id for r in recs}
        if runs <= seen_runs:
            continue
        out.extend(r for r in recs if r.run_id not in seen_runs)
        seen_runs |= runs
    keys = [sort_key(r) for r in out]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ArchiveError(
            f"record {dict(zip(KEYS, dup, strict=True))} appears in more than one run"
        )
    return out


def merge(sources: Sequence[Path], out: Path) -> dict[str, Any]:
    """Combine run folders through their manifests into ``out``; a run given twice counts once,
    and a record key present in two different runs is refused (nothing is written)."""
    manifests = []
    seen: set[str] = set()
    for s in sources:
        m = read_manifest(Path(s))
        check_path(Path(s))
        if m["run_id"] in seen:
            continue
        seen.add(m["run_id"])
        manifests.append(m)
    records = load_records([Path(s) for s in sources])
    import hashlib

    run_id = "merge-" + hashlib.sha256("\x1f".join(sorted(seen)).encode()).hexdigest()[:12]
    manifest = {
        "run_id": run_id,
        "kind": "merged",
        "sources": [
            {
                "run_id": m["run_id"],
                "kind": m.get("kind"),
                "models": m.get("models"),
                "records": m.get("records"),
                "complete": m.get("complete"),
            }
            for m in sorted(manifests, key=lambda m: m["run_id"])
        ],
        "models": sorted({mm for m in manifests for mm in m.get("models", [])}),
        "complete": all(m.get("complete") for m in manifests),
    }
    return write_run(Path(out), records, manifest)

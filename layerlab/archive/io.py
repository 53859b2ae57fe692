"""Reading and writing archives: record and study tables to Parquet with deterministic bytes,
written atomically and validated on the way in and out, and a run folder's archive with its
manifest. Older archives are upgraded in memory on read (:mod:`layerlab.archive.upgrade`)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from layerlab._io import atomic_write_bytes
from layerlab.archive.manifest import MANIFEST, Manifest, as_manifest, write_manifest
from layerlab.archive.schema import (
    KEYS,
    NULLABLE,
    SCHEMA,
    SCHEMA_VERSION,
    STUDY_KEYS,
    STUDY_SCHEMA,
    STUDY_SCHEMA_VERSION,
    ArchiveError,
    Record,
    sort_key,
)
from layerlab.archive.upgrade import upgrade, version_of
from layerlab.archive.validate import validate_table

# the files of a run folder (besides its manifest.json)
ARCHIVE = "records.parquet"
STUDY_ARCHIVE = "study.parquet"
PROGRESS = "records.jsonl"


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as Parquet with deterministic bytes (zstd, no statistics)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_statistics=False)
    return buf.getvalue()


def to_table(records: Iterable[Record]) -> pa.Table:
    """Records -> Arrow table in the archive schema, rows sorted by the record key."""
    rows = sorted(records, key=sort_key)
    cols: dict[str, list[Any]] = {}
    # column by column with getattr: every field is a scalar, and dataclasses.asdict's recursive
    # copy was most of a live run's serial tail
    for name in SCHEMA.names:
        vals = [getattr(r, name) for r in rows]
        if name in NULLABLE:  # a record that went through pandas carries NaN for a null string
            vals = [None if isinstance(v, float) and v != v else v for v in vals]
        cols[name] = vals
    return pa.Table.from_pydict(cols, schema=SCHEMA)


def write_records(path: Path, records: Sequence[Record]) -> None:
    """Validate and atomically write ``records`` as a Parquet archive (deterministic bytes)."""
    table = to_table(records)
    validate_table(table, str(path))
    atomic_write_bytes(Path(path), parquet_bytes(table))


def read_table(
    path: Path,
    schema: pa.Schema | None = None,
    keys: Sequence[str] = KEYS,
    version: int = SCHEMA_VERSION,
) -> pa.Table:
    """Read and validate an archive; raise :class:`ArchiveError` on any problem.

    Archives of an older schema version are upgraded in memory (:mod:`layerlab.archive.upgrade`);
    ``layerlab archive migrate`` rewrites them.
    """
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{path}: not a readable Parquet archive ({exc})") from exc
    if version_of(table) not in (None, version):
        table = upgrade(table, str(path))
    validate_table(table, str(path), schema, keys, version)
    return table.cast(schema or SCHEMA)


def read_records(path: Path) -> list[Record]:
    table = read_table(path)
    return [Record(**row) for row in table.to_pylist()]


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
    atomic_write_bytes(Path(path), parquet_bytes(table))


def read_study(path: Path) -> list[dict[str, Any]]:
    """Read and validate a study archive (a file or a study run folder)."""
    path = Path(path)
    return read_table(
        path / STUDY_ARCHIVE if path.is_dir() else path,
        STUDY_SCHEMA,
        STUDY_KEYS,
        STUDY_SCHEMA_VERSION,
    ).to_pylist()


def staged(folder: Path, name: str = ARCHIVE) -> Path:
    """Where :func:`write_run` stages a folder's next archive before its manifest commits it."""
    return Path(folder) / f".{name}.pending"


def write_run(
    folder: Path, records: Sequence[Record], manifest: Manifest | Mapping[str, Any]
) -> dict[str, Any]:
    """Write a run folder's archive and manifest so that the folder is valid at every moment.

    The new archive is staged beside the old one (``.records.parquet.pending``), then the new
    manifest (naming the staged archive's checksum) replaces the old one atomically: that is the
    commit. The staged file is renamed over ``records.parquet`` last. A process killed before the
    commit leaves the previous archive and manifest as they were; one killed after it leaves a
    manifest that names the staged archive, which :func:`finish_write` (run at the start of every
    write) puts in place and :func:`~layerlab.archive.vet.check_path` reads meanwhile. The
    manifest (typed, or a mapping) is validated first."""
    from layerlab._io import sha256_bytes

    folder = Path(folder)
    m = as_manifest(manifest, str(folder / MANIFEST))
    finish_write(folder)
    table = to_table(records)
    validate_table(table, str(folder / ARCHIVE))
    data = parquet_bytes(table)
    stage = staged(folder)
    atomic_write_bytes(stage, data)
    m = replace(
        m,
        archive_schema_version=SCHEMA_VERSION,
        records=len(records),
        files={ARCHIVE: sha256_bytes(data)},
    )
    final = write_manifest(folder, m)
    finish_write(folder)
    return final


def finish_write(folder: Path, name: str = ARCHIVE) -> bool:
    """Complete a run folder's interrupted :func:`write_run`: a staged archive that the manifest
    names is renamed into place (True); one it does not name was never committed and is removed.
    Called by writers of the folder only (readers use :func:`committed_archive`)."""
    import os

    from layerlab._io import sha256_file
    from layerlab.archive.manifest import read_manifest

    folder = Path(folder)
    stage = staged(folder, name)
    if not stage.exists():
        return False
    try:
        want = read_manifest(folder).get("files", {}).get(name)
    except ArchiveError:
        want = None
    if want is not None and sha256_file(stage) == want:
        os.replace(stage, folder / name)
        return True
    stage.unlink(missing_ok=True)
    return False


def committed_archive(folder: Path, manifest: Mapping[str, Any], name: str = ARCHIVE) -> Path:
    """The archive file a run folder's manifest commits to: ``records.parquet``, or its staged
    successor while an interrupted :func:`write_run` is not finished (nothing is changed)."""
    from layerlab._io import sha256_file

    folder = Path(folder)
    want = manifest.get("files", {}).get(name)
    arch, stage = folder / name, staged(folder, name)
    if want is not None and stage.exists() and (not arch.exists() or sha256_file(arch) != want):
        if sha256_file(stage) == want:
            return stage
    return arch

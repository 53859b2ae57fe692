"""Migration (``layerlab archive migrate``): an older archive file or run folder rewritten in the
current schema, in place, through the in-memory upgrade (:mod:`layerlab.archive.upgrade`); no
model is run. A run folder's manifest records the migration."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from layerlab._io import atomic_write_bytes
from layerlab.archive.io import ARCHIVE, STUDY_ARCHIVE, parquet_bytes, to_table
from layerlab.archive.manifest import MANIFEST, read_manifest, write_manifest
from layerlab.archive.schema import (
    KEYS,
    SCHEMA,
    SCHEMA_VERSION,
    STUDY_KEYS,
    STUDY_SCHEMA,
    STUDY_SCHEMA_VERSION,
    ArchiveError,
    Record,
)
from layerlab.archive.upgrade import upgrade, version_of
from layerlab.archive.validate import validate_table

MIGRATION_CHANGES = {
    ("records", 1, 2): "contract_mode renamed mitigation; replicate added (0)",
    ("records", 2, 3): "domain added (from policy_id); answerable added (from the scenario spec, "
    "checked against the archive's safe_resolution labels); prompt_hash '' -> null",
    ("records", 3, 4): "grounded redefined (stated in a delivered document, cited or not); "
    "grounded_cited added (the old grounded); contained and token_f1 added; values the old labels "
    "do not determine are null (not recorded: archives hold no reply text)",
    ("study", 1, 2): "condition renamed scenario, arm renamed mitigation; domain added (from "
    "policy_id); control 'none' -> null, control_layer '-' -> null, prompt_hash '' -> null",
    ("study", 2, 3): "grounded redefined (stated in a delivered document, cited or not); "
    "grounded_cited added (the old grounded); exact_match, contained and token_f1 added; values "
    "the old labels do not determine are null (not recorded: archives hold no reply text)",
}
_STUDY_MANIFEST_RENAMES = {"arms": "mitigations", "conditions": "scenarios"}


def migrate(path: Path, scenarios_path: Path | None = None) -> dict[str, Any]:
    """Rewrite an archive file or run folder in the current schema, in place; no model is run.

    The added columns are pure functions of the archive's columns and the specs (see
    :mod:`layerlab.archive.upgrade`). A run folder's manifest keeps its provenance and gains a ``migrations`` entry
    (versions, the archive's previous checksum, the scenario spec hash used, what changed); its
    file checksums and schema version are updated. The result is byte-identical to what the
    current layerlab writes for the same records. An archive already current is left untouched.
    Returns a short report (``path``, ``from``, ``to``, ``records``, ``changed``).
    """
    from layerlab import __version__, paths
    from layerlab._io import sha256_file
    from layerlab.corpus.spec import SpecError, spec_hash
    from layerlab.faults.scenario import load_scenarios

    path = Path(path)
    if not path.exists():
        raise ArchiveError(f"{path}: does not exist (expected an archive file or run folder)")
    manifest = read_manifest(path) if path.is_dir() else None
    if manifest is not None and "manifest_sha256" not in manifest:
        raise ArchiveError(f"{path / MANIFEST}: has no manifest_sha256; cannot vouch for it")
    study = (manifest or {}).get("kind") == "langchain_study" or path.name == STUDY_ARCHIVE
    arch = path / (STUDY_ARCHIVE if study else ARCHIVE) if path.is_dir() else path
    if not arch.exists():
        raise ArchiveError(f"{arch}: missing")
    before = sha256_file(arch)
    if manifest is not None and manifest.get("files", {}).get(arch.name) != before:
        raise ArchiveError(f"{arch}: checksum differs from its manifest (modified or truncated)")
    try:
        table = pq.read_table(arch)
    except (OSError, pa.ArrowException) as exc:
        raise ArchiveError(f"{arch}: not a readable Parquet archive ({exc})") from exc
    schema, keys, version = (
        (STUDY_SCHEMA, STUDY_KEYS, STUDY_SCHEMA_VERSION)
        if study
        else (SCHEMA, KEYS, SCHEMA_VERSION)
    )
    old = version_of(table)
    report = {"path": str(path), "from": old, "to": version, "records": table.num_rows}
    if old == version:
        validate_table(table, str(arch), schema, keys, version)
        return {**report, "changed": False}
    spec_file = Path(scenarios_path or paths.SCENARIO_SPEC)
    try:
        scen = load_scenarios(scenarios_path)
    except SpecError as exc:
        raise ArchiveError(f"{spec_file}: {exc}") from None
    new = upgrade(table, str(arch), scen)
    validate_table(new, str(arch), schema, keys, version)
    new = new.cast(schema)
    # rows in the order the writer sorts them, so a migrated archive equals a fresh write
    order = sorted(range(new.num_rows), key=lambda i: tuple(new.column(k)[i].as_py() for k in keys))
    new = new.take(pa.array(order, pa.int64()))
    if not study:
        new = to_table(Record(**row) for row in new.to_pylist())
    data = parquet_bytes(new)
    if manifest is None:
        atomic_write_bytes(arch, data)
        return {**report, "changed": True}
    kind = "study" if study else "records"
    steps = [
        MIGRATION_CHANGES[(kind, v, v + 1)]
        for v in range(int(old or version), version)
        if (kind, v, v + 1) in MIGRATION_CHANGES
    ]
    m = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    if study:
        m = {_STUDY_MANIFEST_RENAMES.get(k, k): v for k, v in m.items()}
    m["migrations"] = [
        *m.get("migrations", []),
        {
            "from_schema_version": old,
            "to_schema_version": version,
            "previous_sha256": before,
            "layerlab_version": __version__,
            "scenario_spec": spec_hash(spec_file),
            "changes": "; ".join(steps),
        },
    ]
    m["archive_schema_version"] = version
    m["files"] = {**m.get("files", {}), arch.name: hashlib.sha256(data).hexdigest()}
    atomic_write_bytes(arch, data)
    write_manifest(path, m)
    return {**report, "changed": True}

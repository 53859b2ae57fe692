"""Privacy-safe record archives: the record schema (:mod:`~layerlab.archive.schema`), its
validation, reading and writing (:mod:`~layerlab.archive.io`), the run manifest
(:mod:`~layerlab.archive.manifest`) and provenance, vetting (``archive check``), merging, the
upgrade and migration of older archives, and the private opt-in per-sample log
(:mod:`~layerlab.archive.samplelog`, imported on its own).

The names below are the archive's public face: ``from layerlab import archive``, then
``archive.read_records(...)``, ``archive.Record``, ``archive.Manifest``, ...
"""

from layerlab.archive.io import (
    ARCHIVE,
    PROGRESS,
    STUDY_ARCHIVE,
    committed_archive,
    finish_write,
    read_records,
    read_study,
    read_table,
    to_table,
    write_records,
    write_run,
    write_study,
)
from layerlab.archive.manifest import (
    MANIFEST,
    MANIFEST_KEYS,
    UNSET,
    Manifest,
    read_manifest,
    write_manifest,
)
from layerlab.archive.merge import merge
from layerlab.archive.migrate import migrate
from layerlab.archive.provenance import MIXED, provenance_for, provenance_of
from layerlab.archive.schema import (
    ALLOWLIST,
    KEYS,
    LABELS,
    SCHEMA,
    SCHEMA_VERSION,
    SCORES,
    STUDY_KEYS,
    STUDY_SCHEMA,
    STUDY_SCHEMA_VERSION,
    ArchiveError,
    Record,
    domain_of,
    sort_key,
)
from layerlab.archive.upgrade import V4_DERIVED, v4_labels
from layerlab.archive.vet import check_path, load_records, vet

__all__ = [
    "ALLOWLIST",
    "ARCHIVE",
    "KEYS",
    "LABELS",
    "MANIFEST",
    "MANIFEST_KEYS",
    "MIXED",
    "PROGRESS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SCORES",
    "STUDY_ARCHIVE",
    "STUDY_KEYS",
    "STUDY_SCHEMA",
    "STUDY_SCHEMA_VERSION",
    "UNSET",
    "V4_DERIVED",
    "ArchiveError",
    "Manifest",
    "Record",
    "check_path",
    "committed_archive",
    "finish_write",
    "domain_of",
    "load_records",
    "merge",
    "migrate",
    "provenance_for",
    "provenance_of",
    "read_manifest",
    "read_records",
    "read_study",
    "read_table",
    "sort_key",
    "to_table",
    "v4_labels",
    "vet",
    "write_manifest",
    "write_records",
    "write_run",
    "write_study",
]

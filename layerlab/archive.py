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
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, get_args

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

# --- the value-level allowlist ----------------------------------------------------------------
# A column allowlist alone lets prose through any string column (answer text in ``diagnostic``
# passed ``check``). Every string column therefore has a closed vocabulary or a pattern that
# admits identifiers and hashes only: no whitespace, bounded length. Checked on write and read.
_IDENT = r"[a-z][a-z0-9_]{0,63}"
_TOKEN = r"[A-Za-z0-9][A-Za-z0-9_.:/@+=-]{0,127}"  # model names: org/name:tag@variant
VALUE_PATTERNS: dict[str, str] = {
    "run_id": r"[a-z][a-z0-9_]{0,31}(-[0-9a-z]{1,64})?",
    "provider": r"[a-z0-9][a-z0-9_.-]{0,63}",
    "model": _TOKEN,
    "scenario": _IDENT,
    "mitigation": r"[a-z][a-z0-9_+]{0,63}",  # a registered mitigation or a stack of them
    "task_id": r"[a-z][a-z0-9_]{0,63}-\d{2}-q\d{1,2}",
    "policy_id": r"[a-z][a-z0-9_]{0,63}-\d{2}",
    "prompt_hash": r"([0-9a-f]{64})?",
    # study cells
    "condition": _IDENT,
    "arm": _IDENT,
    "control": _IDENT,  # the study's control that fired (allow, refuse, none, ...)
    "control_layer": r"([a-z][a-z0-9_]{0,63}|-)?",
}


def value_vocabularies() -> dict[str, frozenset[str]]:
    """Closed vocabularies of the string columns that have one (their owners define them)."""
    from layerlab.contract import Outcome
    from layerlab.score import DIAGNOSTICS

    # a record ends at the reader, at a mitigation's refusal, or at the contract's outcome
    # (harness.evaluate)
    stages = frozenset({"reader", "refused", *get_args(Outcome)})
    return {
        "diagnostic": frozenset(DIAGNOSTICS),
        "stage": stages,
    }


def _check_values(table: pa.Table, source: str) -> None:
    vocab = value_vocabularies()
    for f in table.schema:
        if not pa.types.is_string(f.type) and not pa.types.is_large_string(f.type):
            continue
        values = set(table.column(f.name).to_pylist())
        if f.name in vocab:
            bad = sorted(v for v in values if v not in vocab[f.name])
            expected = f"one of {sorted(vocab[f.name])}"
        elif f.name in VALUE_PATTERNS:
            rx = re.compile(VALUE_PATTERNS[f.name])
            bad = sorted(v for v in values if not rx.fullmatch(v))
            expected = f"values matching {VALUE_PATTERNS[f.name]}"
        else:
            raise ArchiveError(f"{source}: string column {f.name!r} has no value allowlist")
        if bad:
            shown = bad[0] if len(bad[0]) <= 40 else bad[0][:37] + "..."
            raise ArchiveError(
                f"{source}: column {f.name!r} holds {len(bad)} value(s) outside its allowlist "
                f"(e.g. {shown!r}); expected {expected}"
            )


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
    _check_values(table, source)
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
        "provenance",
        "models",
        "scenarios",
        "modes",
        "mitigations",
        "prompt_version",
        "replicates",
        "share_replies",
        "response_format",
        "seeds",
        "local_models",
        "n_tasks",
        "retriever",
        "settings",
        "expected_records",
        "records",
        "complete",
        "calls",
        "errors",
        "files",
        "sources",
        "note",
        "arms",
        "conditions",
        "tasks",
        "seed",
        "controls",
        "manifest_sha256",
    }
)

# --- provenance: what a record's numbers depend on besides the model --------------------------
PROVENANCE_FIELDS = ("corpus_spec", "corpus", "scenarios", "mitigations", "prompt", "tasks")
MIXED = "mixed"


def _sha(obj: Any) -> str:
    import hashlib

    from layerlab._io import canonical_json

    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def provenance_for(corpus: Any, scenario_hash: str, task_ids: Iterable[str]) -> dict[str, str]:
    """The provenance hashes of a run: corpus spec, built corpus (documents and public tasks),
    scenario spec, mitigation spec, prompt template and the task set. Runs whose hashes differ
    measure different things and are not pooled without saying so (:func:`merge`, :func:`vet`)."""
    from layerlab import paths, prompt
    from layerlab.spec import spec_hash

    return {
        "corpus_spec": corpus.spec_hash,
        "corpus": _sha(
            {
                "documents": [asdict(d) for d in corpus.documents],
                "tasks": [asdict(t) for t in corpus.tasks],
            }
        ),
        "scenarios": scenario_hash,
        "mitigations": spec_hash(paths.MITIGATION_SPEC),
        "prompt": _sha({"v": prompt.PROMPT_VERSION, "system": prompt.SYSTEM}),
        "tasks": _sha(sorted(task_ids)),
    }


def provenance_of(manifest: dict[str, Any]) -> dict[str, str]:
    """A manifest's provenance (older manifests: what their ``spec_hashes`` recorded)."""
    if isinstance(manifest.get("provenance"), dict):
        return dict(manifest["provenance"])
    legacy = manifest.get("spec_hashes") or {}
    return {
        k: v
        for k, v in (("corpus_spec", legacy.get("corpus")), ("scenarios", legacy.get("scenarios")))
        if v
    }


def combine_provenance(
    named: Sequence[tuple[str, dict[str, str]]], allow_mixed: bool = False
) -> dict[str, str]:
    """One provenance for several sources; a field on which they differ refuses the combination
    (naming both sources and hashes) unless ``allow_mixed``, and is then recorded as ``mixed``."""
    out: dict[str, str] = {}
    for f in PROVENANCE_FIELDS:
        seen: dict[str, str] = {}
        for name, prov in named:
            seen.setdefault(prov.get(f, "unknown"), name)
        if MIXED in seen and not allow_mixed:
            raise ArchiveError(
                f"mixed provenance: {seen[MIXED]} was merged from runs with different {f} "
                "hashes; pass --allow-mixed to use it anyway (the output is then labelled mixed)"
            )
        if len(seen) > 1 and not allow_mixed:
            (h1, a), (h2, b) = list(seen.items())[:2]
            raise ArchiveError(
                f"mixed provenance: {a} has {f} hash {h1[:12]}, {b} has {h2[:12]}; "
                "these runs measure different things. Pass --allow-mixed to combine them anyway "
                "(the output is then labelled mixed)"
            )
        out[f] = next(iter(seen)) if len(seen) == 1 else MIXED
    return out


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """SHA-256 over the manifest's canonical JSON, its own checksum field left out."""
    return _sha({k: v for k, v in manifest.items() if k != "manifest_sha256"})


def write_manifest(folder: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Check the manifest's keys, add its checksum and write it atomically; return it."""
    import json

    from layerlab._io import atomic_write_text

    folder = Path(folder)
    extra = set(manifest) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(
            f"{folder / MANIFEST}: keys outside the manifest allowlist: {sorted(extra)}"
        )
    manifest = {**manifest, "manifest_sha256": manifest_checksum(manifest)}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def write_run(folder: Path, records: Sequence[Record], manifest: dict[str, Any]) -> dict[str, Any]:
    """Write ``records.parquet`` then ``manifest.json`` (with the archive's checksum) atomically."""
    from layerlab._io import sha256_file

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
    return write_manifest(folder, manifest)


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read a run folder's manifest; a manifest edited after it was written is refused."""
    import json

    p = Path(folder) / MANIFEST
    if not p.exists():
        raise ArchiveError(f"{p}: missing (not a layerlab run folder)")
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{p}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise ArchiveError(f"{p}: cannot be read ({exc.strerror})") from exc
    if not isinstance(m, dict) or "run_id" not in m:
        raise ArchiveError(f"{p}: not a layerlab manifest (no run_id)")
    extra = set(m) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(f"{p}: keys outside the manifest allowlist: {sorted(extra)}")
    if "manifest_sha256" in m and m["manifest_sha256"] != manifest_checksum(m):
        raise ArchiveError(
            f"{p}: manifest checksum does not match its content (edited after it was written)"
        )
    return m


def check_path(path: Path) -> dict[str, Any]:
    """Validate an archive file or a run folder; return a short report or raise ArchiveError.

    The report's ``partial`` is true for a run folder whose run did not finish (a valid archive
    of fewer records than the run expects) and for a bare archive file (no manifest says it is
    complete)."""
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
            "complete": None,
            "partial": True,
            "provenance": {},
        }
    m = read_manifest(path)
    if "manifest_sha256" not in m:
        raise ArchiveError(
            f"{path / MANIFEST}: has no manifest_sha256 (written by an older layerlab, or the "
            "checksum was removed); rerun it, or use its records.parquet as a bare archive file "
            "(recompute --allow-partial)"
        )
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
    expected = m.get("expected_records")
    complete = m.get("complete") is True and (expected is None or expected == table.num_rows)
    return {
        "path": str(path),
        "run_id": m["run_id"],
        "records": table.num_rows,
        "expected_records": expected,
        "complete": m.get("complete"),
        "partial": not complete,
        "provenance": provenance_of(m),
        "models": list(m.get("models", [])),
    }


# Provenance fields that may differ between real models and reference agents (not within either).
BLOCK_FIELDS = ("tasks",)


def _reference_only(report: dict[str, Any]) -> bool | None:
    """Whether a checked archive holds only reference agents (None: its manifest names no models)."""
    from layerlab.stats import is_reference

    models = report.get("models") or []
    if not models:
        return None
    return all(is_reference(str(m).split("/", 1)[0]) for m in models)


def vet(
    paths_: Sequence[Path], allow_mixed: bool = False, allow_partial: bool = False
) -> list[str]:
    """Check archives before they feed tables: refuse partial ones unless ``allow_partial`` and
    mixed provenance unless ``allow_mixed``. Return the stamps the outputs must then carry."""
    reports = [check_path(Path(p)) for p in paths_]
    stamps: list[str] = []
    partial = [r for r in reports if r["partial"]]
    if partial:
        r = partial[0]
        what = (
            f"a partial run ({r['records']} of {r['expected_records'] or '?'} records)"
            if "run_id" in r
            else "a bare archive file (no manifest says the run is complete)"
        )
        if not allow_partial:
            raise ArchiveError(
                f"{r['path']}: {what}; finish it with --resume or pass --allow-partial "
                "(the tables are then stamped PARTIAL)"
            )
        stamps.append(
            "PARTIAL: "
            + "; ".join(f"{Path(r['path']).name} {r['records']} records" for r in partial)
        )
    # Real models and reference agents are analysed apart (never pooled), so their task sets may
    # differ; everything else they are scored on must match, and so must tasks within a kind.
    prov = combine_provenance(
        [(r["path"], {k: v for k, v in r["provenance"].items() if k not in BLOCK_FIELDS}) for r in reports],
        allow_mixed,
    )
    for kind in (True, False, None):
        same = [r for r in reports if _reference_only(r) is kind]
        if not same:
            continue
        block = combine_provenance(
            [(r["path"], {f: r["provenance"].get(f, "unknown") for f in BLOCK_FIELDS}) for r in same],
            allow_mixed,
        )
        for f in BLOCK_FIELDS:
            if block[f] == MIXED:
                prov[f] = MIXED
    mixed = [f for f, v in prov.items() if v == MIXED]
    if mixed:
        stamps.append("MIXED PROVENANCE: " + ", ".join(mixed) + " differ")
    return stamps


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


def merge(sources: Sequence[Path], out: Path, allow_mixed: bool = False) -> dict[str, Any]:
    """Combine run folders through their manifests into ``out``; a run given twice counts once,
    a record key present in two different runs is refused, and so are runs of different
    provenance unless ``allow_mixed`` (the merged provenance then says ``mixed``). Nothing is
    written when the merge is refused."""
    manifests = []
    seen: set[str] = set()
    for s in sources:
        m = read_manifest(Path(s))
        check_path(Path(s))
        if m["run_id"] in seen:
            continue
        seen.add(m["run_id"])
        manifests.append((str(s), m))
    prov = combine_provenance([(name, provenance_of(m)) for name, m in manifests], allow_mixed)
    records = load_records([Path(s) for s in sources])
    import hashlib

    run_id = "merge-" + hashlib.sha256("\x1f".join(sorted(seen)).encode()).hexdigest()[:12]
    mixed = [f for f, v in prov.items() if v == MIXED]
    manifest = {
        "run_id": run_id,
        "kind": "merged",
        "provenance": prov,
        "sources": [
            {
                "run_id": m["run_id"],
                "kind": m.get("kind"),
                "models": m.get("models"),
                "records": m.get("records"),
                "complete": m.get("complete"),
                "provenance": provenance_of(m),
            }
            for _, m in sorted(manifests, key=lambda nm: nm[1]["run_id"])
        ],
        "models": sorted({mm for _, m in manifests for mm in m.get("models", [])}),
        "complete": all(m.get("complete") for _, m in manifests),
    }
    if mixed:
        manifest["note"] = f"mixed provenance ({', '.join(mixed)} differ), merged with --allow-mixed"
    return write_run(Path(out), records, manifest)

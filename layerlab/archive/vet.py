"""Vetting archives before they are used (``layerlab archive check``, and every command that
feeds tables): a run folder's manifest, checksums, record counts and runs; partial runs and mixed
provenance refused unless asked for, and then stamped; records loaded from checked sources."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerlab.archive.io import (
    ARCHIVE,
    PROGRESS,
    STUDY_ARCHIVE,
    committed_archive,
    read_records,
    read_table,
)
from layerlab.archive.manifest import MANIFEST, read_manifest
from layerlab.archive.provenance import MIXED, combine_provenance, provenance_of
from layerlab.archive.schema import (
    KEYS,
    STUDY_KEYS,
    STUDY_SCHEMA,
    STUDY_SCHEMA_VERSION,
    ArchiveError,
    Record,
    sort_key,
)


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
    if not (path / MANIFEST).exists() and _written_to(path):
        return _interrupted(path)
    m = read_manifest(path)
    if "manifest_sha256" not in m:
        raise ArchiveError(
            f"{path / MANIFEST}: has no manifest_sha256 (written by an older layerlab, or the "
            "checksum was removed); rerun it, or use its records.parquet as a bare archive file "
            "(recompute --allow-partial)"
        )
    study = m.get("kind") == "langchain_study"
    name = STUDY_ARCHIVE if study else ARCHIVE
    arch = committed_archive(path, m, name)
    pending = arch.name != name
    if not arch.exists():
        hint = (
            " (an interrupted run: continue it with --resume)" if (path / PROGRESS).exists() else ""
        )
        raise ArchiveError(f"{arch}: missing{hint}")
    want = m.get("files", {}).get(name)
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
    agent = target = None
    if not study and (m.get("agent") is not None or m.get("target") is not None):
        from layerlab.archive import agenttable

        # an agent or target run: its per-record table, one row a record (None: not yet written)
        keys = list(zip(*(table.column(k).to_pylist() for k in KEYS), strict=True))
        if m.get("agent") is not None:
            rows = agenttable.check(path, m, keys)
            agent = {"protocol": m["agent"].get("protocol"),
                     "max_steps": m["agent"].get("max_steps"), "rows": rows}  # fmt: skip
        if m.get("target") is not None:
            target = {"rows": agenttable.check(path, m, keys, kind="target")}
    expected = m.get("expected_records")
    complete = (
        m.get("complete") is True
        and (expected is None or expected == table.num_rows)
        and not pending
    )
    return {
        "path": str(path),
        "archive": str(arch),
        "note": (
            "its last write was interrupted before the archive was renamed into place (the "
            "records are intact): the same command with --resume finishes it"
            if pending
            else _merge_note(m) if m.get("kind") == "merged" and not complete
            else None
        ),
        "run_id": m["run_id"],
        "records": table.num_rows,
        "expected_records": expected,
        "complete": m.get("complete"),
        "partial": not complete,
        "provenance": provenance_of(m),
        "models": list(m.get("models", [])),
        **({"agent": agent} if agent is not None else {}),
        **({"target": target} if target is not None else {}),
    }


# how a merge's note says it lacks shards (:func:`layerlab.archive.merge.merge` writes it)
MISSING_SHARDS = "not every shard of the run is here"


def _merge_note(m: dict[str, Any]) -> str:
    """What finishes a merge that is not complete: not ``--resume`` (a merge is not resumed) but
    the missing shards made, or the unfinished sources finished, and the merge made again."""
    note = m.get("note") or "a merge of unfinished runs"
    fixes = []
    if MISSING_SHARDS in note:
        fixes.append("make each missing shard with run live --shard I/N")
    if any(s.get("complete") is False for s in m.get("sources", [])):
        fixes.append("finish each unfinished source with --resume in its own folder")
    return f"{note}; {' and '.join(fixes) or 'give every source complete'}, then merge again"


def _written_to(path: Path) -> bool:
    """Whether a folder without a manifest holds a run's progress log or a killed write's files."""
    return (path / PROGRESS).exists() or any(
        p.name.startswith(".") and p.name.endswith((".tmp", ".pending")) for p in path.iterdir()
    )


def _interrupted(path: Path) -> dict[str, Any]:
    """The report of a run folder killed before its first archive: a progress log, no manifest."""
    import json

    try:
        with open(path / PROGRESS, encoding="utf-8") as fh:
            run_id = str(json.loads(fh.readline()).get("run_id", "?"))
    except (OSError, ValueError, AttributeError):
        run_id = "?"
    return {
        "path": str(path),
        "archive": None,
        "note": "killed before its first archive was written: run the same command with --resume",
        "run_id": run_id,
        "records": 0,
        "expected_records": None,
        "complete": False,
        "partial": True,
        "provenance": {},
        "models": [],
    }


# Provenance fields that may differ between real models and reference agents (not within either).
BLOCK_FIELDS = ("tasks",)


def _reference_only(report: dict[str, Any]) -> bool | None:
    """Whether a checked archive holds only reference agents (None: its manifest names no models)."""
    from layerlab.models.agents import is_reference

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
        [
            (r["path"], {k: v for k, v in r["provenance"].items() if k not in BLOCK_FIELDS})
            for r in reports
        ],
        allow_mixed,
    )
    for kind in (True, False, None):
        same = [r for r in reports if _reference_only(r) is kind]
        if not same:
            continue
        block = combine_provenance(
            [
                (r["path"], {f: r["provenance"].get(f, "unknown") for f in BLOCK_FIELDS})
                for r in same
            ],
            allow_mixed,
        )
        for f in BLOCK_FIELDS:
            if block[f] == MIXED:
                prov[f] = MIXED
    mixed = [f for f, v in prov.items() if v == MIXED]
    if mixed:
        stamps.append("MIXED PROVENANCE: " + ", ".join(mixed) + " differ")
    return stamps


def shard_suffix(m: dict[str, Any]) -> str:
    """``#I/N`` for a shard's manifest (its records are a part of the run ``run_id``), else ""."""
    s = m.get("shard")
    return f"#{s['index']}/{s['count']}" if s else ""


def load_records(paths_: Sequence[Path]) -> list[Record]:
    """Records from archive files or run folders, each checked; a run given twice counts once
    (a shard of a run, ``run live --shard``, is a part of its own)."""
    seen_runs: set[str] = set()
    out: list[Record] = []
    for p in paths_:
        p = Path(p)
        rep = check_path(p)
        if rep.get("archive", p) is None:  # an interrupted run with no archive yet
            continue
        recs = read_records(Path(rep.get("archive") or p))
        part = shard_suffix(read_manifest(p)) if (p / MANIFEST).is_file() else ""
        runs = {r.run_id + part for r in recs}
        if runs <= seen_runs:
            continue
        out.extend(r for r in recs if r.run_id + part not in seen_runs)
        seen_runs |= runs
    keys = [sort_key(r) for r in out]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        runs = [r.run_id for r, k in zip(out, keys, strict=True) if k == dup]
        raise DuplicateRecord(dict(zip(KEYS, dup, strict=True)), runs[:2])
    return out


class DuplicateRecord(ArchiveError):
    """A record key that two runs both hold (``runs``: their ids, in the order given)."""

    def __init__(self, key: dict[str, Any], runs: list[str]) -> None:
        super().__init__(f"record {key} appears in more than one run ({', '.join(runs)})")
        self.key, self.runs = key, runs

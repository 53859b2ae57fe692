"""Merging run folders (``layerlab archive merge``): one run folder from several, through their
manifests, refusing a record key present in two runs and mixed provenance unless asked for."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from layerlab.archive.io import write_run
from layerlab.archive.manifest import Manifest, read_manifest
from layerlab.archive.provenance import MIXED, combine_provenance, provenance_of
from layerlab.archive.schema import ArchiveError
from layerlab.archive.vet import (
    MISSING_SHARDS,
    DuplicateRecord,
    check_path,
    load_records,
    shard_suffix,
)


def merge(
    sources: Sequence[Path],
    out: Path,
    allow_mixed: bool = False,
    note: str | None = None,
    complete: bool | None = None,
    in_place: bool = False,
) -> dict[str, Any]:
    """Combine run folders through their manifests into ``out``; a run given twice counts once,
    a record key present in two different runs is refused (naming where the runs differ), and
    so are runs of different provenance unless ``allow_mixed`` (the merged provenance then says
    ``mixed``) and shards of different runs (:func:`_one_sharded_run`). ``out`` must be new,
    empty or an earlier merge of the same runs (:func:`merged_folder_problem`); it is written
    whole through a sibling temporary and renamed into place, so a merge refused, failed or
    killed leaves ``out`` and every source as they were (raises
    :class:`~layerlab._io.FolderRefused` for ``out``). ``note`` and ``complete`` (False: a run
    that stopped before all its sources were made) override what the sources say. ``in_place``:
    ``out`` is the caller's own run folder (a run configuration's, whose model groups are its
    subfolders), whose archive and manifest are written in it, each file atomically."""
    from layerlab._io import replace_folder

    manifests = []
    seen: set[str] = set()
    for s in sources:
        m = read_manifest(Path(s))
        check_path(Path(s))
        part = m["run_id"] + shard_suffix(m)  # the shards of one run share its id
        if part in seen:
            continue
        seen.add(part)
        manifests.append((str(s), m))
    _one_sharded_run(manifests)
    missing = _missing_shards(manifests)
    prov = combine_provenance([(name, provenance_of(m)) for name, m in manifests], allow_mixed)
    agent = _agent_settings(manifests)
    records = _records(sources, manifests)
    run_id = "merge-" + hashlib.sha256("\x1f".join(sorted(seen)).encode()).hexdigest()[:12]
    mixed = [f for f, v in prov.items() if v == MIXED]
    manifest = Manifest(
        run_id=run_id,
        kind="merged",
        provenance=prov,
        sources=[
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
        models=sorted({mm for _, m in manifests for mm in m.get("models", [])}),
        complete=all(m.get("complete") for _, m in manifests) and complete is not False
        and not missing,
    )
    notes = [note] if note else []
    if mixed:
        notes.append(f"mixed provenance ({', '.join(mixed)} differ), merged with --allow-mixed")
    if missing:
        notes.append(f"{MISSING_SHARDS} ({', '.join(missing)} missing): incomplete")
    if notes:
        manifest = replace(manifest, note="; ".join(notes))
    arms = _arm_definitions(manifests)
    if arms is not None:
        manifest = replace(manifest, mitigation_arms=arms)
    target = _target_settings(manifests)

    def fill(folder: Path) -> dict[str, Any]:
        m = manifest
        if agent is not None:  # the step table first; the manifest names its checksum
            sha = _write_agent_table([Path(s) for s in sources], records, folder)
            m = replace(m, agent={**agent, "table_sha256": sha})
        if target is not None:  # a target run's table (target.parquet) likewise
            sha = _write_agent_table([Path(s) for s in sources], records, folder, kind="target")
            m = replace(m, target={**target, "table_sha256": sha})
        return write_run(folder, records, m)

    if in_place:
        return fill(Path(out))
    return replace_folder(Path(out), fill, lambda o: merged_folder_problem(o, run_id))


# what a merged folder holds: replacing an earlier merge of the same runs deletes nothing else
MERGED_FILES = ("manifest.json", "records.parquet", "agent.parquet", "target.parquet")


def merged_folder_problem(out: Path, run_id: str) -> str | None:
    """Why a merge (its id ``run_id``) may not write the folder ``out``, or None: it must be
    missing, empty, or an earlier merge of the same runs (same merged id) holding only a merge's
    files, which it replaces. An input, another run's folder or a folder holding anything else
    (a user's own ``records.parquet``) is refused. Only names and the manifest are read."""
    import json

    from layerlab._io import folder_names

    out = Path(out)
    bad, names = folder_names(out)
    if bad is not None or not names:
        return bad
    expected = "expected a new or empty folder, or an earlier merge of the same runs (replaced)"
    try:
        m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"not empty and not a merge (no manifest.json; holds {names[0]!r}); {expected}"
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return f"not empty and its manifest.json is not valid JSON; {expected}"
    if not isinstance(m, dict) or m.get("kind") != "merged":
        kind = m.get("kind") if isinstance(m, dict) else None
        rid = m.get("run_id") if isinstance(m, dict) else None
        return f"holds a {kind or 'run'} run folder ({rid}), not a merge; {expected}"
    if m.get("run_id") != run_id:
        return f"an earlier merge of other runs ({m.get('run_id')}, not {run_id}); {expected}"
    extra = [n for n in names if n not in MERGED_FILES]
    if extra:
        return f"an earlier merge that also holds {extra[0]!r}, which replacing it would delete"
    return None


# the manifest fields that say what made a run's records (the shards of one run share them)
_RUN_FIELDS = (
    "kind", "layerlab_version", "corpus", "provenance", "models", "scenarios", "mitigations",
    "retriever", "retriever_code", "settings", "prompt_version", "replicates", "epochs",
    "share_replies", "sampling", "response_format", "reply_schema", "seed", "agent", "target",
)  # fmt: skip


def run_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The first field (dotted one level down) where two runs' manifests differ, with both
    values, short: ``settings.temperature: 0.0 vs 0.7``; the run ids when nothing else does."""
    from layerlab._io import canonical_json

    def short(v: Any) -> str:
        text = canonical_json(v)
        return text if len(text) <= 60 else text[:59] + "…"

    for f in _RUN_FIELDS:
        va, vb = a.get(f), b.get(f)
        if isinstance(va, dict) and isinstance(vb, dict):
            for k in sorted({*va, *vb} - {"table_sha256"}):
                if va.get(k) != vb.get(k):
                    return f"{f}.{k}: {short(va.get(k))} vs {short(vb.get(k))}"
        elif va != vb:
            return f"{f}: {short(va)} vs {short(vb)}"
    return f"run_id: {a.get('run_id')} vs {b.get('run_id')}"


def _one_sharded_run(manifests: list[tuple[str, dict[str, Any]]]) -> None:
    """Shards (``run live --shard I/N``) merge only with the other shards of their own run: a
    shard beside a folder of another run (shards run with different flags, say) is refused,
    naming the first setting in which the two differ."""
    sharded = [(n, m) for n, m in manifests if m.get("shard")]
    if not sharded:
        return
    name, first = sharded[0]
    for other, m in manifests:
        if m["run_id"] != first["run_id"]:
            raise ArchiveError(
                f"{other}: not of the run of shard {name} ({run_difference(first, m)}); a "
                "shard merges only with its own run's shards (run live --shard I/N with the same "
                "flags): merge each run's shards first, then the merged folders"
            )


def _records(sources: Sequence[Path], manifests: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The sources' records (:func:`~layerlab.archive.vet.load_records`); a record key two runs
    both hold is refused naming the runs and where their settings differ."""
    try:
        return load_records([Path(s) for s in sources])
    except DuplicateRecord as exc:
        by_id = {m["run_id"]: (n, m) for n, m in manifests}
        a, b = (by_id.get(r) for r in [*exc.runs, "", ""][:2])
        if a is None or b is None:
            raise
        raise ArchiveError(
            f"{b[0]}: holds record(s) {a[0]} holds too ({exc.key}); the runs differ in "
            f"{run_difference(a[1], b[1])}: runs merge only when their records do not overlap"
        ) from None


def _arm_definitions(manifests: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The sources' arm definitions as one ``mitigation_arms`` (None when no source has the
    key); an arm two sources define differently is refused."""
    from layerlab.mitigations import book

    if all(book.KEY not in m for _, m in manifests):
        return None
    try:
        b = book.book_of_manifests(manifests)
    except book.UnknownArmError as exc:
        raise ArchiveError(str(exc)) from None
    return {"baseline": b.baseline, "arms": {n: d.to_json() for n, d in b.arms.items()}}


def _missing_shards(manifests: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The shards of the runs given in shards that are not given (``2/3 of live-…``); shards of
    one run with different counts, or a run given both whole and in shards, are refused."""
    by_run: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}
    for name, m in manifests:
        by_run.setdefault(m["run_id"], []).append((name, m.get("shard")))
    missing: list[str] = []
    for run_id, parts in by_run.items():
        counts = {s["count"] if s else None for _, s in parts}
        if len(counts) > 1:
            raise ArchiveError(
                f"{parts[0][0]}: run {run_id} is given " + (
                    "whole and in shards" if None in counts else
                    f"in shards of different counts ({sorted(c for c in counts if c is not None)})"
                ) + "; give one run's N shards (run live --shard I/N) once each"
            )  # fmt: skip
        (count,) = counts
        have = {s["index"] for _, s in parts if s}
        missing += [f"{i}/{count} of {run_id}" for i in range(1, (count or 0) + 1) if i not in have]
    return missing


def _target_settings(manifests: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The target the sources share (None: no source is a target run): target runs merge with
    one table only when every source is the same target, code included."""
    targets = [(name, m.get("target")) for name, m in manifests]
    if all(t is None for _, t in targets):
        return None
    want = {k: v for k, v in (targets[0][1] or {}).items() if k != "table_sha256"}
    for name, t in targets:
        got = {k: v for k, v in (t or {}).items() if k != "table_sha256"}
        if got != want:
            raise ArchiveError(
                f"{name}: not the same target as {targets[0][0]} (the manifests' target keys "
                "differ); target runs merge with their target.parquet only when one target made them"
            )
    return want


def _agent_settings(manifests: list[tuple[str, dict[str, Any]]]) -> dict[str, Any] | None:
    """The agent settings the sources share (None: no source is an agent run); agent runs merge
    only with agent runs of the same protocol, step limit and versions."""
    agents = [(name, m.get("agent")) for name, m in manifests]
    if all(a is None for _, a in agents):
        return None
    single = [name for name, a in agents if a is None]
    if single:
        raise ArchiveError(
            f"{single[0]}: a single-call run; agent runs (manifest key 'agent') merge only with "
            "agent runs (the merged agent.parquet needs a row per record)"
        )
    first_name, first = agents[0]
    want = {k: v for k, v in first.items() if k != "table_sha256"}  # type: ignore[union-attr]
    for name, a in agents[1:]:
        got = {k: v for k, v in a.items() if k != "table_sha256"}  # type: ignore[union-attr]
        if got != want:
            diff = sorted(k for k in {*got, *want} if got.get(k) != want.get(k))
            raise ArchiveError(
                f"{name}: agent settings differ from {first_name}'s ({', '.join(diff)}); agent "
                "runs merge only with the same protocol, step limit and versions"
            )
    return want


def _write_agent_table(
    sources: Sequence[Path], records: Sequence[Any], out: Path, kind: str = "agent"
) -> str:
    """The merged ``agent.parquet`` (``kind`` "target": ``target.parquet``): the sources' rows
    of the merged records (each source already checked: one row per record); its SHA-256."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from layerlab._io import atomic_write_bytes, sha256_bytes
    from layerlab.archive.agenttable import AGENT_TABLE, TARGET_TABLE, table_schema
    from layerlab.archive.io import parquet_bytes
    from layerlab.archive.schema import KEYS, sort_key

    name = TARGET_TABLE if kind == "target" else AGENT_TABLE
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in sources:
        for r in pq.read_table(s / name).to_pylist():
            rows[tuple(r[k] for k in KEYS)] = r
    chosen = [rows[sort_key(r)] for r in sorted(records, key=sort_key)]
    data = parquet_bytes(pa.Table.from_pylist(chosen, schema=table_schema(kind)))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / name, data)
    return sha256_bytes(data)

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
from layerlab.archive.vet import check_path, load_records, shard_suffix


def merge(
    sources: Sequence[Path],
    out: Path,
    allow_mixed: bool = False,
    note: str | None = None,
    complete: bool | None = None,
) -> dict[str, Any]:
    """Combine run folders through their manifests into ``out``; a run given twice counts once,
    a record key present in two different runs is refused, and so are runs of different
    provenance unless ``allow_mixed`` (the merged provenance then says ``mixed``). Nothing is
    written when the merge is refused. ``note`` and ``complete`` (False: a run that stopped
    before all its sources were made) override what the sources say."""
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
    whole = _whole_shards(manifests)
    prov = combine_provenance([(name, provenance_of(m)) for name, m in manifests], allow_mixed)
    agent = _agent_settings(manifests)
    records = load_records([Path(s) for s in sources])
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
        and whole is not False,
    )
    notes = [note] if note else []
    if mixed:
        notes.append(f"mixed provenance ({', '.join(mixed)} differ), merged with --allow-mixed")
    if whole is False:
        notes.append("not every shard of the run is here: incomplete")
    if notes:
        manifest = replace(manifest, note="; ".join(notes))
    arms = _arm_definitions(manifests)
    if arms is not None:
        manifest = replace(manifest, mitigation_arms=arms)
    if agent is not None:  # the step table first; the manifest names its checksum
        sha = _write_agent_table([Path(s) for s in sources], records, Path(out))
        manifest = replace(manifest, agent={**agent, "table_sha256": sha})
    target = _target_settings(manifests)
    if target is not None:  # a target run's table (target.parquet) likewise
        sha = _write_agent_table([Path(s) for s in sources], records, Path(out), kind="target")
        manifest = replace(manifest, target={**target, "table_sha256": sha})
    return write_run(Path(out), records, manifest)


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


def _whole_shards(manifests: list[tuple[str, dict[str, Any]]]) -> bool | None:
    """Whether every run given in shards has all of them (None: no shards); shards of one run
    with different counts, or a run given both whole and in shards, are refused."""
    by_run: dict[str, list[tuple[str, dict[str, Any] | None]]] = {}
    for name, m in manifests:
        by_run.setdefault(m["run_id"], []).append((name, m.get("shard")))
    if not any(s for parts in by_run.values() for _, s in parts):
        return None
    whole = True
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
        whole = whole and (count is None or len(parts) == count)
    return whole


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

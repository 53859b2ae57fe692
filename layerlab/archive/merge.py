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
from layerlab.archive.vet import check_path, load_records


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
        if m["run_id"] in seen:
            continue
        seen.add(m["run_id"])
        manifests.append((str(s), m))
    prov = combine_provenance([(name, provenance_of(m)) for name, m in manifests], allow_mixed)
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
        complete=all(m.get("complete") for _, m in manifests) and complete is not False,
    )
    notes = [note] if note else []
    if mixed:
        notes.append(f"mixed provenance ({', '.join(mixed)} differ), merged with --allow-mixed")
    if notes:
        manifest = replace(manifest, note="; ".join(notes))
    return write_run(Path(out), records, manifest)

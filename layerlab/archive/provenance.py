"""Provenance: what a record's numbers depend on besides the model (the corpus spec, the built
corpus, the scenario and mitigation specs, the prompt template and the task set), as hashes in
a run's manifest. Runs whose hashes differ measure different things and are not pooled without
saying so (:func:`layerlab.archive.merge.merge`, :func:`layerlab.archive.vet.vet`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from layerlab.archive.schema import ArchiveError

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
    from layerlab import paths
    from layerlab.corpus.spec import spec_hash
    from layerlab.system import prompt

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


def provenance_of(manifest: Mapping[str, Any]) -> dict[str, str]:
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

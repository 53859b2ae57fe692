"""The run manifest: what a run folder's ``manifest.json`` may say, typed, with one owner.

:class:`Manifest` lists every key a manifest may hold, its JSON type and its meaning; the
allowlist (:data:`MANIFEST_KEYS`) and the data dictionary's manifest entries derive from it. A
key absent from a manifest is :data:`UNSET` (not written), which differs from a JSON null
(``seed`` of a run without one). :meth:`Manifest.from_dict` validates today's dict (unknown
keys, wrong types: the error names the field); :meth:`Manifest.to_dict` gives it back unchanged,
so a manifest written from the typed object has the same bytes as one written from the dict.
A manifest carries its own checksum (``manifest_sha256``): one edited after it was written is
refused on read.
"""

from __future__ import annotations

import enum
import json
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

from layerlab.archive.schema import ArchiveError

if TYPE_CHECKING:
    from layerlab.mitigations.book import ArmBook

MANIFEST = "manifest.json"


class _Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset.UNSET  # the key is absent from the manifest
Unset = Literal[_Unset.UNSET]


def _key(meaning: str) -> Any:
    """A manifest key that may be absent, with its meaning (for the data dictionary)."""
    return field(default=UNSET, metadata={"doc": meaning})


@dataclass(frozen=True)
class Manifest:
    """A run folder's manifest: only ``run_id`` is always present; every other key is written
    by the kinds of run it applies to (live, deterministic, langchain_study, merged)."""

    run_id: str = field(
        metadata={"doc": "the run: a hash of everything that determines its records"}
    )
    kind: str | Unset = _key("what wrote the folder: live, deterministic, langchain_study, merged")
    layerlab_version: str | Unset = _key("the layerlab version that wrote the run")
    corpus: str | Unset = _key("the corpus name")
    spec_hashes: dict[str, str] | Unset = _key(
        "hashes of the corpus, scenario and mitigation specs (older runs: see provenance)"
    )
    provenance: dict[str, str] | Unset = _key(
        "what the numbers depend on besides the model: hashes of the corpus spec, built corpus, "
        "scenario and mitigation specs, prompt template and task set"
    )
    models: list[str] | Unset = _key("the models (provider/model) that answered")
    scenarios: list[str] | Unset = _key("the fault scenarios run")
    modes: list[str] | Unset = _key("the contract modes run (manifests before mitigations)")
    mitigations: list[str] | Unset = _key("the mitigation arms run")
    mitigation_arms: dict[str, Any] | Unset = _key(
        "what each arm is, read by recompute, compare and gate instead of what is installed: the "
        "baseline's name and per arm its kinds, layers, stages, whether a stack and a matrix row, "
        "and the distribution and version of a plug-in's kind (older runs: the shipped spec)"
    )
    prompt_version: str | Unset = _key("the prompt template's version")
    replicates: int | Unset = _key(
        "epochs: independent repetitions of every cell (the most any model ran; see epochs)"
    )
    epochs: dict[str, Any] | Unset = _key(
        "a run of more than one epoch (`--epochs K`): the epochs requested, those run per model, "
        "and why a model ran one (a greedy model, a deterministic reference agent: its epochs "
        "would be identical)"
    )
    share_replies: bool | Unset = _key("whether arms whose prompts coincide share one reply")
    sampling: dict[str, Any] | Unset = _key("how replies were decoded (temperature, top_p, ...)")
    response_format: str | Unset = _key("the structured-output mode asked of the provider")
    reply_schema: str | Unset = _key("the reply schema's version, when a response format is set")
    seeds: str | Unset = _key("how per-record seeds are derived and sent")
    local_models: dict[str, Any] | Unset = _key("provenance of the local models served")
    n_tasks: int | Unset = _key("tasks per cell")
    agent: dict[str, Any] | Unset = _key(
        "agent mode: the tool protocol, the step limit, the tools' and agent prompt's versions, "
        "and the SHA-256 of the per-record step table (agent.parquet)"
    )
    target: dict[str, Any] | Unset = _key(
        "the system under test of a target run: kind, name, the user's version string, reference "
        "(module:attr; a URL only as local or remote), settings (secret-looking ones not stored), "
        "their SHA-256, the tools' version and the SHA-256 of the per-record table (target.parquet)"
    )
    retriever: str | Unset = _key(
        "the search tool's first stage: a registered retriever, or a team's own "
        "(python:MODULE:FACTORY, langchain:MODULE:FACTORY)"
    )
    retriever_code: dict[str, str] | Unset = _key(
        "a team's retriever: its module and package (SHA-256 of their files; never the code)"
    )
    settings: dict[str, Any] | Unset = _key(
        "run settings (timeouts, retries, endpoints as local or remote only)"
    )
    shard: dict[str, int] | Unset = _key(
        "a shard of a run (`run live --shard I/N`): its index (from 1) and the shard count"
    )
    until_decided: dict[str, Any] | Unset = _key(
        "a run that stops when it has decided (`run live --until-decided`): its plan (max_tasks, "
        "batch, alpha, delta, spending, sizes and levels of the looks, the verdicts asked), the "
        "nested task order, the tasks of the look the folder holds and every look judged (tasks, "
        "records, its level alpha, each verdict asked with its reason), the outcome and its lines"
    )
    expected_records: int | Unset = _key("records a complete run holds")
    records: int | Unset = _key("records in the archive")
    complete: bool | Unset = _key("whether the run finished every record")
    calls: dict[str, Any] | Unset = _key("provider calls made, per model")
    errors: dict[str, Any] | Unset = _key("provider errors, per model")
    files: dict[str, str] | Unset = _key("SHA-256 of each archive file of the folder")
    sources: list[dict[str, Any]] | Unset = _key("the runs a merged folder combines")
    note: str | Unset = _key("a remark on the run (e.g. merged with mixed provenance)")
    arms: list[str] | Unset = _key("the study's arms (study manifests before version 2)")
    conditions: list[str] | Unset = _key("the study's scenarios (study manifests before version 2)")
    tasks: list[str] | Unset = _key("the study's tasks")
    seed: int | None | Unset = _key("the run's seed (null: none given)")
    controls: dict[str, list[str]] | Unset = _key("the study's controls per arm")
    migrations: list[dict[str, Any]] | Unset = _key(
        "each `archive migrate` of the folder: versions, previous checksum, what changed"
    )
    archive_schema_version: int | Unset = _key("schema version of the folder's archive")
    manifest_sha256: str | Unset = _key("SHA-256 of the manifest's canonical JSON, itself left out")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = MANIFEST) -> Manifest:
        """A manifest from its dict; :class:`ArchiveError` names a key outside the allowlist, a
        missing ``run_id`` or a field of the wrong type (``source`` prefixes the message)."""
        _check_keys(data, source)
        if "run_id" not in data:
            raise ArchiveError(f"{source}: not a layerlab manifest (no run_id)")
        for name, value in data.items():
            if not _conforms(value, _HINTS[name]):
                want = str(_TYPES[name]).removesuffix(" | Unset")
                raise ArchiveError(
                    f"{source}: manifest field {name!r} holds {_shown(value)}; expected {want}"
                )
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The manifest's keys and values as given (absent keys left out)."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not UNSET}

    def to_json(self) -> str:
        """The bytes of ``manifest.json``: indented JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


_HINTS = get_type_hints(Manifest)
_TYPES = {f.name: f.type for f in fields(Manifest)}
MANIFEST_KEYS = frozenset(_TYPES)


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    extra = set(data) - MANIFEST_KEYS
    if extra:
        raise ArchiveError(f"{source}: keys outside the manifest allowlist: {sorted(extra)}")


def _conforms(value: Any, tp: Any) -> bool:
    """Whether a JSON value has type ``tp`` (str, int, bool, Any, None, unions, Literal, list[X],
    dict[str, X]); ``bool`` is not an ``int`` here."""
    origin = get_origin(tp)
    if tp is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_conforms(value, a) for a in get_args(tp))
    if origin is Literal:
        return value in get_args(tp)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, get_args(tp)[0]) for v in value)
    if origin is dict:
        kt, vt = get_args(tp)
        return isinstance(value, dict) and all(
            _conforms(k, kt) and _conforms(v, vt) for k, v in value.items()
        )
    if tp is type(None):
        return value is None
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _shown(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def as_manifest(manifest: Manifest | Mapping[str, Any], source: str = MANIFEST) -> Manifest:
    """``manifest`` validated (:meth:`Manifest.from_dict`), whether typed or a mapping."""
    data = manifest.to_dict() if isinstance(manifest, Manifest) else manifest
    return Manifest.from_dict(data, source)


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """SHA-256 over the manifest's canonical JSON, its own checksum field left out."""
    from layerlab._io import canonical_json, sha256_bytes

    return sha256_bytes(
        canonical_json({k: v for k, v in manifest.items() if k != "manifest_sha256"}).encode()
    )


def write_manifest(folder: Path, manifest: Manifest | Mapping[str, Any]) -> dict[str, Any]:
    """Validate the manifest (typed, or a mapping), add its checksum and write it atomically;
    return it as written."""
    from layerlab._io import atomic_write_text

    folder = Path(folder)
    m = as_manifest(manifest, str(folder / MANIFEST))
    m = replace(m, manifest_sha256=manifest_checksum(m.to_dict()))
    atomic_write_text(folder / MANIFEST, m.to_json())
    return m.to_dict()


def read_manifest(folder: Path) -> dict[str, Any]:
    """Read a run folder's manifest; a manifest edited after it was written is refused, and so
    is one whose fields do not have the manifest's types."""
    from layerlab._io import BoundedReadError, loads_json_bounded, read_text_bounded

    p = Path(folder) / MANIFEST
    if not p.exists():
        raise ArchiveError(f"{p}: missing (not a layerlab run folder)")
    try:  # bounded: a regular file of at most 16 MiB, nested at most 100 deep
        m = loads_json_bounded(read_text_bounded(p), p, None)
    except json.JSONDecodeError as exc:
        raise ArchiveError(f"{p}: not valid JSON ({exc})") from exc
    except BoundedReadError as exc:
        raise ArchiveError(str(exc)) from None
    if not isinstance(m, dict) or "run_id" not in m:
        raise ArchiveError(f"{p}: not a layerlab manifest (no run_id)")
    _check_keys(m, str(p))
    if "manifest_sha256" in m and m["manifest_sha256"] != manifest_checksum(m):
        raise ArchiveError(
            f"{p}: manifest checksum does not match its content (edited after it was written)"
        )
    Manifest.from_dict(m, str(p))
    return m


def book_for(archives: Sequence[Path | str], present: Iterable[str] = ()) -> ArmBook:
    """What each arm of the records was when the run was made: the arms' definitions
    (:func:`~layerlab.mitigations.book.book_of_manifests`) from the manifests of run folders or
    archive files (an archive file's manifest is the one beside it; a file without one is read by
    the shipped spec)."""
    from layerlab.mitigations.book import book_of_manifests

    manifests = []
    seen: set[str] = set()
    for a in archives:
        p = Path(a)
        folder = p if p.is_dir() else p.parent
        if not (folder / MANIFEST).exists() or str(folder) in seen:
            continue
        seen.add(str(folder))
        manifests.append((str(folder), read_manifest(folder)))
    return book_of_manifests(manifests, present)

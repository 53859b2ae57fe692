"""``--resume`` after the team changed its code (issue 42, item 1): refused naming the change,
or, with ``--accept-code-change``, continued under the new code with the manifest saying which
records ran under which.

A target's code (and a team's retriever's) is part of the run id (``targets/identity.py``), so
a resume after a fix would be another run. :func:`reconcile` tells that case apart from other
changed settings: when putting the run's original code back gives the run id on disk, only the
code changed. Without the flag the resume is refused in one line naming what changed (the
module or package, old → new fingerprint) and the flag; with it the run keeps its id (the
original code's) and goes on: the records still to make — with ``--retry-errors`` the failed
ones too — are made by the new code. The manifest's ``target.code_changes`` lists each accepted
code (its fingerprint) and the records made under it (``task/scenario/arm/epoch``); a record in
no entry was made under ``target.code``, the run's first. Resuming again under the last
accepted code needs no flag.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab.archive import Record
from layerlab.harness.live.settings import LiveConfig, LiveRunError
from layerlab.harness.targets import TargetSpec

FLAG = "--accept-code-change"


def _code(config: LiveConfig) -> dict[str, Any]:
    """The code fingerprints in ``config``: the target's and the retriever's."""
    out: dict[str, Any] = {}
    if isinstance(config.target, TargetSpec) and config.target.code:
        out["target"] = dict(config.target.code)
    if config.retriever_code:
        out["retriever"] = dict(config.retriever_code)
    return out


def _with_code(config: LiveConfig, code: Mapping[str, Any]) -> LiveConfig:
    """``config`` with ``code``'s fingerprints in place of its own."""
    if isinstance(config.target, TargetSpec) and "target" in code:
        spec = dataclasses.replace(config.target, code=tuple(sorted(code["target"].items())))
        config = dataclasses.replace(config, target=spec)
    if "retriever" in code:
        config = dataclasses.replace(config, retriever_code=tuple(sorted(code["retriever"].items())))
    return config


def _original(old: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    target = old.get("target")
    if isinstance(target, Mapping) and isinstance(target.get("code"), Mapping):
        out["target"] = dict(target["code"])
    if isinstance(old.get("retriever_code"), Mapping):
        out["retriever"] = dict(old["retriever_code"])
    return out


def describe(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """What changed between two code fingerprints, e.g. ``the target's module my_rag
    (module_sha256 1a2b3c4d5e6f → 7a8b9c0d1e2f)``."""
    parts = []
    for who in ("target", "retriever"):
        a, b = old.get(who) or {}, new.get(who) or {}
        for key in sorted(set(a) | set(b)):
            if key in ("module", "package") or a.get(key) == b.get(key):
                continue
            name = a.get("package" if key.startswith("package") else "module") or b.get("module")
            what = "package" if key.startswith("package") else "module"
            if key == "service_version":
                what, name = "service", "version"
            parts.append(f"the {who}'s {what} {name} ({key} {str(a.get(key, '-'))[:12]} → "
                         f"{str(b.get(key, '-'))[:12]})")  # fmt: skip
    return ", ".join(parts) or "the code's fingerprint"


def reconcile(
    out: Path,
    config: LiveConfig,
    run_id: Callable[[LiveConfig], str],
    resume: bool,
    accept: bool,
) -> tuple[LiveConfig, list[dict[str, Any]] | None]:
    """``config`` as the resumed run goes on (its original code's fingerprint when only the
    code changed and that is accepted), and the code history to keep (None: no code change).
    :class:`LiveRunError` names the change when it is not accepted (see the module docstring)."""
    mpath = Path(out) / archive.MANIFEST
    if not (resume and mpath.exists()):
        return config, None
    try:
        old = archive.read_manifest(out)
    except archive.ArchiveError:
        return config, None  # said by the resume check that follows
    now, first = _code(config), _original(old)
    if not now or now == first:
        return config, None
    kept = _with_code(config, first)
    if run_id(kept) != old["run_id"]:
        return config, None  # more than the code changed: the resume check says so
    target = old.get("target") if isinstance(old.get("target"), Mapping) else {}
    history = [dict(h) for h in (target or {}).get("code_changes") or ()]
    if history and history[-1].get("code") == now:
        return kept, history  # resumed again under the code accepted last time
    last = history[-1]["code"] if history else first
    if not isinstance(config.target, TargetSpec):
        raise LiveRunError(
            f"{out} holds run {old['run_id']}, made with other code: {describe(last, now)}; "
            "resume with the original code, or choose another --out for a new run"
        )
    if not accept:
        raise LiveRunError(
            f"{out} holds run {old['run_id']}, made with other code: {describe(last, now)}; "
            f"to go on under the new code add {FLAG} (the records still to make, with "
            "--retry-errors the failed ones too, run under it; the manifest says which records "
            "ran under which code), or choose another --out for a new run"
        )
    history.append({"code": now, "records": []})
    return kept, history


def record_id(rec: Record) -> str:
    """A record as the code history names it: ``task/scenario/arm/epoch``."""
    return f"{rec.task_id}/{rec.scenario}/{rec.mitigation}/{rec.replicate}"


def stamp(
    m: archive.Manifest, history: list[dict[str, Any]] | None, made: Iterable[Record]
) -> archive.Manifest:
    """The manifest with ``target.code_changes``: the records ``made`` in this invocation under
    the last accepted code (moved out of any earlier entry: a record is made once per code)."""
    if not history or not isinstance(m.target, dict):
        return m
    new = {record_id(r) for r in made}
    for h in history[:-1]:
        h["records"] = sorted(set(h.get("records") or ()) - new)
    history[-1]["records"] = sorted(set(history[-1].get("records") or ()) | new)
    return dataclasses.replace(m, target={**m.target, "code_changes": history})

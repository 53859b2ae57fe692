"""An agent run's step table (``agent.parquet``): its schema, and its check against the folder.

An agent run (``run live --agent``) keeps, beside ``records.parquet``, one row per record of its
step fields (:mod:`layerlab.harness.live.agentlog` writes it); the manifest's ``agent`` key names
its SHA-256 (``agent.table_sha256``). ``layerlab archive check`` runs :func:`check` on every run
folder whose manifest has ``agent``: the file is there, matches the checksum, has exactly one
row per record (the same keys), and its values agree with one another and with the manifest.
A target run (``run live --target``) keeps ``target.parquet`` (the same columns and ``reply``),
named by ``target.table_sha256`` and checked the same way (its keys, columns and reply formats).
A run writes its table when it stops; until then (while it runs, or once killed) its manifest,
written at the start, names no checksum and holds no records: such a run reads as partial.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from layerlab.archive.schema import KEYS, ArchiveError

AGENT_TABLE = "agent.parquet"
COUNTS = ("steps", "tool_calls", "invalid_calls", "retries_after_fault")
SUMMARY = (*COUNTS, "step_limit", "protocol")
INPUT_HASH = "input_hash"
COLUMNS = (*KEYS, *SUMMARY, "calls", INPUT_HASH)

SCHEMA = pa.schema(
    [
        *[pa.field(k, pa.string(), nullable=False) for k in KEYS[:-1]],
        pa.field("replicate", pa.int32(), nullable=False),
        *[pa.field(k, pa.int16(), nullable=False) for k in COUNTS],
        pa.field("step_limit", pa.bool_(), nullable=False),
        pa.field("protocol", pa.string(), nullable=False),
        pa.field("calls", pa.string(), nullable=False),
        pa.field(INPUT_HASH, pa.string(), nullable=True),
    ]
)
"""``agent.parquet``'s columns (in order) and types. ``input_hash`` is what the agent (or
target) saw: the SHA-256 of the canonical JSON list of the tool observations delivered to it, in
order (:meth:`layerlab.harness.tools.ToolBox.input_hash`), which the identical-inputs column
compares between arms. A table written before it existed lacks the column, and a row carried
over from such a run's log (a resume) holds null: its input is not recorded."""
OPTIONAL = frozenset({INPUT_HASH})
"""Columns a committed table may lack (written before they existed)."""

CALL_FIELDS: dict[str, tuple[type, ...]] = {
    "step": (int,),
    "tool": (str,),
    "valid": (bool,),
    "outcome": (str,),
    "doc_ids": (list,),
    "payloads": (int,),
    "after_fault": (bool,),
}
"""The fields of each entry of ``calls`` (a JSON list, one entry per tool call) and their types."""

CALL_OUTCOMES = (
    "ok",
    "partial",
    "empty",
    "unavailable",
    "rejected",
    "denied",
    "not_found",
    "refused",
    "invalid",
)
"""A call's ``outcome`` values (:data:`layerlab.harness.tools.OUTCOMES`; a test keeps them equal)."""


_HASH = re.compile(r"[0-9a-f]{64}")


def _fail(path: Path, what: str) -> ArchiveError:
    return ArchiveError(f"{path}: {what}")


def _key_text(key: tuple[Any, ...]) -> str:
    return "/".join(str(v) for v in key)


TARGET_TABLE = "target.parquet"
TARGET_EXTRA = ("reply",)
"""A target run's table (``run live --target``): the step table's columns with ``reply`` (its
format) before ``calls``."""
REPLY_FORMATS = ("structured", "free_text", "none")
"""How a target's reply was read: a structured reply, free text, or none (it failed); the
targets label their replies with these (:mod:`layerlab.harness.targets.base`)."""


def table_schema(kind: str = "agent") -> pa.Schema:
    """The per-record table's columns and types: ``agent.parquet``'s, or ``target.parquet``'s."""
    if kind == "agent":
        return SCHEMA
    at = SCHEMA.get_field_index("calls")
    schema = SCHEMA
    for k, name in enumerate(TARGET_EXTRA):
        schema = schema.insert(at + k, pa.field(name, pa.string(), nullable=False))
    return schema


def check(
    folder: Path, manifest: dict[str, Any], record_keys: list[tuple[Any, ...]], kind: str = "agent"
) -> int | None:
    """Check a run folder's per-record table (``kind`` "agent": ``agent.parquet``, named by the
    manifest's ``agent`` key; "target": ``target.parquet``, named by its ``target`` key) against
    the manifest and its records' keys; raise :class:`ArchiveError` (one line naming the file
    and what differs). Returns the table's row count, or None for an unfinished run that has
    not written it yet (a run writes its table and names its checksum only when it stops; until
    then its manifest says it is not complete and holds no records)."""
    import pyarrow.parquet as pq

    from layerlab._io import sha256_file
    from layerlab.system.agentprompt import PROTOCOLS

    name = AGENT_TABLE if kind == "agent" else TARGET_TABLE
    path = Path(folder) / name
    agent = manifest.get(kind)
    if not isinstance(agent, dict):
        raise _fail(Path(folder) / "manifest.json", f"its {kind!r} key is not an object")
    want = agent.get("table_sha256")
    if want is None and manifest.get("complete") is not True and not record_keys:
        return None  # started or killed before its first stop: the table comes with the records
    if not isinstance(want, str):
        raise _fail(
            Path(folder) / "manifest.json",
            f"{kind!r} names no table_sha256 (the checksum of {name})",
        )
    if not path.exists():
        raise _fail(path, f"missing (the manifest's {kind}.table_sha256 names it)")
    got = sha256_file(path)
    if got != want:
        raise _fail(
            path,
            f"checksum {got[:12]}… differs from the manifest's {kind}.table_sha256 {want[:12]}… "
            "(modified or truncated)",
        )
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise _fail(path, f"not a readable Parquet table ({exc})") from None
    schema = table_schema(kind)
    if INPUT_HASH not in table.column_names:  # written before inputs were recorded
        schema = schema.remove(schema.get_field_index(INPUT_HASH))
    names, columns = table.column_names, schema.names
    if list(names) != list(columns):
        missing = [c for c in columns if c not in names]
        extra = [c for c in names if c not in columns]
        raise _fail(
            path,
            f"columns differ from the step table's: missing {missing}, extra {extra}"
            if missing or extra
            else f"columns in the order {names}, expected {list(columns)}",
        )
    for f in schema:
        t = table.schema.field(f.name).type
        if t != f.type:
            raise _fail(path, f"column {f.name!r} has type {t}, expected {f.type}")
        if table.column(f.name).null_count and not f.nullable:
            raise _fail(path, f"column {f.name!r} has null values")
    rows = table.to_pylist()
    _check_keys(path, rows, record_keys)
    for r in rows:
        h = r.get(INPUT_HASH)
        if h is not None and not _HASH.fullmatch(h):
            raise _fail(
                path,
                f"record {_key_text(tuple(r[k] for k in KEYS))}: {INPUT_HASH} {h[:20]!r}; "
                "expected 64 hex characters (or null: not recorded)",
            )
        if kind == "agent":
            _check_row(path, r, agent, PROTOCOLS)
        elif r["reply"] not in REPLY_FORMATS:
            raise _fail(
                path,
                f"record {_key_text(tuple(r[k] for k in KEYS))}: reply {r['reply']!r}; "
                f"expected one of {list(REPLY_FORMATS)}",
            )
    return len(rows)


def input_hashes(folder: Path) -> dict[tuple[Any, ...], str | None] | None:
    """A run folder's ``input_hash`` by record key: None when the folder is not an agent or
    target run (its records' input is their prompt); every value None when its table predates
    the column (not recorded). The table is read as :func:`check` checked it (``archive check``
    and every archive read run that first)."""
    import pyarrow.parquet as pq

    from layerlab.archive.manifest import MANIFEST, read_manifest

    folder = Path(folder)
    if not (folder / MANIFEST).exists():
        return None
    m = read_manifest(folder)
    for kind, name in (("agent", AGENT_TABLE), ("target", TARGET_TABLE)):
        if isinstance(m.get(kind), dict) and (folder / name).exists():
            path = folder / name
            have = pq.read_schema(path).names
            cols = [*KEYS, *([INPUT_HASH] if INPUT_HASH in have else [])]
            rows = pq.read_table(path, columns=cols).to_pylist()
            return {tuple(r[k] for k in KEYS): r.get(INPUT_HASH) for r in rows}
    return None


def _check_keys(path: Path, rows: list[dict[str, Any]], record_keys: list[tuple[Any, ...]]) -> None:
    keys = [tuple(r[k] for k in KEYS) for r in rows]
    seen: set[tuple[Any, ...]] = set()
    for k in keys:
        if k in seen:
            raise _fail(path, f"two rows for the record {_key_text(k)}")
        seen.add(k)
    recs = set(record_keys)
    missing = sorted(recs - seen)
    extra = sorted(seen - recs)
    if missing:
        raise _fail(
            path,
            f"no row for {len(missing)} record(s) of records.parquet, e.g. {_key_text(missing[0])}",
        )
    if extra:
        raise _fail(
            path,
            f"{len(extra)} row(s) for no record of records.parquet, e.g. {_key_text(extra[0])}",
        )


def _check_row(path: Path, r: dict[str, Any], agent: dict[str, Any], protocols: Any) -> None:
    """One row's values: agreeing with one another, with its calls and with the manifest."""
    key = _key_text(tuple(r[k] for k in KEYS))

    def bad(what: str) -> ArchiveError:
        return _fail(path, f"record {key}: {what}")

    if r["protocol"] not in protocols:
        raise bad(f"protocol {r['protocol']!r}; expected one of {list(protocols)}")
    if agent.get("protocol") not in (None, r["protocol"]):
        raise bad(
            f"protocol {r['protocol']!r}, the manifest's agent.protocol is {agent['protocol']!r}"
        )
    for c in COUNTS:
        if r[c] < 0:
            raise bad(f"{c} is {r[c]}; expected a count ≥ 0")
    if r["steps"] < 1:
        raise bad(f"steps is {r['steps']}; every record makes at least one model call")
    try:
        calls = json.loads(r["calls"])
    except ValueError:
        raise bad("calls is not JSON (expected a list of per-call objects)") from None
    if not isinstance(calls, list):
        raise bad(f"calls is a JSON {type(calls).__name__}; expected a list")
    for i, c in enumerate(calls, 1):
        if not isinstance(c, dict) or set(c) != set(CALL_FIELDS):
            have = sorted(c) if isinstance(c, dict) else type(c).__name__
            raise bad(f"call {i} has fields {have}; expected {sorted(CALL_FIELDS)}")
        for k, types in CALL_FIELDS.items():
            v = c[k]
            if not isinstance(v, types) or (types == (int,) and isinstance(v, bool)):
                raise bad(f"call {i}'s {k} is {v!r}; expected {types[0].__name__}")
        if c["outcome"] not in CALL_OUTCOMES:
            raise bad(
                f"call {i}'s outcome is {c['outcome']!r}; expected one of {list(CALL_OUTCOMES)}"
            )
        if c["valid"] != (c["outcome"] != "invalid"):
            raise bad(f"call {i} is valid={c['valid']} with outcome {c['outcome']!r}")
        if not 1 <= c["step"] <= r["steps"]:
            raise bad(f"call {i} is at step {c['step']}; the record made {r['steps']} step(s)")
        if c["payloads"] < 0:
            raise bad(f"call {i}'s payloads is {c['payloads']}; expected a count ≥ 0")
    turns = len({c["step"] for c in calls})
    derived = {
        "tool_calls": len(calls),
        "invalid_calls": sum(not c["valid"] for c in calls),
        "retries_after_fault": sum(c["after_fault"] for c in calls),
    }
    for k, v in derived.items():
        if r[k] != v:
            raise bad(f"{k} is {r[k]}, its calls say {v}")
    if r["steps"] < turns:
        raise bad(f"steps is {r['steps']}, fewer than its {turns} tool-calling turn(s)")
    limit = agent.get("max_steps")
    if isinstance(limit, int):
        if turns > limit:
            raise bad(f"{turns} tool-calling turns, the manifest's agent.max_steps is {limit}")
        if r["step_limit"] != (r["steps"] > limit):
            raise bad(
                f"step_limit is {r['step_limit']} with {r['steps']} steps and agent.max_steps "
                f"{limit} (expected step_limit exactly when steps > max_steps)"
            )

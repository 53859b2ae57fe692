"""What an agent run keeps beside its records: one row per record of step fields and calls.

The archive's ``records.parquet`` has the same schema in both modes (every table, statistic and
viewer reads an agent run as it reads any run). An agent run adds ``agent.parquet``: per record,
its identity, ``steps`` (model calls), ``tool_calls``, ``invalid_calls``, ``retries_after_fault``,
``step_limit`` and the ``protocol``, and ``calls``: the per-call log as JSON (tool, whether the
call met the tool's schema, the outcome, the documents it delivered, payloads fetched, whether
it followed a fault) — public fields only, never evidence text, a query or an answer — and
``input_hash``, the hash of the observations its calls delivered (what it saw, as a model's
prompt hash is what the model saw).

During the run each row is appended to ``agent.jsonl`` *before* its record's progress line, so
a record in the progress log always has its row; a row whose record never made it (a kill
between the two lines) is left out when the table is written, and a resumed record's new row
replaces the old.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from layerlab._io import atomic_write_bytes, canonical_json, sha256_bytes
from layerlab.archive import Record, agenttable
from layerlab.archive.schema import sort_key
from layerlab.harness.agent import AgentLoop
from layerlab.harness.targets.base import TargetDone
from layerlab.harness.tools import ToolCall
from layerlab.models.routing import response_format_for

AGENT_LOG = "agent.jsonl"
AGENT_TABLE = agenttable.AGENT_TABLE
TARGET_LOG = "target.jsonl"  # a target run's rows: the same fields and ``reply``
TARGET_TABLE = agenttable.TARGET_TABLE
TARGET_EXTRA = agenttable.TARGET_EXTRA  # structured, free_text or none (harness.targets.base)
KEY = ("provider", "model", "scenario", "mitigation", "task_id", "replicate")
SUMMARY = agenttable.SUMMARY


def agent_request(req: Mapping[str, Any], response_format: str, local: bool) -> dict[str, Any]:
    """The request keys an agent step adds to the route's: ``tools`` and ``tool_choice``
    (native), or the action schema as the server's ``response_format`` (json_action, when the
    run asks for structured output; else the route's is dropped: the reply is an action, not
    the single-call reply)."""
    if "tools" in req:
        return {"tools": req["tools"], "tool_choice": req["tool_choice"], "response_format": None}
    rf = response_format_for(response_format, local, schema=req["response_schema"])
    return {"response_format": rf}


def agent_row(rec: Record, loop: AgentLoop) -> dict[str, Any]:
    """One record's row of the agent table (public fields only)."""
    return {
        **{k: getattr(rec, k) for k in KEY},
        **asdict(loop.summary()),
        "calls": call_rows(loop.calls),
        agenttable.INPUT_HASH: loop.tools.input_hash(),
    }


def call_rows(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """The per-call log of a record (public fields only)."""
    return [
        {
            "step": c.step,
            "tool": c.tool,
            "valid": c.valid,
            "outcome": c.outcome,
            "doc_ids": list(c.doc_ids),
            "payloads": c.payloads,
            "after_fault": c.after_fault,
        }
        for c in calls
    ]


def target_row(rec: Record, done: TargetDone) -> dict[str, Any]:
    """One record's row of a target run's table: the agent table's fields (``steps`` is the
    number of tool calls; the protocol ``target:KIND``) and ``reply``: whether the target's reply
    was the structured contract or free text (or none)."""
    calls = done.tools.calls
    return {
        **{k: getattr(rec, k) for k in KEY},
        "steps": len(calls),
        "tool_calls": len(calls),
        "invalid_calls": sum(not c.valid for c in calls),
        "retries_after_fault": sum(c.after_fault for c in calls),
        "step_limit": False,
        "protocol": f"target:{done.kind}",
        "reply": done.reply.format,
        "calls": call_rows(calls),
        agenttable.INPUT_HASH: done.tools.input_hash(),
    }


def transcript(loop: AgentLoop) -> list[dict[str, Any]]:
    """The whole conversation, step by step, for the *private* sample log (it holds evidence
    text and the model's replies: never archived)."""
    return [dict(m) for m in loop.messages]


def read_rows(path: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The agent log's rows by record key (the last row of a key wins; a torn line is
    skipped)."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
                rows[tuple(row[k] for k in KEY)] = row
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return rows


def table_bytes(
    rows: Mapping[tuple[Any, ...], dict[str, Any]],
    records: Iterable[Record],
    extra: Sequence[str] = (),
) -> bytes:
    """``agent.parquet``'s bytes: the rows of ``records`` in archive order. Raises ValueError
    when a record has no row (the run's agent log was lost)."""
    import pyarrow as pa

    from layerlab.archive.io import parquet_bytes

    recs = sorted(records, key=sort_key)
    missing = [sort_key(r) for r in recs if sort_key(r) not in rows]
    if missing:
        raise ValueError(f"{len(missing)} agent records have no row in {AGENT_LOG}: {missing[0]}")
    chosen = [rows[sort_key(r)] for r in recs]
    cols: dict[str, list[Any]] = {k: [r[k] for r in chosen] for k in (*KEY, *SUMMARY, *extra)}
    cols["calls"] = [canonical_json(r["calls"]) for r in chosen]
    # a row from a log written before inputs were recorded (a resume) holds null: not recorded
    cols[agenttable.INPUT_HASH] = [r.get(agenttable.INPUT_HASH) for r in chosen]
    cols = {f: cols[f] for f in (*KEY, *SUMMARY, *extra, "calls", agenttable.INPUT_HASH)}
    # a target run's table: the step fields, then ``reply``, then the calls
    schema = agenttable.table_schema("target" if extra else "agent")
    return parquet_bytes(pa.table(cols, schema=schema))


def write_table(folder: Path, records: Sequence[Record], target: bool = False) -> str:
    """Write ``agent.parquet`` (a target run: ``target.parquet``) atomically from the folder's
    log; its SHA-256."""
    log, table, extra = (TARGET_LOG, TARGET_TABLE, TARGET_EXTRA) if target else (
        AGENT_LOG, AGENT_TABLE, ())  # fmt: skip
    data = table_bytes(read_rows(Path(folder) / log), records, extra)
    atomic_write_bytes(Path(folder) / table, data)
    return sha256_bytes(data)


def read_table(folder: Path, target: bool = False) -> list[dict[str, Any]]:
    """An agent (or target) run's rows (``calls`` decoded), checked against the manifest's
    checksum."""
    import pyarrow.parquet as pq

    from layerlab._io import sha256_file
    from layerlab.archive.manifest import read_manifest

    folder = Path(folder)
    name, key = (TARGET_TABLE, "target") if target else (AGENT_TABLE, "agent")
    path = folder / name
    want = (read_manifest(folder).get(key) or {}).get("table_sha256")
    if want is None or not path.exists():
        raise ValueError(
            f"{folder}: not {'a' if target else 'an'} {key} run (no {name} named by its manifest)"
        )
    if sha256_file(path) != want:
        raise ValueError(
            f"{path}: checksum differs from the manifest's (continue the run with --resume)"
        )
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        r["calls"] = json.loads(r["calls"])
    return rows


def tool_use_notes(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per model that made no tool call in some or all of its records: a model that
    never calls a tool is not acting as an agent, and its records must not be read as agent
    behaviour (they are answers without evidence)."""
    notes = []
    models = dict.fromkeys(f"{r['provider']}/{r['model']}" for r in rows)
    for m in models:
        mine = [r for r in rows if f"{r['provider']}/{r['model']}" == m]
        none = sum(r["tool_calls"] == 0 for r in mine)
        if none == len(mine):
            notes.append(
                f"{m} made no tool call in any of its {len(mine)} records: it did not act as an "
                f"agent through {mine[0]['protocol']} (try --tool-protocol json_action); its "
                "records are answers without evidence, not agent behaviour"
            )
        elif none:
            notes.append(f"{m} made no tool call in {none} of its {len(mine)} records")
    return notes

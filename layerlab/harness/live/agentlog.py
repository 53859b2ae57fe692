"""What an agent run keeps beside its records: one row per record of step fields and calls.

The archive's ``records.parquet`` has the same schema in both modes (every table, statistic and
viewer reads an agent run as it reads any run). An agent run adds ``agent.parquet``: per record,
its identity, ``steps`` (model calls), ``tool_calls``, ``invalid_calls``, ``retries_after_fault``,
``step_limit`` and the ``protocol``, and ``calls``: the per-call log as JSON (tool, whether the
call met the tool's schema, the outcome, the documents it delivered, payloads fetched, whether
it followed a fault) — public fields only, never evidence text, a query or an answer.

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
from layerlab.models.routing import response_format_for

AGENT_LOG = "agent.jsonl"
AGENT_TABLE = agenttable.AGENT_TABLE
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
        "calls": [
            {
                "step": c.step,
                "tool": c.tool,
                "valid": c.valid,
                "outcome": c.outcome,
                "doc_ids": list(c.doc_ids),
                "payloads": c.payloads,
                "after_fault": c.after_fault,
            }
            for c in loop.calls
        ],  # fmt: skip
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


def table_bytes(rows: Mapping[tuple[Any, ...], dict[str, Any]], records: Iterable[Record]) -> bytes:
    """``agent.parquet``'s bytes: the rows of ``records`` in archive order. Raises ValueError
    when a record has no row (the run's agent log was lost)."""
    import pyarrow as pa

    from layerlab.archive.io import parquet_bytes

    recs = sorted(records, key=sort_key)
    missing = [sort_key(r) for r in recs if sort_key(r) not in rows]
    if missing:
        raise ValueError(f"{len(missing)} agent records have no row in {AGENT_LOG}: {missing[0]}")
    chosen = [rows[sort_key(r)] for r in recs]
    cols: dict[str, list[Any]] = {k: [r[k] for r in chosen] for k in (*KEY, *SUMMARY)}
    cols["calls"] = [canonical_json(r["calls"]) for r in chosen]
    return parquet_bytes(pa.table(cols, schema=agenttable.SCHEMA))


def write_table(folder: Path, records: Sequence[Record]) -> str:
    """Write ``agent.parquet`` (atomically) from the folder's agent log; its SHA-256."""
    data = table_bytes(read_rows(Path(folder) / AGENT_LOG), records)
    atomic_write_bytes(Path(folder) / AGENT_TABLE, data)
    return sha256_bytes(data)


def read_table(folder: Path) -> list[dict[str, Any]]:
    """An agent run's rows (``calls`` decoded), checked against the manifest's checksum."""
    import pyarrow.parquet as pq

    from layerlab._io import sha256_file
    from layerlab.archive.manifest import read_manifest

    folder = Path(folder)
    path = folder / AGENT_TABLE
    want = (read_manifest(folder).get("agent") or {}).get("table_sha256")
    if want is None or not path.exists():
        raise ValueError(f"{folder}: not an agent run (no {AGENT_TABLE} named by its manifest)")
    if sha256_file(path) != want:
        raise ValueError(
            f"{path}: checksum differs from the manifest's (continue the run with --resume)"
        )
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        r["calls"] = json.loads(r["calls"])
    return rows

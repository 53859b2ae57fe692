"""Records as a DataFrame, the one way (issue 45): checked archives as one frame
(:func:`records_frame`, also ``layerlab.load_archive``), and records already in hand as the same
frame (:func:`as_frame`); with, per run, the decoding, reply schema, tasks and replicates a
caption of real-model numbers must name (from the runs' manifests).

Every frame of records is built here: the statistics, the tables, the results of a run
(``results.json``), ``compare``, the report and the public API read archives through
:func:`records_frame`, so every one of them is checked the same way (manifest, checksum, record
count, runs, step tables: :func:`layerlab.archive.load_records`) and a run given twice counts
once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import archive, paths


def records_frame(archives: Path | str | Sequence[Path | str] | None = None) -> pd.DataFrame:
    """Checked archives (files or run folders; one, or several) as one DataFrame: one row a
    record, one column a field, and :data:`INPUT` (:func:`input_column`); ``attrs["runs"]``
    holds each run's settings (:func:`run_settings`). Each archive is checked on read
    (:func:`layerlab.archive.load_records`: manifest, checksum, record count, runs named by the
    manifest, step tables), a run given twice counts once, and a record in two runs is refused
    (:class:`~layerlab.archive.ArchiveError`); no records at all is a ``ValueError``.

    Default: the committed reference-agent archive.
    """
    if archives is None:
        archives = [paths.ARCHIVES / "reference_agents"]
    elif isinstance(archives, (str, Path)):
        archives = [archives]
    folders = [Path(a) for a in archives]
    recs = archive.load_records(folders)
    if not recs:
        raise ValueError("no records in the given archives")
    return as_frame(recs, folders)


def as_frame(records: Iterable[archive.Record], folders: Sequence[Path] = ()) -> pd.DataFrame:
    """Records already in hand (a run just written, a deterministic run's) as the frame
    :func:`records_frame` gives; ``folders``, the run folders they were written to (if any),
    give :data:`INPUT` from their step tables and ``attrs["runs"]``."""
    df = pd.DataFrame([r.__dict__ for r in records])
    if df.empty:
        return df
    df[INPUT] = input_column(df, folders)
    df.attrs["runs"] = run_settings(folders)
    return df


INPUT = "input_hash"
"""The records frame's column of what the reader or system saw (see :func:`input_column`)."""


def input_column(df: pd.DataFrame, folders: Sequence[Path]) -> pd.Series:
    """What each record's reader or system saw, as a hash: a model's prompt (``prompt_hash``);
    for an agent or target run, the hash of the tool observations delivered to it, from its
    step table (``input_hash``), or None where that table predates the column (not recorded:
    its ``prompt_hash`` hashes the request, not what the system saw)."""
    from layerlab.archive import agenttable

    col = df["prompt_hash"].astype(object).copy()
    for f in folders:
        folder = f if f.is_dir() else f.parent
        hashes = agenttable.input_hashes(folder)
        if hashes is None:
            continue
        mine = df["run_id"] == archive.read_manifest(folder).get("run_id")
        keys = df.loc[mine, list(archive.KEYS)].itertuples(index=False, name=None)
        col.loc[mine] = [hashes.get(tuple(k)) for k in keys]
    return col


def run_settings(folders: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Per run id, what a caption of real-model numbers must name: decoding (temperature),
    reply schema, tasks and replicates, from the runs' manifests (archives without one: none)."""
    out: dict[str, dict[str, Any]] = {}
    for f in folders:
        folder = f if f.is_dir() else f.parent
        if not (folder / archive.MANIFEST).exists():
            continue
        m = archive.read_manifest(folder)
        settings = m.get("settings") or {}
        sampling = m.get("sampling") or {
            "temperature": settings.get("temperature"),
            "replicates": m.get("replicates", 1),
        }
        out[str(m.get("run_id"))] = {
            "temperature": sampling.get("temperature"),
            "top_p": sampling.get("top_p"),
            "replicates": sampling.get("replicates", m.get("replicates", 1)),
            "reply_schema": (
                m.get("reply_schema", "layerlab.reply-schema/1")
                if m.get("response_format", "none") != "none"
                else None
            ),
            "n_tasks": m.get("n_tasks"),
        }
    return out


def sampling_phrase(df: pd.DataFrame) -> str:
    """``greedy (temperature 0), reply schema 2, 1 replicate``: how the real-model records of
    ``df`` were drawn, one phrase per distinct setting (empty without manifests); captions put
    it beside the block's task count."""
    runs = df.attrs.get("runs") or {}
    phrases = []
    for rid in sorted(set(df["run_id"].astype(str))):
        r = runs.get(rid)
        if r is None:
            continue
        t = r["temperature"]
        dec = (
            "server-default temperature (not sent)"
            if t is None
            else ("greedy (temperature 0)" if t == 0 else f"sampled at temperature {t:g}")
        )
        if r.get("top_p") is not None:
            dec += f", top-p {r['top_p']:g}"
        schema = r["reply_schema"]
        parts = [dec]
        if schema:
            parts.append(f"reply schema {schema.rsplit('/', 1)[-1]}")
        reps = int(r["replicates"] or 1)
        parts.append(f"{reps} replicate{'s' if reps != 1 else ''}")
        if ", ".join(parts) not in phrases:
            phrases.append(", ".join(parts))
    return "; ".join(phrases)

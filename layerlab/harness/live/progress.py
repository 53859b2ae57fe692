"""The progress log: one checksummed JSON line per record, appended by the run's single writer.

A run killed at any moment (SIGKILL included) resumes to exactly one record per cell and task:
a torn last line is trimmed, damaged or tampered lines (a checksum per line) and lines of another
run are dropped, reported and recomputed (:func:`read_progress`); lines written by older archive
schemas are upgraded. :class:`RecordWriter` appends each record's line (flushed at most every
:data:`FLUSH_EVERY_S`, fsynced at the end), keeps the record and throttles the progress hook.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layerlab import archive
from layerlab._io import atomic_write_text, canonical_json
from layerlab.archive import Record
from layerlab.harness.live.budget import Counters

_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Record)}


def _line_sum(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(row)).encode()).hexdigest()[:16]


def progress_line(rec: Record) -> str:
    """One log line: the record's fields plus ``sum``, a checksum over them."""
    row = {name: getattr(rec, name) for name in _FIELD_TYPES}  # flat: no deep-copying asdict
    return json.dumps({**row, "sum": _line_sum(row)}, sort_keys=True) + "\n"


def _typed(row: Mapping[str, Any]) -> bool:
    if set(row) != set(_FIELD_TYPES):
        return False
    for name, kind in _FIELD_TYPES.items():
        v = row[name]
        ok = {
            "bool": isinstance(v, bool),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "str": isinstance(v, str),
            "str | None": v is None or isinstance(v, str),
            "bool | None": v is None or isinstance(v, bool),
            "float | None": v is None or (isinstance(v, float) and 0.0 <= v <= 1.0),
        }.get(str(kind), False)
        if not ok:
            return False
    return True


_V2_ADDED = ("answerable", "domain")  # record fields archive schema 3 added
_V3_ADDED = ("grounded_cited", "contained", "token_f1")  # record fields archive schema 4 added


def _from_v2(row: dict[str, Any], answerable: Mapping[str, bool]) -> dict[str, Any] | None:
    """A schema-2 progress line in the schema-3 layout (a run resumed across the upgrade), or
    ``None`` when it is not one; ``answerable`` comes from the run's scenarios."""
    if row.get("schema_version") != 2 or set(row) != set(_FIELD_TYPES) - set(_V2_ADDED) - set(
        _V3_ADDED
    ):
        return None
    if row.get("scenario") not in answerable or not isinstance(row.get("policy_id"), str):
        return None
    return {
        **row,
        "schema_version": 3,
        "answerable": answerable[row["scenario"]],
        "domain": archive.domain_of(row["policy_id"]),
        "prompt_hash": row.get("prompt_hash") or None,
    }


def _from_v3(row: dict[str, Any]) -> dict[str, Any] | None:
    """A schema-3 progress line in the current layout, or ``None`` when it is not one: the
    labels schema 4 added, as far as the old ones determine them (:func:`archive.v4_labels`;
    the rest null, not recorded: the log holds no reply text)."""
    if row.get("schema_version") != 3 or set(row) != set(_FIELD_TYPES) - set(_V3_ADDED):
        return None
    if not all(
        isinstance(row.get(k), bool) for k in ("answered", "success", "exact_match", "grounded")
    ):
        return None
    return {**row, **archive.v4_labels(row), "schema_version": archive.SCHEMA_VERSION}


def _upgrade_line(
    row: dict[str, Any], answerable: Mapping[str, bool] | None
) -> dict[str, Any] | None:
    """An older progress line in the current layout (schema 2 needs ``answerable``), or None."""
    if row.get("schema_version") == 2:
        v3 = _from_v2(row, answerable) if answerable is not None else None
        return _from_v3(v3) if v3 is not None else None
    return _from_v3(row)


def parse_progress_line(raw: bytes, answerable: Mapping[str, bool] | None = None) -> Record | str:
    """A record, or why the line is unusable: ``damaged`` (bytes, JSON, fields or types) or
    ``tampered`` (well-formed, but the checksum does not match its fields). With ``answerable``
    (scenario -> bool), a line written before archive schema 3 is upgraded after its checksum is
    verified; a schema-3 line is upgraded without it."""
    try:
        row = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "damaged"
    if not isinstance(row, dict):
        return "damaged"
    got = row.pop("sum", None)
    upgraded = _upgrade_line(row, answerable) if not _typed(row) else None
    if upgraded is not None and not _typed(upgraded):
        upgraded = None
    if upgraded is None and not _typed(row):
        return "damaged"
    if got != _line_sum(row):  # the checksum covers the line as it was written
        return "tampered"
    return Record(**(upgraded or row))


@dataclass
class ProgressReport:
    """What reading a progress log dropped (those cells are asked again)."""

    damaged: int = 0
    tampered: int = 0
    foreign: int = 0
    retried: int = 0

    @property
    def dropped(self) -> int:
        return self.damaged + self.tampered + self.foreign + self.retried

    def describe(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.damaged, "damaged"),
                (self.tampered, "tampered (checksum mismatch)"),
                (self.foreign, "from another run"),
                (self.retried, "provider_error, asked again (--retry-errors)"),
            )
            if n
        ]
        return "progress log: dropped " + ", ".join(parts) + " line(s); those cells are recomputed"


def read_progress(
    path: Path,
    run_id: str | None = None,
    drop_errors: bool = False,
    answerable: Mapping[str, bool] | None = None,
) -> tuple[dict[tuple[Any, ...], Record], ProgressReport]:
    """Records already written, first valid line per key. A torn last line (killed mid-write) is
    ignored silently; any other unusable line is dropped and counted in the report."""
    done: dict[tuple[Any, ...], Record] = {}
    report = ProgressReport()
    if not path.exists():
        return done, report
    lines = path.read_bytes().split(b"\n")
    for raw in lines[:-1]:  # the last piece has no newline: empty, or a torn write
        if not raw.strip():
            continue
        rec = parse_progress_line(raw, answerable)
        if isinstance(rec, str):
            setattr(report, rec, getattr(report, rec) + 1)
        elif run_id is not None and rec.run_id != run_id:
            report.foreign += 1
        elif drop_errors and rec.diagnostic == "provider_error":
            report.retried += 1
        else:
            done.setdefault(archive.sort_key(rec), rec)
    return done, report


def rewrite_progress(path: Path, done: Mapping[tuple[Any, ...], Record]) -> None:
    """Replace the log by its usable lines (atomically), so dropped lines are not met again."""
    atomic_write_text(path, "".join(progress_line(r) for r in done.values()))


def trim_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline (a write the kill interrupted)."""
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with open(path, "r+b") as fh:
            fh.truncate(cut)


ProgressHook = Callable[[Counters, int], None]
SampleHook = Callable[[dict[str, Any]], None]  # receives samplelog.entry(...) per record


FLUSH_EVERY_S = 0.05
"""Progress-log lines reach the OS within this long of being written (a ``write`` system call
per record cost more than the rest of a record's bookkeeping); a kill loses at most the last
ones, which ``--resume`` computes again from the reply cache."""


class ProgressLog:
    """The progress log's single writer: appends lines, flushes at most every
    :data:`FLUSH_EVERY_S` (and on :meth:`close`, with an fsync)."""

    def __init__(self, path: Path):
        self.fh = open(path, "a", encoding="utf-8")
        self.dirty = False
        self.last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: str) -> None:
        self.fh.write(line)
        self.dirty = True
        self.tick()

    def tick(self) -> None:
        """Flush if a line is waiting and the interval has passed; else (in an event loop)
        make sure a flush is scheduled, so a line never waits for the next one."""
        if not self.dirty:
            return
        wait = FLUSH_EVERY_S - (time.monotonic() - self.last)
        if wait <= 0:
            self.flush()
            return
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # the caller ticks again (the writer of worker processes)
            self._timer = loop.call_later(wait, self._timed)

    def _timed(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        if self.dirty:
            self.fh.flush()
            self.dirty = False
        self.last = time.monotonic()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()


PROGRESS_EVERY_S = 0.1
"""The progress hook is called at most this often (and once at the end), not per record."""


class Throttle:
    """Calls the progress hook at most every :data:`PROGRESS_EVERY_S` (and when ``final``)."""

    def __init__(self, hook: ProgressHook | None, counters: Counters, total: int):
        self.hook, self.counters, self.total, self.last = hook, counters, total, 0.0

    def __call__(self, final: bool = False) -> None:
        if self.hook is None:
            return
        now = time.monotonic()
        if final or now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.hook(self.counters, self.total)


class RecordWriter:
    """The run's single writer: appends each record's progress-log line, keeps the record in
    ``written``, counts it and passes its sample-log entry on; :attr:`tick` calls the progress
    hook (throttled)."""

    def __init__(
        self,
        path: Path,
        counters: Counters,
        total: int,
        progress: ProgressHook | None,
        samples: SampleHook | None,
        written: dict[tuple[Any, ...], Record],
        agent_log: ProgressLog | None = None,
        every: tuple[float, Callable[[], None]] | None = None,
    ):
        self.counters, self.samples, self.written = counters, samples, written
        self.tick = Throttle(progress, counters, total)
        self.log = ProgressLog(path)
        self.agent_log = agent_log
        self.every, self.last_every = every, time.monotonic()  # (seconds, call): after a record

    def add(
        self, rec: Record, line: str, sample: dict[str, Any] | None, row: dict[str, Any] | None = None
    ) -> None:
        if row is not None and self.agent_log is not None:
            # the agent row first: a record in the progress log always has its row (a row
            # without its record, after a kill, is dropped when the run finishes)
            self.agent_log.write(canonical_json(row) + "\n")
            self.agent_log.flush()
        self.log.write(line)
        self.written[archive.sort_key(rec)] = rec
        self.counters.records += 1
        if self.samples is not None and sample is not None:
            self.samples(sample)
        if self.every is not None and time.monotonic() - self.last_every >= self.every[0]:
            self.every[1]()
            self.last_every = time.monotonic()


class Eta:
    """Time left in a run from a smoothed rate, for the progress bar.

    A record served from the reply cache costs next to nothing and they come in bursts, so they
    are counted apart: ``seconds`` is an exponentially weighted mean of the seconds per record
    *not* from the cache (weighted by records, half-life :attr:`half_life` records; time spent
    while only cache hits arrived is charged to the next records that needed a call), and
    ``cached`` an exponentially weighted share of cache hits among records (half-life four
    times as long). Time left is ``left x (1 - cached) x seconds``. Records done before a
    resume are not progress of this invocation: the first :meth:`update` sets the baseline.
    """

    def __init__(self, half_life: float = 100.0, warmup: int = 5):
        self.half_life, self.warmup = half_life, warmup
        self.seconds: float | None = None
        self.cached = 0.0
        self.called = 0  # records that needed a call, seen so far
        self._last: tuple[float, int, int] | None = None  # (time, records, cache hits)

    def _decay(self, n: float) -> float:
        return float(0.5 ** (n / self.half_life))

    def update(self, now: float, records: int, cache_hits: int) -> None:
        """Take the counters at time ``now`` (seconds, monotonic)."""
        if self._last is None:
            self._last = (now, records, cache_hits)
            return
        t0, r0, h0 = self._last
        new, hits = records - r0, min(cache_hits - h0, records - r0)
        if new <= 0:
            return  # nothing finished: the time waits for the next records
        called = new - hits
        k = self._decay(new / 4)  # the share moves slower: one burst is not the rest of the run
        self.cached = k * self.cached + (1 - k) * (hits / new)
        if called <= 0:  # a burst of cache hits: its time goes to the next called records
            self._last = (t0, records, cache_hits)
            return
        per = (now - t0) / called
        k = self._decay(called)
        self.seconds = per if self.seconds is None else k * self.seconds + (1 - k) * per
        self.called += called
        self._last = (now, records, cache_hits)

    def remaining(self, records: int, total: int) -> float | None:
        """Seconds left to finish ``total`` records, or None while there is too little to go on."""
        if self.seconds is None or self.called < self.warmup:
            return None
        return max(0, total - records) * (1.0 - self.cached) * self.seconds


def format_eta(seconds: float | None) -> str:
    """``ETA 1:02:03`` / ``ETA 4:05`` / ``ETA --`` (no estimate yet)."""
    if seconds is None:
        return "ETA --"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"ETA {h}:{m:02d}:{s:02d}" if h else f"ETA {m}:{s:02d}"

"""Worker processes: a run's cells shared by forked processes, this process the single writer.

Each worker gets the run's :class:`~layerlab.harness.live.engine.RunContext`, every n-th cell and
its share of the concurrency, runs its own event loop and sends its records (with their
progress-log lines, already serialised) to the writer in batches; the call budget is one counter
in shared memory. :func:`worker_processes` says how many a run uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import Mapping, Sequence
from typing import Any

from layerlab.archive import Record
from layerlab.harness.live.budget import Budget, Counters, Journal, SharedBudget, sum_counters
from layerlab.harness.live.calls import arun
from layerlab.harness.live.engine import Cell, Engine, RunContext, routes_for
from layerlab.harness.live.progress import FLUSH_EVERY_S, RecordWriter
from layerlab.harness.live.settings import LiveConfig, LiveRunError, workers_from_env

WORKER_BATCH = 64
"""A worker process sends its records to the writer in batches of at most this many."""


def worker_processes(config: LiveConfig, local: Mapping[str, Sequence[str]], cells: int) -> int:
    """How many worker processes a run uses: one per core, or 1 (in process) where sharing a
    process is what the run needs: a local model's servers take one request each at a time
    (their slots are per process), shared replies dedupe identical prompts in flight, and a
    platform without ``fork`` (or ``LAYERLAB_WORKERS=1``) gets no workers."""
    import multiprocessing

    wanted = workers_from_env() or os.cpu_count() or 1
    if config.target is not None:  # the user's system (and its tool server) lives here
        return 1
    if local or config.share_replies or cells < 2 * wanted:
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return wanted


def _share_concurrency(concurrency: int, n: int, i: int) -> int:
    return max(1, concurrency // n + (1 if i < concurrency % n else 0))


def run_workers(
    n_workers: int,
    ctx: RunContext,
    cells: Sequence[Cell],
    writer: RecordWriter,
    budget: Budget,
    rng: random.Random,
) -> bool:
    """The run over ``n_workers`` forked worker processes, this process the single writer.

    Each worker owns every ``n_workers``-th cell, runs its own event loop with its share of
    ``ctx.concurrency`` and sends each record's progress-log line here; only this process
    appends to the progress log (``writer``, closed at the end), so the log stays single-writer,
    checksummed and kill-safe. The call budget is one counter in shared memory. A worker whose
    parent dies is killed with it (Linux) or stops at its next record.
    """
    import multiprocessing
    from multiprocessing.connection import wait

    counters = writer.counters
    mp = multiprocessing.get_context("fork")
    shared = SharedBudget(budget.limit, mp.Value("q", budget.used))
    seeds = [rng.randrange(2**63) for _ in range(n_workers)]
    procs: list[Any] = []
    conns: dict[Any, int] = {}  # receiving end of each worker's pipe -> worker index
    snapshots = [Counters() for _ in range(n_workers)]
    base = dataclasses.replace(counters, latencies=list(counters.latencies))  # the preflight's
    stopped: bool = False
    fatal: str | None = None
    finished = set()
    try:
        for i in range(n_workers):
            recv, send = mp.Pipe(duplex=False)
            share = _share_concurrency(ctx.concurrency, n_workers, i)
            p = mp.Process(
                target=_worker_main,
                args=(send, dataclasses.replace(ctx, concurrency=share), cells[i::n_workers],
                      shared, seeds[i], counters.journal),
                daemon=True,
            )  # fmt: skip
            p.start()
            send.close()
            procs.append(p)
            conns[recv] = i
        while conns:
            writer.log.tick()
            ready: list[Any] = wait(list(conns), timeout=FLUSH_EVERY_S)
            for conn in ready:
                i = conns[conn]
                try:
                    msg: Any = conn.recv()
                except EOFError:
                    del conns[conn]
                    if i not in finished and fatal is None:
                        procs[i].join(5)
                        fatal = (
                            f"worker process {i} ended unexpectedly (exit code {procs[i].exitcode})"
                        )
                    continue
                kind = msg[0]
                if kind == "recs":
                    _, batch, snap = msg
                    for line, rec, sample, row in batch:
                        writer.add(rec, line, sample, row)
                    snapshots[i] = snap
                    sum_counters(counters, [base, *snapshots])
                    writer.tick()
                elif kind == "done":
                    finished.add(i)
                    snapshots[i] = msg[1]
                    stopped = stopped or msg[2]
                elif kind == "fatal":
                    finished.add(i)
                    snapshots[i] = msg[2]
                    fatal = fatal or msg[1]
                    for p in procs:  # as in process: the other in-flight calls are abandoned
                        if p.is_alive():
                            p.terminate()
    finally:
        for p in procs:
            if p.is_alive() and (fatal is not None or len(finished) < n_workers):
                p.terminate()
            p.join()
        writer.log.close()
        sum_counters(counters, [base, *snapshots], latencies=True)
        budget.used = shared.taken
        writer.tick(final=True)
    if fatal is not None:
        raise LiveRunError(fatal)
    return not stopped


def _worker_main(
    conn: Any, ctx: RunContext, cells: Sequence[Cell], budget: Budget, seed: int,
    journal: Journal | None = None,
) -> None:
    """A worker process: its share of the cells, records sent to the writer as they come."""
    _die_with_parent()
    _quiet_signals()
    counters = Counters(journal=journal)  # its calls appended to the invocation's file too
    engine = Engine(
        ctx, budget, counters, random.Random(seed), routes_for(ctx.config, ctx.concurrency)
    )
    light = Counters()  # what progress needs, without the latency list
    batch: list[tuple[str, Record, dict[str, Any] | None, dict[str, Any] | None]] = []
    timer: list[asyncio.TimerHandle] = []

    def send() -> None:
        """Send the batched records (a pipe write per record cost a fifth of a worker's time);
        they reach the writer within FLUSH_EVERY_S, like the log's own lines."""
        timer.clear()
        if batch:
            for name in ("calls", "cache_hits", "cache_misses", "retries", "failures"):
                setattr(light, name, getattr(counters, name))
            conn.send(("recs", list(batch), light))
            batch.clear()

    def emit(
        rec: Record, line: str, sample: dict[str, Any] | None, row: dict[str, Any] | None
    ) -> None:
        batch.append((line, rec, sample, row))
        if len(batch) >= WORKER_BATCH:
            send()
        elif not timer:
            timer.append(asyncio.get_running_loop().call_later(FLUSH_EVERY_S, send))

    try:
        try:
            arun(engine.drain(cells, ctx.concurrency, emit))
        finally:
            send()  # what was scored is written, whatever ended the run
            ctx.cache.close()  # (a record in the log never needs its reply again)
    except LiveRunError as exc:
        conn.send(("fatal", str(exc), counters))
    except BrokenPipeError:
        pass  # the writer is gone (killed): nothing to report to
    else:
        conn.send(("done", counters, engine.stopped))
    finally:
        conn.close()


def _quiet_signals() -> None:
    """Leave Ctrl-C to the writer (it saves the records and stops the workers); a SIGTERM ends
    a worker at once. Either way a worker prints nothing: no traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited by fork


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a ``kill -9`` of the run)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the worker stops when it next writes to the closed pipe

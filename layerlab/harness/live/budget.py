"""The call budget (a hard cap on provider calls, shared by worker processes) and the counters of
a run: records, calls, cache hits and misses, retries, failures, latencies and tokens, each event
appended to the invocation's :class:`Journal` as it happens (a kill -9 loses none)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

# what :attr:`Counters.by_model` sums per model
USAGE_FIELDS = (
    "calls",
    "latency_s",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "priced_calls",
)
# the counts :meth:`Counters.count` bumps (and journals)
COUNTED = ("calls", "cache_hits", "cache_misses", "retries", "failures")


class Journal:
    """An append-only file of counter events, one JSON line each, written by one ``os.write`` on
    an ``O_APPEND`` descriptor: a line whose write returned survives a kill -9 of the process,
    and forked worker processes append to the same file without interleaving."""

    def __init__(self, path: Path) -> None:
        self.fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def add(self, event: Sequence[Any]) -> None:
        if self.fd is not None:
            os.write(self.fd, (json.dumps(list(event), separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class Counters:
    """What a run did so far; a worker process keeps its own and sends snapshots to the writer."""

    records: int = 0
    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0  # replies not in the cache, so asked of the provider
    retries: int = 0
    failures: int = 0
    skipped_done: int = 0
    timed_out: int = 0  # a target's records that did not answer within its timeout
    # successful calls of this invocation: seconds from request sent to reply (queue time not
    # included) and the token counts the server reported; summarised in the manifest only
    latencies: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # per ``-m`` model, this invocation's answered calls: calls, latency_s (summed), prompt and
    # completion tokens, cost_usd (summed over priced calls) and priced_calls (litellm knew the
    # price); accumulated across invocations in the manifest (``runmanifest.calls_summary``)
    by_model: dict[str, dict[str, float]] = field(default_factory=dict)
    # where each count is appended as it happens (None: kept in memory only); not sent along
    # with a worker's snapshot (each worker appends its own events)
    journal: Journal | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "journal"}

    def count(self, name: str) -> None:
        """One more of ``name`` (one of :data:`COUNTED`); a call is counted when it is sent."""
        setattr(self, name, getattr(self, name) + 1)
        if self.journal is not None:
            self.journal.add([name])

    def start_journal(self, journal: Journal) -> None:
        """Append to ``journal`` from now on, beginning with what was counted so far."""
        state = {k: getattr(self, k) for k in (*COUNTED, "latencies", "prompt_tokens",
                                               "completion_tokens", "by_model")}  # fmt: skip
        journal.add(["state", state])
        self.journal = journal

    def add_call(
        self,
        model: str,
        latency_s: float,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float | None,
    ) -> None:
        """Count one answered call of ``model`` (``cost_usd`` None: no known price)."""
        if self.journal is not None:
            self.journal.add(["answer", model, latency_s, prompt_tokens, completion_tokens, cost_usd])
        self.latencies.append(latency_s)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        u = self.by_model.get(model)
        if u is None:
            u = self.by_model[model] = dict.fromkeys(USAGE_FIELDS, 0.0)
        u["calls"] += 1
        u["latency_s"] += latency_s
        u["prompt_tokens"] += prompt_tokens
        u["completion_tokens"] += completion_tokens
        if cost_usd is not None:
            u["cost_usd"] += cost_usd
            u["priced_calls"] += 1

    def usage(self) -> dict[str, Any]:
        """Latency quantiles and token totals of this invocation's answered calls."""
        if not self.latencies:
            return {"answered_calls": 0}
        q = pd.Series(self.latencies).quantile([0.5, 0.9])
        n = len(self.latencies)
        return {
            "answered_calls": n,
            "latency_s_median": round(float(q[0.5]), 3),
            "latency_s_p90": round(float(q[0.9]), 3),
            "prompt_tokens_mean": round(self.prompt_tokens / n, 1),
            "completion_tokens_mean": round(self.completion_tokens / n, 1),
        }


def replay(lines: Iterable[str]) -> Counters:
    """The counters a :class:`Journal`'s lines add up to (a line that does not parse, such as
    a torn last one, is skipped)."""
    c = Counters()
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, list) or not ev:
            continue
        if ev[0] == "state" and len(ev) == 2 and isinstance(ev[1], dict):
            for k, v in ev[1].items():
                if k in (*COUNTED, "latencies", "prompt_tokens", "completion_tokens", "by_model"):
                    setattr(c, k, v)
        elif ev[0] == "answer" and len(ev) == 6:
            c.add_call(*ev[1:])
        elif ev[0] in COUNTED:
            c.count(ev[0])
    return c


class Budget:
    """Hard cap on provider calls; ``None`` means unlimited."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True

    @property
    def spent(self) -> bool:
        return self.limit is not None and self.used >= self.limit


class SharedBudget(Budget):
    """A :class:`Budget` whose count lives in shared memory, for worker processes."""

    def __init__(self, limit: int | None, used: Any):
        super().__init__(limit)
        self._used = used  # multiprocessing.Value("q")

    def take(self) -> bool:
        with self._used.get_lock():
            if self.limit is not None and self._used.value >= self.limit:
                return False
            self._used.value += 1
            return True

    @property
    def spent(self) -> bool:
        return self.limit is not None and self._used.value >= self.limit

    @property
    def taken(self) -> int:
        """Calls taken by every process so far."""
        return int(self._used.value)


def sum_counters(into: Counters, parts: Sequence[Counters], latencies: bool = False) -> None:
    """Set ``into``'s call counts (and with ``latencies`` its latency list and per-model usage)
    to those of ``parts``."""
    for name in (
        "calls",
        "cache_hits",
        "cache_misses",
        "retries",
        "failures",
        "prompt_tokens",
        "completion_tokens",
    ):
        setattr(into, name, sum(getattr(p, name) for p in parts))
    if latencies:
        into.latencies = [x for p in parts for x in p.latencies]
        merged: dict[str, dict[str, float]] = {}
        for p in parts:
            for model, u in p.by_model.items():
                m = merged.setdefault(model, dict.fromkeys(USAGE_FIELDS, 0.0))
                for k in USAGE_FIELDS:
                    m[k] += u.get(k, 0.0)
        into.by_model = merged

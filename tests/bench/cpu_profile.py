"""Where the live harness's CPU goes per call, by owner (``python -m tests.bench --profile``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .suite import live_run

PROFILE_BUCKETS = (
    ("litellm", "litellm: its own per-call request and response work"),
    ("pydantic", "pydantic: litellm's response objects"),
    ("layerlab/models/agents.py", "reference agent: the provider's side"),
    ("layerlab/system/reader.py", "reference agent: the provider's side"),
    ("layerlab/corpus/extract.py", "reference agent: the provider's side"),
    ("layerlab/", "layerlab: gate, contract, score, record, progress line, cache"),
    ("asyncio", "asyncio event loop"),
    ("selectors", "asyncio event loop"),
    ("json", "json encoding and decoding"),
    ("enum", "stdlib enum (mostly litellm's provider lists)"),
)


def _bucket(fn: str, name: str) -> str:
    if fn == "~":  # a built-in function: named by what it is
        for part, label in (
            ("poll", "waiting (poll, sleep)"), ("sleep", "waiting (poll, sleep)"),
            ("sqlite3", "reply cache: SQLite"), ("execute", "reply cache: SQLite"),
            ("write", "file writes"), ("flush", "file writes"),
            ("validate_python", "pydantic: litellm's response objects"),
            ("sha256", "hashing"),
        ):  # fmt: skip
            if part in name:
                return label
        return "builtins (str, dict, isinstance...)"
    for part, label in PROFILE_BUCKETS:
        if part in fn:
            return label
    return "other stdlib"


def profile_live(scenarios: Sequence[str] | None = None) -> dict[str, Any]:
    """cProfile of one live run in one process (cProfile sees one process; the worker processes
    of a normal run do the same work): the local extractive agent, no latency, every mode, the
    given scenarios (default: all nine). Returns the run's size and the seconds per bucket."""
    import cProfile
    import pstats

    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness.deterministic import contract_arms

    scen = tuple(scenarios or load_scenarios())
    live_run(
        ("layerlab/extractive",), scen[:1], contract_arms()[:1], 8, 1
    )  # warm-up: imports, caches
    prof = cProfile.Profile()
    prof.enable()
    wall, _cpu, res = live_run(("layerlab/extractive",), scen, contract_arms(), 16, 1)
    prof.disable()
    buckets: dict[str, float] = {}
    table: Any = pstats.Stats(prof)
    stats = table.stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}
    for (fn, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.items():
        label = _bucket(fn, name)
        buckets[label] = buckets.get(label, 0.0) + tottime
    return {
        "records": res.manifest["records"],
        "calls": res.counters.calls,
        "wall_seconds_profiled": round(wall, 3),
        "buckets": dict(sorted(buckets.items(), key=lambda kv: -kv[1])),
    }


def print_profile(p: Mapping[str, Any], file: Any = None) -> None:
    total = sum(p["buckets"].values()) or 1.0
    calls = max(1, p["calls"])
    print(
        f"live harness, one process, local agent, no latency: {p['records']:,} records, "
        f"{p['calls']:,} calls, {p['wall_seconds_profiled']:.2f} s under cProfile "
        "(cProfile slows it; read the shares)",
        file=file,
    )
    print(f"  {'owner':<62} {'share':>6}  {'ms per call':>11}", file=file)
    for label, secs in p["buckets"].items():
        print(f"  {label:<62} {100 * secs / total:5.1f}%  {1000 * secs / calls:11.3f}", file=file)

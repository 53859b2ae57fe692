"""The benchmarks' result shape (:func:`verdict`: measured against a goal, pass/fail) and the one
printed table framed by the load average."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def median_seconds(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def verdict(
    benchmark: str, measured: float, unit: str, op: str, target: float, **details: Any
) -> dict[str, Any]:
    """A benchmark's result in the shape :func:`main` prints: ``measured`` against the goal
    ``op target`` (``op`` is ``<=`` or ``>=``), with ``ok`` and any details."""
    if op not in ("<=", ">="):
        raise ValueError(f"op: expected '<=' or '>=', got {op!r}")
    ok = measured <= target if op == "<=" else measured >= target
    return {
        "benchmark": benchmark,
        "measured": measured,
        "unit": unit,
        "goal": f"{op} {target:g}",
        "ok": bool(ok),
        **details,
    }


def load_1m() -> float:
    return round(os.getloadavg()[0], 2)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return "-" if x is None else str(x)


def print_table(rows: Sequence[dict[str, Any]], load_start: tuple[float, ...],
                load_end: tuple[float, ...], file: Any = None) -> None:  # fmt: skip
    """The benchmarks as one table: benchmark, measured, goal, pass/fail and a note; then the
    per-command start times of the CLI benchmark."""
    file = file or sys.stdout
    cores = os.cpu_count() or 1
    la = " ".join(f"{x:.2f}" for x in load_start)
    print(f"load average at start: {la} (1/5/15 min; {cores} cores)", file=file)
    table = [("benchmark", "measured", "goal", "result", "note")]
    for r in rows:
        unit = r.get("unit", "")
        table.append(
            (
                str(r.get("benchmark", r.get("key", "?"))),
                f"{_fmt(r.get('measured'))} {unit}".strip(),
                f"{r['goal']} {unit}".strip() if "goal" in r else "-",
                "PASS" if r.get("ok") is True else "FAIL" if r.get("ok") is False else "?",
                str(r.get("note", "")),
            )
        )
    w = [max(len(row[i]) for row in table) for i in range(4)]
    for b, m, g, ok, note in table:
        print(f"{b:<{w[0]}}  {m:>{w[1]}}  {g:>{w[2]}}  {ok:<{w[3]}}  {note}".rstrip(), file=file)
    for r in rows:
        for cmd, v in (r.get("commands") or {}).items():
            heavy = ", ".join(v["heavy_modules"]) or "none"
            print(f"  layerlab {cmd:<22} {v['median_seconds']:6.2f} s  heavy imports: {heavy}",
                  file=file)  # fmt: skip
    la = " ".join(f"{x:.2f}" for x in load_end)
    print(f"load average at end:   {la}", file=file)

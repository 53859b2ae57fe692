"""The registry of benchmarks, the order of the printed table and :func:`main`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from . import __doc__ as PACKAGE_DOC
from .cpu_profile import print_profile, profile_live
from .local_model import bench_local_model, bench_local_model_qwen
from .report import print_table
from .runtimes import bench_runtimes
from .suite import (
    bench_bootstrap,
    bench_cli_start,
    bench_coverage,
    bench_deterministic,
    bench_live_latency,
    bench_live_throughput,
    bench_mitigation_matrix,
    bench_test_suite,
)
from .target import bench_target

BENCHMARKS: dict[str, Callable[[int], dict[str, Any]]] = {
    "deterministic": bench_deterministic,
    "mitigation_matrix": bench_mitigation_matrix,
    "cli_start": bench_cli_start,
    "test_suite": bench_test_suite,
    "live": bench_live_throughput,
    "latency": bench_live_latency,
    "latency_200ms": lambda repeat: bench_live_latency(repeat, latency_ms=200),
    "bootstrap": bench_bootstrap,
    "coverage": bench_coverage,
    "target": bench_target,
    "local_model": bench_local_model,
    "local_model_qwen": bench_local_model_qwen,
    "runtimes": bench_runtimes,
}
# the order of the printed table: issue 15's rows first
ORDER = ("latency_200ms", "latency", "live", "target", "deterministic", "mitigation_matrix",
         "cli_start", "test_suite", "local_model", "local_model_qwen", "runtimes", "bootstrap",
         "coverage")  # fmt: skip
OPT_IN = frozenset({"coverage"})  # tens of minutes: `--only coverage` (or `make coverage`)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks and print the table (or JSON lines); exit 1 when a goal is missed."""
    ap = argparse.ArgumentParser(prog="python -m tests.bench", description=PACKAGE_DOC)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    ap.add_argument("--skip", choices=sorted(BENCHMARKS), action="append", default=[])
    ap.add_argument("--json", action="store_true", help="One JSON object per benchmark.")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="Instead of the benchmarks: where the live harness's CPU goes per call (cProfile, "
        "one process, the local agent over the full matrix), by owner.",
    )
    args = ap.parse_args(argv)
    if args.profile:
        print_profile(profile_live())
        return 0
    names = args.only or [n for n in ORDER if n in BENCHMARKS and n not in OPT_IN]
    names += [n for n in BENCHMARKS if args.only is None and n not in ORDER and n not in OPT_IN]
    names = [n for n in names if n not in args.skip]
    load_start = os.getloadavg()
    if args.json:
        print(json.dumps({"load_average_start": load_start}), flush=True)
    rows = []
    for name in names:
        row = BENCHMARKS[name](args.repeat)
        row.setdefault("key", name)
        rows.append(row)
        if args.json:
            print(json.dumps(row, sort_keys=True), flush=True)
        else:
            print(f"  done: {name}", file=sys.stderr, flush=True)
    load_end = os.getloadavg()
    if args.json:
        print(json.dumps({"load_average_end": load_end}), flush=True)
    else:
        print_table(rows, load_start, load_end)
    return 0 if all(r.get("ok") for r in rows) else 1

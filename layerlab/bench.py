"""Benchmarks (``make bench``): medians of repeated runs and ratios, never timed unit tests.

Run with ``python -m layerlab.bench [--repeat N]``. Prints one JSON object per benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any


def _median_seconds(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def bench_deterministic(repeat: int) -> dict[str, Any]:
    """Records per second of the full deterministic harness (240 x 9 x 2)."""
    from layerlab import corpus as corpus_mod
    from layerlab import harness, paths
    from layerlab.scenario import load_scenarios

    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    scen = load_scenarios()
    n = len(harness.run_deterministic(c, key, scen))  # warm-up (imports, caches)
    med, times = _median_seconds(lambda: harness.run_deterministic(c, key, scen), repeat)
    return {
        "benchmark": "deterministic_harness",
        "records": n,
        "repeat": repeat,
        "median_seconds": round(med, 3),
        "records_per_second_median": round(n / med, 1),
        "min_seconds": round(min(times), 3),
        "max_seconds": round(max(times), 3),
    }


BENCHMARKS: dict[str, Callable[[int], dict[str, Any]]] = {
    "deterministic": bench_deterministic,
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    args = ap.parse_args(argv)
    for name in args.only or list(BENCHMARKS):
        print(json.dumps(BENCHMARKS[name](args.repeat), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()

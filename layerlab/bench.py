"""Benchmarks (``make bench``): medians of repeated runs and ratios, never timed unit tests.

Run with ``python -m layerlab.bench [--repeat N]``. Prints one JSON object per benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
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
    for name in args.only or [n for n in BENCHMARKS if n not in OPT_IN]:
        print(json.dumps(BENCHMARKS[name](args.repeat), sort_keys=True), flush=True)


def _live_run(
    models: tuple[str, ...], scenarios: tuple[str, ...], modes: tuple[str, ...], concurrency: int
) -> tuple[float, Any]:
    import tempfile
    from pathlib import Path

    from layerlab import corpus as corpus_mod
    from layerlab import live, paths
    from layerlab.scenario import load_scenarios
    from layerlab.spec import spec_hash

    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    scen = load_scenarios()
    cfg = live.LiveConfig(models=models, scenarios=scenarios, mitigations=modes)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = live.run_live(
            c,
            key,
            scen,
            cfg,
            Path(tmp) / "run",
            scenario_hash=spec_hash(paths.SCENARIO_SPEC),
            concurrency=concurrency,
        )
        return time.perf_counter() - t0, res


def bench_live_throughput(repeat: int) -> dict[str, Any]:
    """Records per second through litellm with the local extractive agent (full 240 x 9 x 2)."""
    from layerlab.harness import MODES
    from layerlab.scenario import load_scenarios

    scen = tuple(load_scenarios())
    _live_run(("layerlab/extractive",), ("clean",), MODES[:1], 8)  # warm-up: litellm import
    times, res = [], None
    for _ in range(repeat):
        t, res = _live_run(("layerlab/extractive",), scen, MODES, 16)
        times.append(t)
    med = statistics.median(times)
    assert res is not None
    n = res.manifest["records"]
    return {
        "benchmark": "live_harness_local_agent",
        "records": n,
        "provider_calls": res.counters.calls,
        "repeat": repeat,
        "median_seconds": round(med, 3),
        "records_per_second_median": round(n / med, 1),
        "calls_per_second_median": round(res.counters.calls / med, 1),
    }


def bench_live_latency(
    repeat: int, latency_ms: int = 1000, concurrency: int = 32
) -> dict[str, Any]:
    """Wall time against the ideal (calls x latency / concurrency) with an agent that sleeps.

    The wall time is end to end (corpus load, retrieval, scoring, archive writes included).
    """
    from layerlab.harness import MODES

    _live_run(("layerlab/extractive",), ("clean",), MODES[:1], 8)  # warm-up
    times, res = [], None
    for _ in range(repeat):
        t, res = _live_run(
            (f"layerlab/extractive@{latency_ms}ms",),
            ("clean", "conflicting_evidence"),
            MODES[:1],
            concurrency,
        )
        times.append(t)
    assert res is not None
    calls = res.counters.calls
    ideal = calls * latency_ms / 1000 / concurrency
    med = statistics.median(times)
    return {
        "benchmark": "live_harness_latency_overhead",
        "latency_ms": latency_ms,
        "concurrency": concurrency,
        "provider_calls": calls,
        "repeat": repeat,
        "ideal_seconds": round(ideal, 3),
        "median_seconds": round(med, 3),
        "efficiency_median": round(ideal / med, 3),
    }


BENCHMARKS["live"] = bench_live_throughput
BENCHMARKS["latency"] = bench_live_latency
BENCHMARKS["latency_200ms"] = lambda repeat: bench_live_latency(repeat, latency_ms=200)


def bench_bootstrap(repeat: int, plain_resamples: int = 500) -> dict[str, Any]:
    """10,000 bootstrap resamples over a 38,880-record (9 units x 9 scenarios x 240 tasks x 2 arms)
    synthetic archive: the vectorised bootstrap's median time per design, and its ratio to the
    textbook loop over the same draws (:func:`layerlab.stats.plain_loop_bootstrap`), measured in
    the same run. The loop's cost per resample is constant, so it is timed on
    ``plain_resamples`` resamples and scaled to 10,000.
    """
    from layerlab import stats, synthetic
    from layerlab.scenario import load_scenarios

    n_boot = 10_000
    effects = {s: (0.4 if s == stats.TARGET else 0.0) for s in load_scenarios()}
    sample = synthetic.simulate(synthetic.Setting(effects=effects), seed=0, truth_draws=1_000)
    p = sample.paired()
    records = 2 * p.diff.size
    out: dict[str, Any] = {
        "benchmark": "bootstrap",
        "records": records,
        "units": len(p.units),
        "resamples": n_boot,
        "repeat": repeat,
        "plain_loop_resamples_timed": plain_resamples,
    }
    for design in ("crossed", "nested", "tasks"):
        stats.bootstrap(p, 200, seed=1, design=design)  # warm-up

        def run(d: str = design) -> Any:
            return stats.bootstrap(p, n_boot, 1, design=d)

        med, times = _median_seconds(run, repeat)
        t0 = time.perf_counter()
        stats.plain_loop_bootstrap(p, plain_resamples, seed=1, design=design)
        plain = (time.perf_counter() - t0) * n_boot / plain_resamples
        out[f"{design}_median_seconds"] = round(med, 3)
        out[f"{design}_max_seconds"] = round(max(times), 3)
        out[f"{design}_plain_loop_seconds"] = round(plain, 2)
        out[f"{design}_ratio_to_plain_loop"] = round(plain / med, 1)
    med3, _ = _median_seconds(lambda: stats.bootstrap(p, n_boot, 1, policy_level=True), repeat)
    out["crossed_policy_level_median_seconds"] = round(med3, 3)
    out["default_design"] = "crossed"
    out["goal"] = "crossed: ratio >= 50 and median <= 5 s"
    out["goal_met"] = bool(
        out["crossed_ratio_to_plain_loop"] >= 50 and out["crossed_median_seconds"] <= 5
    )
    return out


def bench_coverage(repeat: int) -> dict[str, Any]:
    """The full coverage suite (:mod:`layerlab.coverage`): wall time and the lowest coverage of
    any reported interval type (``repeat`` is ignored: one run)."""
    from layerlab import coverage

    t0 = time.perf_counter()
    table = coverage.run(size=coverage.FULL)
    reported = table[table["status"] == "reported"]
    return {
        "benchmark": "coverage_suite_full",
        "seconds": round(time.perf_counter() - t0, 1),
        "simulations_per_setting": coverage.FULL.sims,
        "settings": int(table["setting"].nunique()),
        "min_reported_coverage": float(reported["coverage"].min()),
        "reported_below_required": int(len(coverage.failures(table))),
        "matches_committed": bool(
            coverage.COVERAGE_CSV.exists()
            and coverage.COVERAGE_CSV.read_text(encoding="utf-8") == coverage.to_csv(table)
        ),
    }


BENCHMARKS["bootstrap"] = bench_bootstrap
BENCHMARKS["coverage"] = bench_coverage
OPT_IN = frozenset({"coverage"})  # tens of minutes: `--only coverage` (or `make coverage`)


def bench_local_model(repeat: int, model: str = "smollm2-135m", tasks: int = 6) -> dict[str, Any]:
    """The harness against a llama.cpp server driven directly with the same requests.

    One server of a local model; the same reader prompts (clean and conflicting evidence, strict
    and repair: one call per record), the same seeds and token cap, no response format (an
    ``openai/`` route sends OpenAI's json_schema form, which llama-cpp-python's server rejects). *Direct*
    posts each request body to the server in turn; *harness* is ``run_live`` end to end (corpus,
    retrieval, contract, scoring, archive) against the same server with an empty reply cache.
    The ratio is harness throughput over direct throughput (goal: >= 0.90). Needs ``make local``.
    """
    import tempfile
    import urllib.request
    from pathlib import Path

    from layerlab import corpus as corpus_mod
    from layerlab import harness, live, models, paths, prompt
    from layerlab.llm import ProviderSettings
    from layerlab.scenario import load_scenarios
    from layerlab.spec import spec_hash

    spec = models.lookup(model)
    models.fetch(spec)
    # the server is reached as an OpenAI-compatible endpoint, which needs a placeholder key
    os.environ.setdefault("OPENAI_API_KEY", models.PLACEHOLDER_KEY)
    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    scen = load_scenarios()
    scenarios, arms = ("clean", "conflicting_evidence"), harness.MODES
    task_ids = tuple(t.task_id for t in c.tasks[:tasks])
    with models.serve(spec, n_servers=1) as (server,):
        settings = ProviderSettings(timeout_s=600, max_tokens=120, api_bases=(server.api_base,))
        cfg = live.LiveConfig(
            models=(f"openai/{spec.name}",), scenarios=scenarios, mitigations=arms,
            task_ids=task_ids, settings=settings, response_format="none", seed=0,
        )  # fmt: skip
        # the direct requests: exactly what the harness sends, built from the same pieces
        route = live.routes_for(cfg, 1)[cfg.models[0]]
        bodies = []
        for s in scenarios:
            prep = harness.prepare(c, scen[s])
            for t in c.tasks[: len(task_ids)]:
                for arm in arms:
                    g = harness.gate(t, prep, arm)
                    if g.inp is None:
                        continue
                    seed = live.record_seed(0, cfg.models[0], s, arm, t.task_id, 0)
                    req = route.request(prompt.messages(g.inp), seed)
                    bodies.append({"model": spec.name, "max_tokens": 120, **req})

        def direct() -> None:
            for b in bodies:
                r = urllib.request.Request(
                    server.api_base + "/chat/completions",
                    data=json.dumps(b).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(r, timeout=600) as resp:
                    resp.read()

        def through_harness() -> None:
            with tempfile.TemporaryDirectory() as tmp:
                res = live.run_live(
                    c, key, scen, cfg, Path(tmp) / "run", scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                    concurrency=4, cache_dir=Path(tmp) / "cache",
                )  # fmt: skip
                assert res.complete and res.counters.calls == len(bodies), res.message

        direct()  # warm-up: model pages, prompt cache
        d_times, h_times = [], []
        for _ in range(repeat):  # interleaved, so that machine load hits both alike
            d_times.append(_median_seconds(direct, 1)[0])
            h_times.append(_median_seconds(through_harness, 1)[0])
    d, h = statistics.median(d_times), statistics.median(h_times)
    return {
        "benchmark": "local_model_harness_vs_direct",
        "model": spec.name,
        "calls": len(bodies),
        "repeat": repeat,
        "direct_median_seconds": round(d, 2),
        "harness_median_seconds": round(h, 2),
        "seconds_per_call_direct": round(d / len(bodies), 2),
        "throughput_ratio": round(d / h, 3),
        "goal": ">= 0.90",
    }


BENCHMARKS["local_model"] = bench_local_model


if __name__ == "__main__":
    main()

"""The harness against a llama.cpp server driven directly with the same requests (issues 10
and 20; needs ``make local``)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from .report import load_1m

LOCAL_MODEL_GOAL = 0.90
"""Issue 10: the harness reaches >= 90% of the server's throughput driven directly."""


def _steady_rate(stamps: Sequence[tuple[float, int]]) -> float | None:
    """Calls per second between the first and the last stamp (time, answered calls so far):
    the steady state, without what comes before the first answer or after the last."""
    if len(stamps) < 2 or stamps[-1][0] <= stamps[0][0]:
        return None
    return (stamps[-1][1] - stamps[0][1]) / (stamps[-1][0] - stamps[0][0])


def bench_local_model(
    repeat: int, model: str = "smollm2-135m", tasks: int = 6, goal: float = LOCAL_MODEL_GOAL
) -> dict[str, Any]:
    """The harness against a llama.cpp server driven directly with the same requests.

    One server of a local model (one slot); the same reader prompts (clean and conflicting
    evidence, strict and repair: one call per record), the same seeds and token cap, no response
    format (an ``openai/`` route sends OpenAI's json_schema form, which llama-cpp-python's server
    rejects), and the same concurrency, the server's slot count: one request at a time on both
    sides. *Direct* posts each request body to the server in turn; *harness* is ``run_live`` end
    to end (set-up, preflight, retrieval, contract, scoring, archive) against the same server
    with an empty reply cache, in one process (a second process would only queue at the slot).

    ``measured`` is the steady-state ratio: calls per second from the first answered call to the
    last, harness over direct. A run's fixed cost (checks, preflight, preparing the scenarios,
    writing the archive and results; the server is started once, outside both timings) does not
    grow with the run, so it is reported apart (``harness_fixed_seconds``) with the end-to-end
    ratio of this small run (``end_to_end_ratio``). Needs ``make local``.
    """
    import tempfile
    import urllib.request
    from pathlib import Path

    from layerlab import paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import deterministic as harness
    from layerlab.harness import live
    from layerlab.harness.prepare import prepare
    from layerlab.harness.step import admit
    from layerlab.models import local as models
    from layerlab.models import runtime
    from layerlab.models.llm import ProviderSettings
    from layerlab.system import prompt

    spec = models.lookup(model)
    models.fetch(spec)
    # the server is reached as an OpenAI-compatible endpoint, which needs a placeholder key
    os.environ.setdefault("OPENAI_API_KEY", models.PLACEHOLDER_KEY)
    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    scen = load_scenarios()
    scenarios, arms = ("clean", "conflicting_evidence"), harness.contract_arms()
    task_ids = tuple(t.task_id for t in c.tasks[:tasks])
    loads = [load_1m()]
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
            prep = prepare(c, scen[s])
            for t in c.tasks[: len(task_ids)]:
                for arm in arms:
                    g = admit(t, prep, arm)
                    if g.inp is None:
                        continue
                    seed = live.record_seed(0, cfg.models[0], s, arm, t.task_id, 0)
                    req = route.request(prompt.messages(g.inp), seed)
                    bodies.append({"model": spec.name, "max_tokens": 120, **req})

        def direct() -> list[tuple[float, int]]:
            stamps = []
            for i, b in enumerate(bodies, 1):
                r = urllib.request.Request(
                    server.api_base + "/chat/completions",
                    data=json.dumps(b).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(r, timeout=600) as resp:
                    resp.read()
                stamps.append((time.perf_counter(), i))
            return stamps

        def through_harness() -> list[tuple[float, int]]:
            stamps: list[tuple[float, int]] = []

            def hook(counters: live.Counters, _total: int) -> None:
                stamps.append((time.perf_counter(), len(counters.latencies)))

            with tempfile.TemporaryDirectory() as tmp:
                res = live.run_live(
                    c, key, scen, cfg, Path(tmp) / "run", scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                    concurrency=1, cache_dir=Path(tmp) / "cache", progress=hook, workers=1,
                )  # fmt: skip
                assert res.complete and res.counters.calls == len(bodies), res.message
            return stamps

        def timed(fn: Callable[[], list[tuple[float, int]]]) -> tuple[float, float | None]:
            t0 = time.perf_counter()
            stamps = fn()
            return time.perf_counter() - t0, _steady_rate(stamps)

        direct()  # warm-up: model pages, prompt cache
        d_runs, h_runs = [], []
        for _ in range(repeat):  # interleaved, so that machine load hits both alike
            d_runs.append(timed(direct))
            h_runs.append(timed(through_harness))
            loads.append(load_1m())
        speed = runtime_speed(server.api_base, bodies)
    n = len(bodies)
    d = statistics.median(t for t, _ in d_runs)
    h = statistics.median(t for t, _ in h_runs)
    d_rate = statistics.median(r for _, r in d_runs if r is not None)
    h_rate = statistics.median(r for _, r in h_runs if r is not None)
    ratio = round(h_rate / d_rate, 3)
    fixed = h - n / h_rate  # what the harness run took beyond its calls at the steady rate
    return {
        "benchmark": f"local model ({spec.name}): harness vs direct, steady-state calls/s",
        "measured": ratio,
        "unit": "of direct",
        "goal": f">= {goal:g}",
        "ok": bool(ratio >= goal),
        "note": f"median of {repeat}, {n} calls each; end to end {d / h:.3f} "
        f"(harness fixed cost {fixed:.1f} s); load {min(loads)}-{max(loads)}",
        "model": spec.name,
        "calls": n,
        "repeat": repeat,
        "concurrency": 1,
        "direct_median_seconds": round(d, 2),
        "harness_median_seconds": round(h, 2),
        "seconds_per_call_direct": round(d / n, 2),
        "direct_calls_per_second_steady": round(d_rate, 3),
        "harness_calls_per_second_steady": round(h_rate, 3),
        "harness_fixed_seconds": round(fixed, 2),
        "end_to_end_ratio": round(d / h, 3),
        "throughput_ratio": ratio,
        "runtime_speed": speed,
        "runtime_build": runtime.provenance(),
        "server_threads": server.settings.n_threads,
        "load_average_1m": loads,
    }


def _post(api_base: str, body: dict[str, Any]) -> tuple[float, dict[str, int]]:
    import urllib.request

    r = urllib.request.Request(
        api_base + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    with urllib.request.urlopen(r, timeout=600) as resp:
        usage = json.loads(resp.read())["usage"]
    return time.perf_counter() - t0, usage


def runtime_speed(api_base: str, bodies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The server's prompt and generation speed on ``bodies`` (real reader prompts, the reply
    schema as a grammar, as a run asks), from split timings: each prompt is asked first for one
    token (its prompt evaluated afresh: the previous prompt differs) and then in full (the
    server reuses the evaluated prompt, so that time is the generation's). ``calls_per_second``
    is calls over the sum of both (one call's cost)."""
    from layerlab.models.routing import response_format_for

    fmt = response_format_for("json_schema", local=True)
    t_prompt = t_gen = 0.0
    p_tok = g_tok = 0
    for b in bodies:
        body = {**b, "response_format": fmt}
        t, usage = _post(api_base, {**body, "max_tokens": 1})
        t_prompt, p_tok = t_prompt + t, p_tok + int(usage["prompt_tokens"])
        t, usage = _post(api_base, body)
        t_gen, g_tok = t_gen + t, g_tok + int(usage["completion_tokens"])
    n = len(bodies)
    return {
        "calls": n,
        "calls_per_second": round(n / (t_prompt + t_gen), 4),
        "prompt_tokens_per_second": round(p_tok / t_prompt, 1),
        "generation_tokens_per_second": round(g_tok / t_gen, 2),
        "prompt_tokens_mean": round(p_tok / n, 1),
        "completion_tokens_mean": round(g_tok / n, 1),
    }


QWEN_GOAL = 0.95
"""Issue 20: on the model the committed real-model archives use, the harness reaches >= 95%
of the same llama.cpp server driven directly."""


def bench_local_model_qwen(repeat: int) -> dict[str, Any]:
    """:func:`bench_local_model` on Qwen2.5-Coder-1.5B (about 8 s a call on one core: 2 tasks,
    at most 3 repeats)."""
    return bench_local_model(min(repeat, 3), "qwen2.5-coder-1.5b", tasks=2, goal=QWEN_GOAL)

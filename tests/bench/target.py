"""The target benchmark: the full matrix against a user's system that answers in 1 s (a sleep),
at concurrency 16; goal: within 1.15x of the ideal wall time (records x latency / concurrency).

The target (:func:`sleepy`) searches once, sleeps ``--target-setting latency`` seconds (its
"model"), and answers extractively; its records are scored as any target's."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from .report import load_1m, verdict

TARGET_GOAL = 1.15
"""Issue 31: wall time at most 1.15 x records x latency / concurrency."""


def sleepy(req: Any) -> dict[str, Any]:
    """A target that takes ``latency`` seconds per question (its model's time), then answers
    from the first result that holds a span of the answer kind."""
    from layerlab.corpus.extract import extract

    obs = req.search(req.question)
    time.sleep(float(req.settings.get("latency", 1.0)))
    for r in obs.get("results") or ():
        span = extract(req.question, req.answer_kind, r["text"])
        if span is not None:
            return {"status": "answered", "answer": span, "citations": [r["doc_id"]]}
    return {"status": "abstained", "reason": "no answer in the evidence"}


def bench_target(
    repeat: int, latency: float = 1.0, concurrency: int = 16, tasks: int | None = None
) -> dict[str, Any]:
    """Wall time of a target run (set-up, scoring, archive and results included) over the ideal
    ``records x latency / concurrency``; ``tasks`` limits the matrix (a scaled-down check), by
    default all of them (4,320 records: about 4.5 min). One run whatever ``repeat`` says."""
    from layerlab import paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness import live

    c = corpus_mod.load(paths.CORPUS_DIR)
    key = corpus_mod.load_answer_key(paths.CORPUS_DIR)
    scen = load_scenarios()
    ids = None if tasks is None else tuple(t.task_id for t in c.tasks[:tasks])
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), task_ids=ids, target=_spec(latency))
    loads = [load_1m()]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res = live.run_live(c, key, scen, cfg, Path(tmp) / "run",
                            scenario_hash=spec_hash(paths.SCENARIO_SPEC),
                            concurrency=concurrency, cache_dir=Path(tmp) / "cache")  # fmt: skip
        wall = time.perf_counter() - t0
    loads.append(load_1m())
    n = res.manifest["records"]
    ideal = n * latency / concurrency
    ratio = round(wall / ideal, 3)
    return verdict(
        f"target run, {n:,} records, {latency:g} s each, concurrency {concurrency}",
        ratio, "x ideal", "<=", TARGET_GOAL, key="target",
        note=f"{wall:.1f} s vs ideal {ideal:.1f} s; load {min(loads)}-{max(loads)}",
        records=n, latency_s=latency, concurrency=concurrency, wall_seconds=round(wall, 2),
        ideal_seconds=round(ideal, 2), complete=res.complete, repeat=1,
        load_average_1m=loads,
    )  # fmt: skip


def _spec(latency: float) -> Any:
    from layerlab.harness.targets import parse_target

    return parse_target("python:tests.bench.target:sleepy", "sleepy", "bench",
                        {"latency": str(latency)})  # fmt: skip

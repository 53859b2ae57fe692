"""llama-cpp-python's server against llama-server on the same prompts (issue 43 item 5): calls
per second and identical greedy replies, per server layout.

The prompts are the committed real-model archive's (``data/archives/local_models/<model>``):
its first tasks of ``data/specs/local_model_tasks.txt``, the clean scenario, the strict arm, built
exactly as the harness builds them (:func:`committed_prompts`: the reader prompt, the reply schema
as the local ``response_format``, the record's seed, the archive's token cap, temperature 0).
Each layout (:data:`LAYOUTS`: servers x threads x slots, speculative decoding) is started as a
run starts it (:func:`layerlab.models.local.serve`), warmed with one token per server, and sent
``repeat`` passes of ``prompts`` prompts each, every pass its own prompts (a prompt asked again
would be read from llama-server's prompt cache in RAM, which a run, asking each prompt once, does
not get), at once as many as it has slots (a worker per slot, each taking the next prompt: the
harness's endpoints); calls per second is the median pass's. Its replies are compared with the
first layout's (llama-cpp-python, as runs use it today): identical text, and
identical prompt token counts (the same chat template). Needs ``make local`` and
``make local-server``::

    PYTHONPATH=. python -m tests.bench.runtimes --prompts 4 --repeat 3 --out /tmp/runtimes.json
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from .report import load_1m

LAYOUTS: tuple[dict[str, Any], ...] = (
    {"runtime": "llama-cpp-python", "servers": 2, "threads": 1, "slots": 1},
    {"runtime": "llama-server", "servers": 2, "threads": 1, "slots": 1},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 1},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 2},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 4},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 2, "speculative": "ngram-simple"},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 1, "grammar": "llama-cpp-python"},
    {"runtime": "llama-server", "servers": 1, "threads": 2, "slots": 4, "grammar": "llama-cpp-python"},
)  # fmt: skip
"""The layouts measured, the first the baseline: llama-cpp-python as runs use it today (a
single-slot server per core). ``grammar: llama-cpp-python`` sends llama-cpp-python's own grammar
for the reply schema (``grammar``, :func:`with_their_grammar`) instead of the schema, which
llama-server turns into a grammar of its own that lets the reply be laid out over lines."""


def label(layout: dict[str, Any]) -> str:
    """``llama-server 1x2 thr, 2 slots, ngram-simple``."""
    spec = f", {layout['speculative']}" if layout.get("speculative") else ""
    spec += f", {layout['grammar']}'s grammar" if layout.get("grammar") else ""
    return (
        f"{layout['runtime']} {layout['servers']}x{layout['threads']} thr, "
        f"{layout['slots']} slot{'s' if layout['slots'] > 1 else ''}{spec}"
    )


def committed_prompts(model: str, n: int) -> list[dict[str, Any]]:
    """The request bodies of the committed archive's first ``n`` records of the clean scenario's
    strict arm (tasks in ``local_model_tasks.txt`` order), as the harness sends them."""
    from layerlab import archive, paths
    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness.live import LiveConfig, record_seed, routes_for
    from layerlab.harness.prepare import prepare
    from layerlab.harness.step import admit
    from layerlab.models.llm import ProviderSettings
    from layerlab.system import prompt

    manifest = archive.read_manifest(paths.LOCAL_MODEL_ARCHIVES / model)
    max_tokens = int(manifest["settings"]["max_tokens"])
    corpus = corpus_mod.load(paths.CORPUS_DIR)
    wanted = (paths.SPECS / "local_model_tasks.txt").read_text().split()
    tasks = {t.task_id: t for t in corpus.tasks}
    cfg = LiveConfig(
        models=(f"local/{model}",), scenarios=("clean",), mitigations=("strict",),
        settings=ProviderSettings(max_tokens=max_tokens, temperature=0.0),
        response_format=manifest["response_format"], seed=0,
    )  # fmt: skip
    route = routes_for(cfg, 1, {cfg.models[0]: ["http://127.0.0.1:1/v1"]})[cfg.models[0]]
    prep = prepare(corpus, load_scenarios()["clean"])
    bodies = []
    for task_id in wanted:
        g = admit(tasks[task_id], prep, "strict")
        if g.inp is None:
            continue
        seed = record_seed(0, cfg.models[0], "clean", "strict", task_id, 0)
        req = route.request(prompt.messages(g.inp), seed)
        req.pop("api_key", None)
        bodies.append({"model": model, "max_tokens": max_tokens, "temperature": 0.0, **req})
        if len(bodies) == n:
            break
    return bodies


def with_their_grammar(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with llama-cpp-python's grammar for its ``response_format`` schema instead (as a
    llama-server run sends it: :func:`layerlab.models.llamaserver.grammar_for`)."""
    from layerlab.models import llamaserver

    out = dict(body)
    return {**out, "grammar": llamaserver.grammar_for(out.pop("response_format"))}


def post(api_base: str, body: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """One chat completion: the reply text and the usage."""
    r = urllib.request.Request(
        api_base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        got = json.loads(resp.read())
    return {"content": got["choices"][0]["message"].get("content"), "usage": got.get("usage", {})}


def drive(
    endpoints: Sequence[str],
    bodies: Sequence[dict[str, Any]],
    send: Callable[[str, dict[str, Any]], dict[str, Any]] = post,
) -> tuple[float, list[dict[str, Any]]]:
    """Every body once, a worker per endpoint (a server of k slots is listed k times), each
    taking the next body: the wall seconds and the replies in body order."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(bodies)):
        todo.put(i)
    out: list[dict[str, Any] | None] = [None] * len(bodies)
    errors: list[BaseException] = []

    def work(base: str) -> None:
        while True:
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                out[i] = send(base, bodies[i])
            except BaseException as exc:  # noqa: BLE001 - reported after the pass
                errors.append(exc)
                return

    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(b,)) for b in endpoints]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors or any(o is None for o in out):
        raise RuntimeError(f"a pass failed: {errors[0] if errors else 'a body was not sent'}")
    return wall, [o for o in out if o is not None]


def _parsed(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return text


def same(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many replies of two layouts are identical, the same JSON value (laid out otherwise),
    and how many prompts had as many tokens."""
    return {
        "identical": sum(x["content"] == y["content"] for x, y in zip(a, b, strict=True)),
        "same_json": sum(
            _parsed(x["content"]) == _parsed(y["content"]) for x, y in zip(a, b, strict=True)
        ),
        "same_prompt_tokens": sum(
            x["usage"].get("prompt_tokens") == y["usage"].get("prompt_tokens")
            for x, y in zip(a, b, strict=True)
        ),
    }


def measure(model: str, layout: dict[str, Any], bodies: Sequence[dict[str, Any]],
            repeat: int) -> dict[str, Any]:  # fmt: skip
    """One layout: started as a run starts it, warmed, then ``repeat`` passes, each of its own
    share of ``bodies``."""
    from layerlab.models import local as models

    spec = models.lookup(model)
    kw = {"n_threads": layout["threads"], "runtime_name": layout["runtime"],
          "slots": layout["slots"], "speculative": layout.get("speculative")}  # fmt: skip
    if layout.get("grammar"):
        bodies = [with_their_grammar(b) for b in bodies]
    with models.serve(spec, n_servers=layout["servers"], **kw) as servers:
        endpoints = [s.api_base for s in servers for _ in range(s.settings.slots)]
        for s in servers:  # model pages in, the system prompt's prefix evaluated
            post(s.api_base, {**bodies[0], "max_tokens": 1})
        passes, replies, n = [], [], len(bodies) // repeat
        for k in range(repeat):
            wall, got = drive(endpoints, bodies[k * n : (k + 1) * n])
            passes.append(n / wall)
            replies += got
        cpu = models.cpu_seconds(servers)
    return {
        "layout": label(layout), **layout, "calls": len(bodies), "repeat": repeat,
        "calls_per_second": round(statistics.median(passes), 4),
        "passes": [round(p, 4) for p in passes],
        "server_cpu_seconds": cpu, "replies": replies,
    }  # fmt: skip


def compare(model: str = "qwen2.5-coder-1.5b", prompts: int = 8, repeat: int = 3,
            layouts: Sequence[dict[str, Any]] = LAYOUTS,
            say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:  # fmt: skip
    """Every layout on the same ``prompts`` x ``repeat`` prompts: calls/s (median pass), ratio
    to the first, identical replies out of all of them."""
    from layerlab.models import local as models

    os.environ.setdefault("OPENAI_API_KEY", models.PLACEHOLDER_KEY)
    models.fetch(models.lookup(model))
    bodies = committed_prompts(model, prompts * repeat)
    loads, rows = [load_1m()], []
    for lay in layouts:
        say(f"{label(lay)}: {repeat} passes of {len(bodies) // repeat} prompts")
        rows.append(measure(model, lay, bodies, repeat))
        loads.append(load_1m())
        say(f"  {rows[-1]['calls_per_second']} calls/s (passes {rows[-1]['passes']})")
    base = rows[0]
    for r in rows:
        r["ratio"] = round(r["calls_per_second"] / base["calls_per_second"], 3)
        r.update(same(base["replies"], r["replies"]))
    return {"model": model, "prompts": len(bodies), "repeat": repeat, "rows": rows,
            "load_average_1m": loads}  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    """The comparison as a Markdown table."""
    n = result["prompts"]
    lines = [
        "| layout | calls/s (median) | ratio | identical greedy replies | same JSON | same prompt tokens |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['layout']} | {r['calls_per_second']:.3f} | {r['ratio']:.2f}x | "
            f"{r['identical']}/{n} | {r['same_json']}/{n} | {r['same_prompt_tokens']}/{n} |"
        )
    return "\n".join(lines)


GOAL = 1.0
"""The fastest llama-server layout whose replies are the baseline's is at least as fast."""


def bench_runtimes(repeat: int) -> dict[str, Any]:
    """``make bench``'s row: calls/s of both runtimes on the committed prompts (3 passes of 4
    prompts a layout: about 25 min on 2 shared cores)."""
    res = compare(prompts=4, repeat=min(max(repeat, 1), 3))
    base, others = res["rows"][0], res["rows"][1:]
    same_ones = [r for r in others if r["identical"] == res["prompts"]] or others
    best = max(same_ones, key=lambda r: r["calls_per_second"])
    return {
        "benchmark": "local runtimes: llama-server vs llama-cpp-python, calls/s",
        "measured": best["ratio"], "unit": "x llama-cpp-python", "goal": f">= {GOAL:g}",
        "ok": bool(best["ratio"] >= GOAL),
        "note": f"{best['layout']}: {best['calls_per_second']} vs {base['calls_per_second']} "
        f"calls/s, {best['identical']}/{res['prompts']} identical replies",
        "rows": [{k: v for k, v in r.items() if k != "replies"} for r in res["rows"]],
        "load_average_1m": res["load_average_1m"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per pass")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layout", type=int, action="append", help="indexes into LAYOUTS (0 first)")
    ap.add_argument("--out", default=None, help="write the results (replies included) as JSON")
    ns = ap.parse_args(argv)
    lays = [LAYOUTS[i] for i in ns.layout] if ns.layout else list(LAYOUTS)
    if ns.layout and 0 not in ns.layout:
        lays.insert(0, LAYOUTS[0])
    res = compare(ns.model, ns.prompts, ns.repeat, lays, say=lambda m: print(m, flush=True))
    if ns.out:
        with open(ns.out, "w") as fh:
            json.dump(res, fh, indent=1)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

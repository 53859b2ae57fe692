"""Cost and time of a live run: per-call latency, tokens and cost summed over every invocation in
the manifest, in ``results.json`` and the report; a resume never erases them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from layerlab import archive, paths
from layerlab.analysis import results
from layerlab.corpus.spec import spec_hash
from layerlab.harness import live
from layerlab.harness.live import budget, calls, runmanifest
from layerlab.models import local as models_mod
from layerlab.models.llm import ProviderSettings, import_litellm
from layerlab.reporting.format import cells

sys.path.insert(0, str(Path(__file__).parents[2]))
from fake_openai import FakeOpenAI  # noqa: E402

SCEN_HASH = spec_hash(paths.SCENARIO_SPEC)


@pytest.fixture()
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-placeholder")
    with FakeOpenAI() as srv:
        yield srv


def _cfg(corpus, base: str) -> live.LiveConfig:
    return live.LiveConfig(
        models=("openai/good",),
        scenarios=("clean", "stale_index"),
        task_ids=tuple(t.task_id for t in corpus.tasks[:4]),
        settings=ProviderSettings(timeout_s=5.0, backoff_s=0.01, api_bases=(base,)),
    )


def test_the_budget_is_over_the_whole_run_and_a_resume_gets_what_is_left(
    tmp_path, server, corpus, key
) -> None:
    from layerlab.faults.scenario import load_scenarios

    scen, cfg, out = load_scenarios(), _cfg(corpus, server.base), tmp_path / "run"
    kw = dict(scenario_hash=SCEN_HASH, cache_dir=tmp_path / "cache", concurrency=1)
    first = live.run_live(corpus, key, scen, cfg, out, budget=5, **kw)
    assert not first.complete and server.requests == 5
    same = live.run_live(corpus, key, scen, cfg, out, budget=5, resume=True, **kw)
    assert not same.complete and same.counters.calls == 0 and server.requests == 5
    assert "budget spent after 5 calls over the run" in same.message
    more = live.run_live(corpus, key, scen, cfg, out, budget=8, resume=True, **kw)
    assert not more.complete and more.counters.calls == 3
    assert more.manifest["calls"]["made"] == server.requests == 8


def test_usage_accumulates_across_invocations_and_a_resume_with_nothing_left_keeps_it(
    tmp_path, server, corpus, key
) -> None:
    from layerlab.faults.scenario import load_scenarios

    scen, cfg, out = load_scenarios(), _cfg(corpus, server.base), tmp_path / "run"
    kw = dict(scenario_hash=SCEN_HASH, cache_dir=tmp_path / "cache", concurrency=1)
    first = live.run_live(corpus, key, scen, cfg, out, budget=5, **kw)
    assert not first.complete
    u1 = first.manifest["calls"]["usage"]["openai/good"]
    assert u1["calls"] == first.counters.calls == 5
    assert u1["prompt_tokens"] == u1["completion_tokens"] == 5  # the fake server says 1 each
    assert u1["latency_s"] > 0 and u1["cost_usd"] is None  # a local server: no price
    second = live.run_live(corpus, key, scen, cfg, out, resume=True, **kw)
    assert second.complete and second.counters.calls > 0
    u2 = second.manifest["calls"]["usage"]["openai/good"]
    assert u2["calls"] == 5 + second.counters.calls == server.requests
    assert u2["latency_s"] >= u1["latency_s"]
    assert len(second.manifest["calls"]["invocations"]) == 2
    # a resume with nothing left asks nothing and erases nothing
    third = live.run_live(corpus, key, scen, cfg, out, resume=True, **kw)
    assert third.counters.calls == 0
    m3 = archive.read_manifest(out)
    assert m3["calls"]["usage"] == second.manifest["calls"]["usage"]
    assert m3["calls"]["invocations"] == second.manifest["calls"]["invocations"]
    # results.json carries the totals, labelled; the report shows them
    res = json.loads((out / results.RESULTS).read_text())
    u = res["usage"]["openai/good"]
    assert u["answered_calls"] == server.requests and u["cost_usd"] is None
    assert u["compute"] == results.COMPUTE_WALL and u["compute_s"] == round(u2["latency_s"], 2)
    assert u["prompt_tokens"] == server.requests
    row = cells.usage_table(res["usage"]).iloc[0]
    assert row["cost (USD)"] == "-" and row["compute measures"] == "call wall time"
    from layerlab.reporting.run import report

    html = report.build([out])
    assert "Cost and time" in html and "call wall time" in html


def test_a_model_litellm_prices_gets_litellms_cost_and_local_ones_none() -> None:
    litellm = import_litellm()
    resp = litellm.ModelResponse(
        model="gpt-4o-mini",
        choices=[{"message": {"role": "assistant", "content": "x"}}],
        usage={"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
    )
    cost = calls.price(litellm, "openai/gpt-4o-mini", resp, None)
    want = litellm.completion_cost(completion_response=resp, model="openai/gpt-4o-mini")
    assert cost is not None and cost > 0 and cost == pytest.approx(want)
    # served on this machine, a reference agent, or a model litellm has no price for: none
    assert calls.price(litellm, "openai/gpt-4o-mini", resp, "http://127.0.0.1:8080/v1") is None
    assert calls.price(litellm, "layerlab/extractive", resp, None) is None
    unknown = litellm.ModelResponse(
        model="no-such-model-xyz",
        choices=[{"message": {"role": "assistant", "content": "x"}}],
        usage={"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100},
    )
    assert calls.price(litellm, "openai/no-such-model-xyz", unknown, None) is None
    assert "openai/no-such-model-xyz" in calls._UNPRICED  # asked once, then known unpriced


def test_usage_is_summed_over_worker_processes_and_priced_calls_only() -> None:
    a, b, into = budget.Counters(), budget.Counters(), budget.Counters()
    a.add_call("m", 1.0, 10, 2, 0.5)
    b.add_call("m", 2.0, 20, 3, None)
    b.add_call("n", 0.5, 1, 1, None)
    budget.sum_counters(into, [a, b], latencies=True)
    assert into.by_model["m"] == {
        "calls": 2,
        "latency_s": 3.0,
        "prompt_tokens": 30,
        "completion_tokens": 5,
        "cost_usd": 0.5,
        "priced_calls": 1,
    }
    s = runmanifest.calls_summary(into, None, {"n": 12.5})
    assert s["usage"]["m"]["cost_usd"] == 0.5 and s["usage"]["n"]["cost_usd"] is None
    assert s["usage"]["n"]["server_cpu_s"] == 12.5
    again = runmanifest.calls_summary(budget.Counters(), {"calls": s}, {"n": 2.0})
    assert again["usage"]["m"] == s["usage"]["m"] and again["usage"]["n"]["server_cpu_s"] == 14.5
    summary = results.usage_summary({"calls": again})
    assert summary["n"]["compute"] == results.COMPUTE_CPU and summary["n"]["compute_s"] == 14.5
    assert summary["m"]["cost_usd"] == 0.5 and summary["m"]["cost"] == results.COST_BASIS


BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"


def test_cpu_seconds_of_a_server_process(tmp_path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    try:

        class S:  # the part of a LocalServer cpu_seconds reads
            process = proc

        import time

        deadline = time.monotonic() + 10
        cpu = models_mod.cpu_seconds([S()])  # type: ignore[list-item]
        while (cpu or 0) < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
            cpu = models_mod.cpu_seconds([S()])  # type: ignore[list-item]
        assert cpu is not None and cpu >= 0.2
    finally:
        proc.kill()
        proc.wait()
    assert models_mod.cpu_seconds([S()]) is None  # type: ignore[list-item]  # gone: unmeasurable

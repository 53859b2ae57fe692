"""Transport faults on model calls (``run live -m``): each attempt meets its fault before the
provider is reached; a 429 is retried after its Retry-After, an expired credential is a
provider error of the record, not of the run; reruns are byte-identical
(layerlab/harness/live/calls.py, layerlab/faults/transport.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from layerlab.archive import read_records
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.models.llm import ProviderSettings

sys.path.insert(0, str(Path(__file__).parents[2]))
from fake_openai import FakeOpenAI  # noqa: E402

FAKE_KEY = "sk-test-" + "k3y" * 10
SPEC = """seed: 7
scenarios:
  - name: clean
    layer: none
    injected: nothing
    expected_behaviour: answer
    answerable: true
  - name: model_limited
    layer: transport
    injected: 429 twice on the model call
    expected_behaviour: wait and retry
    answerable: true
    faults:
      - op: rate_limit
        params: {retry_after_s: 0.2, channel: model}
        lasts: 2
  - name: model_auth
    layer: transport
    injected: the model's credential expired
    expected_behaviour: fail the record
    answerable: true
    faults:
      - op: auth_expiry
        params: {channel: model}
"""


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "scenarios.yaml"
    p.write_text(SPEC)
    return p


def _run(corpus, key, spec: Path, base: str, out: Path) -> live.LiveResult:
    scen = load_scenarios(spec)
    cfg = live.LiveConfig(models=("openai/good",), scenarios=tuple(scen), mitigations=("strict",),
                          task_ids=tuple(t.task_id for t in corpus.tasks[:2]),
                          settings=ProviderSettings(timeout_s=5.0, backoff_s=0.01,
                                                    api_bases=(base,)))  # fmt: skip
    return live.run_live(corpus, key, scen, cfg, out, scenario_hash=spec_hash(spec),
                         cache_dir=out.parent / f"{out.name}-cache", concurrency=1)  # fmt: skip


def test_model_calls_meet_their_transport_faults(corpus, key, spec, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with FakeOpenAI() as srv:
        t0 = time.monotonic()
        res = _run(corpus, key, spec, srv.base, tmp_path / "a")
        took = time.monotonic() - t0
        reached = srv.requests
        again = [_run(corpus, key, spec, srv.base, tmp_path / f"r{i}") for i in (1, 2)]
    assert res.complete and all(r.complete for r in again)
    recs = {(r.scenario, r.task_id): r for r in read_records(tmp_path / "a" / "records.parquet")}
    for task in (t.task_id for t in corpus.tasks[:2]):
        clean, limited = recs[("clean", task)], recs[("model_limited", task)]
        # the 429s were retried after Retry-After, the third attempt reached the model
        assert (limited.success, limited.diagnostic) == (clean.success, clean.diagnostic)
        assert limited.prompt_hash == clean.prompt_hash
        # an expired credential: the record's provider error (not a setup error of the run)
        assert recs[("model_auth", task)].diagnostic == "provider_error"
    # faulted attempts never reached the provider: one request per answered record (the
    # preflight's reply is the first clean record's)
    assert reached == 2 * 2
    assert res.counters.retries == 2 * 2  # two 429s per model_limited record
    # Retry-After honoured: each model_limited record waits 0.2 s twice, one wait after the other
    # (records may run side by side, so only one record's waits bound the run; backoff alone: 0.03 s)
    assert took >= 2 * 0.2
    blobs = {(tmp_path / d / "records.parquet").read_bytes() for d in ("a", "r1", "r2")}
    assert len(blobs) == 1  # three runs, byte-identical records

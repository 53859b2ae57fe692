"""Transport faults: typed events decided from the seed, the task and the call's number; the
error payload the harness sees; the exceptions an in-process caller gets; the bounded clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerlab import paths
from layerlab.archive.io import write_records
from layerlab.corpus import build as corpus_mod
from layerlab.corpus.spec import SpecError
from layerlab.faults import transport as tr
from layerlab.faults.operators import OPERATORS, ToolContext
from layerlab.faults.scenario import known_scenarios, load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.mitigations import contract_mode

TRANSPORT = ["slow_tool", "rate_limited", "server_error", "connection_reset", "stalled_call",
             "truncated_body", "auth_expired", "service_outage", "model_rate_limited"]  # fmt: skip
TOOL_FAILING = TRANSPORT[1:8]  # the scenarios whose tool calls fail (the last: model calls only)


def _ev(name: str, attempt: int, task: str = "t-1") -> tr.TransportEvent | None:
    s = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)[name]
    return s.transport_event(ToolContext(task, "p", "s", attempt))


def test_the_transport_spec_is_apart_from_the_paper_nine() -> None:
    scen = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)
    assert list(scen) == TRANSPORT
    assert {s.spec.layer for s in scen.values()} == {"transport", "latency", "model_transport"}
    assert all(op.stage == "transport" for s in scen.values() for op in s.operators)
    assert not set(TRANSPORT) & set(load_scenarios())  # the nine are untouched
    assert set(TRANSPORT) <= set(known_scenarios())
    assert {"latency", "rate_limit", "server_error", "connection_reset", "stall",
            "truncated_body", "auth_expiry"} <= set(OPERATORS)  # fmt: skip


def test_each_scenario_gives_its_typed_event_on_the_calls_it_lasts() -> None:
    e = _ev("rate_limited", 0)
    assert (e.kind, e.status, e.retry_after, e.fails) == ("rate_limited", 429, 1.5, True)
    assert _ev("rate_limited", 1) == e and _ev("rate_limited", 2) is None  # lasts: 2
    assert (_ev("server_error", 0).status, _ev("server_error", 1)) == (503, None)
    assert _ev("connection_reset", 0).kind == "connection_reset"
    assert (_ev("stalled_call", 0).kind, _ev("stalled_call", 0).delay_s) == ("stall", 30.0)
    cut = _ev("truncated_body", 0)
    assert cut.status == 200 and 0.2 <= cut.keep < 0.8
    assert all(_ev("auth_expired", a).status == 401 for a in range(4))  # persistent
    assert all(_ev("service_outage", a).kind == "server_error" for a in range(4))
    assert _ev("model_rate_limited", 0) is None  # channel: model — the tool calls pass
    s = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)["model_rate_limited"]
    model = [s.transport_event(ToolContext("t-1", "p", "s", a), "model") for a in range(3)]
    assert [e and e.kind for e in model] == ["rate_limited", "rate_limited", None]
    # both channels of one fault: the same struck tasks, draws of their own
    slow = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)["slow_tool"]
    assert slow.transport_event(ToolContext("t-1", "p", "s", 0), "model") != _ev("slow_tool", 0)
    slow = [_ev("slow_tool", a) for a in range(6)]
    assert all(not e.fails and 0.2 <= e.delay_s < 0.5 for e in slow)
    assert len({e.delay_s for e in slow}) > 1  # jittered per call
    assert [_ev("slow_tool", a) for a in range(6)] == slow  # and seeded: the same on a reload


def test_a_failed_call_is_an_error_only_payload_the_contract_finds_unavailable() -> None:
    s = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)["rate_limited"]
    sent = {"schema": "x", "results": []}
    got = s.transport(sent, ToolContext("t-1", "p", "s", 0))
    assert got == {"error": {"code": "rate_limited", "retry_after": 1.5,
                             "message": "HTTP 429 Too Many Requests; retry after 1.5s"}}  # fmt: skip
    assert contract_mode("strict").check(got).outcome == "unavailable"
    assert contract_mode("repair").check(got).outcome == "unavailable"
    assert s.transport(sent, ToolContext("t-1", "p", "s", 2)) is sent  # over: untouched
    slow = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)["slow_tool"]
    assert slow.transport(sent, ToolContext("t-1", "p", "s", 0)) is sent  # latency: same reply


def test_intensity_strikes_a_nested_share_of_tasks_and_rate_a_share_of_calls(
    corpus: corpus_mod.Corpus,
) -> None:
    s = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)["service_outage"]
    ids = [t.task_id for t in corpus.tasks]
    struck = [{t for t in ids if s.at(d).transport_event(ToolContext(t, "p", "s", 0))}
              for d in (0.0, 0.25, 0.5, 1.0)]  # fmt: skip
    assert struck[0] == set() and struck[-1] == set(ids)
    assert all(a <= b for a, b in zip(struck, struck[1:], strict=False))
    assert 0.15 < len(struck[1]) / len(ids) < 0.35


def test_rate_strikes_a_seeded_share_of_calls(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("seed: 3\nscenarios:\n  - name: flaky\n    layer: transport\n    injected: x\n"
                 "    expected_behaviour: y\n    answerable: true\n    faults:\n"
                 "      - op: server_error\n        params: {rate: 0.3}\n")  # fmt: skip
    s = load_scenarios(p)["flaky"]
    hits = [s.transport_event(ToolContext(f"t{i}", "p", "s", a)) is not None
            for i in range(100) for a in range(4)]  # fmt: skip
    assert 0.22 < sum(hits) / len(hits) < 0.38
    again = [s.transport_event(ToolContext(f"t{i}", "p", "s", a)) is not None
             for i in range(100) for a in range(4)]  # fmt: skip
    assert again == hits


def test_bad_transport_parameters_are_one_line_each(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("seed: 3\nscenarios:\n  - name: x\n    layer: transport\n    injected: x\n"
                 "    expected_behaviour: y\n    answerable: true\n    faults:\n"
                 "      - op: server_error\n        params: {status: 404}\n"
                 "      - op: stale\n")  # fmt: skip
    with pytest.raises(SpecError) as info:
        load_scenarios(p)
    text = "\n".join(map(str, info.value.problems))
    assert "status" in text and "500" in text and "unknown fault operator 'stale'" in text


def test_latencies_add_up_before_the_first_failure() -> None:
    a = tr.TransportEvent("latency", delay_s=0.5)
    b = tr.TransportEvent("server_error", 502)
    assert tr.merge([a, a]) == tr.TransportEvent("latency", delay_s=1.0)
    assert tr.merge([a, b, a]) == tr.TransportEvent("server_error", 502, delay_s=0.5)
    assert tr.merge([]) is None


def test_each_failure_has_its_exception_under_the_natural_builtin() -> None:
    pairs = {"rate_limited": ConnectionError, "server_error": ConnectionError,
             "connection_reset": ConnectionResetError, "stall": TimeoutError,
             "truncated_body": ConnectionError, "auth_expired": PermissionError}  # fmt: skip
    for kind, builtin in pairs.items():
        ev = tr.TransportEvent(kind, 429 if kind == "rate_limited" else None, 2.0)  # type: ignore[arg-type]
        exc = tr.exception_for(ev)
        assert isinstance(exc, builtin) and isinstance(exc, tr.TransportError)
        assert exc.event is ev and str(exc) == ev.message()
    assert tr.exception_for(tr.TransportEvent("rate_limited", 429, 2.0)).retry_after == 2.0
    with pytest.raises(ValueError, match="not a failure"):
        tr.exception_for(tr.TransportEvent("latency", delay_s=1.0))


def test_the_clock_bounds_every_sleep_and_counts_it() -> None:
    asked: list[float] = []
    clock = tr.Clock(sleep=asked.append, max_delay_s=0.05)
    assert clock.wait(30.0) == 0.05 and clock.wait(0.01) == 0.01 and clock.wait(-1) == 0.0
    assert asked == [0.05, 0.01] and clock.slept == pytest.approx(0.06)


def test_the_reference_reader_meets_the_faults_and_reruns_are_byte_identical(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey, tmp_path: Path
) -> None:
    scen = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)
    runs = []
    for i in range(3):
        write_records(tmp_path / f"{i}.parquet",
                      harness.run_deterministic(corpus, key, scen, ["strict"]))  # fmt: skip
        runs.append((tmp_path / f"{i}.parquet").read_bytes())
    assert runs[0] == runs[1] == runs[2]
    recs = harness.run_deterministic(corpus, key, scen, ["strict"])
    by = {n: [r for r in recs if r.scenario == n] for n in TRANSPORT}
    clean = [r for r in harness.run_deterministic(corpus, key, load_scenarios(), ["strict"])
             if r.scenario == "clean"]  # fmt: skip
    # a slow call is the clean call, and so is a model-only fault here (no model is called)
    assert [r.success for r in by["slow_tool"]] == [r.success for r in clean]
    assert [r.success for r in by["model_rate_limited"]] == [r.success for r in clean]
    for n in TOOL_FAILING:  # every failed first call: no reader, the availability diagnosis
        assert not any(r.reached_reader for r in by[n]) and not any(r.success for r in by[n])
        assert {r.diagnostic for r in by[n]} == {"availability"}
    # and no structured non-answer either: the baseline has no mitigation to give one
    assert not any(r.safe_resolution for n in ("auth_expired", "service_outage") for r in by[n])

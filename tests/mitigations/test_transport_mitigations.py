"""The transport layer's mitigations — a bounded retry honouring Retry-After and a circuit
breaker (layerlab/mitigations/builtin.py, data/specs/mitigations_transport.yaml) — and their rows
of the specificity matrix, computed by Table 10's own code over the paper's nine scenarios and
the transport ones (layerlab/analysis/specificity.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerlab import paths
from layerlab.analysis import compare
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic
from layerlab.harness.prepare import prepare
from layerlab.harness.step import admit
from layerlab.mitigations import Call, load_mitigations
from layerlab.system.contract import ContractResult

TRANSPORT_FAILING = {"rate_limited", "server_error", "connection_reset", "stalled_call",
                     "truncated_body", "auth_expired", "service_outage"}  # fmt: skip


def _failed(code: str, retry_after: float | None = None) -> ContractResult:
    return ContractResult("unavailable", False, None, (), ("tool returned only an error",),
                          code, retry_after)  # fmt: skip


def _call(attempt: int) -> Call:
    return Call("t-1", "q", "s", attempt, "tfidf", {})


@pytest.fixture(scope="module")
def spec() -> object:
    return load_mitigations(paths.TRANSPORT_MITIGATION_SPEC)


def test_the_retry_backs_off_honours_retry_after_and_is_bounded(spec) -> None:
    m = spec.arm("transport_retry").at("tool")[0]
    first = m.on_tool(_failed("server_error"), _call(0))
    later = m.on_tool(_failed("server_error"), _call(2))
    assert first.action == later.action == "retry" and 0.25 <= first.delay_s <= 0.5
    assert 1.0 <= later.delay_s <= 2.0  # exponential: 0.5 s x 2^2, equal jitter
    assert m.on_tool(_failed("rate_limited", 1.5), _call(0)).delay_s == 1.5  # Retry-After
    assert m.on_tool(_failed("rate_limited", 999.0), _call(0)).delay_s == 30.0  # capped
    assert m.on_tool(_failed("server_error"), _call(3)).action == "refuse"  # max_retries: 3
    refused = m.on_tool(_failed("auth_expired"), _call(0))
    assert refused.action == "refuse" and "cannot recover" in refused.reason
    # not the wire's: a missing output, a retriever's error, a denial, an accepted payload
    for other in (_failed(""), _failed("retriever_error"), ContractResult("denied", True, None)):
        assert m.on_tool(other, _call(0)).action == "pass"


def test_the_breaker_retries_while_closed_probes_once_then_fails_fast(spec) -> None:
    m = spec.arm("circuit_breaker").at("tool")[0]
    acts = [m.on_tool(_failed("rate_limited", 1.5), _call(a)) for a in range(3)]
    assert [(a.action, a.delay_s) for a in acts] == [("retry", 0.0), ("retry", 30.0),
                                                     ("refuse", 0.0)]  # fmt: skip
    assert "circuit open" in acts[2].reason
    assert m.on_tool(_failed(""), _call(0)).action == "pass"


def test_each_arm_through_the_harness_on_each_fault(corpus, spec) -> None:
    scen = load_scenarios(paths.TRANSPORT_SCENARIO_SPEC)
    task = corpus.tasks[0]
    got = {}
    for name in ("rate_limited", "connection_reset", "auth_expired", "service_outage"):
        prep = prepare(corpus, scen[name])
        for arm in ("strict", "transport_retry", "circuit_breaker"):
            g = admit(task, prep, spec.arm(arm))
            got[(name, arm)] = (g.inp is not None, g.refusal is not None, g.attempts, g.waited_s)
    assert got[("rate_limited", "strict")][:3] == (False, False, 1)  # no reader, no refusal
    assert got[("rate_limited", "transport_retry")][:3] == (True, False, 3)
    assert got[("rate_limited", "transport_retry")][3] >= 2 * 1.5  # waited Retry-After twice
    assert got[("rate_limited", "circuit_breaker")] == (True, False, 3, 30.0)  # the probe
    assert got[("connection_reset", "transport_retry")][:3] == (True, False, 2)
    assert got[("auth_expired", "transport_retry")][:3] == (False, True, 1)  # refused at once
    assert got[("service_outage", "transport_retry")][:3] == (False, True, 4)
    assert got[("service_outage", "circuit_breaker")][:3] == (False, True, 3)  # fails fast


def test_the_transport_matrix_by_table10s_code(tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    deterministic.run_mitigation_archive(
        out, mitigations_path=paths.TRANSPORT_MITIGATION_SPEC,
        scenario_paths=(paths.SCENARIO_SPEC, paths.TRANSPORT_SCENARIO_SPEC),
    )  # fmt: skip
    ((mx, df),) = compare.matrix_blocks(out, n_boot=200, chances=False).values()
    rows = mx.summary.set_index("mitigation")
    cells = mx.cells.set_index(["mitigation", "scenario"])
    for arm in ("transport_retry", "circuit_breaker"):
        assert rows.loc[arm, "verdict"] == "specific", rows.loc[arm].to_dict()
        on = cells.loc[arm]
        assert set(on.index[on["target"]]) == TRANSPORT_FAILING
        # the paper's nine, the slow call and the model-only fault: no change at all
        assert on.loc[~on["target"], "exactly_zero"].all()
        assert (on.loc[on["target"], "estimate"] > 0.9).all()
    # the generic retry also recovers transient transport faults: off target, flagged
    assert rows.loc["availability_retry", "verdict"].startswith("over-broad")
    assert rows.loc["always_abstain", "verdict"].startswith("over-broad")
    assert set(df["scenario"]) >= set(load_scenarios()) | TRANSPORT_FAILING


def test_mitigation_run_refuses_a_scenario_given_twice(tmp_path: Path, capsys) -> None:
    from layerlab.cli import main

    code = main(["mitigation", "run", "--out", str(tmp_path / "m"), "--spec",
                 str(paths.TRANSPORT_MITIGATION_SPEC), "--scenarios", str(paths.SCENARIO_SPEC),
                 "--scenarios", str(paths.SCENARIO_SPEC)])  # fmt: skip
    err = capsys.readouterr().err
    assert code != 0 and "already in an earlier file" in err and "clean" in err
    assert not (tmp_path / "m" / "records.parquet").exists()

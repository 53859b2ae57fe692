"""The gate's text comes from the format room: :mod:`layerlab.analysis.gate` returns typed checks
(numbers and a reason code, no line), :mod:`layerlab.reporting.format.gatetext` words them — the
exact lines ``layerlab gate`` prints and the pytest plugin shows (tests/analysis/test_gate.py
checks them end to end on the committed archives)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from layerlab import paths
from layerlab.analysis import gate
from layerlab.analysis.gate import Check, Outcome, RateJudged, VerdictJudged
from layerlab.reporting.format import gatetext

UNIT = "local/m"
T_MIN = gate.parse_threshold("S:clean=0.7", "min")
T_MAX = gate.parse_threshold("GF@repair=10%", "max")


def _rate(t: gate.Threshold, passed: bool, value: float, compared: str = "rate") -> Check:
    scen = None if t.scenario is None else t.scenario
    judged = RateJudged(t, scen, t.arm or "strict", UNIT, 52, 80, 0.65, (0.535, 0.753),
                        compared=compared, value=value)  # type: ignore[arg-type]  # fmt: skip
    return Check("threshold", passed, "within" if passed else "beyond", judged)


def _verdict(verdict: str, reason: str, passed: bool, why: gate.Reason, **kw: object) -> Check:
    fields = dict(mitigation="repair", block="targets", verdict=verdict, reason=reason,
                  flag="--specific repair", asked="specific", delta=0.1, delta_set=False,
                  chance=0.0, sims=200, floor=25, tasks=16, run="runs/x")  # fmt: skip
    fields.update(kw)
    return Check("verdict", passed, why, VerdictJudged(**fields))  # type: ignore[arg-type]


def test_the_analysis_result_carries_numbers_and_a_reason_code_never_a_line() -> None:
    for cls in (Check, RateJudged, VerdictJudged, Outcome):
        names = {f.name for f in dataclasses.fields(cls)}
        assert not names & {"line", "lines", "text", "notes"}, cls
    outcome = gate.evaluate(paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b", [T_MIN])
    check = outcome.checks[0]
    assert not hasattr(check, "line") and not hasattr(outcome, "summary")
    assert (check.kind, check.passed, check.reason) == ("threshold", False, "beyond")
    j = check.judged
    assert isinstance(j, RateJudged) and (j.scenario, j.arm, j.k, j.n) == ("clean", "strict", 52, 80)
    assert j.value == j.rate == pytest.approx(0.65) and j.ci is not None and j.ci[0] < 0.65 < j.ci[1]
    assert gatetext.line(check) == (
        "FAIL S clean strict local/qwen2.5-coder-1.5b: 0.650 < 0.700 "
        "(52 of 80 records; --min S:clean=0.7)"
    )


def test_threshold_lines() -> None:
    assert gatetext.line(_rate(T_MIN, True, 0.7)) == (
        "PASS S clean strict local/m: 0.700 >= 0.700 (52 of 80 records; --min S:clean=0.7)"
    )
    assert gatetext.line(_rate(T_MAX, False, 0.753, "ci_high")) == (
        "FAIL GF all repair local/m: 95% high 0.753 > 0.100 "
        "(rate 0.650, 52 of 80 records; --max GF@repair=10%)"
    )
    missing = RateJudged(T_MIN, "clean", "strict", UNIT, 0, 80, None, None, not_recorded=30)
    assert gatetext.line(Check("threshold", False, "not_recorded", missing)) == (
        "FAIL S clean strict local/m: not recorded for 30 of 80 records (--min S:clean=0.7)"
    )


def test_verdict_lines_say_why_what_this_size_decides_and_how_to_size_a_run() -> None:
    line = gatetext.line(_verdict("inconclusive", "not shown within ±10 pp", False, "inconclusive"))
    assert line == (
        "FAIL verdict repair [targets]: inconclusive — not shown within ±10 pp; inconclusive is "
        "not a pass (--specific repair; δ = 10 pp (roles.yaml); P(specific) at this size 0.00 "
        "if nothing changes off target (200 simulated runs); specific needs >= 25 tasks with "
        "unchanged off-target outcomes; `layerlab plan runs/x --specific repair` sizes a run "
        "that decides)"
    )
    ok = _verdict("specific", "", True, "as_asked", chance=0.91, tasks=40, delta=0.5,
                  delta_set=True)  # fmt: skip
    assert gatetext.line(ok) == (
        "PASS verdict repair [targets]: specific (--specific repair; δ = 50 pp; P(specific) at "
        "this size 0.91 if nothing changes off target (200 simulated runs))"
    )
    # not simulated: no chance stated, no plan command (nothing says it is unlikely)
    bare = _verdict("over-broad (harm)", "band excludes 0", False, "not_as_asked", chance=math.nan)
    assert gatetext.line(bare) == (
        "FAIL verdict repair [targets]: over-broad (harm) — band excludes 0 (--specific repair; "
        "δ = 10 pp (roles.yaml))"
    )


def test_power_lines_summary_and_margin_note() -> None:
    power = _verdict("ineffective", "", False, "short", flag="--min-power 0.8", min_power=0.8,
                     asked="conclusive", chance=0.25)  # fmt: skip
    power = dataclasses.replace(power, kind="power")
    assert gatetext.line(power) == (
        "FAIL power repair [targets]: P(conclusive) at this size 0.25 < 0.80 (200 runs simulated "
        "from its own per-task rates, nothing changed off target; --min-power 0.8)"
    )
    unsim = dataclasses.replace(power, reason="not_simulated",
                                judged=dataclasses.replace(power.judged, chance=math.nan))  # fmt: skip
    assert "P(conclusive) at this size not simulated < 0.80" in gatetext.line(unsim)
    out = Outcome("runs/x", [_rate(T_MIN, True, 0.7), _rate(T_MAX, False, 0.2), power],
                  margin_override=(0.2, 0.1))  # fmt: skip
    assert outcome_lines(out) == [
        "note: verdicts at δ = 20 pp set by --delta, not the specs' δ = 10 pp "
        "(data/specs/roles.yaml equivalence_margin): an off-target change up to that size "
        "counts as none; state it with the result",
        gatetext.line(out.checks[1]),
        gatetext.line(power),
        "gate FAILED on runs/x: 2 of 3 checks failed (thresholds: 1 of 2 failed; powers: 1 of 1 "
        "failed)",
    ]
    passed = Outcome("runs/x", [_rate(T_MIN, True, 0.7)], left_out=("always_abstain",))
    assert gatetext.report(passed, verbose=True) == [
        gatetext.line(passed.checks[0]),
        "gate passed on runs/x: all 1 checks passed (1 threshold); --no-over-broad left out "
        "always_abstain: layerlab's deliberately over-broad controls, in a run of every arm "
        "(roles.yaml over_broad_controls)",
    ]


def outcome_lines(outcome: Outcome) -> list[str]:
    return list(gatetext.report(outcome))

"""The reliability surface (layerlab.analysis.surface): each layer's S, safe resolution and pass^k
over the fault's intensity λ from a swept run's records, and the largest λ the estimates hold and
the lower bounds decide a threshold to; on hand-made records with known counts and on a real
small sweep of the live harness."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from layerlab.analysis import surface
from layerlab.analysis.records import records_frame
from layerlab.analysis.results import rate
from layerlab.cli import main

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai import FakeOpenAI  # noqa: E402


def _records(cells: dict[str, list[list[int]]], unit: str = "layerlab/extractive") -> pd.DataFrame:
    """One record per scenario, task and epoch: ``cells[scenario][task][epoch]`` its outcome
    (success and safe resolution alike)."""
    provider, model = unit.split("/")
    rows = [
        {"provider": provider, "model": model, "mitigation": "strict", "scenario": scen,
         "task_id": f"t{t:02d}", "policy_id": f"p{t:02d}", "replicate": e,
         "success": bool(y), "safe_resolution": bool(y), "diagnostic": "ok"}
        for scen, tasks in cells.items() for t, epochs in enumerate(tasks)
        for e, y in enumerate(epochs)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _share(n: int, k: int, epochs: int = 1) -> list[list[int]]:
    return [[1] * epochs if t < k else [0] * epochs for t in range(n)]


def test_a_run_without_a_sweep_is_refused_in_one_line() -> None:
    df = _records({"clean": _share(4, 4), "stale_index": _share(4, 0)})
    with pytest.raises(surface.SurfaceError, match=r"--intensity"):
        surface.surface(df)


def test_each_layer_is_a_curve_over_intensity_with_the_run_s_own_intervals() -> None:
    df = _records({"clean": _share(40, 38), "stale_index@0": _share(40, 38),
                   "stale_index@0.25": _share(40, 30), "stale_index": _share(40, 2)})  # fmt: skip
    clean, stale = surface.surface(df)
    assert (clean.scenario, [p.intensity for p in clean.points]) == ("clean", [0.0])
    assert (stale.scenario, stale.layer) == ("stale_index", "freshness")
    assert [p.intensity for p in stale.points] == [0.0, 0.25, 1.0]
    assert [p.scenario for p in stale.points] == [
        "stale_index@0",
        "stale_index@0.25",
        "stale_index",
    ]
    p = stale.at(0.25)
    assert p is not None and (p.records, p.tasks, p.epochs) == (40, 40, 1)
    expected = rate(df[df["scenario"] == "stale_index@0.25"], "safe_resolution")
    got = p.rates["safe"]
    assert (got.k, got.n, got.rate, got.ci_low, got.ci_high) == (
        30, 40, expected["rate"], expected["ci_low"], expected["ci_high"])  # fmt: skip
    assert got.ci_low < 0.75 < got.ci_high
    assert p.pass_hat["safe"] == {1: 0.75}  # one epoch: pass^1 = S, no higher k


def test_pass_hat_k_counts_the_tasks_that_succeed_in_every_drawn_epoch() -> None:
    # 4 epochs: task 0 always, task 1 in 3 of 4, the rest never
    tasks = [[1, 1, 1, 1], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    df = _records({"clean": tasks, "stale_index@0.5": tasks, "stale_index": tasks})
    p = surface.surface(df)[1].at(0.5)
    assert p is not None and p.epochs == 4
    # pass^1 = (1 + 3/4)/4, pass^2 = (1 + C(3,2)/C(4,2))/4, pass^4 = 1/4; 8 > epochs: not drawn
    assert p.pass_hat["S"] == pytest.approx({1: 1.75 / 4, 2: 1.5 / 4, 4: 0.25})


def test_tolerance_separates_what_the_estimates_hold_from_what_the_bounds_decide() -> None:
    big = _records({"clean": _share(400, 400), "stale_index@0": _share(400, 400),
                    "stale_index@0.1": _share(400, 396), "stale_index@0.25": _share(400, 372),
                    "stale_index@0.5": _share(400, 300), "stale_index": _share(400, 0)})  # fmt: skip
    t = surface.tolerance(surface.surface(big)[1], 0.9)
    assert (t.holds_to, t.decided_to, t.falls_at, t.falls_decided) == (0.25, 0.25, 0.5, True)
    assert t.verdict == "tolerates" and t.error == 0.025
    # the same shares on 40 tasks: the estimates hold to 0.25, the bounds decide nothing above 0
    small = _records({"stale_index@0": _share(40, 40), "stale_index@0.1": _share(40, 39),
                      "stale_index@0.25": _share(40, 37), "stale_index": _share(40, 0)})  # fmt: skip
    t = surface.tolerance(surface.surface(small)[0], 0.9)
    assert (t.holds_to, t.verdict, t.falls_at, t.falls_decided) == (0.25, "inconclusive", 1.0, True)
    assert t.decided_to is not None and t.decided_to < 0.25
    # a perfect share is never decided at 1.0 (40 of 40's lower bound is 0.91)
    t = surface.tolerance(surface.surface(small)[0], 1.0)
    assert (t.holds_to, t.decided_to, t.verdict, t.falls_at) == (0.0, None, "inconclusive", 0.1)
    # below the threshold at the smallest λ: nothing tolerated
    low = _records({"stale_index@0": _share(40, 30), "stale_index": _share(40, 0)})
    t = surface.tolerance(surface.surface(low)[0], 0.9, metric="S")
    assert (t.holds_to, t.decided_to, t.falls_at, t.verdict) == (None, None, 0.0, "below")
    with pytest.raises(surface.SurfaceError, match="metric 'GF'"):
        surface.tolerance(surface.surface(low)[0], 0.9, metric="GF")


TASKS = "finance-01-q1,it_ops-01-q2,pto-01-q1,hr-01-q1,returns-02-q1,legal-03-q2"


def _sweep(tmp: Path, *flags: str) -> list[str]:
    return ["run", "live", "--tasks", TASKS, "--scenario", "clean", "--scenario", "stale_index",
            "--scenario", "missing_tool_output", "--intensity", "0,0.5,1", "--mitigation",
            "strict", "--out", str(tmp / "run"), "--cache-dir", str(tmp / "cache"),
            "--no-progress", *flags]  # fmt: skip


def test_a_reference_agent_s_sweep_draws_its_surface(tmp_path, capsys) -> None:
    assert main(_sweep(tmp_path, "-m", "layerlab/extractive")) == 0, capsys.readouterr().err
    df = records_frame(tmp_path / "run")
    curves = surface.surface(df)
    assert [(c.scenario, [p.intensity for p in c.points]) for c in curves] == [
        ("clean", [0.0]), ("missing_tool_output", [0.0, 0.5, 1.0]),
        ("stale_index", [0.0, 0.5, 1.0])]  # fmt: skip
    for c in curves:
        for p in c.points:
            sub = df[df["scenario"] == p.scenario]
            assert p.records == len(sub) == 6
            assert p.rates["safe"].k == int(sub["safe_resolution"].sum())
    # at λ = 0 no task is struck: the layer starts where the clean scenario is
    clean = curves[0].points[0].rates["safe"]
    assert all(c.points[0].rates["safe"].k == clean.k for c in curves[1:])
    # the extractive agent answers from stale evidence: freshness falls by λ = 1
    assert curves[2].points[-1].rates["safe"].k < clean.k


def test_a_sampled_model_s_sweep_has_pass_hat_k_at_each_intensity(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "k3y" * 10)
    with FakeOpenAI() as srv:
        flags = ("-m", "openai/coin", "--api-base", srv.base, "--temperature", "0.7", "--seed",
                 "5", "--epochs", "4")  # fmt: skip
        assert main(_sweep(tmp_path, *flags)) == 0, capsys.readouterr().err
    curves = surface.surface(records_frame(tmp_path / "run"))
    gaps = []
    for c in curves:
        for p in c.points:
            assert p.epochs == 4 and set(p.pass_hat["S"]) == {1, 2, 4}
            hat = [p.pass_hat["S"][k] for k in (1, 2, 4)]
            assert hat == sorted(hat, reverse=True)  # all of k tries: never easier as k grows
            assert hat[0] == pytest.approx(p.rates["S"].k / p.records)
            gaps.append(hat[0] - hat[2])
    assert max(gaps) > 0  # the coin's epochs differ: pass^4 says what S does not


def test_load_reads_the_committed_surfaces_reference_first_or_the_runs_given(tmp_path) -> None:
    from layerlab import paths

    committed = surface.load()
    assert list(committed)[0] == "reference"
    assert list(committed)[1:] == [p.name for p in paths.archives_in(paths.LOCAL_MODEL_SURFACE)]
    assert {c.unit for c in committed["reference"]} == {"layerlab/cautious", "layerlab/extractive"}
    given = surface.load([paths.REFERENCE_SURFACE])
    assert list(given) == ["reference"] and given["reference"] == committed["reference"]


def test_least_to_decide_is_the_tightest_bound_a_point_of_that_size_has() -> None:
    from layerlab.analysis.rates import clopper_pearson

    assert surface.least_to_decide(64, 0.9) == 63  # 62 of 64: lower bound 0.892
    assert clopper_pearson(62, 64)[0] < 0.9 <= clopper_pearson(63, 64)[0]
    assert surface.least_to_decide(16, 0.9) is None  # 16 of 16: 0.794 at most
    assert surface.least_to_decide(64, 0.0) == 0

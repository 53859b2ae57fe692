"""What a design can decide (:mod:`layerlab.analysis.planning`, ``layerlab plan``): the
probability of each verdict by simulation from a pilot's own per-task rates, through the rule
the tables use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from layerlab.analysis import planning, specificity
from layerlab.cli import main

SCEN = ("clean", "stale_index", "schema_drift", "wrong_session", "missing_tool_output")


def _pilot_frame(n_tasks: int, epochs: int = 1, off_rate: float | None = None,
                 seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """A guard that fixes stale_index (0 -> 1) and leaves every other scenario alone: per task
    a success rate (0/1 for a deterministic system, ``off_rate`` per epoch for a sampled one)."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        for s in SCEN:
            rate = float(rng.random() < 0.6) if off_rate is None else off_rate
            for arm in ("strict", "freshness_guard"):
                for e in range(epochs):
                    y = (arm == "freshness_guard") if s == "stale_index" else rng.random() < rate
                    rows.append({"provider": "target", "model": "mine", "scenario": s,
                                 "task_id": f"t-{t:03d}-q1", "policy_id": f"p{t:03d}",
                                 "mitigation": arm, "replicate": e,
                                 "safe_resolution": int(y)})  # fmt: skip
    return pd.DataFrame(rows)


def _prob(df: pd.DataFrame, n: int, epochs: int = 1, sims: int = 60) -> dict[str, float]:
    p = planning.pilot(df, "freshness_guard", "strict", "safe_resolution")
    off = [s for s in p.scenarios if s != "stale_index"]
    return planning.verdict_probability(p, ["stale_index"], off, n, epochs, sims=sims)


def test_a_deterministic_guard_is_specific_from_the_floor_of_tasks() -> None:
    df = _pilot_frame(16)
    p = planning.pilot(df, "freshness_guard", "strict", "safe_resolution")
    assert p.deterministic and p.epochs == 1 and len(p.tasks) == 16
    assert _prob(df, 16)["specific"] == 0.0  # below the floor of 25: never
    assert _prob(df, 25)["specific"] == 1.0  # at the floor: always (no off-target change)
    shares = _prob(df, 40)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_sampled_system_needs_epochs_and_the_plan_says_which() -> None:
    """Off-target arms re-drawn per epoch at 50%: one epoch at 80 tasks is rarely specific;
    three epochs at 240 tasks mostly are (the review measured 1.8% and 97%)."""
    df = _pilot_frame(40, epochs=4, off_rate=0.5, seed=1)
    p = planning.pilot(df, "freshness_guard", "strict", "safe_resolution")
    assert not p.deterministic and p.epochs == 4
    one = _prob(df, 80, 1, sims=40)["specific"]
    three = _prob(df, 240, 3, sims=40)["specific"]
    assert one <= 0.15 < 0.6 <= three, (one, three)
    off = [s for s in p.scenarios if s != "stale_index"]
    t = planning.plan(p, ["stale_index"], off, sizes=(80, 240), epochs=(1, 3), sims=30)
    assert list(t["records per arm"]) == sorted(t["records per arm"])
    assert set(t["epochs"]) == {1, 3} and not t.attrs["deterministic"]
    assert "from 240 tasks x 3 epoch(s)" in planning.advice(t, "freshness_guard")


def test_layerlab_plan_on_a_run_folder(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # user_targets
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:extractive", "--limit", "16",
            "--scenario", "clean", "--scenario", "stale_index", "--scenario", "schema_drift",
            "--mitigation", "strict", "--mitigation", "freshness_guard", "--out", str(out),
            "--no-progress", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    rc = main(["plan", str(out), "--specific", "freshness_guard", "--tasks", "16", "--tasks",
               "25", "--sims", "40"])  # fmt: skip
    said = capsys.readouterr()
    assert rc == 0, said.err
    assert "freshness_guard: P(specific) >= 0.8 from 25 tasks x 1 epoch(s)" in said.out
    assert "epochs above 1 left out" in said.out  # a deterministic pilot
    rc = main(["plan", str(out), "--specific", "nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "'nope': not a mitigation arm of " in err[0]


def test_the_verdict_probability_uses_the_tables_rule() -> None:
    """Same rule, same answer: an archive the pilot's size simulated from a deterministic pilot
    is the pilot's own tasks redrawn; specificity.matrix reports that probability per arm."""
    df = _pilot_frame(30)
    records = df.drop(columns="replicate")
    mx = planning.with_chances(specificity.matrix(records, n_boot=200), records, sims=20)
    r = mx.summary.set_index("mitigation").loc["freshness_guard"]
    assert r["verdict"] == specificity.SPECIFIC and r["p specific"] == 1.0 and r["sims"] == 20
    assert r["floor"] == 25 and r["tasks"] == 30

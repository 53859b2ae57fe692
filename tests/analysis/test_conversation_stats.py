"""A conversational run's statistics: S by turn, a conversation's success, pass^k over epochs,
the leak with exact intervals, the break."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layerlab.analysis.conversations import summarise
from layerlab.analysis.rates import clopper_pearson
from layerlab.archive import turnrecords


def _rec(cid: str, turn: int, epoch: int = 0, ok: bool = True, leak: bool = False,
         kind: str = "opening") -> turnrecords.TurnRecord:  # fmt: skip
    return turnrecords.TurnRecord(
        turnrecords.TURN_SCHEMA_VERSION, "layerlab", "layerlab/extractive", "foreign_memory",
        True, cid, cid[:-3], "finance", epoch, turn, kind, "answered", turn > 0, turn, 0, 1, 0,
        ok, ok, True, True, True, True, not ok, True, False, False, ok, leak,
        "ok" if ok else ("session_state" if leak else "reader"))  # fmt: skip


def test_turns_conversations_epochs_and_leaks() -> None:
    recs = [
        # c1: both epochs succeed on every turn
        *[_rec("a-01-c1", t, e) for t in range(3) for e in range(2)],
        # c2: epoch 0 fails at turn 2 (a leak), epoch 1 succeeds
        _rec("a-02-c1", 0), _rec("a-02-c1", 1), _rec("a-02-c1", 2, ok=False, leak=True,
                                                     kind="recall_first"),
        *[_rec("a-02-c1", t, 1) for t in range(3)],
    ]  # fmt: skip
    (cell,) = summarise(recs)["layerlab/extractive"].values()
    assert cell["turns"] == 12 and cell["conversations"] == 2 and cell["epochs"] == 2
    assert [t["S"] for t in cell["by_turn"]] == [1.0, 1.0, 0.75]
    assert cell["conversation_success"] == 0.75
    # pass^1: mean(1, 1/2) = 0.75; pass^2: mean(1, 0) = 0.5
    assert cell["pass_hat_k"] == {"1": 0.75, "2": 0.5}
    lo, hi = clopper_pearson(1, 12)
    assert cell["leak_turns"] == {"k": 1, "n": 12, "rate": round(1 / 12, 4),
                                  "interval": [round(lo, 4), round(hi, 4)]}  # fmt: skip
    assert cell["leak_conversations"]["k"] == 1 and cell["leak_conversations"]["n"] == 2
    assert cell["first_leak_turn"] == 2
    assert cell["break"] | {} == {"turn": 2, "S": 0.75, "S_turn0": 1.0, "failed": 1, "n": 4,
                                  "kind": "recall_first", "kind_failed": 1,
                                  "diagnostic": "session_state",
                                  "diagnostic_failed": 1}  # fmt: skip


def test_cells_per_system_and_scenario_in_the_order_met() -> None:
    a = [_rec("a-01-c1", 0)]
    b = [replace(r, scenario="conversation_clean") for r in a]
    c = [replace(r, model="target/mine", provider="target") for r in a]
    s = summarise(b + a + c)
    assert list(s) == ["layerlab/extractive", "target/mine"]
    assert list(s["layerlab/extractive"]) == ["conversation_clean", "foreign_memory"]
    assert s["target/mine"]["foreign_memory"]["leak_turns"]["interval"][0] == 0.0


def test_an_empty_run_has_no_cells() -> None:
    assert summarise([]) == {}
    with pytest.raises(TypeError):
        summarise(None)  # type: ignore[arg-type]


def test_turn_rates_give_exact_intervals_over_one_epoch_and_none_over_several() -> None:
    from layerlab.analysis.conversations import turn_rates

    one = [_rec("a-01-c1", 0), _rec("a-01-c1", 1, ok=False), _rec("a-02-c1", 0),
           _rec("a-02-c1", 1)]  # fmt: skip
    rates = turn_rates(one)
    assert [(r["turn"], r["k"], r["n"], r["S"]) for r in rates] == [(0, 2, 2, 1.0), (1, 1, 2, 0.5)]
    lo, hi = clopper_pearson(1, 2)
    assert rates[1]["interval"] == [round(lo, 4), round(hi, 4)]
    two = [*one, *(replace(r, epoch=1) for r in one)]
    assert all(r["interval"] is None for r in turn_rates(two))  # a conversation's epochs correlate


def test_load_reads_the_committed_archives_reference_first_or_the_runs_given(tmp_path) -> None:
    from layerlab import paths
    from layerlab.analysis.conversations import load
    from layerlab.harness.conversation import write_run

    committed = load()
    assert list(committed)[0] == "reference"
    assert list(committed)[1:] == [p.name for p in paths.conversation_archives()[1:]]
    recs = [_rec("a-01-c1", 0), _rec("a-01-c1", 1)]
    write_run(tmp_path / "mine", recs, {"systems": ["layerlab/extractive"]})
    assert load([tmp_path / "mine"]) == {"mine": sorted(recs, key=turnrecords.sort_key)}

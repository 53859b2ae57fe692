"""The session mitigations' specificity matrix: conversations paired across arms, the
single-turn matrix's verdicts, one matrix per system."""

from __future__ import annotations

import pytest

from layerlab.analysis.convmatrix import conversation_frame, matrices
from layerlab.analysis.specificity import SPECIFIC, matrix
from layerlab.archive import turnrecords
from layerlab.mitigations.session import load_session_mitigations

N = 40  # conversations: above the 25 an unchanged off-target cell needs at δ = 10 pp


def _rec(cid: str, turn: int, scenario: str, arm: str, ok: bool = True, safe: bool | None = None,
         model: str = "layerlab/extractive") -> turnrecords.TurnRecord:  # fmt: skip
    safe = ok if safe is None else safe
    return turnrecords.TurnRecord(
        turnrecords.TURN_SCHEMA_VERSION, "layerlab", model, scenario, True, cid, cid[:-3],
        "finance", 0, turn, "opening", "answered", False, turn, 0, 1, 0,
        ok, ok, True, True, True, True, False, True, False, False, safe, False,
        "ok" if ok else "freshness", arm)  # fmt: skip


def _run(gain: bool = True, model: str = "layerlab/extractive") -> list[turnrecords.TurnRecord]:
    recs = []
    for i in range(N):
        cid = f"finance-{i:02d}-c1"
        for arm in ("none", "update_invalidation"):
            for t in range(3):
                recs.append(_rec(cid, t, "conversation_clean", arm, model=model))
                # the stale cache breaks turn 2 of every other conversation; the arm repairs it
                broken = t == 2 and i % 2 == 0 and (arm == "none" or not gain)
                recs.append(_rec(cid, t, "stale_tool_cache", arm, ok=not broken, model=model))
    return recs


def test_arms_are_paired_by_conversation_and_judged_by_the_single_turn_rule() -> None:
    book = load_session_mitigations().book()
    recs = _run()
    (mx,) = matrices(recs, book, n_boot=500, unit="conversation").values()
    cells = mx.cells.set_index("scenario")
    assert cells.loc["stale_tool_cache", "estimate"] == pytest.approx(0.5)
    assert bool(cells.loc["stale_tool_cache", "target"]) and not cells.loc["conversation_clean", "target"]
    assert set(cells["n_pairs"]) == {N}  # conversations, not turns
    (row,) = mx.summary.to_dict("records")
    assert row["verdict"] == SPECIFIC and row["layers"] == "freshness"
    # the same matrix as specificity.matrix over the conversation frame: reused, not copied
    direct = matrix(conversation_frame(recs), book, mx_scenarios(), 500, 0, False)
    assert direct.summary["verdict"].tolist() == mx.summary["verdict"].tolist()
    (flat,) = matrices(_run(gain=False), book, n_boot=500, unit="conversation").values()
    assert flat.summary["verdict"].iloc[0] == "ineffective"
    # by turn: each turn paired, the conversation its cluster; only turn 2 changes
    (by_turn,) = matrices(recs, book, n_boot=500, unit="turn").values()
    cells = by_turn.cells.set_index("scenario")
    assert set(cells["n_pairs"]) == {3 * N}
    assert cells.loc["stale_tool_cache", "estimate"] == pytest.approx(0.5 / 3)
    assert by_turn.summary["policy level"].iloc[0]  # resampled by conversation


def mx_scenarios():
    from layerlab.faults.scenario import conversation_scenarios

    sc = conversation_scenarios()
    return {n: sc[n] for n in ("conversation_clean", "stale_tool_cache")}


def test_a_conversation_succeeds_when_every_turn_does() -> None:
    recs = [_rec("finance-01-c1", 0, "swapped_session", "none"),
            _rec("finance-01-c1", 1, "swapped_session", "none", ok=False, safe=True)]  # fmt: skip
    (row,) = conversation_frame(recs).to_dict("records")
    assert row["turns"] == 2 and row["safe_resolution"] and not row["success"]


def test_one_matrix_per_system_and_one_line_problems() -> None:
    book = load_session_mitigations().book()
    out = matrices(_run() + _run(model="layerlab/cautious"), book, n_boot=200)
    assert list(out) == ["layerlab/extractive", "layerlab/cautious"]
    only = [r for r in _run() if r.mitigation == "update_invalidation"]
    with pytest.raises(ValueError, match="layerlab/extractive: archives hold no baseline arm 'none'"):
        matrices(only, book)
    with pytest.raises(ValueError, match="outcome 'S'"):
        matrices(_run(), book, outcome="S")
    with pytest.raises(ValueError, match="unit 'epoch'"):
        matrices(_run(), book, unit="epoch")

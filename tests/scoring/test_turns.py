"""A turn scored against its own key: S, the clarify turn, safe resolution where a fault strikes,
and the cross-session leak."""

from __future__ import annotations

import pytest

from layerlab.corpus.conversations import TurnKey
from layerlab.scoring.turns import leaked, score_turn

ONE = TurnKey("c", 1, "update", "answer", ("p",), ("$15,000",), ("p-new",))
TWO = TurnKey("c", 2, "multi_hop", "answer", ("p", "q"), ("$15,000", "5 days"), ("p-new", "q-b"))
ASK = TurnKey("c", 3, "clarify", "clarify", ("p", "q"), (), ())
SHOWN = {"p-new": "Above $15,000 approval is needed.", "p-b": "Above $10,000 approval.",
         "q-b": "Within 5 days."}  # fmt: skip


def test_s_needs_the_value_the_evidence_and_a_shown_citation() -> None:
    ok = score_turn(ONE, "answered", "$15,000", ["p-new"], SHOWN)
    assert ok.success and ok.diagnostic == "ok" and not ok.grounded_false_positive
    stale = score_turn(ONE, "answered", "$10,000", ["p-b"], SHOWN, retired=["p-b"])
    assert not stale.success and stale.diagnostic == "freshness" and stale.grounded_false_positive
    unseen = score_turn(ONE, "answered", "$15,000", ["p-new"], {"p-b": SHOWN["p-b"]})
    assert not unseen.success and unseen.diagnostic == "retrieval"
    assert not score_turn(ONE, "answered", "$15,000", ["p-new"], SHOWN, invalid_calls=1).success


def test_a_multi_hop_turn_needs_both_values() -> None:
    assert score_turn(TWO, "answered", "$15,000; 5 days", ["p-new", "q-b"], SHOWN).success
    assert not score_turn(TWO, "answered", "$15,000", ["p-new", "q-b"], SHOWN).success


def test_a_clarify_turn_succeeds_by_asking() -> None:
    assert score_turn(ASK, "clarification", None, [], SHOWN).success
    no = score_turn(ASK, "answered", "$15,000", ["p-new"], SHOWN)
    assert not no.success and no.diagnostic == "no_clarification"


def test_safe_resolution_where_an_unanswerable_fault_strikes() -> None:
    assert score_turn(ONE, "abstained", None, [], SHOWN, unsafe_strike=True).safe_resolution
    assert score_turn(ONE, "clarification", None, [], SHOWN, unsafe_strike=True).safe_resolution
    assert not score_turn(ONE, "answered", "$15,000", ["p-new"], SHOWN, unsafe_strike=True).safe_resolution
    assert not score_turn(ONE, "abstained", None, [], SHOWN).safe_resolution
    failed = score_turn(ONE, "answered", "$15,000", ["p-new"], SHOWN, failure="provider_error")
    assert not failed.success and not failed.abstained and failed.diagnostic == "provider_error"


def test_a_leak_is_another_users_citation_or_value() -> None:
    foreign = {"p~other": "Above $12,500 approval is needed."}
    own = tuple(SHOWN.values())
    assert leaked("$12,500", [], foreign, own)
    assert leaked("$15,000", ["p~other"], foreign, own)
    assert not leaked("$15,000", ["p-new"], foreign, own)
    assert not leaked("$12,500", [], foreign, (*own, "up to $12,500"))  # ours says it too
    lab = score_turn(ONE, "answered", "$12,500", ["p~other"], {**SHOWN, **foreign}, foreign=foreign, own=own)
    assert lab.leak and lab.diagnostic == "session_state"
    with pytest.raises(ValueError, match="reply category"):
        score_turn(ONE, "maybe", None, [], SHOWN)

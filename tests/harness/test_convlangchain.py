"""A LangChain chat chain with message history runs through the conversations with no glue
beyond its factory, and meets the history layerlab serves (faults included)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from layerlab.corpus import conversations as cv  # noqa: E402
from layerlab.corpus.build import load  # noqa: E402
from layerlab.faults.scenario import conversation_scenarios  # noqa: E402
from layerlab.harness import conversation as hc  # noqa: E402
from layerlab.harness.convlangchain import session_history  # noqa: E402


@pytest.fixture(scope="module")
def run_under():
    convs, key = cv.build_from_specs()
    setting = hc.Setting(load(), key)
    scenarios = conversation_scenarios()

    def run(name: str, n: int = 12):
        return hc.run([hc.target("langchain:conversation_targets:chat_factory")], convs[:n],
                      [scenarios[name]], setting)  # fmt: skip

    return run


def test_a_chat_chain_gets_the_served_history_turn_by_turn(targets, run_under) -> None:
    targets.CHAT_SEEN.clear()
    recs = run_under("conversation_clean")
    seen = {(s["conversation_id"], s["turn"]): s["messages"] for s in targets.CHAT_SEEN}
    assert len(seen) == len(recs)
    for (_cid, t), msgs in seen.items():
        assert len(msgs) == 2 * t  # every earlier turn: the user's text and the answer
        assert all(kind == ("human" if i % 2 == 0 else "ai") for i, (kind, _) in enumerate(msgs))
    assert all(r.success for r in recs if r.turn == 0)
    assert {r.model for r in recs} == {"target/chat_factory"}


def test_truncated_history_reaches_the_chain(targets, run_under) -> None:
    targets.CHAT_SEEN.clear()
    run_under("truncated_history")
    for s in targets.CHAT_SEEN:
        assert len(s["messages"]) == 2 * max(s["turn"] - 1, 0)  # turn 0 dropped


def test_the_history_is_read_only_inside_a_turn() -> None:
    with pytest.raises(RuntimeError, match="outside a turn"):
        session_history("s-1")


def test_the_reply_keys_are_read_one_way_for_both_kinds() -> None:
    from layerlab.harness.targets.langchain import ANSWER_KEYS, SOURCE_KEYS, reply_keys

    assert reply_keys({}) == (ANSWER_KEYS, SOURCE_KEYS)
    assert reply_keys({"answer_key": "text", "sources_key": "docs"}) == (("text",), ("docs",))

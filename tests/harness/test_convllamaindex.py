"""A LlamaIndex chat engine runs through the conversations with no glue beyond its factory
(llama-index-core's CondensePlusContextChatEngine over layerlab's retriever, its LLM the MockLLM,
offline), and meets the history and memory layerlab serves (faults included)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from layerlab.corpus import conversations as cv  # noqa: E402
from layerlab.corpus.build import load  # noqa: E402
from layerlab.faults.scenario import conversation_scenarios  # noqa: E402
from layerlab.harness import conversation as hc  # noqa: E402
from layerlab.harness.targets.spec import TargetError  # noqa: E402

SPEC = "llamaindex:conversation_targets:li_chat_factory"


@pytest.fixture(scope="module")
def world():
    convs, key = cv.build_from_specs()
    return convs, hc.Setting(load(), key), conversation_scenarios()


def _played(targets, world, scenario: str, n: int = 8, settings=None):
    """The records, and per turn what the engine's LLM was given in its last chat (role, text,
    the message's session id)."""
    convs, setting, scenarios = world
    system = hc.target(SPEC, settings)
    llm = targets.LI_LLMS[-1]
    seen = {}

    def spy(req):
        out = system.answer(req)
        if hasattr(out, "__await__"):
            import asyncio

            out = asyncio.run(out)
        seen[(req.conversation_id, req.turn)] = (req.session_id, [
            (m.role.value, m.content, m.additional_kwargs.get("session_id"))
            for m in llm.last_chat_messages])  # fmt: skip
        return out

    recs = hc.run([hc.System(system.provider, system.model, spy)], convs[:n],
                  [scenarios[scenario]], setting)  # fmt: skip
    return recs, seen


def test_a_stock_chat_engine_gets_the_served_history_turn_by_turn(targets, world) -> None:
    recs, seen = _played(targets, world, "conversation_clean")
    assert len(seen) == len(recs) and {r.model for r in recs} == {"target/li_chat_factory"}
    assert all(r.category == "answered" and r.diagnostic != "provider_error" for r in recs)
    memory = {(r.conversation_id, r.turn): r.memory_entries for r in recs}
    assert sum(memory.values()) > 0
    for (cid, t), (_sid, msgs) in seen.items():
        chat = [role for role, _, _ in msgs if role != "system"]
        assert chat == ["user", "assistant"] * t + ["user"]  # every earlier turn, then this one
        # the engine's own context prompt, then one system message per memory entry served
        assert sum(role == "system" for role, _, _ in msgs) == 1 + memory[(cid, t)]


def test_truncated_history_and_foreign_memory_reach_the_engine(targets, world) -> None:
    _, trunc = _played(targets, world, "truncated_history")
    for (_cid, t), (_sid, msgs) in trunc.items():
        chat = [role for role, _, _ in msgs if role != "system"]
        assert chat == ["user", "assistant"] * max(t - 1, 0) + ["user"]  # turn 0 dropped
    _, foreign = _played(targets, world, "foreign_memory")
    for (_cid, t), (sid, msgs) in foreign.items():
        others = [s for role, _, s in msgs if role == "system" and s not in (None, sid)]
        assert bool(others) == (t >= 1)  # another user's entry, as a system message


def test_achat_is_awaited_and_answers_as_chat(targets, world) -> None:
    a, _ = _played(targets, world, "conversation_clean", n=4)
    b, _ = _played(targets, world, "conversation_clean", n=4, settings={"achat": "true"})
    assert a == b


def test_a_clarification_asks_back(targets, world) -> None:
    convs, setting, scenarios = world
    recs = hc.run([hc.target("llamaindex:conversation_targets:li_clarifying_factory")], convs[:4],
                  [scenarios["conversation_clean"]], setting)  # fmt: skip
    assert recs and all(r.category == "clarification" for r in recs)


def test_a_factory_that_returns_no_chat_engine_is_one_line(targets) -> None:
    with pytest.raises(TargetError, match="not a chat engine") as err:
        hc.target("llamaindex:llamaindex_targets:returns_nothing")
    assert "\n" not in str(err.value)

"""The conversational harness: a system played through every conversation turn by turn, the
session faults reaching a conversational Python target at their layer, the answer key never
reaching a request, and the same records byte for byte on a rerun."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

from layerlab.archive import turnrecords as turn_archive
from layerlab.corpus import conversations as cv
from layerlab.corpus.build import load
from layerlab.faults.scenario import Scenario, conversation_scenarios
from layerlab.faults.session import SessionState
from layerlab.harness import conversation as hc
from layerlab.harness.convtools import ConversationRequest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module", autouse=True)
def _fixtures_on_path():
    sys.path.insert(0, str(FIXTURES))
    yield
    sys.path.remove(str(FIXTURES))


@pytest.fixture(scope="module")
def built() -> tuple[tuple[cv.Conversation, ...], cv.ConversationKey]:
    return cv.build_from_specs()


@pytest.fixture(scope="module")
def setting(built) -> hc.Setting:
    return hc.Setting(load(), built[1])


@pytest.fixture(scope="module")
def scenarios():
    return conversation_scenarios()


def _updated(convs):
    """Conversations with a replacement after the opening and a turn after it."""
    return [c for c in convs if any(t.publishes for t in c.turns[1:-1])]


def test_every_turn_is_played_and_scored_once(built, setting, scenarios) -> None:
    convs, key = built
    recs = hc.run([hc.reference("layerlab/extractive")], convs, [scenarios["conversation_clean"]],
                  setting)  # fmt: skip
    assert len(recs) == len(key) == sum(len(c.turns) for c in convs)
    assert {(r.conversation_id, r.turn) for r in recs} == set(key)
    assert all(r.kind == key[(r.conversation_id, r.turn)].kind for r in recs)
    assert not any(r.struck or r.leak for r in recs)  # clean: nothing served differs
    # the baseline answers most turns of a clean conversation (measured: 0.87)
    assert sum(r.success for r in recs) / len(recs) > 0.7


def test_the_answer_key_never_reaches_a_request(built, setting, scenarios) -> None:
    """Every turn of every conversation, under every scenario: what the request holds, and
    everything reachable from it, holds no key, no scenario, no store."""
    convs, key = built
    forbidden = (cv.TurnKey, cv.ConversationKey, Scenario, SessionState, hc.Setting)
    answers = {a for k in key.values() for a in k.expected_answers}
    turns = 0

    def spy(req: ConversationRequest):
        nonlocal turns
        turns += 1
        assert set(ConversationRequest.__slots__) - {"__weakref__"} == {
            "answer_kind", "conversation_id", "history", "memory", "question", "session_id",
            "settings", "turn"}  # fmt: skip
        seen, todo = set(), [req]
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, type):
                continue
            seen.add(id(obj))
            assert not isinstance(obj, forbidden), type(obj)
            todo += [o for o in gc.get_referents(obj) if not isinstance(o, type)]
        assert req.question not in answers
        assert all(m.turn < req.turn for m in req.history)
        return hc.reference("layerlab/extractive").answer(req)

    system = hc.System("target", "spy", spy)
    for name in scenarios:
        hc.run([system], convs[:20], [scenarios[name]], setting)
    hc.run([system], convs, [scenarios["conversation_clean"]], setting)
    assert turns == sum(len(c.turns) for c in convs[:20]) * len(scenarios) + len(key)


def _reached_llamaindex(run_system):
    """What reached a LlamaIndex chat engine's LLM at each turn: the messages of its chat."""
    pytest.importorskip("llama_index.core")
    import conversation_targets

    system = hc.target("llamaindex:conversation_targets:li_chat_factory")
    llm = conversation_targets.LI_LLMS[-1]
    got: list = []

    def spy(req):
        out = system.answer(req)
        got.append(list(llm.last_chat_messages))
        return out

    run_system(hc.System(system.provider, system.model, spy))
    return got


def _reached_http(run_system):
    """What reached an HTTP service at each turn: the JSON it was POSTed."""
    import conversation_targets

    service = conversation_targets.Service()
    system = hc.target(service.url)
    try:
        run_system(system)
    finally:
        hc.close_all([system])
        service.close()
    assert all(set(b) == {"conversation_id", "turn", "session_id", "question", "answer_kind",
                          "history", "memory", "tools_url", "tools_token", "mcp_url"}
               for b in service.bodies)  # fmt: skip
    return service.bodies


def _reached_mcp(run_system):
    """What reached a system over MCP at each turn: the tools listed and a search's result."""
    pytest.importorskip("mcp")
    from mcp import Client

    got: list = []

    async def over_mcp(req):
        async with Client(req.mcp_url) as tools:
            listed = await tools.list_tools()
            found = await tools.call_tool("search", {"query": req.question})
        got.append([t.model_dump() for t in listed.tools] + [found.model_dump()])
        return hc.reference("layerlab/extractive").answer(req)

    run_system(hc.System("target", "mcp", over_mcp))
    return got


REACHED = {"llamaindex": _reached_llamaindex, "http": _reached_http, "mcp": _reached_mcp}


@pytest.mark.parametrize("kind", sorted(REACHED))
def test_the_answer_key_never_reaches_a_framework_or_service_target(kind, built, setting,
                                                                    scenarios) -> None:  # fmt: skip
    """Every turn of some conversations, under every scenario, through each target kind past
    the request (a chat engine's prompt, a service's JSON): no key, no scenario, no store, and
    no key field, reaches the system."""
    convs, key = built
    forbidden = (cv.TurnKey, cv.ConversationKey, Scenario, SessionState, hc.Setting)

    def run_system(system):
        for name in scenarios:
            hc.run([system], convs[:6], [scenarios[name]], setting)

    reached = REACHED[kind](run_system)
    assert len(reached) == sum(len(c.turns) for c in convs[:6]) * len(scenarios)
    for got in reached:
        seen, todo = set(), [got]
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, type):
                continue
            seen.add(id(obj))
            assert not isinstance(obj, forbidden), type(obj)
            if isinstance(obj, str):
                assert not any(f in obj for f in ("expected_answers", "required_doc_ids"))
            todo += [o for o in gc.get_referents(obj) if not isinstance(o, type)]


def test_the_records_are_byte_identical_on_rerun(built, setting, scenarios, tmp_path) -> None:
    convs, _ = built
    chosen = [scenarios[n] for n in ("conversation_clean", "swapped_session", "stale_tool_cache")]
    systems = [hc.reference("layerlab/extractive"), hc.target("conversation_targets:naive_memory")]
    a = hc.run(systems, convs[:30], chosen, setting, epochs=2)
    b = hc.run(systems, convs[:30], chosen, setting, epochs=2)
    turn_archive.write(a, tmp_path / "a")
    turn_archive.write(b, tmp_path / "b")
    assert (tmp_path / "a" / "turns.jsonl").read_bytes() == (tmp_path / "b" / "turns.jsonl").read_bytes()
    assert turn_archive.read(tmp_path / "a") == sorted(a, key=turn_archive.sort_key)


def test_naive_memory_leaks_under_foreign_memory_and_scoped_memory_does_not(built, setting, scenarios) -> None:
    convs, _ = built
    sc = scenarios["foreign_memory"]
    naive = hc.run([hc.target("conversation_targets:naive_memory")], convs, [sc], setting)
    scoped = hc.run([hc.target("conversation_targets:scoped_memory")], convs, [sc], setting)
    assert sum(r.leak for r in naive) >= len(convs) // 2  # turn 1 of most conversations
    assert all(r.diagnostic == "session_state" for r in naive if r.leak)
    assert not any(r.leak for r in scoped)
    clean = hc.run([hc.target("conversation_targets:naive_memory")], convs,
                   [scenarios["conversation_clean"]], setting)  # fmt: skip
    assert not any(r.leak for r in clean)


def _recorded(convs, setting, scenario):
    from conversation_targets import Recorder

    Recorder.seen = []
    hc.run([hc.target("conversation_targets:Recorder")], convs, [scenario], setting)
    return {(s["conversation_id"], s["turn"]): s for s in Recorder.seen}


def test_each_session_fault_reaches_the_target_at_its_layer(built, setting, scenarios) -> None:
    convs, _ = built
    some = convs[:24]
    clean = _recorded(some, setting, scenarios["conversation_clean"])
    for (_cid, t), s in clean.items():  # the clean store: one session, every earlier turn
        assert s["history_turns"] == list(range(t))
        assert {m[0] for m in s["memory"]} <= {s["session_id"]}
    # session_state: another user's memory entry from turn 1 on
    foreign = _recorded(some, setting, scenarios["foreign_memory"])
    for (_cid, t), s in foreign.items():
        others = [m for m in s["memory"] if m[0] != s["session_id"]]
        assert bool(others) == (t >= 1) and all(m[1] != "northwind:user" for m in others)
    # context: the window has dropped turn 0
    trunc = _recorded(some, setting, scenarios["truncated_history"])
    assert all(s["history_turns"] == list(range(1, t)) for (cid, t), s in trunc.items())
    # session_state: from turn 2, the session id is another user's; the turns before are gone
    swap = _recorded(some, setting, scenarios["swapped_session"])
    for (cid, t), s in swap.items():
        assert (s["session_id"] != clean[(cid, t)]["session_id"]) == (t >= 2)
        if t >= 2:
            assert min(s["history_turns"], default=2) >= 2
    # freshness: after a replacement, the retired version served from memory or the cache
    upd = _updated(convs)[:12]
    at = {c.conversation_id: next(t.index for t in c.turns if t.publishes) for c in upd}
    retired = {c.conversation_id: next(t.retires[0] for t in c.turns if t.publishes) for c in upd}
    new = {c.conversation_id: next(t.publishes[0].doc_id for t in c.turns if t.publishes) for c in upd}
    clean_u = _recorded(upd, setting, scenarios["conversation_clean"])
    cache = _recorded(upd, setting, scenarios["stale_tool_cache"])
    memory = _recorded(upd, setting, scenarios["stale_memory"])
    for cid, u in at.items():
        old = retired[cid]
        assert (new[cid], "current") in clean_u[(cid, u)]["anchor_results"]
        assert (old, "current") not in clean_u[(cid, u)]["anchor_results"]
        assert (old, "current") in cache[(cid, u)]["anchor_results"]  # the cached result
        assert (new[cid], "current") not in cache[(cid, u)]["anchor_results"]
        assert any(m[2] == old for m in memory[(cid, u)]["memory"])
        assert not any(m[2] == old for m in clean_u[(cid, u)]["memory"])


def test_a_failing_target_is_the_turns_failure_and_the_user_moves_on(built, setting, scenarios) -> None:
    convs, _ = built
    recs = hc.run([hc.target("conversation_targets:fails")], convs[:5],
                  [scenarios["conversation_clean"]], setting)  # fmt: skip
    assert len(recs) == sum(len(c.turns) for c in convs[:5])
    assert all(r.diagnostic == "provider_error" and not r.success for r in recs)


@pytest.mark.parametrize("fn", ["slow_at_turn_one", "async_slow_at_turn_one"])
def test_a_turn_past_its_timeout_fails_as_timeout_and_the_user_moves_on(fn, built, setting,
                                                                       scenarios) -> None:  # fmt: skip
    import time
    from dataclasses import replace

    import conversation_targets

    convs, _ = built
    sc = [scenarios["conversation_clean"]]
    conversation_targets.LATE.clear()
    slow = hc.run([hc.target(f"conversation_targets:{fn}")], convs[:3], sc, setting,
                  turn_timeout=0.25)  # fmt: skip
    scoped = hc.run([hc.target("conversation_targets:scoped_memory")], convs[:3], sc, setting,
                    turn_timeout=5)  # fmt: skip
    assert len(slow) == len(scoped) == sum(len(c.turns) for c in convs[:3])
    assert all((r.diagnostic == "timeout") == (r.turn == 1) for r in slow)
    assert all(r.searches == 0 and not r.success for r in slow if r.turn == 1)
    same = [replace(r, model="-") for r in slow if r.turn == 0]
    assert same == [replace(r, model="-") for r in scoped if r.turn == 0]
    assert any(r.success for r in slow if r.turn > 1)  # the conversation went on
    if fn == "slow_at_turn_one":  # the threads left behind wake up: their turn's tools are closed
        deadline = time.monotonic() + 5 * conversation_targets.SLEEP_S
        while len(conversation_targets.LATE) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert conversation_targets.LATE == ["refused"] * 3
    with pytest.raises(ValueError, match="turn timeout"):
        hc.run([hc.reference("layerlab/extractive")], convs[:1], sc, setting, turn_timeout=0)


def test_bad_systems_and_scenarios_are_one_line(setting, scenarios) -> None:
    with pytest.raises(ValueError, match="layerlab/extractive"):
        hc.reference("layerlab/nope")
    paper = __import__("layerlab.faults.scenario", fromlist=["x"]).load_scenarios()
    with pytest.raises(ValueError, match="not a conversational scenario"):
        hc.run([hc.reference("layerlab/extractive")], [], [paper["stale_index"]], setting)


def test_read_turn_reply_knows_a_clarification() -> None:
    assert hc.read_turn_reply({"status": "clarification", "answer": "which one?"}, []).category == "clarification"
    assert hc.read_turn_reply('{"status": "clarification"}', []).category == "clarification"
    r = hc.read_turn_reply({"status": "answered", "answer": "$5", "citations": ["a"]}, ["a"])
    assert (r.category, r.answer, r.citations) == ("answered", "$5", ("a",))
    assert hc.read_turn_reply(42, []).failure == "malformed_reply"


def test_intensity_strikes_a_nested_share_of_the_conversations(built, setting, scenarios) -> None:
    convs, _ = built
    sc = scenarios["foreign_memory"]
    naive = hc.target("conversation_targets:naive_memory")
    struck = {}
    for dose in (0.0, 0.25, 0.5, 1.0):
        recs = hc.run([naive], convs, [sc.at(dose)], setting)
        assert {r.scenario for r in recs} == {sc.at(dose).name}
        struck[dose] = {r.conversation_id for r in recs if r.struck}
        assert {r.conversation_id for r in recs if r.leak} <= struck[dose]
    assert struck[0.0] == set() and len(struck[1.0]) == len(convs)
    assert struck[0.25] <= struck[0.5] <= struck[1.0]
    assert 0 < len(struck[0.25]) < len(struck[0.5]) < len(convs)


def test_an_async_target_is_awaited(built, setting, scenarios) -> None:
    convs, _ = built
    sc = [scenarios["foreign_memory"]]
    a = hc.run([hc.target("conversation_targets:async_scoped")], convs[:10], sc, setting)
    b = hc.run([hc.target("conversation_targets:scoped_memory")], convs[:10], sc, setting)
    strip = [(r.turn, r.category, r.success, r.leak) for r in a]
    assert strip == [(r.turn, r.category, r.success, r.leak) for r in b]
    assert not any(r.diagnostic in ("malformed_reply", "provider_error") for r in a)


def test_the_memory_store_holds_only_what_the_system_said_or_a_document(built, setting, scenarios) -> None:
    """Every turn, under every scenario: a memory entry served is an answer the system gave
    earlier in the conversation, or a document's text (an entry a fault injected): the key
    never writes to the store."""
    convs, _ = built
    docs = {d.text for d in setting.corpus.documents} | {d.text for d in setting.foreign.values()}
    docs |= {d.text for c in convs for t in c.turns for d in t.publishes}
    said: dict[str, set[str]] = {}
    reader = hc.reference("layerlab/extractive")

    def spy(req: ConversationRequest):
        mine = said.setdefault(req.conversation_id, set())
        for m in req.memory:
            assert m.text in mine or m.text in docs, (req.conversation_id, req.turn, m.text)
        reply = reader.answer(req)
        if reply.get("answer"):
            mine.add(reply["answer"])
        return reply

    system = hc.System("target", "spy", spy)
    for name in scenarios:
        said.clear()
        recs = hc.run([system], convs, [scenarios[name]], setting)
        assert sum(r.memory_entries for r in recs) > 0

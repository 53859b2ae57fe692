"""A LangGraph graph runs through the conversations with no glue beyond its factory, over real
LangGraph stores that layerlab holds and faults: the thread in a SqliteSaver on disk holds the
served history (faults included), the SqliteStore the served memory (another user's entry
included), and the answer key never reaches the graph."""

from __future__ import annotations

import gc
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from layerlab.corpus import conversations as cv  # noqa: E402
from layerlab.corpus.build import TENANT, load  # noqa: E402
from layerlab.faults.scenario import Scenario, conversation_scenarios  # noqa: E402
from layerlab.faults.session import SessionState, session_id_of  # noqa: E402
from layerlab.harness import conversation as hc  # noqa: E402
from layerlab.harness.convlanggraph import NAMESPACE, ConversationalGraph  # noqa: E402
from layerlab.harness.convtools import spoken  # noqa: E402
from layerlab.harness.targets.spec import TargetError, parse_target  # noqa: E402
from layerlab.mitigations.session import session_arms  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
USER = f"{TENANT}:user"


@pytest.fixture(scope="module")
def built():
    return cv.build_from_specs()


@pytest.fixture(scope="module")
def setting(built):
    return hc.Setting(load(), built[1])


@pytest.fixture(scope="module")
def scenarios():
    return conversation_scenarios()


def _on_disk(path: Path, thread: str) -> list[list[tuple[str, str, str]]]:
    """The messages of every checkpoint layerlab wrote (``update_state``) in ``thread``, read
    from the checkpointer's SQLite file through a connection of its own, newest first."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    with sqlite3.connect(path) as conn:
        saver = SqliteSaver(conn)
        return [[(m.type, m.content, m.id) for m in c.checkpoint["channel_values"]["messages"]]
                for c in saver.list({"configurable": {"thread_id": thread}},
                                    filter={"source": "update"})]  # fmt: skip


def test_a_graph_runs_as_a_target_with_the_chat_chains_S(targets, built, setting, scenarios) -> None:
    clean = [scenarios["conversation_clean"]]
    targets.LG_SEEN.clear()
    graph = hc.target("langgraph:conversation_targets:graph_factory")
    chain = hc.target("langchain:conversation_targets:chat_factory")
    try:
        recs = hc.run([graph], built[0][:12], clean, setting)
        same = hc.run([chain], built[0][:12], clean, setting)
        targets.LG_SEEN.clear()
        assert hc.run([graph], built[0][:12], clean, setting) == recs  # nothing kept across runs
    finally:
        hc.close_all([graph])
    assert {r.model for r in recs} == {"target/graph_factory"}
    assert [r.success for r in recs] == [r.success for r in same]  # the chain's S, turn by turn
    assert all(r.success for r in recs if r.turn == 0) and sum(r.success for r in recs) > len(recs) / 2
    assert len(targets.LG_SEEN) == len(recs)
    for s in targets.LG_SEEN:  # every earlier turn, then the turn's question, in one thread
        t = s["turn"]
        assert [m[2] for m in s["messages"]] == [f"{i}-{r}" for i in range(t)
                                                 for r in ("user", "assistant")] + [f"{t}-user"]  # fmt: skip
        assert s["config"]["user_id"] == USER and s["config"]["thread_id"].startswith("s-")
    assert not graph.answer.__self__.stores.folder.exists()  # closed: the run's files removed


@pytest.mark.parametrize("name", ["truncated_history", "swapped_session"])
def test_the_checkpointer_on_disk_holds_the_served_history(name, targets, built, setting,
                                                            scenarios) -> None:  # fmt: skip
    system = hc.target("langgraph:conversation_targets:graph_factory")
    lg: ConversationalGraph = system.answer.__self__
    seen: list[tuple[object, ...]] = []

    def spy(req):
        out = system.answer(req)
        served = [("human" if m.role == "user" else "ai", spoken(m), f"{m.turn}-{m.role}")
                  for m in req.history]  # fmt: skip
        seen.append((req.conversation_id, req.turn, req.session_id, served,
                     _on_disk(lg.stores.checkpoint_file, req.session_id)))  # fmt: skip
        return out

    try:
        hc.run([hc.System(system.provider, system.model, spy)], built[0][:8], [scenarios[name]],
               setting)  # fmt: skip
    finally:
        hc.close_all([system])
    assert seen
    for cid, turn, session, served, disk in seen:
        assert len(disk) == 1 and disk[0] == served  # this turn's write alone: the served history
        own = session_id_of(cid, USER)
        if name == "truncated_history":
            assert session == own and not any(m[2].startswith("0-") for m in disk[0])
            assert len(disk[0]) == 2 * max(turn - 1, 0)
        else:  # from turn 2, another user's thread, without the turns before
            assert (session != own) == (turn >= 2)
            assert all(int(m[2].split("-")[0]) >= 2 for m in disk[0]) if turn >= 2 else True


def _memory_run(targets, convs, setting, scenario, **kw):
    targets.LG_SEEN.clear()
    system = hc.target("langgraph:conversation_targets:memory_graph_factory",
                       kw.pop("settings", None))  # fmt: skip
    try:
        return hc.run([system], convs, [scenario], setting, **kw)
    finally:
        hc.close_all([system])


def test_foreign_memory_sits_in_the_store_and_leaks_unless_scoped(targets, built, setting,
                                                                  scenarios) -> None:  # fmt: skip
    convs, sc = built[0][:16], scenarios["foreign_memory"]
    naive = _memory_run(targets, convs, setting, sc)
    read = list(targets.LG_SEEN)
    for s in read:  # the store the graph reads holds the served entries, another user's too
        others = [v for v in s["memory"] if v["session_id"] != s["config"]["thread_id"]]
        assert bool(others) == (s["turn"] >= 1) and all(v["user"] != USER for v in others)
    assert sum(r.leak for r in naive) >= len(convs) // 2  # turn 1 of most conversations
    assert all(r.diagnostic == "session_state" for r in naive if r.leak)
    arm = _memory_run(targets, convs, setting, sc, arms=session_arms(["session_scoped_memory"]))
    assert not any(r.leak for r in arm) and {r.mitigation for r in arm} == {"session_scoped_memory"}
    assert all(v["session_id"] == s["config"]["thread_id"] for s in targets.LG_SEEN
               for v in s["memory"])  # fmt: skip
    scoped = _memory_run(targets, convs, setting, sc, settings={"scoped": "true", "store": "memory"})
    assert not any(r.leak for r in scoped)  # the graph's own scoping, over an InMemoryStore
    clean = _memory_run(targets, convs, setting, scenarios["conversation_clean"])
    assert not any(r.leak for r in clean)


def test_the_store_holds_only_what_the_turn_is_served(targets, built, setting, scenarios) -> None:
    system = hc.target("langgraph:conversation_targets:memory_graph_factory")
    lg: ConversationalGraph = system.answer.__self__
    held: list[tuple[int, list[str]]] = []

    def spy(req):
        lg.store.put(("scratch",), f"left-by-{req.turn}", {"x": 1})  # what a graph might leave
        out = system.answer(req)
        items = [it.key for ns in lg.store.list_namespaces() for it in lg.store.search(ns)]
        held.append((len(req.memory), items))
        return out

    try:
        hc.run([hc.System(system.provider, system.model, spy)], built[0][:4],
               [scenarios["foreign_memory"]], setting)  # fmt: skip
    finally:
        hc.close_all([system])
    assert all(len(keys) == n and not any(k.startswith("left-by") for k in keys)
               for n, keys in held)  # fmt: skip
    assert any(n for n, _ in held) and NAMESPACE == "memory"


def test_a_graph_with_stores_of_its_own_keeps_them_and_its_other_items(targets, built, setting,
                                                                        scenarios) -> None:  # fmt: skip
    system = hc.target("langgraph:conversation_targets:own_stores_factory")
    lg: ConversationalGraph = system.answer.__self__
    assert lg.checkpointer is not lg.stores.checkpointer and lg.store is not lg.stores.store
    try:
        recs = hc.run([system], built[0][:3], [scenarios["foreign_memory"]], setting)
        held = {tuple(ns) for ns in lg.store.list_namespaces()}
    finally:
        hc.close_all([system])
    assert all(r.success for r in recs if r.turn == 0)
    assert held == {("team",), (NAMESPACE, USER)}  # the team's item kept; the memory served
    assert lg.store.get(("team",), "glossary") is not None


def test_the_answer_key_never_reaches_the_graph(targets, built, setting, scenarios) -> None:
    """Every turn of some conversations, under every scenario: what the graph read (its state's
    messages, its config, its store's items) and the checkpoints written hold no key, no
    scenario, no store of layerlab's, and no key field."""
    convs, key = built
    forbidden = (cv.TurnKey, cv.ConversationKey, Scenario, SessionState, hc.Setting)
    targets.LG_SEEN.clear()
    system = hc.target("langgraph:conversation_targets:memory_graph_factory")
    lg: ConversationalGraph = system.answer.__self__
    states = []

    def spy(req):
        out = system.answer(req)
        config = {"configurable": {"thread_id": req.session_id, "user_id": USER}}
        states.append(lg.graph.get_state(config).values)
        return out

    try:
        for name in scenarios:
            hc.run([hc.System(system.provider, system.model, spy)], convs[:4], [scenarios[name]],
                   setting)  # fmt: skip
    finally:
        hc.close_all([system])
    n = sum(len(c.turns) for c in convs[:4]) * len(scenarios)
    assert len(targets.LG_SEEN) == len(states) == n
    seen, todo = set(), [list(targets.LG_SEEN), states]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        assert not isinstance(obj, forbidden), type(obj)
        if isinstance(obj, str):
            assert not any(f in obj for f in ("expected_answers", "required_doc_ids"))
        todo += [o for o in gc.get_referents(obj) if not isinstance(o, type)]


def test_a_graph_that_asks_back_is_a_clarification(targets, built, setting, scenarios) -> None:
    system = hc.target("langgraph:conversation_targets:asking_graph_factory")
    try:
        recs = hc.run([system], built[0][:2], [scenarios["conversation_clean"]], setting)
    finally:
        hc.close_all([system])
    assert recs and {r.category for r in recs} == {"clarification"}


def test_the_final_state_is_read_as_the_reply(targets) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    lg = ConversationalGraph(parse_target("langgraph:conversation_targets:graph_factory"))
    try:
        q = HumanMessage("q", id="1-user")
        old = AIMessage("$5", id="0-assistant")
        assert lg.read({"messages": [old, q]}, "1-user")["status"] == "abstained"  # none this turn
        cited = AIMessage("$9", additional_kwargs={"citations": ["d-1"]})
        assert lg.read({"messages": [q, cited]}, "1-user") == {"answer": "$9", "citations": ["d-1"]}
        state = {"messages": [q, AIMessage("$9")], "source_documents": ["d-2"]}
        assert lg.read(state, "1-user") == {"answer": "$9", "citations": ["d-2"]}
        assert lg.read({"messages": [q, AIMessage("$9 per d-3")]}, "1-user") == "$9 per d-3"
        asks = AIMessage('{"status": "clarification", "answer": "which?"}')
        assert lg.read({"messages": [q, asks]}, "1-user")["status"] == "clarification"
        assert lg.read({"messages": [q], "status": "clarification"}, "1-user")["status"] == "clarification"
    finally:
        lg.close()


def test_a_factory_that_returns_something_else_is_one_line(targets) -> None:
    with pytest.raises(TargetError) as e:
        hc.target("langgraph:conversation_targets:not_a_graph")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--target langgraph:conversation_targets:not_a_graph:")
    assert "returned a dict, not a LangGraph graph" in msg and "StateGraph" in msg
    with pytest.raises(TargetError, match="store='disk': expected one of sqlite, memory"):
        hc.target("langgraph:conversation_targets:graph_factory", {"store": "disk"})
    from layerlab.harness.targets.execute import load as load_target

    with pytest.raises(TargetError, match="runs through the conversations"):
        load_target(parse_target("langgraph:conversation_targets:graph_factory"))


def test_run_conversations_runs_a_langgraph_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    import tempfile

    from layerlab.cli import main

    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's stores are made here
    assert main(["run", "conversations", "--target", "langgraph:conversation_targets:graph_factory",
                 "--scenario", "conversation_clean", "--per-domain", "1",
                 "--out", str(tmp_path / "lg")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "target/graph_factory: S by turn index" in out and "conversation_clean" in out
    assert (tmp_path / "lg" / "turns.jsonl").is_file()
    assert not list(tmp_path.glob("layerlab-langgraph-*"))  # the run's stores removed at its end

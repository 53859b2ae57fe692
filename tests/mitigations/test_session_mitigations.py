"""The session mitigations of conversations (layerlab/mitigations/session.py,
data/specs/mitigations_conversation.yaml): each changes what the session store serves at its
layer and nothing else, on states built by hand and through the conversational harness; their
spec and roles.yaml's conversational findings are checked when loaded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from layerlab import paths
from layerlab.corpus import conversations as cv
from layerlab.corpus.build import TENANT, load
from layerlab.corpus.spec import SpecError
from layerlab.faults.scenario import conversation_scenarios
from layerlab.faults.session import MemoryEntry, SessionContext, SessionState
from layerlab.harness import conversation as hc
from layerlab.mitigations.session import SUMMARY, load_session_mitigations, session_arms

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CTX = SessionContext(("p-1",))


def _arm(name: str):
    return load_session_mitigations().arm(name)


def _state() -> SessionState:
    """Turn 0 answered from p-1's document (cached, remembered); p-1 replaced at turn 2."""
    s = SessionState.open("c-1").at(0).said("user", "what is the limit of p-1?")
    s = s.cached("limit", ("p-1",), '{"top_k": 3}').remember("p-1", "$5", "p-1-v1")
    s = s.said("assistant", '{"status": "answered", "answer": "$5", "citations": ["p-1-v1"]}')
    s = s.at(1).said("user", "and before?").said("assistant", '{"status": "abstained"}')
    return s.at(2).replace_policy("p-1", "p-1-v1", "p-1-v2").said("user", "it changed today")


def test_the_spec_holds_the_baseline_and_one_arm_per_session_layer() -> None:
    spec = load_session_mitigations()
    assert spec.baseline == "none" and spec.arm("none").layers == ()
    assert {n: spec.arm(n).layers for n in spec.matrix_arms} == {
        "session_scoped_memory": ("session_state",), "update_invalidation": ("freshness",),
        "history_summarisation": ("context",)}  # fmt: skip
    book = spec.book()
    assert book.baseline == "none" and book.arm("update_invalidation").stages == ("session",)
    assert [a.name for a in session_arms([])] == ["none"]
    with pytest.raises(KeyError, match="did you mean 'update_invalidation'"):
        session_arms(["update_invalidaton"])


@pytest.mark.parametrize("old, new, field", [
    ("kind: update_invalidation", "kind: update_invalid", "mitigations[2].kind"),
    ("baseline: none", "baseline: update_invalidation", "baseline"),
])  # fmt: skip
def test_a_bad_spec_is_one_line_naming_the_field(tmp_path, old, new, field) -> None:
    text = paths.CONVERSATION_MITIGATION_SPEC.read_text(encoding="utf-8")
    assert old in text
    bad = tmp_path / "m.yaml"
    bad.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(SpecError) as e:
        load_session_mitigations(bad)
    assert str(e.value).startswith(f"{bad}:") and f": {field}: " in str(e.value)


def test_scoped_memory_drops_another_sessions_and_another_users_entries() -> None:
    s = _state()
    theirs = MemoryEntry(1, "p-1", "$9", "s-other", "other:user", "p-1-x")
    same_session_other_user = MemoryEntry(1, "p-1", "$8", s.session_id, "other:user", "p-1-y")
    served = SessionState(**{**s.__dict__, "memory": (*s.memory, theirs, same_session_other_user)})
    out = _arm("session_scoped_memory").serve(served, s, CTX)
    assert out.memory == s.memory and out.history == s.history and out.cache == s.cache
    assert _arm("session_scoped_memory").serve(s, s, CTX) == s  # nothing foreign: unchanged


def test_update_invalidation_retires_what_a_fault_served_again() -> None:
    from layerlab.faults.operators import OPERATORS

    s = _state()
    assert not s.served_memory() and not s.served_cache()  # the clean store's own rule
    for op in ("stale_memory", "stale_tool_cache"):
        fault = OPERATORS[op](OPERATORS[op].Params())
        stale = fault.apply_session(s, SessionContext(("p-1",), documents={}), None)
        assert stale.served_memory() or stale.served_cache()
        out = _arm("update_invalidation").serve(stale, s, CTX)
        assert not out.served_memory() and not out.served_cache()
        assert out.history == stale.history
    # an entry written after the replacement is served
    later = s.remember("p-1", "$7", "p-1-v2")
    assert _arm("update_invalidation").serve(later, later, CTX).served_memory() == (later.memory[-1],)


def test_summarisation_replaces_dropped_turns_of_this_session_with_one_line() -> None:
    s = _state()
    cut = SessionState(**{**s.__dict__, "history": tuple(m for m in s.history if m.turn >= 1)})
    out = _arm("history_summarisation").serve(cut, s, CTX)
    line, *rest = out.history
    assert tuple(rest) == cut.history and line.role == "user" and line.turn == 0
    assert line.text == f"{SUMMARY} (turns 0-0) what is the limit of p-1? (answers cited: p-1-v1)"
    assert _arm("history_summarisation").serve(s, s, CTX) == s  # nothing dropped: unchanged
    swapped = SessionState(**{**cut.__dict__, "session_id": "s-theirs"})
    assert _arm("history_summarisation").serve(swapped, s, CTX) == swapped  # not our session


# --- through the harness -------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _fixtures_on_path():
    sys.path.insert(0, str(FIXTURES))
    yield
    sys.path.remove(str(FIXTURES))


@pytest.fixture(scope="module")
def built():
    return cv.build_from_specs()


@pytest.fixture(scope="module")
def setting(built):
    return hc.Setting(load(), built[1])


def _seen(convs, setting, scenario, arm):
    from conversation_targets import Recorder

    Recorder.seen = []
    recs = hc.run([hc.target("conversation_targets:Recorder")], convs, [scenario], setting,
                  arms=session_arms([arm]))  # fmt: skip
    return recs, {(s["conversation_id"], s["turn"]): s for s in Recorder.seen}


def test_each_arm_repairs_what_the_target_is_served_at_its_layer(built, setting) -> None:
    convs = built[0][:24]
    sc = conversation_scenarios()
    _, foreign = _seen(convs, setting, sc["foreign_memory"], "session_scoped_memory")
    assert all(m[0] == s["session_id"] for s in foreign.values() for m in s["memory"])
    own = f"{TENANT}:user"
    _, swap0 = _seen(convs, setting, sc["swapped_session"], "none")
    assert any(m[1] != own for s in swap0.values() for m in s["memory"])  # theirs, served
    _, swap = _seen(convs, setting, sc["swapped_session"], "session_scoped_memory")
    assert all(m[0] == s["session_id"] and m[1] == own for s in swap.values() for m in s["memory"])
    # freshness: at the replacement's turn, the anchor search is not served the cached result
    upd = [c for c in built[0] if any(t.publishes for t in c.turns[1:-1])][:12]
    _, base = _seen(upd, setting, sc["stale_tool_cache"], "none")
    _, fixed = _seen(upd, setting, sc["stale_tool_cache"], "update_invalidation")
    for c in upd:
        u = next(t for t in c.turns if t.publishes)
        old, new = u.retires[0], u.publishes[0].doc_id
        assert (old, "current") in base[(c.conversation_id, u.index)]["anchor_results"]
        assert (new, "current") in fixed[(c.conversation_id, u.index)]["anchor_results"]
    # context: the turns after the truncation get one summary line in place of turn 0, and a
    # turn whose history the summary restored is not struck (scored against its key, as clean)
    base, _ = _seen(convs, setting, sc["truncated_history"], "none")
    assert all(r.struck == (r.turn >= 1) for r in base)
    recs, trunc = _seen(convs, setting, sc["truncated_history"], "history_summarisation")
    assert all(s["history_turns"] == list(range(t)) for (_c, t), s in trunc.items())
    assert not any(r.struck for r in recs) and {r.mitigation for r in recs} == {
        "history_summarisation"}


def test_a_summary_does_not_restore_another_sessions_history(built, setting) -> None:
    """A swapped session's lost history is another session's: the summary does not stand in for
    it, so the swapped turns stay struck exactly as without the arm."""
    convs = built[0][:24]
    sc = conversation_scenarios()["swapped_session"]
    base, served0 = _seen(convs, setting, sc, "none")
    summ, served = _seen(convs, setting, sc, "history_summarisation")
    assert any(r.struck for r in base)
    assert [r.struck for r in summ] == [r.struck for r in base]
    assert {k: s["history_turns"] for k, s in served.items()} == {
        k: s["history_turns"] for k, s in served0.items()}  # no summary line was added


def test_scoped_memory_ends_the_leak_of_a_memory_first_system(built, setting) -> None:
    convs = built[0]
    sc = conversation_scenarios()["foreign_memory"]
    target = [hc.target("conversation_targets:naive_memory")]
    base, scoped = (hc.run(target, convs, [sc], setting, arms=session_arms([a]))
                    for a in ("none", "session_scoped_memory"))  # fmt: skip
    assert sum(r.leak for r in base) >= len(convs) // 2
    assert not any(r.leak for r in scoped)
    assert sum(r.success for r in scoped) > sum(r.success for r in base)


def test_the_baseline_arm_is_the_run_without_arms(built, setting) -> None:
    convs = built[0][:20]
    sc = list(conversation_scenarios().values())
    system = [hc.reference("layerlab/extractive")]
    assert hc.run(system, convs, sc, setting) == hc.run(system, convs, sc, setting,
                                                         arms=session_arms(["none"]))  # fmt: skip


def test_roles_conversation_findings_guard_with_session_mitigations(tmp_path) -> None:
    from layerlab.faults.roles import load_roles
    from layerlab.mitigations import load_run_mitigations

    roles = load_roles()
    guards = {k: f.guard for k, f in roles.conversation_findings.items()}
    assert guards == {"session_state": "session_scoped_memory",
                      "freshness": "update_invalidation", "context": "history_summarisation"}  # fmt: skip
    assert {f.guard for f in roles.findings.values()} <= set(load_run_mitigations().arms)
    text = paths.ROLE_SPEC.read_text(encoding="utf-8")
    for old, new, field, what in [
        ("guard: history_summarisation", "guard: freshness_guard",
         "conversation_findings.context.guard", "unknown session mitigation 'freshness_guard'"),
        ("  context:\n    did: answered after", "  contxt:\n    did: answered after",
         "conversation_findings.contxt", "unknown layer 'contxt'"),
    ]:  # fmt: skip
        assert old in text
        bad = tmp_path / "roles.yaml"
        bad.write_text(text.replace(old, new), encoding="utf-8")
        with pytest.raises(SpecError) as e:
            load_roles(bad)
        assert f": {field}: {what}" in str(e.value), str(e.value)

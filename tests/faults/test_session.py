"""Session faults: each operator transforms a conversation's state as documented, at its layer,
deterministically, and nested in intensity over the conversations it strikes."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from layerlab import paths
from layerlab.corpus import build as corpus_mod
from layerlab.corpus import conversations as cv
from layerlab.corpus.text import states_value
from layerlab.faults.operators import OPERATORS
from layerlab.faults.scenario import conversation_scenarios, load_scenarios
from layerlab.faults.session import SessionContext, SessionOperator, SessionState

DOSES = (0.0, 0.1, 0.25, 0.5, 1.0)
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def convs() -> tuple[cv.Conversation, ...]:
    return cv.build_from_specs()[0]


def _context(c: cv.Conversation, corpus: corpus_mod.Corpus) -> SessionContext:
    docs = {d.doc_id: d for d in corpus.documents}
    docs |= {d.doc_id: d for t in c.turns for d in t.publishes}
    return SessionContext(c.policy_ids, corpus.foreign_by_policy(), docs)


def _state(c: cv.Conversation, corpus: corpus_mod.Corpus, upto: int | None = None) -> SessionState:
    """A clean store's state as turn ``upto`` (default: the last) arrives: every earlier turn
    answered, its current document of the policy remembered and its search result cached."""
    upto = len(c.turns) - 1 if upto is None else upto
    current = {d.policy_id: d for d in corpus.documents if d.status == "current"}
    st = SessionState.open(c.conversation_id)
    for t in c.turns[: upto + 1]:
        st = st.meet(t, t.say("answered") if t.branches else t.text)
        for d in t.publishes:
            current[d.policy_id] = d
        if t.index < upto:
            doc = current[c.policy_ids[0]]
            payload = json.dumps({"results": [{"doc_id": doc.doc_id, "text": doc.text}]})
            st = st.said("assistant", f"reply {t.index}").remember(
                doc.policy_id, doc.text, doc.doc_id
            )
            st = st.cached(t.say("answered") if t.branches else t.text, (doc.policy_id,), payload)
    return st


def _op(name: str, **params: object) -> SessionOperator:
    cls = OPERATORS[name]
    return cls(cls.Params.model_validate(params))  # type: ignore[return-value]


def _updated(convs: tuple[cv.Conversation, ...]) -> cv.Conversation:
    """A conversation with a replacement before its last turn."""
    return next(c for c in convs if any(t.publishes for t in c.turns[1:-1]))


def test_the_clean_store_invalidates_a_replaced_policys_memory_and_cache(convs, corpus) -> None:
    c = _updated(convs)
    st = _state(c, corpus)
    (u,) = st.updates
    assert u.policy_id == c.policy_ids[0] and u.published.startswith(u.policy_id)
    old = [m for m in st.memory if m.turn < u.turn]
    assert old and all(m.invalidated_at == u.turn for m in old)
    assert all(m.invalidated_at is None for m in st.memory if m.turn >= u.turn)
    assert not [m for m in st.served_memory() if m.doc_id == u.retired]
    assert not [r for r in st.served_cache() if r.turn < u.turn]
    with pytest.raises(ValueError, match="before turn"):
        st.at(0)


def test_inject_foreign_memory_serves_another_users_entry_from_turn_t(convs, corpus) -> None:
    c = convs[0]
    ctx = _context(c, corpus)
    op = _op("inject_foreign_memory", at_turn=2)
    before = _state(c, corpus, 1)
    assert op.apply_session(before, ctx, RNG) == before
    st = _state(c, corpus, 2)
    out = op.apply_session(st, ctx, RNG)
    (theirs,) = [m for m in out.memory if m not in st.memory]
    foreign = corpus.foreign_by_policy()[c.policy_ids[0]]
    assert (theirs.text, theirs.doc_id, theirs.turn) == (foreign.text, foreign.doc_id, 2)
    assert theirs.session_id != st.session_id and theirs.user != st.user
    ours = [d for d in corpus.documents if d.policy_id == c.policy_ids[0]]
    assert not any(states_value(theirs.text, x) for x in _values(ours))
    assert (out.history, out.cache, out.session_id) == (st.history, st.cache, st.session_id)
    assert op.apply_session(out, ctx, RNG) == out  # served once, whatever the calls
    with pytest.raises(ValueError, match="no other-tenant version"):
        op.apply_session(st, replace(ctx, foreign={}), RNG)


def _values(docs: list[corpus_mod.Document]) -> list[str]:
    key = corpus_mod.load_answer_key()
    pol = {d.policy_id for d in docs}
    spec = {p.id: p for d in _domains() for p in d.policies if p.id in pol}
    return [v for p in spec.values() for v in (p.current.value, p.superseded.value)] + [
        e.expected_answer for e in key.values() if e.policy_id in pol
    ]


def _domains():
    from layerlab.corpus.spec import load_domains

    return load_domains(paths.CORPUS_SPEC_DIR)


def test_stale_memory_serves_the_retired_version_after_an_update(convs, corpus) -> None:
    c = _updated(convs)
    ctx = _context(c, corpus)
    op = _op("stale_memory")
    st = _state(c, corpus)
    (u,) = st.updates
    out = op.apply_session(st, ctx, RNG)
    served = [m.doc_id for m in out.served_memory()]
    assert u.retired in served and u.retired not in [m.doc_id for m in st.served_memory()]
    assert (out.history, out.cache) == (st.history, st.cache)
    # before the update nothing is stale
    early = _state(c, corpus, u.turn - 1)
    assert op.apply_session(early, ctx, RNG) == early
    # a conversation that remembered nothing gets the retired document's entry, written before
    bare = replace(st, memory=())
    (entry,) = op.apply_session(bare, ctx, RNG).served_memory()
    assert (entry.doc_id, entry.turn) == (u.retired, u.turn - 1)
    assert entry.text == ctx.documents[u.retired].text and entry.session_id == st.session_id


def test_truncate_history_drops_the_first_turn_only(convs, corpus) -> None:
    c = convs[0]
    st = _state(c, corpus)
    out = _op("truncate_history").apply_session(st, _context(c, corpus), RNG)
    assert {m.turn for m in st.history} - {m.turn for m in out.history} == {0}
    assert out.history == tuple(m for m in st.history if m.turn >= 1)
    assert (out.memory, out.cache, out.session_id) == (st.memory, st.cache, st.session_id)
    two = _op("truncate_history", drop_first=2).apply_session(st, _context(c, corpus), RNG)
    assert min(m.turn for m in two.history) == 2


def test_swap_session_serves_another_users_session_from_turn_t(convs, corpus) -> None:
    c = next(x for x in convs if len(x.turns) >= 4)
    ctx = _context(c, corpus)
    op = _op("swap_session", at_turn=2)
    early = _state(c, corpus, 1)
    assert op.apply_session(early, ctx, RNG) == early
    st = _state(c, corpus, 3)
    out = op.apply_session(st, ctx, RNG)
    assert out.session_id != st.session_id and out.user == st.user
    assert {m.turn for m in out.history} == {2, 3}
    theirs = [m for m in out.memory if m.user != st.user]
    assert len(theirs) == 1 and theirs[0].session_id == out.session_id
    assert all(m.session_id == out.session_id and m.turn >= 2 for m in out.memory)
    assert out.cache == st.cache
    mine = _op("swap_session", at_turn=2, with_their_memory=False).apply_session(st, ctx, RNG)
    assert all(m.user == st.user for m in mine.memory)


def test_stale_tool_cache_serves_results_cached_before_the_update(convs, corpus) -> None:
    c = _updated(convs)
    st = _state(c, corpus)
    (u,) = st.updates
    out = _op("stale_tool_cache").apply_session(st, _context(c, corpus), RNG)
    stale = [r for r in out.served_cache() if r.turn < u.turn]
    assert stale and all(u.retired in r.payload for r in stale)
    assert len(out.served_cache()) == len(st.cache)
    assert (out.history, out.memory) == (st.history, st.memory)
    nothing = replace(st, cache=())
    assert _op("stale_tool_cache").apply_session(nothing, _context(c, corpus), RNG) == nothing


def test_each_scenario_claims_its_operators_layer_and_the_paper_keeps_nine() -> None:
    scen = conversation_scenarios()
    for s in scen.values():
        for op in s.operators:
            assert op.stage == "session" and op.layer == s.spec.layer, s.name
    assert {s.spec.layer for s in scen.values() if s.operators} == {
        "session_state", "freshness", "context",
    }  # fmt: skip
    assert len(load_scenarios()) == 9 and not set(scen) & set(load_scenarios())


@pytest.mark.parametrize("name", [n for n, s in conversation_scenarios().items() if s.operators])
def test_a_session_fault_is_deterministic_and_nested_in_intensity(name, convs, corpus) -> None:
    scen = conversation_scenarios()
    hit: list[set[str]] = []
    for dose in DOSES:
        s = scen[name].at(dose)
        changed = set()
        for c in convs:
            st, ctx = _state(c, corpus), _context(c, corpus)
            out = s.session(st, ctx)
            assert out == s.session(st, ctx)
            if out != st:
                changed.add(c.conversation_id)
            assert s.struck(c.conversation_id, c.policy_ids[0]) or out == st
        hit.append(changed)
    assert hit[0] == set() and hit[-1]
    assert all(a <= b for a, b in zip(hit, hit[1:], strict=False)), name  # nested
    assert len(hit[2]) < len(hit[-1])


def test_the_paper_scenarios_leave_a_session_as_it_is(convs, corpus) -> None:
    c = _updated(convs)
    st = _state(c, corpus)
    for s in load_scenarios().values():
        assert s.session(st, _context(c, corpus)) == st

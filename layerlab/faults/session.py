"""Session faults: a conversation's state across turns, and the operators that fault it.

:class:`SessionState` is what a conversational system is served at a turn, as layerlab's
session store keeps it: the history (earlier turns' messages), the memory (entries written in
earlier turns, each with the session and user it belongs to), the tool results cached in earlier
turns, and the policies replaced during the conversation. The store's own rules are the clean
ones: a replacement (:meth:`SessionState.replace`) invalidates the memory entries and cached
results of its policy, so neither is served again.

A session fault (:class:`SessionOperator`, stage ``session``) is a pure function of the state at
a turn: the store stays clean and each turn is served ``Scenario.session(state, ctx)``, so a
fault "injected at turn t" is served from turn t on, the same at every call. Five operators,
each at the layer it claims:

* ``inject_foreign_memory`` (session_state): from turn t, memory holds an entry from another
  user's conversation — that tenant's version of the policy discussed, under its session and user;
* ``stale_memory`` (freshness): the memory entries a replacement invalidated are served again
  (an entry of the retired version is written if the conversation left none);
* ``truncate_history`` (context): the context window drops the first turns (turn 1 by default);
* ``swap_session`` (session_state): from turn t the session id is another user's: the history
  and memory of the turns before are gone, and (by default) that session's memory is served;
* ``stale_tool_cache`` (freshness): results cached before a replacement are served again.

Intensity λ (:meth:`~layerlab.faults.scenario.Scenario.at`) strikes a share of the
*conversations*, by the conversation id's own seeded draw, nested in λ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
from pydantic import Field

from layerlab.corpus.build import TENANT, Document, policy_of
from layerlab.corpus.conversations import Turn
from layerlab.faults.operators import FaultOperator, _Params, register_operator, stable_int

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Message:
    """One message of the conversation's history."""

    turn: int
    role: Role
    text: str


@dataclass(frozen=True)
class MemoryEntry:
    """An entry of the conversation's memory: what it says, about which policy, written at which
    turn, in whose session; ``invalidated_at``: the turn whose replacement retired it."""

    turn: int
    policy_id: str
    text: str
    session_id: str
    user: str
    doc_id: str | None = None
    invalidated_at: int | None = None


@dataclass(frozen=True)
class CachedResult:
    """A tool result cached at a turn (its payload as canonical JSON), for the policies it holds."""

    turn: int
    query: str
    policy_ids: tuple[str, ...]
    payload: str
    invalidated_at: int | None = None


@dataclass(frozen=True)
class Update:
    """A policy replaced during the conversation: at which turn, the retired and the published
    document."""

    turn: int
    policy_id: str
    retired: str
    published: str


def session_id_of(conversation_id: str, user: str) -> str:
    """A conversation's session id (stable, opaque)."""
    return f"s-{stable_int(conversation_id, user) % 16**8:08x}"


@dataclass(frozen=True)
class SessionState:
    """What a conversational system is served at turn ``turn`` (module docstring)."""

    conversation_id: str
    user: str
    session_id: str
    turn: int = 0
    history: tuple[Message, ...] = ()
    memory: tuple[MemoryEntry, ...] = ()
    cache: tuple[CachedResult, ...] = ()
    updates: tuple[Update, ...] = ()

    @classmethod
    def open(cls, conversation_id: str, user: str = f"{TENANT}:user") -> SessionState:
        """A new conversation's empty state at turn 0."""
        return cls(conversation_id, user, session_id_of(conversation_id, user))

    def at(self, turn: int) -> SessionState:
        """The state as the next turn ``turn`` meets it (turns only move forward)."""
        if turn < self.turn:
            raise ValueError(f"{self.conversation_id}: turn {turn} is before turn {self.turn}")
        return replace(self, turn=turn)

    def meet(self, turn: Turn, text: str) -> SessionState:
        """The state as user turn ``turn`` arrives saying ``text``: the turn's replacements made
        (each published document retires the one of its policy it names) and its message added."""
        state = self.at(turn.index)
        for doc in turn.publishes:
            retired = [r for r in turn.retires if policy_of(r) == doc.policy_id]
            if len(retired) != 1:
                raise ValueError(f"{self.conversation_id} turn {turn.index}: {doc.doc_id!r} must "
                                 "retire one document of its policy")  # fmt: skip
            state = state.replace_policy(doc.policy_id, retired[0], doc.doc_id)
        return state.said("user", text)

    def said(self, role: Role, text: str) -> SessionState:
        """The history with a message of this turn added."""
        return replace(self, history=(*self.history, Message(self.turn, role, text)))

    def remember(self, policy_id: str, text: str, doc_id: str | None = None) -> SessionState:
        """The memory with an entry of this turn, this session and this user added."""
        entry = MemoryEntry(self.turn, policy_id, text, self.session_id, self.user, doc_id)
        return replace(self, memory=(*self.memory, entry))

    def cached(self, query: str, policy_ids: tuple[str, ...], payload: str) -> SessionState:
        """The cache with this turn's tool result for ``query`` added."""
        return replace(
            self, cache=(*self.cache, CachedResult(self.turn, query, policy_ids, payload))
        )

    def replace_policy(self, policy_id: str, retired: str, published: str) -> SessionState:
        """``policy_id`` replaced at this turn: the update recorded, and the memory entries and
        cached results of the policy invalidated (the store's clean rule)."""
        t = self.turn
        memory = tuple(
            replace(m, invalidated_at=t) if m.policy_id == policy_id and m.invalidated_at is None
            else m for m in self.memory
        )  # fmt: skip
        cache = tuple(
            replace(c, invalidated_at=t) if policy_id in c.policy_ids and c.invalidated_at is None
            else c for c in self.cache
        )  # fmt: skip
        update = Update(t, policy_id, retired, published)
        return replace(self, memory=memory, cache=cache, updates=(*self.updates, update))

    def served_memory(self) -> tuple[MemoryEntry, ...]:
        """The memory entries served: every one no replacement invalidated."""
        return tuple(m for m in self.memory if m.invalidated_at is None)

    def served_cache(self) -> tuple[CachedResult, ...]:
        """The cached results served: every one no replacement invalidated."""
        return tuple(c for c in self.cache if c.invalidated_at is None)


@dataclass(frozen=True)
class SessionContext:
    """What a session fault may know of the conversation (public fields only): its policies (the
    first is the one discussed), the other tenant's version of each policy
    (``Corpus.foreign_by_policy``) and the documents by id (the corpus's and those published in
    the conversation)."""

    policy_ids: tuple[str, ...]
    foreign: Mapping[str, Document] = field(default_factory=dict, repr=False, compare=False)
    documents: Mapping[str, Document] = field(default_factory=dict, repr=False, compare=False)


class SessionOperator(FaultOperator):
    """A fault of the session state across turns (:meth:`apply_session`)."""

    stage = "session"

    def apply_session(
        self, state: SessionState, ctx: SessionContext, rng: np.random.Generator
    ) -> SessionState:
        raise NotImplementedError


def _theirs(ctx: SessionContext, op: str) -> Document:
    policy = ctx.policy_ids[0] if ctx.policy_ids else None
    doc = ctx.foreign.get(policy) if policy else None
    if doc is None:
        raise ValueError(
            f"{op}: no other-tenant version of {policy!r}; build the session context with the "
            "corpus's foreign versions (Corpus.foreign_by_policy)"
        )
    return doc


def _their_entry(
    state: SessionState, ctx: SessionContext, op: str, tag: str, turn: int
) -> MemoryEntry:
    """Another user's memory entry about the policy discussed, from that user's session."""
    doc = _theirs(ctx, op)
    other = f"s-{stable_int(state.conversation_id, op, tag) % 16**8:08x}"
    return MemoryEntry(turn, doc.policy_id, doc.text, other, f"{doc.tenant}:user", doc.doc_id)


class _AtTurnParams(_Params):
    at_turn: int = Field(default=1, ge=0, le=50)
    tag: str = "foreign"


@register_operator
class InjectForeignMemory(SessionOperator):
    """From turn ``at_turn``, memory also holds an entry from another user's conversation: that
    tenant's version of the policy discussed (a different value), under that user's session."""

    name = "inject_foreign_memory"
    layer = "session_state"
    Params = _AtTurnParams

    def apply_session(self, state: SessionState, ctx: SessionContext,
                      rng: np.random.Generator) -> SessionState:  # fmt: skip
        p: _AtTurnParams = self.params  # type: ignore[assignment]
        if state.turn < p.at_turn:
            return state
        entry = _their_entry(state, ctx, self.name, p.tag, p.at_turn)
        return state if entry in state.memory else replace(state, memory=(*state.memory, entry))


@register_operator
class StaleMemory(SessionOperator):
    """After a replacement, memory still serves what it held of the retired version: the entries
    the replacement invalidated are served again; if the conversation wrote none, an entry of the
    retired document, written the turn before, is."""

    name = "stale_memory"
    layer = "freshness"

    def apply_session(self, state: SessionState, ctx: SessionContext,
                      rng: np.random.Generator) -> SessionState:  # fmt: skip
        memory = list(state.memory)
        for u in state.updates:
            if u.turn > state.turn:
                continue
            hit = [i for i, m in enumerate(memory) if m.policy_id == u.policy_id
                   and m.invalidated_at == u.turn]  # fmt: skip
            for i in hit:
                memory[i] = replace(memory[i], invalidated_at=None)
            if not hit:
                doc = ctx.documents.get(u.retired)
                if doc is None:
                    raise ValueError(f"stale_memory: the retired document {u.retired!r} is not "
                                     "in the session context's documents")  # fmt: skip
                turn = max(u.turn - 1, 0)
                memory.append(MemoryEntry(turn, u.policy_id, doc.text, state.session_id,
                                          state.user, doc.doc_id))  # fmt: skip
        return replace(state, memory=tuple(memory))


class _TruncateParams(_Params):
    drop_first: int = Field(default=1, ge=1, le=50)


@register_operator
class TruncateHistory(SessionOperator):
    """The context window drops the conversation's first ``drop_first`` turns from the history
    (turn 1, by default: the question that named the policy)."""

    name = "truncate_history"
    layer = "context"
    Params = _TruncateParams

    def apply_session(self, state: SessionState, ctx: SessionContext,
                      rng: np.random.Generator) -> SessionState:  # fmt: skip
        n = self.params.drop_first  # type: ignore[attr-defined]
        return replace(state, history=tuple(m for m in state.history if m.turn >= n))


class _SwapParams(_AtTurnParams):
    at_turn: int = Field(default=2, ge=1, le=50)
    with_their_memory: bool = True


@register_operator
class SwapSession(SessionOperator):
    """From turn ``at_turn`` the conversation runs under another user's session id: the history
    and memory of the turns before are gone (they were this session's), what came after is served
    under the new id, and (``with_their_memory``) that session's own memory entry about the policy
    discussed is served too."""

    name = "swap_session"
    layer = "session_state"
    Params = _SwapParams

    def apply_session(self, state: SessionState, ctx: SessionContext,
                      rng: np.random.Generator) -> SessionState:  # fmt: skip
        p: _SwapParams = self.params  # type: ignore[assignment]
        if state.turn < p.at_turn:
            return state
        theirs = _their_entry(state, ctx, self.name, p.tag, p.at_turn)
        new = theirs.session_id
        memory = tuple(replace(m, session_id=new) for m in state.memory
                       if m.turn >= p.at_turn and m.session_id == state.session_id)  # fmt: skip
        return replace(
            state,
            session_id=new,
            history=tuple(m for m in state.history if m.turn >= p.at_turn),
            memory=(theirs, *memory) if p.with_their_memory else memory,
        )


@register_operator
class StaleToolCache(SessionOperator):
    """After a replacement, the tool results cached before it are served again (a cache that does
    not invalidate on update); a conversation that cached nothing of the policy has none to serve."""

    name = "stale_tool_cache"
    layer = "freshness"

    def apply_session(self, state: SessionState, ctx: SessionContext,
                      rng: np.random.Generator) -> SessionState:  # fmt: skip
        done = {(u.turn, u.policy_id) for u in state.updates if u.turn <= state.turn}
        cache = tuple(
            replace(c, invalidated_at=None)
            if any((c.invalidated_at, pid) in done for pid in c.policy_ids) else c
            for c in state.cache
        )  # fmt: skip
        return replace(state, cache=cache)


__all__ = [
    "CachedResult", "MemoryEntry", "Message", "SessionContext", "SessionOperator", "SessionState",
    "Update", "session_id_of",
]  # fmt: skip

"""Session mitigations: changes of what layerlab's session store serves a conversational system.

A conversation's state (:class:`~layerlab.faults.session.SessionState`: history, memory, cached
tool results, the replacements made) is held by layerlab; a session fault changes what a turn is
served of it. A session mitigation is the serving rule a team would add to its store: a pure
function of what the turn is served (after the scenario's faults) and of the store's own record,
applied by the conversational harness before the system sees the request
(:mod:`layerlab.harness.conversation`). Like every mitigation it declares the layer(s) it
targets, its stage (``session``) and its actions, and it never reads the answer key.

The kinds (:data:`SESSION_KINDS`, :func:`register_session`):

* ``none`` — the baseline: what the faults serve, unchanged;
* ``session_scoped_memory`` (session_state) — memory is served only from the turn's own session
  and user: an entry written under another session id or by another user is dropped;
* ``update_invalidation`` (freshness) — a replacement invalidates the memory entries and the
  cached tool results of its policy written before it, and memory holding the retired
  document, whatever served them again;
* ``history_summarisation`` (context) — when the history served lacks earlier turns of this
  session that the store holds (a context window dropped them), one summary line takes their
  place: the opening question of the dropped turns (the one that named the policy) and the
  documents their answers cited. The summary is written from the store's history of this
  session only: a history lost to a session change is another session's, not summarised. It is
  a repair (:meth:`SessionMitigation.restores_history`): a turn whose dropped turns it summarised
  has its history judged restored, so the turn is not struck by the truncation and an answer it
  makes possible is scored against the turn's key, as under clean; a summary that loses what
  the turn needs shows as a wrong answer, not as a struck one.

Their arms are entries of their own spec, ``data/specs/mitigations_conversation.yaml``
(:func:`load_session_mitigations`), apart from ``mitigations.yaml``, whose hash names the
paper's archives: the single-turn pipeline's stages (index … after_reader) do not exist in a
conversation's session store, and the session stage does not exist in the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from layerlab import paths
from layerlab.corpus.spec import load_yaml_as
from layerlab.faults.session import Message, SessionContext, SessionState
from layerlab.mitigations.base import Action, MitigationParams
from layerlab.mitigations.book import ArmBook, ArmDefinition
from layerlab.registry import Registry, did_you_mean

STAGE = "session"
SUMMARY = "[summary of earlier turns]"  # how a summary line starts (a reader may look for it)


class SessionMitigation:
    """Base class: subclasses set ``kind``, ``layers``, ``actions``, ``Params`` and override
    :meth:`serve`."""

    kind: ClassVar[str]
    layers: ClassVar[tuple[str, ...]]
    stage: ClassVar[str] = STAGE
    actions: ClassVar[tuple[Action, ...]]
    Params: ClassVar[type[MitigationParams]] = MitigationParams

    def __init__(self, params: MitigationParams, name: str = ""):
        self.params = params
        self.name = name or self.kind

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        """What the turn is served instead of ``served`` (the faults' serving), given the
        store's own record of the conversation ``store`` and the public context ``ctx``."""
        raise NotImplementedError

    def restores_history(self, served: SessionState, store: SessionState) -> bool:
        """Whether this mitigation's serving of ``served`` stands in for the earlier turns of
        the session that the faults dropped from its history (a repair: the harness then judges
        the turn's history restored, :mod:`layerlab.harness.conversation`). None does but
        :class:`HistorySummarisation`."""
        return False


SESSION_KINDS: Registry[type[SessionMitigation]] = Registry(
    "session mitigation kind", lambda c: c.kind
)


def register_session(cls: type[SessionMitigation]) -> type[SessionMitigation]:
    """Class decorator: make a session mitigation kind available to the conversational spec."""
    return SESSION_KINDS.register(cls)


@register_session
class NoMitigation(SessionMitigation):
    """The baseline: what the scenario's faults serve, unchanged."""

    kind = "none"
    layers = ()
    actions = ("pass",)

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        return served


@register_session
class SessionScopedMemory(SessionMitigation):
    """Memory served only from this session and this user: an entry written under another
    session id, or by another user, is dropped."""

    kind = "session_scoped_memory"
    layers = ("session_state",)
    actions = ("pass", "filter")

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        keep = tuple(m for m in served.memory
                     if m.session_id == served.session_id and m.user == served.user)  # fmt: skip
        return served if keep == served.memory else replace(served, memory=keep)


@register_session
class UpdateInvalidation(SessionMitigation):
    """A replacement invalidates the memory entries and cached tool results of its policy
    written before it, and any memory entry holding the retired document."""

    kind = "update_invalidation"
    layers = ("freshness",)
    actions = ("pass", "filter")

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        memory, cache = list(served.memory), list(served.cache)
        for u in served.updates:
            if u.turn > served.turn:
                continue
            memory = [replace(m, invalidated_at=u.turn) if m.invalidated_at is None and (
                m.doc_id == u.retired or m.policy_id == u.policy_id and m.turn < u.turn) else m
                for m in memory]  # fmt: skip
            cache = [replace(c, invalidated_at=u.turn) if c.invalidated_at is None
                     and u.policy_id in c.policy_ids and c.turn < u.turn else c
                     for c in cache]  # fmt: skip
        return replace(served, memory=tuple(memory), cache=tuple(cache))


def _cited(text: str) -> list[str]:
    try:
        obj = json.loads(text)
    except ValueError:
        return []
    cites = obj.get("citations") if isinstance(obj, dict) else None
    return [c for c in cites or () if isinstance(c, str)]


@register_session
class HistorySummarisation(SessionMitigation):
    """When the history served lacks earlier turns of this session that the store holds, one
    summary line takes their place: the dropped turns' opening question and the documents their
    answers cited (written from this session's history only)."""

    kind = "history_summarisation"
    layers = ("context",)
    actions = ("pass", "repair")

    @staticmethod
    def _dropped(served: SessionState, store: SessionState) -> list[Message]:
        """The store's earlier turns of this session that the served history lacks (none when
        the session changed: another session's history is not ours to summarise)."""
        if served.session_id != store.session_id:
            return []
        kept = {(m.turn, m.role, m.text) for m in served.history}
        return [m for m in store.history
                if m.turn < served.turn and (m.turn, m.role, m.text) not in kept]  # fmt: skip

    def restores_history(self, served: SessionState, store: SessionState) -> bool:
        return bool(self._dropped(served, store))

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        dropped = self._dropped(served, store)
        if not dropped:
            return served
        first = next((m.text for m in dropped if m.role == "user"), "")
        cited = dict.fromkeys(c for m in dropped if m.role == "assistant" for c in _cited(m.text))
        span = f"turns {dropped[0].turn}-{dropped[-1].turn}"
        text = f"{SUMMARY} ({span}) {first}".rstrip()
        if cited:
            text += f" (answers cited: {', '.join(cited)})"
        line = Message(dropped[0].turn, "user", text)
        return replace(served, history=(line, *served.history))


# --- the spec: data/specs/mitigations_conversation.yaml ----------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class SessionEntrySpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    kind: str
    params: dict[str, Any] = Field(default_factory=dict)
    description: str = ""
    matrix: bool = True  # a row of the conversational specificity matrix


class SessionMitigationFile(_Strict):
    baseline: str
    mitigations: list[SessionEntrySpec] = Field(min_length=1)


@dataclass(frozen=True)
class SessionArm:
    """One arm of a conversational run: a session mitigation (the baseline's is ``none``)."""

    name: str
    step: SessionMitigation
    layers: tuple[str, ...]
    stages: tuple[str, ...]
    actions: tuple[str, ...]
    kinds: tuple[str, ...]
    description: str
    matrix: bool
    is_stack: bool = False

    def serve(self, served: SessionState, store: SessionState, ctx: SessionContext) -> SessionState:
        return self.step.serve(served, store, ctx)

    def restores_history(self, served: SessionState, store: SessionState) -> bool:
        return self.step.restores_history(served, store)


@dataclass(frozen=True)
class SessionArms:
    """The arms of the conversational spec, in file order (the shape the specificity matrix
    reads: ``baseline``, ``arms``, ``arm``, ``matrix_arms``)."""

    baseline: str
    arms: Mapping[str, SessionArm]
    source: str

    def arm(self, name: str) -> SessionArm:
        try:
            return self.arms[name]
        except KeyError:
            raise KeyError(f"unknown conversational mitigation {name!r}"
                           f"{did_you_mean(name, self.arms)}; known: {list(self.arms)} "
                           f"(from {self.source})") from None  # fmt: skip

    @property
    def matrix_arms(self) -> tuple[str, ...]:
        return tuple(n for n, a in self.arms.items() if a.matrix and n != self.baseline)

    def book(self) -> ArmBook:
        """The arms' definitions as the specificity matrix reads them
        (:func:`layerlab.analysis.specificity.matrix`)."""
        return ArmBook(self.baseline, {n: ArmDefinition(n, a.kinds, a.layers, a.stages, False,
                                                        a.matrix) for n, a in self.arms.items()},
                       self.source)  # fmt: skip


def _check(f: SessionMitigationFile) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    seen: dict[str, str] = {}
    for i, e in enumerate(f.mitigations):
        if e.name in seen:
            problems.append((("mitigations", i, "name"), f"duplicate name {e.name!r}"))
        seen[e.name] = e.kind
        cls = SESSION_KINDS.get(e.kind)
        if cls is None:
            problems.append((("mitigations", i, "kind"), f"unknown session mitigation kind "
                             f"{e.kind!r}; expected one of {sorted(SESSION_KINDS)}"))  # fmt: skip
            continue
        try:
            cls.Params.model_validate(e.params)
        except ValidationError as exc:
            for err in exc.errors():
                what = "unknown parameter" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append((("mitigations", i, "params", *err["loc"]),
                                 f"{what} (kind {e.kind!r})"))  # fmt: skip
    if seen.get(f.baseline) != NoMitigation.kind:
        problems.append((("baseline",), f"baseline {f.baseline!r} must name an entry of kind "
                         f"{NoMitigation.kind!r}"))  # fmt: skip
    return problems


_CACHE: dict[Path, tuple[float, SessionArms]] = {}


def load_session_mitigations(path: Path | str | None = None) -> SessionArms:
    """Load and validate the conversational mitigations spec (default: the committed
    ``mitigations_conversation.yaml``); :class:`~layerlab.corpus.spec.SpecError` lists every
    problem as ``file:line: field: expectation``."""
    p = Path(path or paths.CONVERSATION_MITIGATION_SPEC)
    stamp = p.stat().st_mtime if p.exists() else -1.0
    hit = _CACHE.get(p)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    f = load_yaml_as(p, SessionMitigationFile, check=_check)
    arms: dict[str, SessionArm] = {}
    for e in f.mitigations:
        cls = SESSION_KINDS[e.kind]
        step = cls(cls.Params.model_validate(e.params), e.name)
        doc = e.description or " ".join((cls.__doc__ or "").split())
        arms[e.name] = SessionArm(e.name, step, cls.layers, (STAGE,), cls.actions, (cls.kind,),
                                  doc, e.matrix)  # fmt: skip
    out = SessionArms(f.baseline, arms, str(p))
    _CACHE[p] = (stamp, out)
    return out


def session_arms(names: Sequence[str], path: Path | str | None = None) -> list[SessionArm]:
    """The arms named (``--mitigation``), each once in the order given; none named: the
    baseline alone. ``KeyError`` (one line) for an unknown name."""
    spec = load_session_mitigations(path)
    return [spec.arm(n) for n in dict.fromkeys(names or [spec.baseline])]


__all__ = [
    "SESSION_KINDS", "STAGE", "SUMMARY", "SessionArm", "SessionArms", "SessionMitigation",
    "load_session_mitigations", "register_session", "session_arms",
]  # fmt: skip

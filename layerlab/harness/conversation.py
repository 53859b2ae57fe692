"""The conversational harness: a system run through the conversations, turn by turn.

For each conversation × conversational scenario × epoch, the scripted user
(:class:`~layerlab.corpus.script.ScriptedUser`) plays the conversation against the system. Layerlab
holds the conversation's state (:class:`~layerlab.faults.session.SessionState`: the history, the
memory store, the cached tool results, the replacements made): at each turn the turn's
replacements are made, the scenario's session faults are applied where they strike
(``Scenario.session``, with its intensity), and the system gets a
:class:`~layerlab.harness.convtools.ConversationRequest`: the conversation id, the turn index, the
turn's text, the served history and memory, and the search tool in front of the served cache.
An arm's session mitigation (:mod:`layerlab.mitigations.session`; the baseline ``none`` changes
nothing) changes what the store serves after the faults and before the system sees the request;
a turn is *struck* when what the arm serves it under the scenario differs from what the arm
serves it from the clean store (a history the arm restored, a summary standing for the dropped
turns, counts as the clean history: :meth:`~layerlab.mitigations.session.SessionMitigation.restores_history`).
After the reply the store keeps the clean record of the turn: the reply in the history, the
searches' results in the cache and, for an answer with a citation, a memory entry (the answer,
under the cited document's policy, in this session). The reply's category (answered, abstained,
or a clarification request) chooses the scripted user's next turn. A system that raises fails
its turn (``provider_error``), one that has not answered within the run's turn timeout fails it
as ``timeout`` (:func:`answered`); either way the user moves on.

Each turn is scored against its own key (:func:`~layerlab.scoring.turns.score_turn`) into a
:class:`~layerlab.archive.turnrecords.TurnRecord`. The key is read here, after the reply, and never
reaches a request. Everything is deterministic: same conversations, scenarios and system, the
same records, byte for byte.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from layerlab._io import canonical_json
from layerlab.archive.turnrecords import TURN_SCHEMA_VERSION, TurnRecord
from layerlab.corpus.build import Corpus, Document
from layerlab.corpus.conversations import Conversation, ConversationKey
from layerlab.corpus.script import ScriptedUser, category_of
from layerlab.faults.scenario import Scenario
from layerlab.faults.session import SessionContext, SessionState
from layerlab.harness.convtools import (
    ConversationRequest,
    ConversationTool,
    Index,
    end_turn,
    mcp_service,
    serve_mcp,
)
from layerlab.harness.live.settings import LiveRunError
from layerlab.harness.targets.base import TargetReply, read_reply, reply_problem
from layerlab.harness.targets.failures import ReplyTimeout
from layerlab.mitigations.session import SessionArm
from layerlab.scoring.turns import score_turn


@dataclass(frozen=True)
class System:
    """A conversational system under test: who it is in the records (``provider``, ``model``)
    and how it answers one :class:`ConversationRequest` (its raw reply); :func:`close_all` ends
    what it holds."""

    provider: str
    model: str
    answer: Callable[[ConversationRequest], Any]
    settings: Mapping[str, Any] = field(default_factory=dict)
    close: Callable[[], None] | None = None
    """What ends the system's resources (an HTTP service's tool server), if any."""
    timed: bool = True
    """Whether the run's turn timeout applies (a model's calls have a timeout of their own, and
    its server answers one turn at a time)."""


def reference(name: str) -> System:
    """A conversational reference reader, ``layerlab/extractive`` or ``layerlab/cautious``: a
    deterministic baseline, not a model (:mod:`layerlab.system.convreader`)."""
    from layerlab.models.agents import PROVIDER
    from layerlab.system.convreader import READERS

    short = name.removeprefix(f"{PROVIDER}/")
    if short not in READERS:
        raise ValueError(f"-m {name}: expected one of "
                         f"{[f'{PROVIDER}/{n}' for n in READERS]} (deterministic baselines)")  # fmt: skip
    return System(PROVIDER, f"{PROVIDER}/{short}", READERS[short]().answer)


CONVERSATIONAL_KINDS = ("python", "langchain", "llamaindex", "langgraph", "http")
"""The target kinds a conversation runs (:func:`target`)."""


def target(spec_text: str, settings: Mapping[str, str] | None = None) -> System:
    """A team's conversational system: a Python target (``module:function`` or
    ``python:module:function``: a function of one :class:`ConversationRequest`, or a class whose
    ``answer`` method is; either may be a coroutine function, whose coroutine is run to its end),
    a LangChain chat chain (``langchain:module:factory``, :mod:`~layerlab.harness.convlangchain`),
    a LlamaIndex chat engine (``llamaindex:module:factory``,
    :mod:`~layerlab.harness.convllamaindex`), a LangGraph graph over layerlab's checkpointer and
    store (``langgraph:module:factory``, :mod:`~layerlab.harness.convlanggraph`) or an HTTP service (``http(s)://...``,
    :mod:`~layerlab.harness.convhttp`; refused in one line when nothing answers there)."""
    from layerlab.harness.targets.python import PythonTarget
    from layerlab.harness.targets.spec import KINDS, parse_target
    from layerlab.models.agents import TARGET_PROVIDER

    kind = spec_text.partition(":")[0]
    if kind in KINDS and kind not in CONVERSATIONAL_KINDS:
        raise ValueError(f"--target {spec_text}: conversations run Python, LangChain, LlamaIndex, "
                         "LangGraph and HTTP targets only so far (MODULE:FN, python:MODULE:FN, "
                         "langchain:MODULE:FACTORY, llamaindex:MODULE:FACTORY, "
                         "langgraph:MODULE:FACTORY, http(s)://...)")  # fmt: skip
    url = spec_text.startswith(("http://", "https://"))
    text = spec_text if url or kind in CONVERSATIONAL_KINDS else f"python:{spec_text}"
    spec = parse_target(text, settings=dict(settings or {}))
    answer: Callable[[ConversationRequest], Any]
    close: Callable[[], None] | None = None
    if spec.kind == "langchain":
        from layerlab.harness.convlangchain import ConversationalChain

        answer = ConversationalChain(spec).answer
    elif spec.kind == "llamaindex":
        from layerlab.harness.convllamaindex import ConversationalEngine

        answer = ConversationalEngine(spec).answer
    elif spec.kind == "langgraph":
        from layerlab.harness.convlanggraph import ConversationalGraph

        graph = ConversationalGraph(spec)
        answer, close = graph.answer, graph.close
    elif spec.kind == "http":
        from layerlab.harness.convhttp import ConversationalService
        from layerlab.harness.targets.http import reachable

        reachable(spec)
        service = ConversationalService(spec)
        answer, close = service.answer, service.close
    else:
        t = PythonTarget(spec)
        answer = cast(Callable[[ConversationRequest], Any], t.answer)  # it calls with any request
    return System(TARGET_PROVIDER, spec.model, answer, spec.options(), close)


@dataclass(frozen=True)
class Reply:
    """A reply as read: its category (None on a failure), answer, citations and failure."""

    category: str | None
    answer: str | None = None
    citations: tuple[str, ...] = ()
    failure: str | None = None

    def json(self) -> str:
        """The reply as the history keeps it (the reply contract's JSON)."""
        return canonical_json({"status": self.category or "abstained", "answer": self.answer,
                               "citations": list(self.citations)})  # fmt: skip


def read_turn_reply(raw: Any, known: Sequence[str]) -> Reply:
    """The reply contract with one status more: ``clarification`` (the system asks back; its
    question in ``answer`` or ``reason``). Anything else is read as a target's reply
    (:func:`~layerlab.harness.targets.base.read_reply`)."""
    if reply_problem(raw) is not None:
        return Reply(None, failure="malformed_reply")
    obj = raw
    if isinstance(raw, TargetReply):
        obj = {"status": raw.status}
    elif isinstance(raw, str):
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
    if isinstance(obj, Mapping) and obj.get("status") == "clarification":
        return Reply("clarification")
    rr = read_reply(raw, known)
    if rr.out is None:
        return Reply(None, failure=rr.failure or "malformed_reply")
    return Reply(rr.out.status, rr.out.answer, tuple(rr.out.citations))


class Setting:
    """What every conversation of a run shares: the corpus's documents and their index, the
    answer kind of each policy, the other tenant's versions, and the conversations' key."""

    def __init__(self, corpus: Corpus, key: ConversationKey) -> None:
        self.corpus = corpus
        self.key = key
        self.index = Index(corpus.documents, corpus.cue_words)
        self.kinds = {t.policy_id: t.answer_kind for t in corpus.tasks}
        self.foreign = corpus.foreign_by_policy()
        self.docs = {d.doc_id: d for d in corpus.documents}


def _view(state: SessionState, turn: int, history: bool = True) -> tuple[Any, ...]:
    """What a turn is served of a state: the history before it (unless ``history`` is false: a
    repair restored it), the memory and cache served, the session id."""
    past = tuple(m for m in state.history if m.turn < turn) if history else ()
    return (past, state.served_memory(), state.served_cache(), state.session_id)


def _answer(system: System, request: ConversationRequest) -> tuple[Any, str | None]:
    """The system's raw reply to one turn, or its failure (``timeout``: a service's own
    timeout; ``provider_error``: anything else it raised)."""
    try:
        raw = system.answer(request)
        if inspect.isawaitable(raw):  # an async target: its coroutine run to its end
            raw = asyncio.run(_awaited(raw))
    except ReplyTimeout:  # a service that did not answer in time
        return None, "timeout"
    except LiveRunError:  # a model's server died or cannot be reached: no data, stop
        raise
    except Exception:  # the system under test failed: the turn's failure, not ours
        return None, "provider_error"
    return raw, None


def answered(system: System, request: ConversationRequest,
             timeout: float | None = None) -> tuple[Any, str | None]:  # fmt: skip
    """(the raw reply, None) or (None, the turn's failure). With ``timeout`` (seconds) the
    system answers in a daemon thread of its own, and one that has not answered by then is the
    turn's ``timeout``: its thread is left behind (a thread cannot be stopped), its turn's tools
    are closed (:func:`~layerlab.harness.convtools.end_turn`) and the conversation goes on.
    Without, it answers in this thread."""
    if timeout is None:
        return _answer(system, request)
    box: list[tuple[Any, str | None]] = []
    worker = threading.Thread(target=lambda: box.append(_answer(system, request)), daemon=True,
                              name=f"turn {request.conversation_id}/{request.turn}")  # fmt: skip
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return None, "timeout"
    return box[0] if box else (None, "provider_error")  # box empty: it raised SystemExit


def play(system: System, conv: Conversation, scenario: Scenario, setting: Setting,
         epoch: int = 0, arm: SessionArm | None = None, turn_timeout: float | None = None,
         mcp: Any = None) -> list[TurnRecord]:  # fmt: skip
    """One conversation played against ``system`` under ``scenario`` (and the session
    mitigation of ``arm``, default none): a record per turn (a turn not answered within
    ``turn_timeout`` seconds is its ``timeout``: :func:`answered`; ``mcp``: the run's MCP
    service, :func:`~layerlab.harness.convtools.mcp_service`)."""
    cid = conv.conversation_id
    published = {d.doc_id: d for t in conv.turns for d in t.publishes}
    docs = {**setting.docs, **published}
    ctx = SessionContext(conv.policy_ids, setting.foreign, docs)
    own = tuple(d.text for d in docs.values() if d.policy_id in conv.policy_ids)
    foreign: dict[str, str] = {}  # another user's entries served to the conversation so far
    kind = setting.kinds.get(conv.policy_ids[0], "")
    user = ScriptedUser(conv)
    state = SessionState.open(cid)
    changes: tuple[tuple[str, Document], ...] = ()
    shown: dict[str, str] = {}
    retired: list[str] = [d.doc_id for d in docs.values()
                          if d.status != "current" and d.policy_id in conv.policy_ids]  # fmt: skip
    records: list[TurnRecord] = []
    category: str = "answered"
    for turn in conv.turns:
        text = user.first() if turn.index == 0 else user.reply(category_of(category))
        if text is None:
            break
        state = state.meet(turn, text)
        for doc in turn.publishes:
            old = next(r for r in turn.retires if docs[r].policy_id == doc.policy_id)
            changes += ((old, doc),)
            retired.append(old)
        served, clean = scenario.session(state, ctx), state
        restored = False  # an arm's repair stands in for the history the faults dropped
        if arm is not None:  # the arm's serving rule, after the faults, before the system
            restored = arm.restores_history(served, state)
            served, clean = arm.serve(served, state, ctx), arm.serve(state, state, ctx)
        struck = _view(served, turn.index, not restored) != _view(clean, turn.index, not restored)
        history = tuple(m for m in served.history if m.turn < turn.index)
        memory = served.served_memory()
        written = {(m.turn, m.policy_id, m.doc_id, m.text) for m in state.memory}
        for m in memory:  # another user's entry, or another session's the store did not write
            if m.user != state.user or m.session_id != state.session_id and (
                    m.turn, m.policy_id, m.doc_id, m.text) not in written:  # fmt: skip
                foreign[m.doc_id or f"memory:{m.session_id}:{m.turn}"] = m.text
        tool = ConversationTool(setting.index, changes, served)
        request = ConversationRequest(tool, text, kind, history, memory, system.settings)
        serve_mcp(request, mcp)
        try:
            raw, failure = answered(system, request, turn_timeout if system.timed else None)
        finally:
            end_turn(request)
        shown |= tool.delivered()
        shown |= {m.doc_id: m.text for m in memory if m.doc_id}
        reply = Reply(None, failure=failure) if failure else read_turn_reply(
            raw, [*shown, *docs, *foreign])  # fmt: skip
        tk = setting.key[(cid, turn.index)]
        labels = score_turn(
            tk, reply.category or "abstained", reply.answer, reply.citations, shown,
            failure=reply.failure, invalid_calls=sum(not c.valid for c in tool.calls),
            unsafe_strike=struck and not scenario.spec.answerable, foreign=foreign, own=own,
            retired=retired,
        )  # fmt: skip
        records.append(TurnRecord(
            TURN_SCHEMA_VERSION, system.provider, system.model, scenario.name,
            scenario.spec.answerable, cid, conv.policy_ids[0], conv.domain, epoch, turn.index,
            tk.kind, reply.category or "none", struck, len(history), len(memory),
            len(tool.calls), sum(c.cached for c in tool.calls), *_labels(labels),
        ))  # fmt: skip
        if arm is not None:  # the baseline's records are the same whether named or not
            records[-1] = replace(records[-1], mitigation=arm.name)
        state = state.said("assistant", reply.json())
        for q, pids, payload in tool.writes:
            state = state.cached(q, pids, payload)
        if reply.category == "answered" and reply.citations:
            src = docs.get(reply.citations[0]) or next(
                (d for d in setting.foreign.values() if d.doc_id == reply.citations[0]), None)
            if src is not None:
                state = state.remember(src.policy_id, reply.answer or "", src.doc_id)
        category = reply.category or "abstained"
    return records


def close_all(systems: Sequence[System]) -> None:
    """End what the systems hold (each one's ``close``, if any)."""
    for system in systems:
        if system.close is not None:
            system.close()


async def _awaited(raw: Any) -> Any:
    return await raw


def _labels(labels: Any) -> list[Any]:
    from dataclasses import astuple

    return list(astuple(labels))


def run(systems: Sequence[System], convs: Sequence[Conversation], scenarios: Sequence[Scenario],
        setting: Setting, epochs: int = 1, turn_timeout: float | None = None,
        progress: Callable[[str], None] | None = None,
        arms: Sequence[SessionArm] = ()) -> list[TurnRecord]:  # fmt: skip
    """Every system × arm × scenario × conversation × epoch, in that order: the turn records
    (``arms``: the session mitigations' arms; none given, the baseline alone, ``none``); each
    turn has ``turn_timeout`` seconds (None: no limit; a system not ``timed`` has none).
    ``progress`` (if given) is told of each system × arm × scenario when it is done."""
    if epochs < 1:
        raise ValueError(f"epochs: expected at least 1, got {epochs}")
    if turn_timeout is not None and not turn_timeout > 0:
        raise ValueError(f"turn timeout: expected seconds greater than 0, got {turn_timeout}")
    for scenario in scenarios:
        if scenario.spec.faults and any(op.stage != "session" for op in scenario.operators):
            raise ValueError(f"--scenario {scenario.name}: not a conversational scenario "
                             "(its faults must be session faults)")  # fmt: skip
    out: list[TurnRecord] = []
    mcp = mcp_service()  # the turns' MCP addresses: started only if a system asks for one
    try:
        for system in systems:
            for arm in arms or (None,):
                for scenario in scenarios:
                    for conv in convs:
                        for epoch in range(epochs):
                            out += play(system, conv, scenario, setting, epoch, arm, turn_timeout, mcp)
                    if progress is not None:
                        tag = f" [{arm.name}]" if arm is not None else ""
                        progress(f"{system.model}{tag} x {scenario.name}: {len(convs)} "
                                 "conversation(s) done")  # fmt: skip
    finally:
        if mcp is not None:
            mcp.close()
    return out




# --- the run's folder ------------------------------------------------------------------------

RUN_FILES = ("turns.jsonl", "summary.json")


def folder_problem(out: Any) -> str | None:
    """Why ``out`` may not be written: it must be missing, empty, or a conversational run folder
    (its manifest says so) holding only that run's files, which it replaces."""
    from pathlib import Path

    from layerlab._io import folder_names

    out = Path(out)
    bad, names = folder_names(out)
    if bad is not None or not names:
        return bad
    try:
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("run") != "conversations":
        return (f"not empty and not a conversational run folder (holds {names[0]!r}); expected "
                "a new or empty folder, or a conversational run's folder (which is replaced)")  # fmt: skip
    extra = [n for n in names if n not in (*RUN_FILES, "manifest.json")]
    return f"a conversational run folder that also holds {extra[0]!r}" if extra else None


def write_run(out: Any, records: Sequence[TurnRecord], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Write the run's folder whole: ``turns.jsonl`` (the turn records), ``summary.json``
    (:func:`~layerlab.analysis.conversations.summarise`) and ``manifest.json`` (``manifest``,
    the counts and the files' checksums; no timestamp: same run, same bytes). Returns the
    summary; :class:`~layerlab._io.FolderRefused` when :func:`folder_problem` objects."""
    from pathlib import Path

    from layerlab import __version__
    from layerlab._io import atomic_write_text, replace_folder, sha256_file
    from layerlab.analysis.conversations import summarise
    from layerlab.archive import turnrecords

    summary = summarise(records)  # in the run's order: systems, then scenarios

    def fill(tmp: Path) -> None:
        turnrecords.write(list(records), tmp)
        atomic_write_text(tmp / "summary.json", canonical_json(summary) + "\n")
        full = {"run": "conversations", "turn_schema_version": TURN_SCHEMA_VERSION,
                "layerlab_version": __version__, **dict(manifest),
                "counts": {"turns": len(records),
                           "conversations": len({r.conversation_id for r in records})},
                "files": {n: sha256_file(tmp / n) for n in RUN_FILES}}  # fmt: skip
        atomic_write_text(tmp / "manifest.json", canonical_json(full) + "\n")

    replace_folder(Path(out), fill, folder_problem)
    return summary


__all__ = ["CONVERSATIONAL_KINDS", "RUN_FILES", "Reply", "Setting", "System", "answered",
           "close_all", "folder_problem", "play", "read_turn_reply", "reference", "run", "target",
           "write_run"]  # fmt: skip

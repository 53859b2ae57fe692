"""Agent mode: the model calls the faulted tools itself, step by step, then replies.

Beside the single-call reader (the harness searches once and hands the model the results), an
agent record is a loop the harness drives, one model call per *step*::

    loop = AgentLoop(task, prepared, arm, protocol="json_action", max_steps=4)
    while not loop.done:
        req = loop.request()            # the conversation so far, the tools or the action schema
        loop.advance(reply_text)        # parse; run each tool call through the faulted tools
    done = loop.finish(context, replicate)   # the one scorer, the archive record

Each tool call goes through the scenario's faults, the arm's contract and its mitigations
(:class:`~layerlab.harness.tools.ToolBox`). The agent may make up to ``max_steps`` tool-calling
turns; the turn after that must be its final reply (it is told so, and under ``json_action``
the schema allows nothing else). A reply that still calls a tool then ends the record as
``step_limit``; a reply that is no action at all as ``malformed_reply``.

The record is scored by the one scorer over everything the agent's calls delivered (R), its
citations (G), every call's validity (V: the payloads, and the agent's own arguments) and its
answer (E); :meth:`AgentLoop.summary` gives the per-record step fields (steps, tool calls,
invalid calls, retries after a fault, stopped by the limit) and :attr:`AgentLoop.calls` the
per-call log the archive's ``steps`` table keeps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from layerlab._io import canonical_json
from layerlab.corpus.build import Task
from layerlab.harness.prepare import PreparedScenario
from layerlab.harness.step import Done, Reading, RecordContext, as_arm
from layerlab.harness.tools import TOOL_DEFINITIONS, TOOLS_VERSION, ToolBox, ToolCall, finish
from layerlab.mitigations import Arm
from layerlab.system import agentprompt as ap
from layerlab.system import prompt
from layerlab.system.reader import ReaderOutput

DEFAULT_MAX_STEPS = 4


@dataclass(frozen=True)
class AgentSummary:
    """The per-record step fields of an agent record."""

    steps: int  # model calls (turns), the final reply's included
    tool_calls: int
    invalid_calls: int  # calls whose arguments broke the tool's schema
    retries_after_fault: int  # calls made right after a call that ended in a fault
    step_limit: bool  # the agent used every tool-calling turn (then was told to answer)
    protocol: str


def conversation_hash(req: dict[str, Any]) -> str:
    """SHA-256 of one step's whole request (versions, conversation, tools or schema): its
    reply-cache key, so every step of a record is one cache entry."""
    data = {"v": prompt.PROMPT_VERSION, "agent": ap.AGENT_PROMPT_VERSION,
            "tools": TOOLS_VERSION, **req}  # fmt: skip
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


class AgentLoop:
    """One agent record, driven by a harness (sync or async): :meth:`request`, then
    :meth:`advance` with the model's reply, until :attr:`done`; then :meth:`finish`."""

    def __init__(
        self,
        task: Task,
        prepared: PreparedScenario,
        arm: str | Arm,
        protocol: str = "json_action",
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        if protocol not in ap.PROTOCOLS:
            raise ValueError(f"unknown tool protocol {protocol!r}; known: {list(ap.PROTOCOLS)}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.task, self.prepared, self.arm = task, prepared, as_arm(arm)
        self.protocol, self.max_steps = protocol, max_steps
        self.tools = ToolBox(task, prepared, self.arm)
        self.messages: list[dict[str, Any]] = ap.first_messages(
            task.question, task.answer_kind, self.tools.session_id, max_steps, protocol
        )
        self.turns = 0  # model replies so far
        self.out: ReaderOutput | None = None
        self.failure: str | None = None
        self.done = False
        self.replies: list[str] = []  # the model's raw replies (the private sample log's)

    @property
    def calls(self) -> list[ToolCall]:
        return self.tools.calls

    @property
    def last_turn(self) -> bool:
        """Whether the next reply must be the final one (every tool-calling turn used)."""
        return self.turns >= self.max_steps

    def request(self) -> dict[str, Any]:
        """The next model call: ``messages`` and, per protocol, ``tools``/``tool_choice`` or the
        ``response_schema`` the reply is constrained to (the harness maps it to its server's
        ``response_format``)."""
        if self.done:
            raise RuntimeError("the agent has replied")
        msgs = [dict(m) for m in self.messages]
        if self.last_turn:
            msgs.append({"role": "user", "content": ap.LAST_TURN})
        if self.protocol == "native":
            return {"messages": msgs, "tools": list(TOOL_DEFINITIONS),
                    "tool_choice": "none" if self.last_turn else "auto"}  # fmt: skip
        schema = ap.ANSWER_SCHEMA if self.last_turn else ap.ACTION_SCHEMA
        return {"messages": msgs, "response_schema": schema}

    def advance(self, reply: str | None, failure: str | None = None) -> None:
        """Take the model's reply to :meth:`request` (or the provider's ``failure``)."""
        if self.done:
            raise RuntimeError("the agent has replied")
        final = self.last_turn  # this reply was asked as the final one
        self.turns += 1
        if failure is not None or reply is None:
            self._end(failure=failure or "provider_error")
            return
        self.replies.append(reply)
        parse = ap.parse_native if self.protocol == "native" else ap.parse_action
        try:
            turn = parse(reply)
        except prompt.MalformedReply:
            self._end(failure="malformed_reply")
            return
        if turn.out is not None:
            self._end(out=turn.out)
            return
        if final:  # still calling tools when told to answer
            self._end(failure="step_limit")
            return
        self.messages.append(ap.assistant_message(self.protocol, reply, turn))
        for c in turn.calls:
            obs = self.tools.call(c.name, c.args, self.turns)
            self.messages.append(ap.tool_message(self.protocol, c, obs))
            if self.tools.refusal is not None:  # a mitigation refused: the record ends
                self._end()
                return

    def _end(self, out: ReaderOutput | None = None, failure: str | None = None) -> None:
        self.out, self.failure, self.done = out, failure, True

    def summary(self) -> AgentSummary:
        calls = self.tools.calls
        return AgentSummary(
            steps=self.turns,
            tool_calls=len(calls),
            invalid_calls=sum(not c.valid for c in calls),
            retries_after_fault=sum(c.after_fault for c in calls),
            step_limit=self.turns > self.max_steps,
            protocol=self.protocol,
        )

    def reading(self) -> Reading:
        """The record's reading for the scorer: the final reply, the conversation's hash and the
        failure, if any."""
        return Reading(self.out, conversation_hash({"messages": self.messages}), self.failure)

    def finish(self, ctx: RecordContext, replicate: int = 0) -> Done:
        """Score the record: the final reply through the arm's after-reader steps, then the
        one scorer over everything the agent's calls delivered."""
        if not self.done:
            raise RuntimeError("the agent has not replied yet")
        return finish(self.tools, ctx, self.reading(), replicate)

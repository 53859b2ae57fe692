"""The public side of the fault matrix that the Inspect task and its scorer share: the corpus,
the scenarios and each scenario made concrete (cached per process), a sample's identity, the
faulted tools of one sample and the replay of a conversation's tool calls through them.

Nothing here reads the answer key. A sample's metadata names its scenario, arm and task (ids
and public fields only); its faulted tools are a :class:`~layerlab.harness.tools.ToolBox`, the
same one an agent of ``run live --agent`` calls. The scorer does not take the tools' state from
the solver: it replays the conversation's tool calls, in order, through a fresh ToolBox of the
same (task, scenario, arm) — every fault and mitigation is deterministic — and checks that each
replayed observation is the one the model was given (:func:`replay`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from layerlab.corpus.build import Corpus, Task
from layerlab.faults.scenario import Scenario
from layerlab.harness.prepare import PreparedScenario
from layerlab.harness.tools import FAULTS, ToolBox, ToolCall, tool_error
from layerlab.registry import did_you_mean


class MatrixError(ValueError):
    """A task parameter or sample that names no part of the matrix (message says which)."""


@lru_cache(maxsize=4)
def corpus(folder: str = "") -> Corpus:
    """The public side of a built corpus (``""``: the committed one), loaded once."""
    from layerlab.corpus import build

    return build.load(folder or None)


@lru_cache(maxsize=4)
def scenarios(path: str = "") -> dict[str, Scenario]:
    """The fault scenarios of the scenario DSL (``""``: the committed spec), loaded once."""
    from layerlab.faults.scenario import load_scenarios

    return load_scenarios(path or None)


@lru_cache(maxsize=64)
def prepared(folder: str, scenario: str) -> PreparedScenario:
    """A scenario made concrete over a corpus (its index, searches and payloads), once."""
    from layerlab.harness.prepare import prepare

    return prepare(corpus(folder), scenarios()[scenario])


def sample_id(scenario: str, mitigation: str, task_id: str) -> str:
    """A sample's id: ``scenario:arm:task_id`` (the same in the task and in an exported run)."""
    return f"{scenario}:{mitigation}:{task_id}"


@dataclass(frozen=True)
class Cell:
    """Which record of the matrix a sample is: its scenario, arm and task (public ids only)."""

    scenario: str
    mitigation: str
    task_id: str
    corpus: str = ""  # the built corpus folder ("": the committed one)

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> Cell:
        try:
            return cls(str(metadata["scenario"]), str(metadata["mitigation"]),
                       str(metadata["task_id"]), str(metadata.get("corpus") or ""))  # fmt: skip
        except KeyError as exc:
            raise MatrixError(
                f"sample metadata has no {exc.args[0]!r} (expected a sample of "
                "layerlab/fault_matrix: scenario, mitigation, task_id)"
            ) from None

    def task(self) -> Task:
        for t in corpus(self.corpus).tasks:
            if t.task_id == self.task_id:
                return t
        raise MatrixError(f"task {self.task_id!r}: not in the corpus {self.corpus or 'enterprise_v2'}")

    def toolbox(self) -> ToolBox:
        """The sample's faulted tools: a fresh ToolBox of its task, scenario and arm."""
        return ToolBox(self.task(), prepared(self.corpus, self.scenario), self.mitigation)


def metadata(cell: Cell, task: Task, answerable: bool) -> dict[str, Any]:
    """A sample's metadata: its identity and the task's public fields (never its answer)."""
    return {
        "scenario": cell.scenario,
        "mitigation": cell.mitigation,
        "task_id": task.task_id,
        "domain": task.domain,
        "policy_id": task.policy_id,
        "variant": task.variant,
        "answer_kind": task.answer_kind,
        "answerable": answerable,
        **({"corpus": cell.corpus} if cell.corpus else {}),
    }


def choose(
    scenario_names: str | Sequence[str] | None,
    task_ids: str | Sequence[str] | None,
    limit: int | None,
    seed: int,
    folder: str = "",
) -> tuple[list[str], list[Task]]:
    """The scenarios and tasks a task's parameters ask for (comma-separated or lists; None: all;
    ``limit``: a seeded, stratified subset, as ``run live --limit``)."""
    from layerlab.harness.selection import stratified_tasks

    known = scenarios()
    names = _names(scenario_names) or list(known)
    for n in names:
        if n not in known:
            raise MatrixError(f"scenarios: unknown scenario {n!r}{did_you_mean(n, known)} "
                              f"(known: {', '.join(known)})")  # fmt: skip
    pool = corpus(folder).tasks
    by_id = {t.task_id: t for t in pool}
    ids = _names(task_ids)
    for i in ids:
        if i not in by_id:
            raise MatrixError(f"tasks: no task {i!r} in the corpus{did_you_mean(i, by_id)}")
    chosen = [by_id[i] for i in ids] if ids else list(pool)
    if limit is not None:
        keep = set(stratified_tasks(chosen, integer("limit", limit, 1), integer("seed", seed)))
        chosen = [t for t in chosen if t.task_id in keep]
    return names, chosen


def integer(name: str, value: object, minimum: int | None = None) -> int:
    """A task parameter that must be an integer (``-T`` gives YAML's; the Python API may give a
    string of digits), at least ``minimum``."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (
        minimum is not None and value < minimum
    ):
        least = f" >= {minimum}" if minimum is not None else ""
        raise MatrixError(f"{name}: expected an integer{least}, got {value!r}")
    return value


def _names(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [s.strip() for s in items if s.strip()]


def call_tool(box: ToolBox, name: str, args: Any, step: int) -> dict[str, Any]:
    """One tool call of a sample. After a mitigation's refusal no call reaches the tools (agent
    mode ends the record there): the call gets the refusal again, and is not recorded."""
    if box.refusal is not None:
        return {"status": "refused", "error": tool_error("refused", box.refusal)}
    return box.call(name, args, step)


def reject(box: ToolBox, name: str, problem: str, step: int) -> None:
    """Record a call that Inspect refused before it reached the tool (its arguments broke the
    tool's schema, or no such tool): an invalid call, against V, as the ToolBox counts its own."""
    after = bool(box.calls) and box.calls[-1].outcome in FAULTS
    box.calls.append(ToolCall(step, name, False, "invalid", after_fault=after, problem=problem))


def replay(cell: Cell, messages: Sequence[Any]) -> ToolBox:
    """The sample's ToolBox after its conversation's tool calls, replayed in order: each call
    Inspect ran goes through a fresh ToolBox, each call Inspect refused is an invalid call. A
    replayed observation that differs from the one the model was given raises
    :class:`MatrixError` (the tools would not be what was scored)."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool

    box = cell.toolbox()
    results = {m.tool_call_id: m for m in messages if isinstance(m, ChatMessageTool)}
    step = 0
    for m in messages:
        if not isinstance(m, ChatMessageAssistant):
            continue
        step += 1
        for call in m.tool_calls or []:
            got = results.get(call.id)
            if got is None:  # not run (the last turn's calls, or the sample ended first)
                continue
            if got.error is not None and got.error.type == "parsing":
                reject(box, call.function, got.error.message, step)
                continue
            obs = call_tool(box, call.function, call.arguments, step)
            if _shown(got) != obs:
                raise MatrixError(
                    f"{sample_id(cell.scenario, cell.mitigation, cell.task_id)}: the replayed "
                    f"{call.function} call (turn {step}) does not give the observation the model "
                    "got; the tools are not deterministic here"
                )
    return box


def _shown(message: Any) -> Any:
    """The observation a tool message carried (its text as JSON; None when it is not JSON)."""
    try:
        return json.loads(message.text)
    except (TypeError, ValueError):
        return None


def corpus_folder(folder: str | Path | None) -> str:
    """A corpus folder parameter as the caches key it (``""``: the committed corpus)."""
    return str(Path(folder).resolve()) if folder else ""

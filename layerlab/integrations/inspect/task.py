"""The fault matrix as an Inspect task: ``inspect eval layerlab/fault_matrix --model M``.

One Inspect :class:`~inspect_ai.dataset.Sample` per (scenario, task) of the matrix, under one arm
(``-T mitigation=strict``): its input is the task's question, its metadata the scenario, arm and
the task's public fields (:func:`~layerlab.integrations.inspect.matrix.metadata`), its target
empty — the answer key is the scorer's alone. Each sample runs agent mode's conversation:

* :func:`faulted_tools` opens it as ``run live --agent`` does (the native protocol's
  instructions; the question, answer kind, session id and how many tool calls are left) and
  gives the model the sample's faulted ``search`` and ``open_document`` as Inspect tools
  (``use_tools``), with layerlab's own JSON schemas: every call goes through the scenario's
  faults, the arm's contract and its mitigations (:class:`~layerlab.harness.tools.ToolBox`);
* :func:`tool_turns` lets the model call them for up to ``max_steps`` turns (Inspect's
  ``generate``, one round of tool calls a turn), then asks for the final reply with no tool left;
  a mitigation's refusal ends the sample, as it ends an agent record;
* :func:`~layerlab.integrations.inspect.scorer.fault_matrix_scorer` scores it.

Task parameters (``-T``): ``scenarios`` and ``tasks`` (comma-separated, or lists; default all),
``limit`` (a seeded, stratified subset of the tasks, as ``run live --limit``) with ``seed``,
``mitigation`` (the arm), ``max_steps`` and ``corpus`` (a built corpus folder).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageTool, ChatMessageUser
from inspect_ai.solver import Generate, Solver, TaskState, solver, use_tools
from inspect_ai.tool import Tool, ToolDef, ToolParams, tool

from layerlab.harness.agent import DEFAULT_MAX_STEPS
from layerlab.harness.tools import OPEN, SEARCH, TOOL_DEFINITIONS, TOOLS_VERSION, ToolBox
from layerlab.integrations.inspect import matrix
from layerlab.integrations.inspect.scorer import fault_matrix_scorer
from layerlab.system import agentprompt

PROTOCOL = "native"  # Inspect carries tool calls natively: agent mode's native conversation


@task
def fault_matrix(
    scenarios: str | list[str] | None = None,
    tasks: str | list[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
    mitigation: str = "strict",
    max_steps: int = DEFAULT_MAX_STEPS,
    corpus: str | None = None,
) -> Task:
    """layerlab's fault matrix: each sample a (scenario, task) under one arm, the model calling
    the scenario's faulted tools, scored by layerlab's scorer (S = E ∧ R ∧ G ∧ V, safe resolution,
    grounded false positives), per scenario.

    Args:
      scenarios: scenario names (comma-separated or a list; default: all nine).
      tasks: task ids (comma-separated or a list; default: every task of the corpus).
      limit: a seeded, stratified subset of that many tasks (as ``run live --limit``).
      seed: the seed of the ``limit`` selection.
      mitigation: the arm (its contract and mitigations), e.g. strict, repair, freshness_guard.
      max_steps: tool-calling turns before the model must reply.
      corpus: a built corpus folder (default: the committed enterprise_v2).
    """
    from layerlab import __version__, mitigations

    max_steps = matrix.integer("max_steps", max_steps, 1)
    try:
        arm = mitigations.arm(mitigation)
    except (KeyError, ValueError) as exc:
        raise matrix.MatrixError(f"mitigation: {exc.args[0] if exc.args else exc}") from None
    folder = matrix.corpus_folder(corpus)
    names, chosen = matrix.choose(scenarios, tasks, limit, seed, folder)
    specs = matrix.scenarios()
    samples = [
        Sample(
            id=matrix.sample_id(s, arm.name, t.task_id),
            input=t.question,
            metadata=matrix.metadata(matrix.Cell(s, arm.name, t.task_id, folder), t,
                                     specs[s].spec.answerable),  # fmt: skip
        )
        for s in names
        for t in chosen
    ]
    name = matrix.corpus(folder).name
    return Task(
        dataset=MemoryDataset(samples, name=f"layerlab {name}"),
        solver=[faulted_tools(max_steps), tool_turns(max_steps)],
        scorer=fault_matrix_scorer(),
        version=TOOLS_VERSION,
        metadata={
            "layerlab_version": __version__,
            "tools": TOOLS_VERSION,
            "agent_prompt": agentprompt.AGENT_PROMPT_VERSION,
            "protocol": PROTOCOL,
            "mitigation": arm.name,
            "corpus": name,
            "scenarios": names,
        },
    )


_DESCRIBED = {"doc_id": "the doc_id as a search returned it"}  # Inspect wants every one described


def _params(name: str) -> ToolParams:
    """A tool's parameters as layerlab defines them (:data:`TOOL_DEFINITIONS`), each described."""
    fn = next(t["function"] for t in TOOL_DEFINITIONS if t["function"]["name"] == name)
    params = json.loads(json.dumps(fn["parameters"]))
    for k, p in params["properties"].items():
        if "description" not in p:
            p["description"] = _DESCRIBED[k]
    return ToolParams.model_validate(params)


def _description(name: str) -> str:
    return str(next(t["function"]["description"] for t in TOOL_DEFINITIONS
                    if t["function"]["name"] == name))  # fmt: skip


@tool(name=SEARCH)
def search(box: ToolBox) -> Tool:
    """The sample's faulted search tool. (A call's step is not kept here: the scorer replays
    the conversation through a fresh ToolBox, which numbers the turns.)"""

    async def execute(query: str, top_k: int = 3) -> str:
        """Search the company's policy documents.

        Args:
          query: what to search for
          top_k: how many documents to return (1-5)
        """
        return json.dumps(matrix.call_tool(box, SEARCH, {"query": query, "top_k": top_k}, 0))

    return execute


@tool(name=OPEN)
def open_document(box: ToolBox) -> Tool:
    """The sample's faulted open_document tool."""

    async def execute(doc_id: str) -> str:
        """Open one document by its doc_id.

        Args:
          doc_id: the doc_id as a search returned it
        """
        return json.dumps(matrix.call_tool(box, OPEN, {"doc_id": doc_id}, 0))

    return execute


def sample_tools(box: ToolBox) -> list[ToolDef]:
    """The sample's two faulted tools as Inspect tools, with layerlab's names, descriptions
    and JSON schemas; never truncated (the model sees the whole observation)."""
    made = {SEARCH: search(box), OPEN: open_document(box)}
    return [ToolDef(made[n], name=n, description=_description(n), parameters=_params(n),
                    max_output=0) for n in (SEARCH, OPEN)]  # fmt: skip


@solver
def faulted_tools(max_steps: int = DEFAULT_MAX_STEPS) -> Solver:
    """Open the sample's conversation as agent mode does and give the model its faulted tools."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        cell = matrix.Cell.of(state.metadata)
        box = cell.toolbox()
        opening = agentprompt.first_messages(box.task.question, box.task.answer_kind,
                                             box.session_id, max_steps, PROTOCOL)  # fmt: skip
        state.messages = [ChatMessageSystem(content=opening[0]["content"]),
                          ChatMessageUser(content=opening[1]["content"])]  # fmt: skip
        return await use_tools(sample_tools(box))(state, generate)

    return solve


@solver
def tool_turns(max_steps: int = DEFAULT_MAX_STEPS) -> Solver:
    """Up to ``max_steps`` turns of ``generate`` with one round of tool calls each, then the
    final reply with no tool left (told so, as agent mode tells it); a refusal ends the sample."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        for turn in range(1, max_steps + 2):
            last = turn > max_steps
            if last:
                state.messages.append(ChatMessageUser(content=agentprompt.LAST_TURN))
                state.tool_choice = "none"
            state = await generate(state, tool_calls="none" if last else "single")
            if last or not state.output.message.tool_calls or _refused(state.messages):
                break
        return state

    return solve


def _refused(messages: Sequence[Any]) -> bool:
    """Whether a mitigation refused in the last round of tool calls (the sample ends there)."""
    for m in reversed(messages):
        if not isinstance(m, ChatMessageTool):
            return False
        try:
            if json.loads(m.text).get("status") == "refused":
                return True
        except (TypeError, ValueError, AttributeError):
            continue
    return False

"""The Inspect scorer of the fault matrix: layerlab's one scorer, and the shape of its Score.

Evaluator side: with :mod:`layerlab.scoring` this is the only place the Inspect integration
reads the answer key (:func:`_answer_key`, inside the scorer, when the first sample is scored).
The key never reaches the sample (its input, target or metadata), the model, a tool result or
the Score: a Score carries the scorer's labels, which the archive's allowlist admits, and the
model's own answer — never the expected answer or the required document ids.

:func:`score_of` is the one shape of a record's Score, shared with the export of a finished run
(:mod:`~layerlab.integrations.inspect.export`): ``value`` is a dict of 0/1 per measure
(:data:`VALUES`: S, E, R, G, V, safe resolution, grounded false positive), ``explanation`` one
line of labels, ``metadata`` the labels themselves. :data:`METRICS` gives each measure's
accuracy (and standard error), and S, safe resolution and GF per scenario.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from inspect_ai.scorer import Score, Target, accuracy, grouped, scorer, stderr
from inspect_ai.solver import TaskState

from layerlab.integrations.inspect import matrix

if TYPE_CHECKING:
    from inspect_ai.scorer import Scorer

    from layerlab.corpus.build import AnswerKey
    from layerlab.harness.step import Reading

VALUES: dict[str, str] = {
    "S": "success",
    "E": "exact_match",
    "R": "retrieval_ok",
    "G": "citation_ok",
    "V": "schema_ok",
    "safe": "safe_resolution",
    "GF": "grounded_false_positive",
}
"""A Score's value keys and the record label each one is (1 true, 0 false; NaN not recorded,
which only an archive migrated from schema 3 has for GF)."""

BY_SCENARIO = ("S", "safe", "GF")


SCORER = "fault_matrix_scorer"
"""The scorer's name: the key of its Score in a sample's ``scores``."""
_GROUPED = {"group_key": "scenario", "all": False}


def _metrics() -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for k in VALUES:
        out[k] = [accuracy(), stderr()]
        if k in BY_SCENARIO:
            out[k].append(grouped(accuracy(), **_GROUPED))  # type: ignore[arg-type]
    return out


METRICS = _metrics()
"""Per measure: its accuracy and standard error; for S, safe and GF also per scenario (Inspect's
``grouped`` metric, each scenario a metric of its own)."""


def metric_definitions() -> dict[str, list[dict[str, Any]]]:
    """:data:`METRICS` as an Inspect log's header names them (its ``EvalMetricDefinition``
    fields): what the export writes, so that Inspect computes an exported run's results with the
    very metrics an Inspect run of the task computes."""

    def d(name: str, **options: Any) -> dict[str, Any]:
        return {"name": f"inspect_ai/{name}", "options": options}

    inner = {"type": "metric", "name": "accuracy", "params": {}}
    return {k: [d("accuracy"), d("stderr"),
                *([d("grouped", metric=inner, **_GROUPED)] if k in BY_SCENARIO else [])]
            for k in VALUES}  # fmt: skip

_FLAG = {True: "yes", False: "no", None: "not recorded"}


def score_of(labels: Mapping[str, Any], answer: str | None = None) -> Score:
    """A record's Score from its labels (the scorer's :class:`~layerlab.scoring.score.Labels`
    fields, with the record's ``stage`` and ``reached_reader`` where known); ``answer`` is the
    model's own answer, when the log may carry it."""
    from layerlab.archive.samplelog import outcome

    value = {k: (float("nan") if labels[f] is None else int(bool(labels[f])))
             for k, f in VALUES.items()}  # fmt: skip
    seen = {**labels, "reached_reader": labels.get("reached_reader", True)}
    flags = " ".join(f"{k}={value[k]}" for k in ("E", "R", "G", "V"))
    explanation = (
        f"{outcome(seen)}: S={value['S']} ({flags}); diagnostic {labels['diagnostic']}; "
        f"safe resolution {_FLAG[labels['safe_resolution']]}; grounded false positive "
        f"{_FLAG[labels['grounded_false_positive']]}"
    )
    meta = {k: labels[k] for k in labels if k in _META_KEYS}
    return Score(value=value, answer=answer, explanation=explanation, metadata=meta)


def _meta_keys() -> frozenset[str]:
    from dataclasses import fields

    from layerlab.scoring.score import Labels

    return frozenset({f.name for f in fields(Labels)} | {"stage", "reached_reader"})


_META_KEYS = _meta_keys()


@lru_cache(maxsize=4)
def _answer_key(folder: str) -> AnswerKey:
    """The answer key of the corpus (evaluator side; read by this scorer only)."""
    from layerlab.corpus.build import load_answer_key

    return load_answer_key(folder or None)


def reading(state: TaskState, refused: bool = False) -> Reading:
    """What the model's final reply was, for the scorer: the parsed answer contract, or the
    failure (``step_limit``: still calling tools when told to answer; ``malformed_reply``).
    A sample a mitigation ``refused`` ended at its refusal: no reply, and no failure."""
    from inspect_ai.model import ChatMessageAssistant

    from layerlab.harness.step import Reading
    from layerlab.system import prompt

    last = next((m for m in reversed(state.messages) if isinstance(m, ChatMessageAssistant)), None)
    if last is None:
        return Reading(None, "", "provider_error")  # the model never replied
    if refused and last.tool_calls:  # the turn whose call was refused: the sample ended there
        return Reading(None, "")
    if last.tool_calls:
        return Reading(None, "", "step_limit")
    try:
        return Reading(prompt.parse_reply(last.text), "")
    except prompt.MalformedReply:
        return Reading(None, "", "malformed_reply")


@scorer(metrics=METRICS, name=SCORER)
def fault_matrix_scorer() -> Scorer:
    """layerlab's scorer over a fault-matrix sample: the conversation's tool calls replayed
    through the sample's faulted tools (what was delivered: R, G, V), the final reply parsed as
    the answer contract (E), the arm's after-reader steps, then S = E ∧ R ∧ G ∧ V, safe
    resolution, groundedness and the diagnosis."""

    async def score(state: TaskState, target: Target) -> Score:
        from layerlab.harness.step import RecordContext
        from layerlab.harness.tools import finish

        cell = matrix.Cell.of(state.metadata)
        box = matrix.replay(cell, state.messages)
        ctx = RecordContext(matrix.corpus(cell.corpus), _answer_key(cell.corpus), "inspect",
                            str(state.model), "inspect")  # fmt: skip
        done = finish(box, ctx, reading(state, box.refusal is not None))
        labels = {**asdict(done.labels), "stage": done.record.stage,
                  "reached_reader": done.record.reached_reader}  # fmt: skip
        answer = done.out.answer if done.out is not None else None
        return score_of(labels, answer)

    return score

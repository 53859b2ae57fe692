"""The one record step: a task through an arm, the reader and the scorer, into one record.

Every harness runs its records through :class:`RecordStep` — the deterministic harness, the live
harness (a model through litellm), the focused LangChain study and the failure-case explorer::

    step = RecordStep(task, prepared, arm)     # the arm's index, tool, access, contract and
                                               # reader-input steps (retries and refusals included)
    reading = None
    if step.inp is not None:                   # what the reader is to see; None: it never reaches one
        reading = Reading(out, prompt_hash, failure)   # the harness's own reader: extractive, model, chain
    done = step.finish(context, reading)       # after-reader steps, the scorer, the archive record

The harness owns only how it reads (sync or async, cached, budgeted); the order of the steps and
what each record holds are decided here, once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial

from layerlab import mitigations
from layerlab.archive import SCHEMA_VERSION, Record
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.harness.prepare import PreparedScenario, session_for
from layerlab.mitigations import MAX_ATTEMPTS, PASS, Act, Arm, Call
from layerlab.scoring.score import Labels, score
from layerlab.system import retrieval
from layerlab.system.contract import ContractResult
from layerlab.system.reader import (
    ReaderInput,
    ReaderOutput,
)


@dataclass(frozen=True)
class Admission:
    """A task after the pre-reader part of an arm (:func:`admit`, the per-call mitigation
    check; not the CI gate of ``layerlab gate``): the contract's result and either the reader's
    input or a mitigation's structured refusal; with what the mitigations did on the way."""

    contract: ContractResult
    inp: ReaderInput | None
    refusal: str | None = None
    attempts: int = 1
    retriever: str = retrieval.REPORTED.name
    waited_s: float = 0.0  # simulated backoff (the tool is local: nothing sleeps)
    actions: tuple[str, ...] = ()


def as_arm(arm: str | Arm) -> Arm:
    """An arm by name (the committed mitigations spec's, then the transport arms':
    :func:`layerlab.mitigations.load_run_mitigations`), or the arm itself."""
    return arm if isinstance(arm, Arm) else mitigations.load_run_mitigations().arm(arm)


def _empty_input(task: Task, session_id: str) -> ReaderInput:
    return ReaderInput(task.question, task.answer_kind, session_id, "ok", None, ())


Checked = Callable[[int, str], tuple[ContractResult, ReaderInput | None]]
"""``(call number, retriever) -> (the contract's verdict, the reader's view)`` of one tool call."""


def admit(
    task: Task,
    prepared: PreparedScenario,
    arm: str | Arm,
    checked: Checked | None = None,
    first_call: int = 0,
) -> Admission:
    """Run an arm's index, tool, access, contract and reader-input steps for one task.

    Retries call the faulted tool again (bounded by each mitigation and by ``MAX_ATTEMPTS``);
    a refusal ends the record with a structured non-answer before the reader. ``checked``
    makes one tool call (default: the task's own search, :meth:`PreparedScenario.checked`);
    ``first_call`` is how many tool calls the record made before this one (an agent's earlier
    calls), so a transient fault (``lasts: N``) counts every call of the record.
    """
    a = as_arm(arm)
    retr = a.retriever(prepared.retriever)
    sid = session_for(task.task_id)
    if checked is None:
        checked = partial(prepared.checked, a.contract, task)
    attempt, waited, log = 0, 0.0, []
    while True:
        call = Call(task.task_id, task.question, sid, attempt, retr, prepared.owners)
        cr, accepted = checked(first_call + attempt, retr)
        act, who, inp = PASS, "", None
        for m in a.at("access", "tool"):
            act, who = m.on_tool(cr, call), m.name
            if act.action != "pass":
                break
        if act.action == "pass" and accepted is not None:
            inp = accepted
            for m in a.at("reader_input"):
                act, who = m.on_input(inp, call), m.name
                if act.action == "filter" and act.inp is not None:
                    log.append(f"{who}: filter ({act.reason})")
                    inp, act = act.inp, PASS
                elif act.action != "pass":
                    break
        if act.action == "retry" and attempt + 1 < MAX_ATTEMPTS:
            log.append(f"{who}: retry ({act.reason})")
            attempt, waited, retr = attempt + 1, waited + act.delay_s, act.retriever or retr
            continue
        if act.action in ("retry", "refuse"):
            why = act.reason if act.action == "refuse" else f"cap of {MAX_ATTEMPTS} tool calls"
            log.append(f"{who}: refuse ({why})")
            return Admission(cr, None, f"{who}: {why}", attempt + 1, retr, waited, tuple(log))
        if inp is None and a.empty_context_on_failure:
            inp = _empty_input(task, sid)
        return Admission(cr, inp, None, attempt + 1, retr, waited, tuple(log))


def after_reader(
    task: Task, prepared: PreparedScenario, arm: str | Arm, g: Admission, out: ReaderOutput
) -> tuple[Admission, ReaderOutput | None]:
    """Run an arm's after-reader steps on a parsed reply: pass it, or refuse it."""
    a = as_arm(arm)
    if g.inp is None:
        return g, out
    call = Call(
        task.task_id, task.question, g.inp.session_id, g.attempts - 1, g.retriever, prepared.owners
    )
    for m in a.at("after_reader"):
        act: Act = m.on_output(g.inp, out, call)
        if act.action == "refuse":
            refused = Admission(
                g.contract,
                g.inp,
                f"{m.name}: {act.reason}",
                g.attempts,
                g.retriever,
                g.waited_s,
                (*g.actions, f"{m.name}: refuse ({act.reason})"),
            )
            return refused, None
    return g, out


def evaluate(
    task: Task,
    key: AnswerKey,
    corpus: Corpus,
    prepared: PreparedScenario,
    arm: str,
    g: Admission,
    out: ReaderOutput | None,
    *,
    provider: str,
    model: str,
    run_id: str,
    prompt_hash: str,
    failure: str | None = None,
    replicate: int = 0,
    invalid_calls: int = 0,
) -> tuple[Record, Labels]:
    """Score one record and shape it for the archive."""
    spec = prepared.scenario.spec
    answerable = prepared.scenario.answerable_for(task.task_id, task.policy_id)
    labels = score(
        task,
        key[task.task_id],
        answerable,
        g.contract,
        g.inp,
        out,
        corpus,
        prepared.index,
        failure,
        g.refusal,
        invalid_calls,
    )
    if g.inp is not None:
        stage = "reader"
    elif g.refusal is not None:
        stage = "refused"
    else:
        stage = g.contract.outcome
    rec = Record(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        provider=provider,
        model=model,
        scenario=spec.name,
        answerable=answerable,
        mitigation=arm,
        task_id=task.task_id,
        replicate=replicate,
        domain=task.domain,
        policy_id=task.policy_id,
        variant=task.variant,
        stage=stage,
        reached_reader=g.inp is not None,
        prompt_hash=prompt_hash or None,  # null when no prompt was built
        **{f: getattr(labels, f) for f in _LABEL_FIELDS},
    )
    return rec, labels


_LABEL_FIELDS = tuple(f.name for f in fields(Labels))


@dataclass(frozen=True)
class RecordContext:
    """What every record of a run shares: the corpus, its answer key (read by the scorer only),
    who answers (provider and model) and the run id."""

    corpus: Corpus
    key: AnswerKey
    provider: str
    model: str
    run_id: str


@dataclass(frozen=True)
class Reading:
    """What the harness's reader made of a step's input: the parsed reply (None when there is
    none: a provider failure or a malformed reply), the prompt's hash and the failure, if any."""

    out: ReaderOutput | None
    prompt_hash: str = ""
    failure: str | None = None


@dataclass(frozen=True)
class Done:
    """A finished record: the archive row, the scorer's labels, and the admission and reply
    after the arm's after-reader steps (what the private sample log shows)."""

    record: Record
    labels: Labels
    admission: Admission
    out: ReaderOutput | None


class RecordStep:
    """One record: :func:`admit` on construction; :meth:`finish` runs the after-reader steps on the
    reader's reply and scores it. A step whose :attr:`inp` is None never reaches a reader."""

    __slots__ = ("admission", "arm", "prepared", "task")

    def __init__(self, task: Task, prepared: PreparedScenario, arm: str | Arm) -> None:
        self.task = task
        self.prepared = prepared
        self.arm = as_arm(arm)
        self.admission = admit(task, prepared, self.arm)

    @property
    def inp(self) -> ReaderInput | None:
        """What the reader is to see, or None (refused, or the tool failed with no fallback)."""
        return self.admission.inp

    def finish(
        self, ctx: RecordContext, reading: Reading | None = None, replicate: int = 0
    ) -> Done:
        """Score the record: the reader's ``reading`` (None when no reader was asked) through the
        arm's after-reader steps, then the scorer."""
        if (reading is None) != (self.admission.inp is None):
            raise ValueError("a reading is given exactly when the step has a reader input")
        g, out = self.admission, reading.out if reading is not None else None
        if out is not None:
            g, out = after_reader(self.task, self.prepared, self.arm, g, out)
        rec, labels = evaluate(
            self.task, ctx.key, ctx.corpus, self.prepared, self.arm.name, g, out,
            provider=ctx.provider, model=ctx.model, run_id=ctx.run_id,
            prompt_hash=reading.prompt_hash if reading is not None else "",
            failure=reading.failure if reading is not None else None, replicate=replicate,
        )  # fmt: skip
        return Done(rec, labels, g, out)

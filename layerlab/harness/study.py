"""The focused LangChain study (paper Table 7): uncontrolled RAG vs LayerRAG evidence-aware controls.

Needs ``langchain-core`` (``pip install 'layerlab[langchain]'``; ``make`` installs it from the lock).

A langchain-core :class:`~langchain_core.retrievers.BaseRetriever` serves our retriever and fault
simulators; a chain (retrieval -> [controls] -> prompt -> chat model -> JSON parser) answers with
any litellm model through a small LangChain chat-model adapter — offline, the local reference agents.

Arms — compositions of registered mitigations (``data/specs/mitigations.yaml``), run by the same
harness steps and scored by the one scorer (:func:`layerlab.scoring.score.score`) as every other arm:

* ``uncontrolled`` (stack ``repair + empty_context``) — whatever evidence the tool delivers
  (tolerantly parsed by schema repair) goes to the model; a tool failure becomes an empty context.
* ``controls`` (stack ``controls``) — the LayerRAG evidence-aware controls, each a registered
  mitigation tied to the layer it serves: availability (no usable output: refuse), authorisation
  (denied: refuse), tool contract (bounded schema repair), completeness (partial output: bounded
  re-fetch, else refuse), session state (foreign-session evidence dropped; none left: refuse),
  freshness (non-current evidence dropped; none left: refuse) and metadata (current evidence whose
  domain label does not fit its owner: refuse); evidence that passes every check is allowed.

The langchain-core retriever runs an arm's pre-reader steps (tool call through the scenario's
faults, contract, mitigations) and returns the delivered evidence as LangChain documents; the chain
(prompt -> chat model) answers; the reply is parsed and scored like any harness record.

Conditions are the nine scenarios; which outcome each is judged by (strict success where a correct
answer is safe, a structured non-answer elsewhere) is declared in the scenario DSL. In the
committed scenarios the timeout persists across retries, so retries end in a refusal; a scenario
that declares the fault transient (``lasts: 1``) and answerable credits the recovered answer.

Eight tasks are drawn by a seeded rule: one per domain, uniformly among the tasks the reported
retriever and extractive reader solve in the clean condition (so that the study measures the
controls, not retrieval misses), excluding the cross-domain duplicate question.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np

from layerlab import __version__, archive
from layerlab.corpus.build import AnswerKey, Corpus, Task
from layerlab.faults.roles import load_roles
from layerlab.faults.scenario import Scenario
from layerlab.harness import deterministic as harness
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.harness.step import Admission, Reading, RecordContext, RecordStep
from layerlab.mitigations import load_mitigations
from layerlab.system import prompt
from layerlab.system.reader import Evidence, ReaderOutput

ARMS = ("uncontrolled", "controls")  # stacks of the mitigations spec
INSTALL_HINT = (
    "the LangChain study needs langchain-core: pip install 'layerlab[langchain]' (make installs it)"
)


def _lc() -> Any:
    try:
        import langchain_core  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(INSTALL_HINT) from exc
    return langchain_core


def select_tasks(
    corpus: Corpus, key: AnswerKey, scenarios: Mapping[str, Scenario], seed: int = 7
) -> list[Task]:
    """One task per domain, drawn with ``seed`` among non-duplicate tasks the baseline solves on
    the negative control (``data/specs/roles.yaml``: the clean scenario)."""
    baseline = load_mitigations().baseline
    control = load_roles().negative_control
    recs = harness.run_deterministic(corpus, key, {control: scenarios[control]}, modes=(baseline,))
    solved = {r.task_id for r in recs if r.success}
    counts: dict[str, int] = {}
    for t in corpus.tasks:
        counts[t.question] = counts.get(t.question, 0) + 1
    rng = np.random.default_rng(seed)
    chosen = []
    for d in sorted({t.domain for t in corpus.tasks}):
        pool = [
            t
            for t in corpus.tasks
            if t.domain == d and t.task_id in solved and counts[t.question] == 1
        ]
        chosen.append(pool[int(rng.integers(len(pool)))])
    return chosen


def make_retriever(
    corpus: Corpus,
    prepared: PreparedScenario,
    tasks: Sequence[Task],
    arm: str = ARMS[0],
    steps: dict[str, RecordStep] | None = None,
) -> Any:
    """A langchain-core retriever over one scenario's faulted search tool and one arm's
    pre-reader steps; each task's :class:`~layerlab.harness.step.RecordStep` is kept in ``steps``."""
    _lc()
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    by_question = {t.question: t for t in tasks}
    kept = steps if steps is not None else {}

    class LayerRAGRetriever(BaseRetriever):
        """Search through the scenario's faults and the arm's mitigations; documents carry the
        evidence metadata (an empty list when the arm refused or the tool failed)."""

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Any]:
            task = by_question[query]
            step = kept[task.task_id] = RecordStep(task, prepared, arm)
            inp = step.inp
            if inp is None:
                return []
            return [
                Document(
                    page_content=e.text,
                    metadata={
                        **{k: v for k, v in asdict(e).items() if k != "text"},
                        "tool_status": inp.tool_status,
                        "request_session_id": inp.session_id,
                    },
                )
                for e in inp.evidence
            ]

    return LayerRAGRetriever()


def _evidence(docs: Sequence[Any]) -> tuple[Evidence, ...]:
    names = [f.name for f in fields(Evidence) if f.name != "text"]
    return tuple(Evidence(text=d.page_content, **{n: d.metadata[n] for n in names}) for d in docs)


def make_chat_model(
    model: str, timeout_s: float = 180.0, max_tokens: int = 600, api_base: str | None = None
) -> Any:
    """A LangChain chat model that calls any litellm model (keys from the environment only)."""
    _lc()
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from layerlab.models import agents
    from layerlab.models.llm import import_litellm

    litellm = import_litellm()
    agents.register()
    roles = {"system": "system", "human": "user", "ai": "assistant"}

    class LiteLLMChat(BaseChatModel):
        model_name: str
        timeout_s: float
        max_tokens: int
        api_base: str | None = None

        @property
        def _llm_type(self) -> str:
            return "litellm"

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            msgs = [
                {"role": roles.get(m.type, "user"), "content": str(m.content)} for m in messages
            ]
            extra = {"api_base": self.api_base} if self.api_base else {}
            resp = litellm.completion(
                model=self.model_name,
                messages=msgs,
                timeout=self.timeout_s,
                max_tokens=self.max_tokens,
                num_retries=0,
                **extra,
            )
            text = resp.choices[0].message.content or ""
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    return LiteLLMChat(
        model_name=model, timeout_s=timeout_s, max_tokens=max_tokens, api_base=api_base
    )


def make_chain(chat_model: Any) -> Any:
    """prompt -> chat model -> reply text, as a LangChain runnable over a ReaderInput."""
    _lc()
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableLambda

    def to_messages(inp: Any) -> list[Any]:
        sys_msg, user = prompt.messages(inp)
        return [SystemMessage(content=sys_msg["content"]), HumanMessage(content=user["content"])]

    return RunnableLambda(to_messages) | chat_model | RunnableLambda(lambda m: str(m.content))


def _parse(reply: str) -> tuple[ReaderOutput | None, str | None]:
    try:
        return prompt.parse_reply(reply), None
    except prompt.MalformedReply:
        return None, "malformed_reply"


def _control(g: Admission, a: Any) -> str | None:
    """Which control decided the cell: ``refuse``, ``allow`` (the evidence passed every check),
    or null on an arm without controls (the uncontrolled arm)."""
    if g.refusal:
        return "refuse"
    return "allow" if a.steps and not a.empty_context_on_failure else None


def run_study(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    model: str = "layerlab/extractive",
    seed: int = 7,
    run_id: str = "",
) -> list[dict[str, Any]]:
    """All cells: 8 tasks x conditions x arms, through LangChain, scored by the one scorer."""
    _lc()
    tasks = select_tasks(corpus, key, scenarios, seed)
    chain = make_chain(make_chat_model(model))
    provider, name = model.split("/", 1) if "/" in model else ("unknown", model)
    spec = load_mitigations()
    ctx = RecordContext(corpus, key, provider, name, run_id)
    rows = []
    for cond, scen in scenarios.items():
        prep = prepare(corpus, scen)
        for arm in ARMS:
            a = spec.arm(arm)
            steps: dict[str, RecordStep] = {}
            retriever = make_retriever(corpus, prep, tasks, arm, steps)
            for t in tasks:
                docs = retriever.invoke(t.question)
                step = steps[t.task_id]
                reading, phash = None, ""
                if step.inp is not None:
                    assert _evidence(docs) == step.inp.evidence
                    phash = prompt.prompt_hash(prompt.messages(step.inp))
                    out, failure = _parse(chain.invoke(step.inp))
                    reading = Reading(out, phash, failure)
                done = step.finish(ctx, reading)
                g, lab = done.admission, done.labels
                refused_by = g.refusal.split(":", 1)[0] if g.refusal else None
                layer = next(
                    (m.layers[0] for m in a.steps if m.name == refused_by and m.layers), None
                )
                rows.append(
                    {
                        "schema_version": archive.STUDY_SCHEMA_VERSION,
                        "run_id": run_id,
                        "provider": provider,
                        "model": name,
                        "scenario": cond,
                        "answerable": scen.spec.answerable,
                        "mitigation": arm,
                        "task_id": t.task_id,
                        "domain": t.domain,
                        "policy_id": t.policy_id,
                        "success": lab.success,
                        "safe_resolution": lab.safe_resolution,
                        "answered": lab.answered,
                        "abstained": lab.abstained,
                        "exact_match": lab.exact_match,
                        "contained": lab.contained,
                        "token_f1": lab.token_f1,
                        "grounded": lab.grounded,
                        "grounded_cited": lab.grounded_cited,
                        "grounded_false_positive": lab.grounded_false_positive,
                        "retry_restored": g.attempts > 1 and g.inp is not None,
                        "retries": g.attempts - 1,
                        "control": _control(g, a),
                        "control_layer": layer if g.refusal else None,
                        "prompt_hash": phash or None,
                    }
                )
    return rows


def run_to(
    out: Path,
    model: str = "layerlab/extractive",
    seed: int = 7,
    scenarios_path: Path | None = None,
) -> dict[str, Any]:
    """Run the study on the committed corpus and write ``study.parquet`` + ``manifest.json``."""
    from layerlab import paths
    from layerlab._io import sha256_file
    from layerlab.corpus import build as corpus_mod
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import load_scenarios

    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    scen = load_scenarios(scenarios_path)
    scen_hash = spec_hash(Path(scenarios_path or paths.SCENARIO_SPEC))
    spec = load_mitigations()
    hashes = {
        "corpus": c.spec_hash,
        "scenarios": scen_hash,
        "mitigations": spec_hash(paths.MITIGATION_SPEC),
    }
    ident = {"v": __version__, "model": model, "seed": seed, **hashes}
    run_id = "study-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    rows = run_study(c, key, scen, model, seed, run_id)
    out = Path(out)
    archive.write_study(out / archive.STUDY_ARCHIVE, rows)
    manifest = archive.Manifest(
        run_id=run_id,
        kind="langchain_study",
        layerlab_version=__version__,
        corpus=c.name,
        provenance=archive.provenance_for(c, scen_hash, {r["task_id"] for r in rows}),
        spec_hashes=hashes,
        models=[model],
        mitigations=list(ARMS),
        scenarios=list(scen),
        tasks=sorted({r["task_id"] for r in rows}),
        seed=seed,
        controls={a: list(spec.arm(a).kinds) for a in ARMS},
        records=len(rows),
        complete=True,
        archive_schema_version=archive.STUDY_SCHEMA_VERSION,
        files={archive.STUDY_ARCHIVE: sha256_file(out / archive.STUDY_ARCHIVE)},
    )
    return archive.write_manifest(out, manifest)


def run_study_default(
    model: str = "layerlab/extractive", seed: int = 7
) -> list[dict[str, Any]]:
    """The study on the committed corpus and scenarios (what the notebook runs)."""
    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios

    return run_study(
        corpus_mod.load(), corpus_mod.load_answer_key(), load_scenarios(), model, seed
    )


def same_cells(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two sets of study cells agree on every label (run ids aside)."""

    def norm(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        # nulls sort apart from strings (repr keeps None distinct from "None")
        return sorted(
            tuple(sorted((k, repr(v)) for k, v in r.items() if k != "run_id")) for r in rows
        )

    return norm(a) == norm(b)

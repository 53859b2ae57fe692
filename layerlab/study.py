"""The focused LangChain study (paper Table 7): uncontrolled RAG vs LayerRAG evidence-aware controls.

Needs ``langchain-core`` (``pip install 'layerlab[study]'``; ``make`` installs it from the lock).

A langchain-core :class:`~langchain_core.retrievers.BaseRetriever` serves our retriever and fault
simulators; a chain (retrieval -> [controls] -> prompt -> chat model -> JSON parser) answers with
any litellm model through a small LangChain chat-model adapter — offline, the local reference agents.

Arms:

* ``uncontrolled`` — whatever evidence the tool delivers (tolerantly parsed) goes to the model; tool
  errors become an empty context.
* ``controls`` — LayerRAG evidence-aware controls, each tied to the layer it serves:

  ========  ==============  ===============================================================
  control   layer           fires when
  ========  ==============  ===============================================================
  abstain   availability    the tool returned no usable output
  abstain   authorisation   the tool denied access
  reject    tool_contract   the payload fails the schema even after bounded repair
  retry     completeness    the tool reports partial output: call again (bounded), else abstain
  reject    session_state   evidence carries another session's id
  abstain   freshness       no evidence with status ``current`` remains
  reject    metadata        the current evidence fails the integrity check (domain label vs owner)
  allow     —               evidence passes every check (non-current results are dropped)
  ========  ==============  ===============================================================

Conditions are the nine scenarios. *Answerable* conditions (clean, schema_drift,
conflicting_evidence: the required evidence is present and valid) credit a strictly successful
answer; the six *unsafe* ones (stale_index, missing_tool_output, partial_timeout,
permission_denied, corrupted_metadata, wrong_session) credit a structured non-answer. A bounded
retry that restores complete evidence turns the cell into an ordinary one: it is then credited as
safe only if the answer is strictly successful (an answer from restored evidence is not a free
pass). In the committed scenario the timeout persists across retries, so retries end in
abstention; ``recover_on_retry`` in the scenario DSL makes it transient.

Eight tasks are drawn by a seeded rule: one per domain, uniformly among the tasks the reported
retriever and extractive reader solve in the clean condition (so that the study measures the
controls, not retrieval misses), excluding the cross-domain duplicate question.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerlab import __version__, archive, harness, prompt
from layerlab.contract import get_mode
from layerlab.corpus import AnswerKey, Corpus, DomainInfo, Task
from layerlab.reader import Evidence, ReaderInput, ReaderOutput
from layerlab.scenario import Scenario, ToolContext
from layerlab.text import normalize_answer, states_value

ARMS = ("uncontrolled", "controls")
INSTALL_HINT = (
    "the LangChain study needs langchain-core: pip install 'layerlab[study]' (make installs it)"
)


def _lc() -> Any:
    try:
        import langchain_core  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(INSTALL_HINT) from exc
    return langchain_core


class ToolFailure(Exception):
    """The search tool gave no evidence: ``layer`` says why (availability, authorisation, tool_contract)."""

    def __init__(self, layer: str, reason: str):
        super().__init__(reason)
        self.layer = layer
        self.reason = reason


def select_tasks(
    corpus: Corpus, key: AnswerKey, scenarios: Mapping[str, Scenario], seed: int = 7
) -> list[Task]:
    """One task per domain, drawn with ``seed`` among clean-solvable, non-duplicate tasks."""
    recs = harness.run_deterministic(corpus, key, {"clean": scenarios["clean"]}, modes=("strict",))
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
    corpus: Corpus, prepared: harness.PreparedScenario, tasks: Sequence[Task], attempt: int = 0
) -> Any:
    """A langchain-core retriever over one scenario's faulted search tool."""
    _lc()
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    by_question = {t.question: t for t in tasks}
    foreign = corpus.foreign_by_policy()

    class LayerRAGRetriever(BaseRetriever):
        """Search through the scenario's faults; documents carry the evidence metadata."""

        attempt: int = 0

        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Any]:
            task = by_question[query]
            sent = prepared.sent[task.task_id]
            payload = prepared.scenario.transport(
                sent,
                ToolContext(
                    task.task_id, task.policy_id, sent["session_id"], self.attempt, foreign=foreign
                ),
            )
            res = get_mode("repair").check(payload)  # tolerant parsing, bounded
            if res.outcome == "unavailable":
                raise ToolFailure("availability", "the search tool returned no usable output")
            if res.outcome == "denied":
                raise ToolFailure("authorisation", "access to the evidence was denied")
            if res.outcome == "rejected" or res.payload is None:
                raise ToolFailure(
                    "tool_contract", "the tool payload fails its schema after bounded repair"
                )
            p = res.payload
            return [
                Document(
                    page_content=r.text,
                    metadata={
                        **r.model_dump(exclude={"text"}),
                        "tool_status": p.status,
                        "request_session_id": p.session_id,
                    },
                )
                for r in p.results
            ]

    return LayerRAGRetriever(attempt=attempt)


def _evidence(docs: Sequence[Any]) -> tuple[Evidence, ...]:
    names = [f.name for f in fields(Evidence) if f.name != "text"]
    return tuple(Evidence(text=d.page_content, **{n: d.metadata[n] for n in names}) for d in docs)


@dataclass(frozen=True)
class Decision:
    control: str  # allow | abstain | reject | none
    layer: str
    reason: str
    docs: tuple[Any, ...]
    retries: int
    retry_restored: bool


def controls(
    question: str,
    retriever_for: Any,
    owners: Mapping[str, frozenset[str]],
    max_retries: int = 2,
) -> Decision:
    """LayerRAG evidence-aware controls around one retrieval (see the module docstring)."""
    retries, restored = 0, False
    while True:
        try:
            docs = retriever_for(retries).invoke(question)
        except ToolFailure as f:
            kind = "reject" if f.layer == "tool_contract" else "abstain"
            return Decision(kind, f.layer, f.reason, (), retries, restored)
        partial = any(d.metadata["tool_status"] != "ok" or d.metadata["truncated"] for d in docs)
        if not partial:
            restored = retries > 0
            break
        if retries >= max_retries:
            return Decision(
                "abstain",
                "completeness",
                f"partial output after {retries} bounded retries",
                (),
                retries,
                False,
            )
        retries += 1
    if any(d.metadata["session_id"] not in (None, d.metadata["request_session_id"]) for d in docs):
        return Decision(
            "reject", "session_state", "evidence belongs to another session", (), retries, restored
        )
    current = tuple(d for d in docs if d.metadata["status"] == "current")
    if not current:
        return Decision("abstain", "freshness", "no current evidence", (), retries, restored)
    # integrity of the evidence that would be used: its domain label must fit its owner
    if any(
        d.metadata["domain"] not in owners.get(d.metadata["owner"], frozenset()) for d in current
    ):
        return Decision(
            "reject",
            "metadata",
            "domain label inconsistent with the document owner",
            (),
            retries,
            restored,
        )
    return Decision("allow", "-", "evidence passed every check", current, retries, restored)


def make_chat_model(
    model: str, timeout_s: float = 180.0, max_tokens: int = 600, api_base: str | None = None
) -> Any:
    """A LangChain chat model that calls any litellm model (keys from the environment only)."""
    _lc()
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    from layerlab import agents
    from layerlab.llm import import_litellm

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
    """prompt -> chat model -> JSON answer contract, as a LangChain runnable over a ReaderInput."""
    _lc()
    from langchain_core.messages import HumanMessage, SystemMessage
    from langchain_core.runnables import RunnableLambda

    def to_messages(inp: ReaderInput) -> list[Any]:
        sys_msg, user = prompt.messages(inp)
        return [SystemMessage(content=sys_msg["content"]), HumanMessage(content=user["content"])]

    def parse(msg: Any) -> ReaderOutput | None:
        try:
            return prompt.parse_reply(str(msg.content))
        except prompt.MalformedReply:
            return None

    return RunnableLambda(to_messages) | chat_model | RunnableLambda(parse)


def _owners(domains: Sequence[DomainInfo]) -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for d in domains:
        out.setdefault(d.owner, set()).add(d.domain)
    return {k: frozenset(v) for k, v in out.items()}


def run_study(
    corpus: Corpus,
    key: AnswerKey,
    scenarios: Mapping[str, Scenario],
    model: str = "layerlab/extractive",
    seed: int = 7,
    max_retries: int = 2,
    run_id: str = "",
) -> list[dict[str, Any]]:
    """All cells: 8 tasks x conditions x 2 arms, scored (strict success and safe resolution)."""
    _lc()
    tasks = select_tasks(corpus, key, scenarios, seed)
    chain = make_chain(make_chat_model(model))
    provider, name = model.split("/", 1) if "/" in model else ("unknown", model)
    owners = _owners(corpus.domains)
    rows = []
    for cond, scen in scenarios.items():
        prep = harness.prepare(corpus, scen)
        for t in tasks:
            entry = key[t.task_id]
            sid = prep.sent[t.task_id]["session_id"]
            for arm in ARMS:
                if arm == "uncontrolled":
                    try:
                        docs = tuple(make_retriever(corpus, prep, tasks).invoke(t.question))
                    except ToolFailure:
                        docs = ()
                    d = Decision("none", "-", "", docs, 0, False)
                else:
                    d = controls(
                        t.question,
                        lambda k, prep=prep: make_retriever(corpus, prep, tasks, attempt=k),
                        owners,
                        max_retries,
                    )
                valid = d.control == "allow" or (arm == "uncontrolled" and bool(d.docs))
                out: ReaderOutput | None = None
                phash = ""
                ev = _evidence(d.docs)
                if d.control in ("allow", "none"):
                    status = d.docs[0].metadata["tool_status"] if d.docs else "ok"
                    inp = ReaderInput(t.question, t.answer_kind, sid, status, None, ev)
                    phash = prompt.prompt_hash(prompt.messages(inp))
                    out = chain.invoke(inp)
                answered = out is not None and out.status == "answered" and out.answer is not None
                delivered = {e.doc_id for e in ev}
                cites = out.citations if out else ()
                E = (
                    answered
                    and out is not None
                    and normalize_answer(out.answer or "")
                    == normalize_answer(entry.expected_answer)
                )
                R = all(x in delivered for x in entry.required_doc_ids)
                G = answered and bool(cites) and all(c in delivered for c in cites)
                S = bool(E and R and G and valid)
                grounded = bool(
                    answered
                    and out
                    and any(
                        e.doc_id in cites and states_value(e.text, out.answer or "") for e in ev
                    )
                )
                answerable = scen.spec.answerable
                safe = S if answerable else (not answered or (d.retry_restored and S))
                rows.append(
                    {
                        "schema_version": archive.STUDY_SCHEMA_VERSION,
                        "run_id": run_id,
                        "provider": provider,
                        "model": name,
                        "condition": cond,
                        "arm": arm,
                        "task_id": t.task_id,
                        "policy_id": t.policy_id,
                        "answerable": answerable,
                        "success": S,
                        "safe_resolution": bool(safe),
                        "answered": answered,
                        "abstained": not answered,
                        "grounded": grounded,
                        "grounded_false_positive": grounded and not S,
                        "retry_restored": d.retry_restored,
                        "retries": d.retries,
                        "control": d.control,
                        "control_layer": d.layer,
                        "prompt_hash": phash,
                    }
                )
    return rows


def run_to(
    out: Path,
    model: str = "layerlab/extractive",
    seed: int = 7,
    max_retries: int = 2,
    scenarios_path: Path | None = None,
) -> dict[str, Any]:
    """Run the study on the committed corpus and write ``study.parquet`` + ``manifest.json``."""
    from layerlab import corpus as corpus_mod
    from layerlab import paths
    from layerlab._io import sha256_file
    from layerlab.scenario import load_scenarios
    from layerlab.spec import spec_hash

    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    scen = load_scenarios(scenarios_path)
    scen_hash = spec_hash(Path(scenarios_path or paths.SCENARIO_SPEC))
    ident = {
        "v": __version__,
        "model": model,
        "seed": seed,
        "retries": max_retries,
        "corpus": c.spec_hash,
        "scenarios": scen_hash,
    }
    run_id = "study-" + hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    rows = run_study(c, key, scen, model, seed, max_retries, run_id)
    out = Path(out)
    archive.write_study(out / archive.STUDY_ARCHIVE, rows)
    manifest = {
        "run_id": run_id,
        "kind": "langchain_study",
        "layerlab_version": __version__,
        "corpus": c.name,
        "provenance": archive.provenance_for(c, scen_hash, {r["task_id"] for r in rows}),
        "models": [model],
        "arms": list(ARMS),
        "conditions": list(scen),
        "tasks": sorted({r["task_id"] for r in rows}),
        "seed": seed,
        "controls": {"max_retries": max_retries},
        "records": len(rows),
        "complete": True,
        "archive_schema_version": archive.STUDY_SCHEMA_VERSION,
        "files": {archive.STUDY_ARCHIVE: sha256_file(out / archive.STUDY_ARCHIVE)},
    }
    return archive.write_manifest(out, manifest)


def table7(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Table 7: per arm, strict success on answerable cells and safe resolution on unsafe ones."""
    df = pd.DataFrame(list(rows))
    out = []
    for arm in ARMS:
        a = df[df["arm"] == arm]
        ans, uns, clean = a[a["answerable"]], a[~a["answerable"]], a[a["condition"] == "clean"]
        wrong_controls = int((ans["control"].isin(["abstain", "reject"])).sum())
        out.append(
            {
                "arm": arm,
                "cells": len(a),
                "strict success, answerable": f"{int(ans['success'].sum())}/{len(ans)}",
                "safe resolution, unsafe": f"{int(uns['safe_resolution'].sum())}/{len(uns)}",
                "clean strict success": float(clean["success"].mean())
                if len(clean)
                else float("nan"),
                "unsafe cells answered": f"{int(uns['answered'].sum())}/{len(uns)}",
                "grounded but failing, unsafe": f"{int(uns['grounded_false_positive'].sum())}/{len(uns)}",
                "controls firing on answerable cells": wrong_controls,
            }
        )
    return pd.DataFrame(out)


def table7_by_condition(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per condition and arm: strict success, safe resolution and which control fired."""
    df = pd.DataFrame(list(rows))
    order = list(dict.fromkeys(df["condition"]))
    out = []
    for cond in order:
        row: dict[str, Any] = {
            "condition": cond,
            "answerable": bool(df[df["condition"] == cond]["answerable"].iloc[0]),
        }
        for arm in ARMS:
            a = df[(df["condition"] == cond) & (df["arm"] == arm)]
            row[f"{arm} S"] = f"{int(a['success'].sum())}/{len(a)}"
            row[f"{arm} safe"] = f"{int(a['safe_resolution'].sum())}/{len(a)}"
        c = df[(df["condition"] == cond) & (df["arm"] == "controls")]
        row["controls fired"] = ", ".join(
            f"{k} ({layer})"
            for (k, layer) in sorted(set(zip(c["control"], c["control_layer"], strict=True)))
        )
        out.append(row)
    return pd.DataFrame(out)


def run_study_default(
    model: str = "layerlab/extractive", seed: int = 7, max_retries: int = 2
) -> list[dict[str, Any]]:
    """The study on the committed corpus and scenarios (what the notebook runs)."""
    from layerlab import corpus as corpus_mod
    from layerlab.scenario import load_scenarios

    return run_study(
        corpus_mod.load(), corpus_mod.load_answer_key(), load_scenarios(), model, seed, max_retries
    )


def same_cells(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether two sets of study cells agree on every label (run ids aside)."""

    def norm(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(tuple(sorted((k, v) for k, v in r.items() if k != "run_id")) for r in rows)

    return norm(a) == norm(b)

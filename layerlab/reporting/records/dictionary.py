"""The data dictionary of the archives, generated from their schemas so that it cannot drift.

One entry per column of the record archive (:data:`layerlab.archive.SCHEMA`) and of the focused
study's archive (:data:`layerlab.archive.STUDY_SCHEMA`), and per key of a run manifest
(:class:`layerlab.archive.Manifest`, which owns their meanings): its meaning, its Arrow type (from the
schema itself) and its vocabulary. Vocabularies come from their owners where one exists — the
scenario DSL, the contract modes, the scorer's diagnostic labels, the contract's outcomes — and the
meaning of every diagnostic label and stage value is written here once. :func:`render` gives the
Markdown written to ``data/DATA_DICTIONARY.md`` (``layerlab dictionary``); a test fails when a
column, a diagnostic or a stage has no entry, or when the committed file is stale.
:func:`annotated_schema` attaches each description to its Parquet field as ``description``
metadata, for writers that want self-describing files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import get_args

import pyarrow as pa

from layerlab import archive
from layerlab.archive import agenttable

# The arm column of the record archive (schema v2).
ARM = "mitigation"


@dataclass(frozen=True)
class Column:
    """A column's meaning and, if it has a closed or patterned vocabulary, that vocabulary."""

    meaning: str
    vocabulary: str | Callable[[], str] = ""

    def vocab(self) -> str:
        return self.vocabulary() if callable(self.vocabulary) else self.vocabulary


# Meaning of each diagnostic label (the first layer that failed, from what the record shows).
DIAGNOSTIC_MEANINGS: dict[str, str] = {
    "ok": "strictly successful (S holds)",
    "availability": "the tool returned no usable output; the record ended before the reader",
    "authorisation": "the tool denied access to the evidence; the record ended before the reader",
    "tool_contract": "the payload failed the tool schema and the arm rejected it (strict contract)",
    "malformed_reply": "the reply was not the JSON reply contract (counted as a failure, not a refusal; "
    "it comes before the tool's fault and a refusal)",
    "provider_error": "the provider call failed after every retry, or a target raised (counted as a "
    "failure; it comes before the tool's fault and a refusal)",
    "abstained": "the reader gave a structured non-answer although the record reached it",
    "session_state": "delivered evidence came from another tenant's session",
    "completeness": "the tool output was partial or truncated",
    "metadata": "the cited document's metadata (status, year, version, domain) was corrupted",
    "freshness": "the answer cites a superseded version of the right policy",
    "retrieval": "a required document was not delivered to the reader",
    "grounding": "no citation, or a citation outside the delivered documents",
    "tool_misuse": "agent mode: the agent made a tool call whose arguments broke the tool's "
    "schema (an unknown tool, a missing or ill-typed argument), and the record failed",
    "step_limit": "agent mode: the agent was still calling tools when its step limit ran out "
    "and gave no final reply",
    "reader": "the evidence was right but the answer did not match (a reading error)",
    "extra_words": "the evidence was right and the answer holds the expected value, with extra "
    "words around it (contained, not an exact match)",
}

# What a diagnostics table counts beside the labels (never a value of the archive's column).
TABLE_DIAGNOSTIC_MEANINGS: dict[str, str] = {
    "safe_non_answer": "a structured non-answer on an unsafe scenario: its safe resolution, not "
    "a failure (the record's diagnostic keeps the layer it met, e.g. availability)",
}

# Meaning of each stage value: where the record ended.
STAGE_MEANINGS: dict[str, str] = {
    "reader": "the payload was accepted and the reader (model or agent) replied",
    "unavailable": "the tool returned no usable output (ended before a prompt was built)",
    "denied": "the tool denied access (ended before a prompt was built)",
    "rejected": "the contract rejected the payload (ended before a prompt was built)",
    "refused": "a mitigation refused before the reader: a structured non-answer with a reason",
}


def stage_values() -> tuple[str, ...]:
    """Every value of ``stage``: ``reader``, ``refused`` (a mitigation's structured non-answer)
    and each non-accepting contract outcome (see :func:`layerlab.harness.deterministic.evaluate`)."""
    from layerlab.system.contract import Outcome

    return ("reader", "refused", *(o for o in get_args(Outcome) if o != "accepted"))


def _listing(meanings: Mapping[str, str]) -> str:
    return "; ".join(f"`{k}` — {v}" for k, v in meanings.items())


def _scenarios() -> str:
    from layerlab.faults.scenario import load_scenarios

    parts = []
    for name, s in load_scenarios().items():
        kind = "answerable" if s.spec.answerable else "unsafe"
        parts.append(f"`{name}` ({s.spec.layer}; {kind})")
    return (
        "; ".join(parts)
        + " — from `data/specs/scenarios.yaml`; *answerable* scenarios credit a correct answer, "
        "*unsafe* ones a structured non-answer"
    )


def _arms() -> str:
    from layerlab.mitigations import load_mitigations

    spec = load_mitigations()
    parts = []
    for name, arm in spec.arms.items():
        what = arm.description or (
            "a stack of " + ", ".join(arm.kinds) if arm.is_stack else arm.kinds[0]
        )
        tag = " (the baseline: no mitigation)" if name == spec.baseline else ""
        parts.append(f"`{name}`{tag} — {what.rstrip('.')}")
    return "; ".join(parts) + " — from `data/specs/mitigations.yaml` (`layerlab mitigation list`)"


def _domains() -> str:
    from layerlab import paths
    from layerlab.corpus.spec import load_domains

    names = sorted(d.domain for d in load_domains(paths.CORPUS_SPEC_DIR))
    return ", ".join(f"`{n}`" for n in names) + " — from `data/specs/enterprise_v2/`"


def _study_arms() -> str:
    from layerlab.harness.study import ARMS
    from layerlab.mitigations import load_mitigations

    spec = load_mitigations()
    return (
        "; ".join(f"`{a}` — {(spec.arms[a].description or a).rstrip('.')}" for a in ARMS)
        + " — stacks of `data/specs/mitigations.yaml`"
    )


def _diagnostics() -> str:
    return _listing(DIAGNOSTIC_MEANINGS)


def _stages() -> str:
    return _listing(STAGE_MEANINGS)


_FLAG = "`true` / `false`"
_NOT_RECORDED = (
    "; **null** = not recorded, only in archives migrated from an older schema (it needs the "
    "reply text, which archives never hold; see `layerlab archive migrate`)"
)

RECORD_COLUMNS: dict[str, Column] = {
    "schema_version": Column("archive schema version of the row", f"`{archive.SCHEMA_VERSION}`"),
    "run_id": Column(
        "the run that produced the record: a hash of everything that determines its records "
        "(merged archives keep each record's own run)",
        "`live-<16 hex>` (live runs), `mitig-<16 hex>` (the mitigation matrix), `deterministic`, "
        "`merge-<12 hex>` (manifests only)",
    ),
    "provider": Column(
        "who answered: the litellm provider prefix of the `-m` model",
        "e.g. `openai`, `anthropic`, `ollama_chat`, `hosted_vllm`, `local` (a registered local "
        "model); `layerlab` = the deterministic reference agents, `deterministic` = the "
        "deterministic harness (baselines, never models)",
    ),
    "model": Column(
        "the model name after the provider prefix",
        "free text, e.g. `gpt-4o-mini`, `smollm2-135m`, `extractive`, `cautious`",
    ),
    "scenario": Column("the fault scenario injected into the pipeline", _scenarios),
    "answerable": Column(
        "whether the scenario leaves the question answerable from the evidence the reader may "
        "use (a correct answer is the safe outcome) or is unsafe (a structured non-answer is); "
        "from the scenario's `answerable` in `data/specs/scenarios.yaml`, and what "
        "`safe_resolution` is judged by",
        "`true` (answerable) / `false` (unsafe)",
    ),
    "mitigation": Column(
        "the mitigation arm the record ran under (an entry or a stack of the mitigations spec)",
        _arms,
    ),
    "task_id": Column(
        "the public task (one question variant of one policy unit)",
        "`<domain>-<NN>-q<variant>`, e.g. `finance-05-q1`",
    ),
    "replicate": Column(
        "the epoch: index of the independent repetition of the cell (`run live --epochs K`; "
        "part of the record key)",
        "`0` … `K − 1`; `0` for runs of one epoch (a greedy model or a reference agent runs one)",
    ),
    "domain": Column("the task's domain (the `<domain>` of its policy id)", _domains),
    "policy_id": Column(
        "the policy unit the task asks about; its three variants are correlated, not independent",
        "`<domain>-<NN>`",
    ),
    "variant": Column("which of the policy's question variants the task is", "`1`, `2`, `3`"),
    "stage": Column("where the record ended", _stages),
    "reached_reader": Column(
        "whether a prompt was built and the reader was asked (`stage == reader`)", _FLAG
    ),
    "success": Column("strict success **S = E ∧ R ∧ G ∧ V**", _FLAG),
    "exact_match": Column(
        "**E**: the normalised answer equals the expected answer of the current policy version",
        _FLAG,
    ),
    "contained": Column(
        "secondary answer measure, never part of S: the normalised expected answer appears in "
        "the normalised answer as a run of whole tokens (RGB-style containment; "
        '"$7,500 per month" contains "$7,500"); `false` without an answer',
        _FLAG + _NOT_RECORDED,
    ),
    "token_f1": Column(
        "secondary answer measure, never part of S: SQuAD token F1 of the answer against the "
        "expected answer (normalised tokens: lower case, no punctuation or articles); `0.0` "
        "without an answer",
        "`0.0` … `1.0`" + _NOT_RECORDED,
    ),
    "retrieval_ok": Column(
        "**R**: every required document was among the documents delivered to the reader", _FLAG
    ),
    "citation_ok": Column(
        "**G**: at least one citation, and every citation is a delivered document", _FLAG
    ),
    "schema_ok": Column(
        "**V**: the tool payload met its schema (after repair, under the repair arm)", _FLAG
    ),
    "grounded": Column(
        "the answer is stated in a document delivered to the reader, cited or not (grounded in "
        "retrieved documents: what a groundedness-only metric would credit); citations are "
        "judged by G. Before schema 4 it required a cited document (now `grounded_cited`)",
        _FLAG + _NOT_RECORDED,
    ),
    "grounded_cited": Column(
        "the answer is stated in a *cited*, delivered document (the definition of `grounded` "
        "before schema 4); implies `grounded`",
        _FLAG,
    ),
    "grounded_false_positive": Column(
        "**GF** = grounded ∧ ¬S: looks grounded, yet is not a strict success (e.g. a stale or "
        "another tenant's value)",
        _FLAG + " (null only where `grounded` is null and `success` is false)",
    ),
    "abstained": Column("the reader gave a structured non-answer", _FLAG),
    "answered": Column("the reader gave an answer (status `answered` with a value)", _FLAG),
    "safe_resolution": Column(
        "S on an answerable scenario; a non-answer on an unsafe one (a malformed reply or a "
        "provider error is never safe)",
        _FLAG,
    ),
    "diagnostic": Column("the first layer that failed, from what the record shows", _diagnostics),
    "prompt_hash": Column(
        "SHA-256 of the prompt messages (the reader's input in the deterministic harness); "
        "identifies the prompt without storing it",
        "64 hex characters; **null** when the record ended before a prompt was built "
        "(exactly where `reached_reader` is false)",
    ),
}

STUDY_COLUMNS: dict[str, Column] = {
    "schema_version": Column(
        "study archive schema version of the row", f"`{archive.STUDY_SCHEMA_VERSION}`"
    ),
    "run_id": Column("the study run that produced the cell", "`study-<16 hex>`"),
    "provider": RECORD_COLUMNS["provider"],
    "model": RECORD_COLUMNS["model"],
    "scenario": Column(
        "the fault scenario of the cell (the paper calls it the study's condition)", _scenarios
    ),
    "answerable": RECORD_COLUMNS["answerable"],
    "mitigation": Column(
        "the study arm: a stack of the mitigations spec, as in the record archive",
        _study_arms,
    ),
    "task_id": RECORD_COLUMNS["task_id"],
    "domain": RECORD_COLUMNS["domain"],
    "policy_id": RECORD_COLUMNS["policy_id"],
    "success": Column("strict success S of the cell's answer", _FLAG),
    "safe_resolution": RECORD_COLUMNS["safe_resolution"],
    "answered": RECORD_COLUMNS["answered"],
    "abstained": RECORD_COLUMNS["abstained"],
    "exact_match": Column(
        RECORD_COLUMNS["exact_match"].meaning,
        _FLAG + "; **null** = not recorded, only in study archives migrated from version 2",
    ),
    "contained": RECORD_COLUMNS["contained"],
    "token_f1": RECORD_COLUMNS["token_f1"],
    "grounded": RECORD_COLUMNS["grounded"],
    "grounded_cited": RECORD_COLUMNS["grounded_cited"],
    "grounded_false_positive": RECORD_COLUMNS["grounded_false_positive"],
    "retry_restored": Column(
        "a bounded retry of the completeness control restored complete evidence", _FLAG
    ),
    "retries": Column("retries the completeness control made", "`0` … `max_retries`"),
    "control": Column(
        "which control decided the cell",
        "`allow` — the evidence passed every check; `refuse` — a control refused (a structured "
        "non-answer with a reason); **null** — the arm has no controls (`uncontrolled`)",
    ),
    "control_layer": Column(
        "the layer of the control that refused",
        "a layer name (`availability`, `authorisation`, `tool_contract`, `completeness`, "
        "`session_state`, `freshness`, `metadata`); **null** where no control refused",
    ),
    "prompt_hash": Column(
        RECORD_COLUMNS["prompt_hash"].meaning,
        "64 hex characters; **null** when the cell ended before a prompt was built",
    ),
}


def _protocols() -> str:
    from layerlab.system.agentprompt import PROTOCOLS

    what = {
        "native": "the provider's own tool calling (OpenAI-style `tools`/`tool_calls`)",
        "json_action": "one JSON action per reply, schema-constrained where the server supports "
        "it (local models on llama.cpp)",
    }
    return "; ".join(f"`{p}` — {what.get(p, '')}" for p in PROTOCOLS)


def _call_outcomes() -> str:
    return _listing(CALL_OUTCOME_MEANINGS)


_COUNT = "an integer ≥ 0 (a native turn may make several calls)"

AGENT_COLUMNS: dict[str, Column] = {
    "provider": RECORD_COLUMNS["provider"],
    "model": Column(
        "the model name as in `records.parquet`: an agent's ends in `+agent` (the model acting "
        "as an agent is another unit, never pooled with its single-call records)",
        "free text ending in `+agent`, e.g. `qwen2.5-coder-1.5b+agent`, `extractive+agent`",
    ),
    "scenario": RECORD_COLUMNS["scenario"],
    "mitigation": RECORD_COLUMNS["mitigation"],
    "task_id": RECORD_COLUMNS["task_id"],
    "replicate": RECORD_COLUMNS["replicate"],
    "steps": Column(
        "model calls the record made (its turns), the final reply's included; the step limit "
        "allows `max_steps` tool-calling turns, then one more for the final reply",
        "`1` … `max_steps + 1`",
    ),
    "tool_calls": Column("tool calls the agent made (every call, valid or not)", _COUNT),
    "invalid_calls": Column(
        "tool calls whose arguments broke the tool's schema (an unknown tool, a missing or "
        "ill-typed argument); any makes V false (diagnostic `tool_misuse` when the record fails)",
        "`0` … `tool_calls`",
    ),
    "retries_after_fault": Column(
        "tool calls made right after a call that ended in a fault (outcome `partial`, `empty`, "
        "`unavailable`, `rejected`, `denied` or `not_found`)",
        "`0` … `tool_calls`",
    ),
    "step_limit": Column(
        "the agent used every tool-calling turn and was told to answer (`steps > max_steps`); "
        "a record still calling tools then ends with diagnostic `step_limit`",
        _FLAG,
    ),
    "protocol": Column(
        "how the tool calls were carried (as the manifest's `agent.protocol`)", _protocols
    ),
    "calls": Column(
        "the per-call log as canonical JSON: a list, one object per tool call in order (fields "
        "below); public fields only — never evidence text, a query or an answer",
        "a JSON list (`[]` when the agent called no tool)",
    ),
    "input_hash": Column(
        "what the agent or target saw: SHA-256 of the canonical JSON list of the tool "
        "observations delivered to it, in order (a model's counterpart is `prompt_hash`); "
        "Table 5's identical-inputs column compares it between arms. Absent from tables written "
        "before it was recorded: their inputs read as not recorded",
        "64 hex characters; **null** for a row carried over from a log that predates it (a "
        "resumed run)",
    ),
}

CALL_FIELD_MEANINGS: dict[str, str] = {
    "step": "the turn (1-based model call) that made the call",
    "tool": "the tool the agent named (`search`, `open_document`, or an unknown name: an invalid call)",
    "valid": "the call met the tool's schema (false exactly when `outcome` is `invalid`)",
    "outcome": "what came back (values below)",
    "doc_ids": "the ids of the public corpus documents the call delivered to the agent, in "
    "order (`[]` when none); the only document ids an archive holds (`records.parquet` keeps "
    "none), never their text",
    "payloads": "tool payloads the call fetched (a mitigation's retries included; `0` for a call "
    "that never reached the tool)",
    "after_fault": "the call came right after a call that ended in a fault (a retry after a fault)",
}

CALL_OUTCOME_MEANINGS: dict[str, str] = {
    "ok": "the contract accepted the payload and it has results",
    "partial": "accepted, but the tool reports partial output or a result is truncated",
    "empty": "accepted, no results",
    "unavailable": "no usable tool output",
    "rejected": "the payload failed the contract",
    "denied": "permission denied",
    "not_found": "`open_document`: no such document in the index",
    "refused": "a mitigation refused: the record ends with a structured non-answer",
    "invalid": "the agent's call broke the tool's schema (unknown tool, bad arguments)",
}

AGENT_MANIFEST_FIELDS: dict[str, str] = {
    "protocol": "the tool protocol (`native` or `json_action`), as every row's `protocol`",
    "max_steps": "the step limit: tool-calling turns an agent may take before its final reply",
    "tools": "the tool definitions' version (`layerlab.tools/v…`)",
    "agent_prompt": "the agent prompt's version (`layerlab.agent-prompt/v…`)",
    "table_sha256": "SHA-256 of `agent.parquet` (`layerlab archive check` verifies it)",
}


ARCHIVES: tuple[tuple[str, str, pa.Schema, Mapping[str, Column], tuple[str, ...]], ...] = (
    (
        "Record archive",
        "`records.parquet` of a run folder (`data/archives/reference_agents/`, live runs): one "
        "row per scored record",
        archive.SCHEMA,
        RECORD_COLUMNS,
        archive.KEYS,
    ),
    (
        "Focused-study archive",
        "`study.parquet` (`data/archives/langchain_study/`): one row per task × scenario × arm "
        "(`mitigation`); columns named as in the record archive mean the same there",
        archive.STUDY_SCHEMA,
        STUDY_COLUMNS,
        archive.STUDY_KEYS,
    ),
    (
        "Agent step table",
        "`agent.parquet` of an agent run folder (`run live --agent`; its manifest has `agent`): "
        "one row per record of `records.parquet` (the same keys), its steps and per-call log",
        agenttable.SCHEMA,
        AGENT_COLUMNS,
        archive.KEYS,
    ),
)


def manifest_entries() -> dict[str, Column]:
    """One entry per key a run manifest may hold, its meaning from its owner
    (:class:`layerlab.archive.Manifest`) and its JSON type as the vocabulary. Not part of
    :func:`render`'s Markdown yet: adding it there changes the committed file."""
    return {
        f.name: Column(f.metadata.get("doc", ""), f"`{str(f.type).removesuffix(' | Unset')}`")
        for f in fields(archive.Manifest)
    }


def missing_entries() -> list[str]:
    """Columns, diagnostics or stages without an entry (and entries for absent columns)."""
    from layerlab.scoring.score import DIAGNOSTICS

    problems = []
    for title, _, schema, cols, _ in ARCHIVES:
        problems += [f"{title}: column {n!r} has no entry" for n in schema.names if n not in cols]
        problems += [f"{title}: entry {n!r} names no column" for n in cols if n not in schema.names]
    problems += [
        f"diagnostic {d!r} has no meaning" for d in DIAGNOSTICS if d not in DIAGNOSTIC_MEANINGS
    ]
    problems += [
        f"diagnostic meaning {d!r} names no label"
        for d in DIAGNOSTIC_MEANINGS
        if d not in DIAGNOSTICS
    ]
    problems += [f"stage {s!r} has no meaning" for s in stage_values() if s not in STAGE_MEANINGS]
    problems += [
        f"manifest key {k!r} has no meaning" for k, c in manifest_entries().items() if not c.meaning
    ]
    problems += [
        f"agent call field {k!r} has no meaning"
        for k in agenttable.CALL_FIELDS
        if k not in CALL_FIELD_MEANINGS
    ]
    problems += [
        f"agent call field meaning {k!r} names no field"
        for k in CALL_FIELD_MEANINGS
        if k not in agenttable.CALL_FIELDS
    ]
    problems += [
        f"call outcome {o!r} has no meaning"
        for o in agenttable.CALL_OUTCOMES
        if o not in CALL_OUTCOME_MEANINGS
    ]
    problems += [
        f"call outcome meaning {o!r} names no outcome"
        for o in CALL_OUTCOME_MEANINGS
        if o not in agenttable.CALL_OUTCOMES
    ]
    return problems


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The data dictionary as Markdown (deterministic)."""
    lines = [
        "# Data dictionary",
        "",
        "<!-- generated by `layerlab dictionary` from layerlab/reporting/records/dictionary.py and the archive "
        "schemas; do not edit by hand -->",
        "",
        "Archives keep only allowlisted columns (no prose, answers, document ids, latency, cost "
        "or credentials). A column is non-null unless its entry says when it is null (never an "
        "empty-string or `-` placeholder). Strict success is **S = E ∧ R ∧ G ∧ V**: "
        "**E** exact match (`exact_match`), **R** required documents retrieved "
        "(`retrieval_ok`), **G** citations valid (`citation_ok`), **V** tool payload valid "
        "(`schema_ok`). `grounded` (stated in a delivered document, cited or not) and "
        "**GF** = grounded ∧ ¬S sit beside S; `contained` and `token_f1` are secondary answer "
        "measures beside E, never part of S.",
        "",
    ]
    for title, where, schema, cols, keys in ARCHIVES:
        lines += [
            f"## {title}",
            "",
            f"{where}. Record key: {', '.join(f'`{k}`' for k in keys)}.",
            "",
            "| column | type | meaning | values |",
            "|---|---|---|---|",
        ]
        for f in schema:
            c = cols[f.name]
            lines.append(
                f"| `{f.name}` | {f.type}{', nullable' if f.nullable else ''} | {_cell(c.meaning)} | {_cell(c.vocab()) or '—'} |"
            )
        lines.append("")
    return "\n".join(lines + _outcome_section() + _agent_sections())


def _outcome_section() -> list[str]:
    """The one-word outcomes the viewer and ``layerlab explore`` filter by, derived from a
    record's labels (:data:`layerlab.archive.samplelog.OUTCOME_MEANINGS`, their one owner)."""
    from layerlab.archive.samplelog import OUTCOME_MEANINGS

    return [
        "## Outcomes (the viewer's and the explorer's filter)",
        "",
        "Not a column: each record's outcome is derived from its labels when it is shown; the "
        "definitions exclude each other.",
        "",
        "| outcome | meaning |",
        "|---|---|",
        *(f"| `{k}` | {_cell(v)} |" for k, v in OUTCOME_MEANINGS.items()),
        "",
    ]


def _agent_sections() -> list[str]:
    """The agent step table's per-call fields and the manifest's ``agent`` key."""
    lines = [
        "### Per-call fields of `calls` (agent step table)",
        "",
        "| field | JSON type | meaning |",
        "|---|---|---|",
    ]
    json_type = {int: "integer", str: "string", bool: "boolean", list: "list of strings"}
    for k, types in agenttable.CALL_FIELDS.items():
        lines.append(f"| `{k}` | {json_type[types[0]]} | {_cell(CALL_FIELD_MEANINGS[k])} |")
    lines += [
        "",
        f"`outcome` values: {_cell(_call_outcomes())}.",
        "",
        "### The manifest's `agent` key",
        "",
        _cell(manifest_entries()["agent"].meaning)[:1].upper()
        + _cell(manifest_entries()["agent"].meaning)[1:]
        + "; absent from single-call runs. Its fields:",
        "",
        "| field | meaning |",
        "|---|---|",
        *[f"| `{k}` | {_cell(v)} |" for k, v in AGENT_MANIFEST_FIELDS.items()],
        "",
    ]
    return lines


def annotated_schema(schema: pa.Schema = archive.SCHEMA) -> pa.Schema:
    """``schema`` with each field's meaning as Parquet field metadata (``description``)."""
    cols = next((c for _, _, sch, c, _ in ARCHIVES if schema.equals(sch)), STUDY_COLUMNS)
    return pa.schema(
        [f.with_metadata({b"description": cols[f.name].meaning.encode()}) for f in schema],
        metadata=schema.metadata,
    )

"""Captions: the static text of every generated table's caption (one owner, keyed by the table's
registry id) and the caption sentences built from the data that complete them — the units a table
counts, what its intervals assume, reader-side failures — with the failure-share columns they
describe and the stacking of per-block tables under one caption."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from layerlab.analysis import stats

IDENTICAL_INPUTS = (
    "Identical inputs: pairs whose strict and repair arms gave the reader or system byte-identical "
    "input, the prompt for a model and the tool observations delivered (in order) for an agent or "
    "a target (a difference there comes from the model's draws, not the arm); not recorded: an "
    "agent or target archive written before its observations were hashed."
)

CAPTIONS = {
    "table1": "Fault scenarios, targeted reliability layers and expected safe behaviour.",
    "table2": "Deterministic enterprise_v2 results: strict success S and groundedness false "
    "positives GF by scenario and contract mode.",
    "table3": "Required-document recall and current-version preference under deterministic "
    "retriever ablations (240 tasks per cell). The explicit task-domain filter is a "
    "sensitivity condition, not the reported retriever.",
    "table4": "Success by scenario and contract mode: rate and cluster-aware 95% interval.",
    "table5": "Groundedness false positives GF (grounded but not strictly successful) and paired "
    "repair-minus-strict success differences (percentage points), with 95% intervals. "
    + IDENTICAL_INPUTS,
    "table5_crosscheck": "statsmodels cross-checks of the paired effects: exact McNemar on the paired "
    "outcomes and a GEE linear-probability model (risk difference), and whether each agrees with "
    "Table 5's interval about the effect being distinguishable from zero.",
    "specificity_margin": "Specificity margin: target-layer (schema drift) gain minus the largest absolute "
    "off-target change (percentage points).",
    "table5_safe": "Paired repair-minus-strict differences in safe resolution (strict success on "
    "answerable scenarios, a structured non-answer on unsafe ones; percentage points, 95% "
    "intervals, each cell's method named in the notes), and the specificity margin on that "
    "outcome: does repair change safe behaviour off its target layer? " + IDENTICAL_INPUTS,
    "table8": "Largest strict-to-repair success gains by model and scenario.",
    "table9": "Provider-level averages over all scenarios (context, not a capability ranking).",
    "coverage": "Coverage of the package's 95% intervals on synthetic archives with known truth.",
    "paper_comparison": "The paper's stated figures beside ours.",
    "table6": "Representative task-level outcomes, chosen by rule from the archive. Unknown denotes no usable "
    "answer under the benchmark contract.",
    "table7": "Focused LangChain study: strict success on answerable conditions and safe resolution (structured "
    "non-answers) on unsafe ones, per arm.",
    "table7_by_condition": "Focused LangChain study by condition: strict success, safe resolution and the "
    "LayerRAG control that fired.",
    "safe_resolution_models": "Safe resolution by model and scenario: strict success on answerable "
    "scenarios, a structured non-answer on unsafe ones (malformed replies and provider errors are "
    "failures, never refusals), baseline contract arm.",
    "table6_models": "Table 6's representative cases for real models, from archive labels: what the "
    "model did and how it was scored (archives keep no answer text).",
    "replicates_models": "Within-task variability of a real model under sampled decoding: each task "
    "asked R times per arm. Tasks that flip: share of tasks whose draws disagree; ICC: share of "
    "the outcome's variance between tasks; design effect 1 + (R - 1) ICC. Intervals clustered by "
    "task over all replicates, over replicate 0 alone (a one-draw archive), and Wilson over the "
    "records as if independent (too narrow when draws of a task agree).",
    "exchangeability_models": "Strict and repair arms where their prompts are byte-identical: pairs "
    "(task, replicate) that disagree, by direction, with the exact two-sided sign test. Under "
    "exchangeable draws each direction is equally likely; arms are asked in a seeded random order.",
    "agent_vs_single": "One model in two modes on the same tasks, scenarios and contract arms: "
    "single call (the harness searches once, the model reads) and agent (the model calls the "
    "faulted search and open_document tools itself, up to 4 tool-calling turns, then replies). "
    "Judged outcome per scenario: strict success S where answerable, safe resolution elsewhere; "
    "agent - single is the paired difference by task. GF: grounded false positives. Steps: model "
    "calls per record; tool calls per record; invalid calls: share of tool calls whose arguments "
    "broke the tool's schema; retries after fault: tool calls made right after a faulted call, "
    "per record; step limit: share of records that used every tool-calling turn.",
    "surface_models": "A real model's reliability surface: safe resolution (strict success on "
    "answerable scenarios, a structured non-answer on unsafe ones) of each faulted layer at each "
    "fault intensity λ (the share of policies or tasks the fault strikes; λ = 0 strikes none, so "
    "every layer starts at the clean rate), with 95% Clopper-Pearson intervals at the effective "
    "sample size clustered by task; how far along λ the layer keeps the threshold by its estimates "
    "and whether every 95% lower bound up to there decides it (an intersection-union test, error "
    "at most 2.5%). A struck transport call ends before the reader (no model call): those rows "
    "measure the harness's single search, the model only on the tasks left unstruck.",
    "user_table4": "A team's own pipeline (the worked example: a LangChain chain over BM25 and "
    "the local Qwen model, run as a target): Table 4's rows.",
    "user_table5": "A team's own pipeline (the worked example): Table 5's rows.",
    "user_table10": "A team's own pipeline (the worked example): Table 10's rows, every "
    "mitigation on the pipeline's own records.",
    "user_table10_sized": "A team's own pipeline at the size its guard's verdict needs: Table 10's "
    "rows of a second, larger run of the same chain (more tasks, fewer arms: the baseline and "
    "validity resolution, the guard whose change on clean questions the worked example's 16 tasks "
    "could not show; make user-pipeline-sized).",
    "conversations": "Conversations (multi-turn sessions over the corpus's policies, a scripted "
    "user; docs/conversations.md): strict success S of each turn against its own key, by turn "
    "index; conv. S: the share of conversations every turn of which succeeded; the cross-session "
    "leak (a reply carrying another user's conversation) over turns, with its exact "
    "Clopper-Pearson 95% interval; breaks at: the turn index with the lowest S. The reference "
    "readers are deterministic baselines keyed on the conversations' wording, not models.",
    "conversations_matrix": "The session mitigations' specificity matrix over the conversations "
    "(data/specs/mitigations_conversation.yaml; docs/conversations.md): per system and arm, the "
    "change in the share of turns safely resolved against the baseline arm (none) under each "
    "conversational scenario, in percentage points with its 95% interval (turns paired by "
    "conversation and turn index, resampled by conversation; * the arm's target layer's "
    "scenarios); the target gain is the smallest target cell, and the verdict is Table 10's rule "
    "(each target's 95% interval above 0, each off-target cell's 90% interval within its layer's "
    "margin). The reference readers are deterministic baselines, not models.",
    "answer_quality": "Supplementary: answer quality of the answered records by scenario and arm, "
    "beside strict exact match E (which S uses, unchanged): containment (the normalised expected "
    "answer appears in the normalised answer as whole tokens, RGB-style), right value with extra "
    "words (contained but not E), and mean SQuAD token F1. Lenient measures read a verbose model "
    "fairly; they are not success.",
}


FAILURES = {"malformed": "malformed_reply", "provider error": "provider_error"}


def failure_rates(sub: pd.DataFrame) -> dict[str, float]:
    """Share of records that are malformed replies / provider errors (failures, not refusals)."""
    n = len(sub)
    return {k: float((sub["diagnostic"] == v).sum() / n) if n else 0.0 for k, v in FAILURES.items()}


FAILURES_NOTE = (
    "Malformed replies and provider errors are failures on every scenario, never refusals; their "
    "shares are reported as columns."
)


def failure_notes(df: pd.DataFrame) -> list[str]:
    """The table notes on reader-side failures, from what the archive holds: the rule (the same
    for every block, so stated once) and the counts by unit."""
    units = df["provider"] + "/" + df["model"]
    per = []
    for u in sorted(set(units)):
        sub = df[units == u]
        per.append(
            f"{u} {int((sub['diagnostic'] == FAILURES['malformed']).sum())}"
            f"/{int((sub['diagnostic'] == FAILURES['provider error']).sum())}"
        )
    return [
        FAILURES_NOTE,
        f"Malformed/provider-error records by unit: {', '.join(per)} (of {len(df)} records).",
    ]


def rate_design(r: pd.DataFrame, what: str = "Intervals") -> str:
    """What a set of cluster-aware rate intervals assumes, for a table note. The counts of units
    and tasks are in the caption's units sentence, so blocks of the same design share this note
    word for word (and a table states it once)."""
    parts = []
    for d in sorted(set(r["design"])):
        if d == "crossed":
            parts.append(
                "variance two-way cluster-robust over units and tasks (crossed; population of "
                "units and tasks), widened by t(units - 1)/z"
            )
        elif d == "tasks":
            parts.append(
                f"variance clustered by task; with fewer than {stats.MIN_UNITS} units the "
                "interval describes these units, not a population of models"
            )
    return (
        f"{what}: Clopper-Pearson at the design-effect-adjusted sample size, "
        + "; ".join(parts)
        + "; records are not treated as independent (a rate of 0 or 1 uses the number of "
        "independent clusters as its sample size)."
    )


def effects_design(eff: stats.Effects) -> str:
    return f"Paired effects: {eff.describe()}." + (f" Note: {eff.note}." if eff.note else "")


def units_phrase(df: pd.DataFrame) -> str:
    """``a/x, b/y (N records, T tasks)``: the units of one block, for captions."""
    units = sorted(set(stats.unit_labels(df)))
    from layerlab.models.agents import is_target

    # decoding is said of models layerlab asked; a target decodes as its own code does
    asked = df["provider"].map(lambda p: not (stats.is_reference(p) or is_target(p)))
    how = stats.sampling_phrase(df[asked])
    return f"{', '.join(units)} ({len(df)} records, {df['task_id'].nunique()} tasks" + (
        f"; {how})" if how else ")"
    )


def units_sentence(df: pd.DataFrame) -> str:
    return units_phrase(df) + "."


def units_note(df: pd.DataFrame) -> str:
    """A caption sentence naming the units a table counts, by kind, never pooled."""
    parts = [f"{name}: {units_phrase(sub)}" for name, sub in stats.blocks(df).items()]
    return " Units, each block computed on its own: " + "; ".join(parts) + "."


def stack(parts: Mapping[str, pd.DataFrame], name: str) -> pd.DataFrame:
    """Per-block tables one under the other with a leading ``block`` column. The caption is the
    table's own followed by each block's details (``attrs['detail']``: its units); the notes
    (``attrs['notes']``: what the intervals assume) are stated once: a note every block shares
    word for word once, a block's own note after its name."""
    frames = []
    details = []
    for block, t in parts.items():
        frames.append(t.assign(block=block)[["block", *t.columns]])
        if t.attrs.get("detail"):
            details.append(f"{_cap(block)}: {t.attrs['detail'].strip()}")
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out.attrs["caption"] = " ".join([CAPTIONS[name], *details])
    notes = block_notes({b: t.attrs.get("notes", []) for b, t in parts.items()})
    if notes:
        out.attrs["notes"] = notes
    return out


def block_notes(per_block: Mapping[str, list[str]]) -> str:
    """Notes of several blocks as one paragraph, each stated once: a note every block has, once
    and unprefixed (in the order of the first block); a note of some blocks, after each one's
    name."""
    lists = list(per_block.values())
    shared = [n for n in (lists[0] if lists else []) if all(n in ns for ns in lists)]
    out = list(shared)
    for block, ns in per_block.items():
        own = [n for n in ns if n not in shared]
        if own:
            out.append(f"{_cap(block)}: {' '.join(own)}")
    return " ".join(out)


def _cap(block: str) -> str:
    return f"{block[0].upper()}{block[1:]}"

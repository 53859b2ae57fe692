"""What a finished run says, per model: rates with intervals, failure shares, ``results.json``.

A live run ends with a count of records; a researcher wants to know what each model did. This
module turns a run folder (or any checked archive) into per-model results — strict success S,
safe resolution, groundedness false positives GF (grounded: stated in a delivered document,
cited or not) and GF under the cited-only definition, each with a 95% interval, the shares of
records lost to malformed replies and provider errors, and secondary answer measures over the
answered records (exact match, containment, mean token F1, "right value, extra words") — per
mitigation arm, and a per-model × scenario breakdown. A rate over a label some records did not
record (archives migrated from schema 3) has no value: it says how many were not recorded.
:func:`write_results` writes them as ``results.json`` next to the archive
(aggregates only: no prose, answers or document ids), deterministically, so a rerun on the same
records writes the same bytes.

Reference agents (provider ``layerlab``) are deterministic baselines, not models: every result
carries ``reference_agent`` so that tables and reports show them apart, never pooled with models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import archive
from layerlab._io import atomic_write_text
from layerlab.analysis import passk
from layerlab.analysis.rates import cluster_rate
from layerlab.analysis.records import as_frame, records_frame
from layerlab.analysis.units import ARM, contract_arms, scenario_order
from layerlab.models.agents import is_reference, is_target
from layerlab.scoring.score import SAFE_NON_ANSWER

RESULTS = "results.json"
# 4: per model its epochs, and for runs of more than one epoch pass@k and pass^k by scenario;
# 3: GF under the delivered-document definition, GF_cited, answer measures, not-recorded counts;
# 2: intervals clustered by task (1: every record independent)
RESULTS_VERSION = 4
# Headline rates: archive label -> short name used in tables and JSON.
RATES = {
    "success": "S",
    "safe_resolution": "safe",
    "grounded_false_positive": "GF",
    "grounded_cited_false_positive": "GF_cited",  # derived: grounded_cited ∧ ¬S (the old GF)
}
# Failure shares: diagnostic value -> short name.
FAILURES = {"malformed_reply": "malformed", "provider_error": "provider_error"}
INTERVAL = (
    "Clopper-Pearson 95% at the effective sample size, clustered by task (a task's records share its "
    "evidence; stats.cluster_rate, tasks only: describes these tasks)"
)


def _round(x: float) -> float | None:
    return None if x != x else round(float(x), 4)  # NaN -> null in JSON


def with_derived(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the labels results derive from archive columns: ``grounded_cited_false_positive``
    (grounded_cited ∧ ¬S, the groundedness false positive under the cited-only definition)."""
    if "grounded_cited_false_positive" in df or "grounded_cited" not in df:
        return df
    return df.assign(
        grounded_cited_false_positive=df["grounded_cited"].astype(bool)
        & ~df["success"].astype(bool)
    )


def rate(sub: pd.DataFrame, label: str) -> dict[str, Any]:
    """``k``, ``n``, rate and 95% interval of a binary ``label`` over the records of ``sub``;
    the interval is clustered by task (:data:`INTERVAL`), as the paper tables' rates are. When
    some records did not record ``label`` (null: an archive migrated from schema 3), the rate
    and interval are null and ``not_recorded`` counts them (``k`` counts the recorded trues)."""
    n = len(sub)
    if not n:
        return {"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}
    missing = int(sub[label].isna().sum())
    k = int(sub[label].fillna(False).astype(bool).sum())
    if missing:
        return {
            "k": k,
            "n": n,
            "rate": None,
            "ci_low": None,
            "ci_high": None,
            "not_recorded": missing,
        }
    r = cluster_rate(sub, label, design="tasks")
    return {
        "k": k,
        "n": n,
        "rate": _round(k / n),
        "ci_low": _round(r.ci_low),
        "ci_high": _round(r.ci_high),
    }


def arm_order(arms: Sequence[str]) -> list[str]:
    """The baseline arm (the mitigations spec's contract baseline) first, then the others sorted."""
    base = contract_arms()[0]
    return sorted(set(arms), key=lambda a: (a != base, a))


def _cell(sub: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {"records": len(sub)}
    for label, short in RATES.items():
        out[short] = rate(sub, label)
    n = len(sub)
    for diag, short in FAILURES.items():
        k = int((sub["diagnostic"] == diag).sum())
        out[short] = {"k": k, "share": _round(k / n) if n else None}
    out["reached_reader"] = int(sub["reached_reader"].sum())
    out["answered"] = int(sub["answered"].sum())
    out["abstained"] = int(sub["abstained"].sum())
    out["answer_quality"] = answer_quality(sub)
    return out


def answer_quality(sub: pd.DataFrame) -> dict[str, Any]:
    """Secondary answer measures over the *answered* records of ``sub``, beside strict E (never
    replacing it): exact match, containment (the expected answer's tokens appear in the
    answer), ``extra_words`` (contained but not an exact match: the right value with more
    words), each as ``k`` and ``share``, and the mean token F1. Shares over records that did
    not record a measure (migrated archives) are null, with ``not_recorded`` counting them."""
    a = sub[sub["answered"].astype(bool)]
    n = len(a)
    em = a["exact_match"].astype(bool)
    absent = pd.Series([None] * n, index=a.index, dtype=object)  # a frame without the column
    contained = a["contained"] if "contained" in a else absent
    f1 = (a["token_f1"] if "token_f1" in a else absent).astype(float)
    missing = max(int(contained.isna().sum()), int(f1.isna().sum()))
    c = contained.fillna(False).astype(bool)
    out: dict[str, Any] = {"answered": n}
    for name, flag, known in (
        ("exact_match", em, True),
        ("contained", c, not missing),
        ("extra_words", c & ~em, not missing),
    ):
        k = int(flag.sum())
        out[name] = {"k": k, "share": _round(k / n) if n and known else None}
    out["token_f1"] = _round(float(f1.mean())) if n and not missing else None
    if missing:
        out["not_recorded"] = missing
    return out


def table_diagnostics(df: pd.DataFrame) -> pd.Series:
    """The label each record is counted under in a diagnostics table
    (:func:`layerlab.scoring.score.table_diagnostic`): a structured non-answer on an unsafe
    scenario is ``safe_non_answer`` — a safe resolution, not the failure of the layer it met."""
    safe = df["safe_resolution"].fillna(False).astype(bool)
    correct_abstention = safe & ~df["success"].fillna(False).astype(bool)
    return df["diagnostic"].where(~correct_abstention, SAFE_NON_ANSWER)


def summarize(df: pd.DataFrame) -> dict[str, Any]:
    """Per-model results of a record frame (one row per record, archive columns).

    Returns ``{"models": [...], "interval": ...}``; each model entry holds its provider, whether
    it is a reference agent, its record count, per-arm headline cells and a per-scenario
    breakdown (success and safe resolution per arm; in a run of more than one epoch also
    their pass@k and pass^k, :func:`layerlab.analysis.passk.by_scenario`), and the diagnostic
    counts per arm
    (:func:`table_diagnostics`: correct abstentions counted as ``safe_non_answer``, not as the
    failure of the layer they met).
    """
    if df.empty:
        raise ValueError("no records to summarise")
    models = []
    df = with_derived(df)
    scenarios = scenario_order(df)
    for (provider, model), sub in df.groupby(["provider", "model"], sort=True):
        arms = arm_order(sub[ARM].unique())
        per_arm = {a: _cell(sub[sub[ARM] == a]) for a in arms}
        by_scenario = {}
        for s in scenarios:
            ss = sub[sub["scenario"] == s]
            if ss.empty:
                continue
            by_scenario[s] = {
                a: {
                    "S": rate(ss[ss[ARM] == a], "success"),
                    "safe": rate(ss[ss[ARM] == a], "safe_resolution"),
                    "GF": rate(ss[ss[ARM] == a], "grounded_false_positive"),
                    "GF_cited": rate(ss[ss[ARM] == a], "grounded_cited_false_positive"),
                }
                for a in arms
                if not ss[ss[ARM] == a].empty
            }
        for s, per_arm_k in passk.by_scenario(sub).items():  # runs of more than one epoch
            for a, pk in per_arm_k.items():
                by_scenario[s][a]["pass_k"] = pk
        shown = table_diagnostics(sub)  # a correct abstention counts as resolved
        diagnostics = {
            a: {str(k): int(v) for k, v in sorted(shown[sub[ARM] == a].value_counts().items())}
            for a in arms
        }
        models.append(
            {
                "provider": str(provider),
                "model": str(model),
                "reference_agent": is_reference(str(provider)),
                "records": len(sub),
                "tasks": int(sub["task_id"].nunique()),
                "replicates": int(sub["replicate"].max()) + 1 if "replicate" in sub else 1,
                "epochs": passk.epochs(sub),
                "arms": per_arm,
                "by_scenario": by_scenario,
                "diagnostics": diagnostics,
            }
        )
    out: dict[str, Any] = {"results_version": RESULTS_VERSION, "interval": INTERVAL, "models": models}
    if passk.epochs(df) > 1:  # some cell was asked more than once: what pass@k and pass^k are
        out["pass_k"] = passk.DEFINITION
    return out


def for_run(
    folder: Path,
    records: Sequence[archive.Record] | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Results of one run folder: :func:`summarize` plus the run's id and completeness; for a
    target run also the target and its per-layer ``findings``
    (:func:`layerlab.analysis.layers.findings`).

    The folder's records are read checked (:func:`~layerlab.analysis.records.records_frame`);
    ``records`` and ``manifest``, when the caller has just written them (the live harness),
    save reading them back; they must be what the folder holds."""
    folder = Path(folder)
    m = archive.read_manifest(folder) if manifest is None else manifest
    frame = records_frame(folder) if records is None else as_frame(records, [folder])
    res = summarize(frame)
    out = {
        "run_id": m["run_id"],
        "complete": bool(m.get("complete")),
        "records": int(m.get("records", 0)),
        "expected_records": m.get("expected_records"),
        **res,
        "usage": usage_summary(m),
    }
    if isinstance(m.get("target"), dict):  # a target run: the system under test, named
        out["target"] = {k: m["target"].get(k) for k in ("kind", "name", "version", "ref")}
        from layerlab.analysis import layers, sequential

        # what the system did per layer, first (the contract arms shown as the harness's); an
        # until-decided run's guards at its look's level, as its verdicts were judged
        # (each layer's guard the run's own, a plug-in's too: its arms as the manifest defines)
        from layerlab.mitigations.book import book_of_manifests

        mine = frame[frame["provider"].map(is_target).astype(bool)]
        arms = book_of_manifests([(str(folder), m)], mine["mitigation"])
        out["findings"] = layers.findings(mine, alpha=sequential.judged_level(m)[0], arms=arms)
    return out


def target_line(target: Mapping[str, Any]) -> str:
    """A target in one line: ``NAME VERSION (KIND: REF), the system under test``."""
    version = f" {target['version']}" if target.get("version") else ""
    return (
        f"{target.get('name')}{version} ({target.get('kind')}: {target.get('ref')}), "
        "the system under test (records: provider target)"
    )


COST_BASIS = "litellm's price table (US dollars)"
COMPUTE_CPU = "server CPU-seconds (the local servers' processes, start to stop)"
COMPUTE_WALL = "call wall time (seconds from request sent to reply, summed)"


def usage_summary(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per model, what its calls took over every invocation of the run (the manifest's
    ``calls.usage``): answered calls, mean latency, tokens, cost and compute time, each labelled.

    ``cost_usd`` is null where litellm knows no price (local servers, reference agents);
    ``compute_s`` is the local servers' CPU-seconds where measured, otherwise the summed call
    wall time, and ``compute`` says which. Manifests written before usage was recorded: ``{}``.
    """
    usage = ((manifest.get("calls") or {}).get("usage")) or {}
    out: dict[str, dict[str, Any]] = {}
    for model, u in sorted(usage.items()):
        n = int(u.get("calls") or 0)
        cpu = u.get("server_cpu_s")
        lat = float(u.get("latency_s") or 0.0)
        priced = int(u.get("priced_calls") or 0)
        out[model] = {
            "answered_calls": n,
            "latency_s_mean": round(lat / n, 3) if n else None,
            "latency_s_total": round(lat, 3),
            "prompt_tokens": int(u.get("prompt_tokens") or 0),
            "completion_tokens": int(u.get("completion_tokens") or 0),
            "cost_usd": u.get("cost_usd") if priced else None,
            "priced_calls": priced,
            "cost": COST_BASIS if priced else "no price known (local model or reference agent)",
            "compute_s": round(float(cpu), 2) if cpu is not None else round(lat, 2),
            "compute": COMPUTE_CPU if cpu is not None else COMPUTE_WALL,
        }
    return out


def write_results(
    folder: Path,
    records: Sequence[archive.Record] | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``results.json`` next to the run's archive (atomic, deterministic); return it.
    ``records`` and ``manifest`` as in :func:`for_run`."""
    folder = Path(folder)
    res = for_run(folder, records, manifest)
    atomic_write_text(folder / RESULTS, json.dumps(res, indent=2, sort_keys=True) + "\n")
    return res


def error_summary(res: dict[str, Any]) -> list[str]:
    """One line per model whose records include malformed replies or provider errors."""
    lines = []
    for m in res["models"]:
        bad = {short: sum(c[short]["k"] for c in m["arms"].values()) for short in FAILURES.values()}
        if any(bad.values()):
            parts = [f"{v} {k.replace('_', ' ')}" for k, v in bad.items() if v]
            lines.append(
                f"{m['provider']}/{m['model']}: {', '.join(parts)} of {m['records']} records "
                "(counted as failures)"
            )
    return lines

"""Paper tables as DataFrames, each built by one function from library results."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from layerlab import paths
from layerlab.analysis import stats
from layerlab.analysis.stats import BASELINE, TREATMENT
from layerlab.faults.scenario import Scenario

CAPTIONS = {
    "table1": "Fault scenarios, targeted reliability layers and expected safe behaviour.",
    "table2": "Deterministic enterprise_v2 results: strict success S and groundedness false "
    "positives GF by scenario and contract mode.",
    "table3": "Required-document recall and current-version preference under deterministic "
    "retriever ablations (240 tasks per cell). The explicit task-domain filter is a "
    "sensitivity condition, not the reported retriever.",
    "table4": "Success by scenario and contract mode: rate and cluster-aware 95% interval.",
    "table5": "Groundedness false positives (grounded but not strictly successful, cluster-aware 95% "
    "intervals) and paired repair-minus-strict success differences with bootstrap 95% intervals "
    "(percentage points). Identical prompts: pairs whose strict and repair prompts are "
    "byte-identical; where all pairs are, a difference comes from the model's draws, not the arm.",
    "table5_crosscheck": "statsmodels cross-checks of the paired effects: exact McNemar on the paired "
    "outcomes and a GEE linear-probability model (risk difference), and whether each agrees with the "
    "bootstrap about the effect being distinguishable from zero.",
    "specificity_margin": "Specificity margin: target-layer (schema drift) gain minus the largest absolute "
    "off-target change (percentage points).",
    "table5_safe": "Paired repair-minus-strict differences in safe resolution (strict success on "
    "answerable scenarios, a structured non-answer on unsafe ones; percentage points, bootstrap 95% "
    "intervals), and the specificity margin on that outcome: does repair change safe behaviour "
    "off its target layer? Identical prompts: pairs whose strict and repair prompts are "
    "byte-identical (a difference there comes from the model's draws, not the arm).",
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
    "answer_quality": "Supplementary: answer quality of the answered records by scenario and arm, "
    "beside strict exact match E (which S uses, unchanged): containment (the normalised expected "
    "answer appears in the normalised answer as whole tokens, RGB-style), right value with extra "
    "words (contained but not E), and mean SQuAD token F1. Lenient measures read a verbose model "
    "fairly; they are not success.",
}


def units_note(df: pd.DataFrame) -> str:
    """A caption sentence naming the units a table counts, by kind, never pooled."""
    parts = [f"{name}: {_units_phrase(sub)}" for name, sub in stats.blocks(df).items()]
    return " Units, each block computed on its own: " + "; ".join(parts) + "."


def _stack(parts: Mapping[str, pd.DataFrame], name: str) -> pd.DataFrame:
    """Per-block tables one under the other with a leading ``block`` column; the caption is the
    table's own followed by each block's details (``attrs['detail']``)."""
    frames = []
    details = []
    for block, t in parts.items():
        frames.append(t.assign(block=block)[["block", *t.columns]])
        if t.attrs.get("detail"):
            details.append(f"{block[0].upper()}{block[1:]}: {t.attrs['detail'].strip()}")
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    out.attrs["caption"] = " ".join([CAPTIONS[name], *details])
    return out


def safe_resolution_by_unit(df: pd.DataFrame, arm: str = BASELINE) -> pd.DataFrame:
    """Safe resolution per unit x scenario on one arm, with the reader's failure shares."""
    sub = df[df[stats.ARM] == arm]
    rows = []
    for (provider, model), u in sub.groupby(["provider", "model"], sort=True):
        for s in stats.scenario_order(sub):
            c = u[u["scenario"] == s]
            rows.append(
                {
                    "unit": f"{provider}/{model}",
                    "scenario": s,
                    "n": len(c),
                    "safe resolution": float(c["safe_resolution"].mean()),
                    "answered": float(c["answered"].mean()),
                    "abstained": float(c["abstained"].mean()),
                    **_failure_rates(c),
                }
            )
    t = pd.DataFrame(rows)
    t.attrs["caption"] = CAPTIONS["safe_resolution_models"] + units_note(sub)
    return t


def table_answer_quality(df: pd.DataFrame) -> pd.DataFrame:
    """Supplementary table: per scenario x arm, over the answered records, the shares of exact
    match E, containment and "right value, extra words", and the mean token F1
    (:func:`layerlab.analysis.results.answer_quality`), one block per kind of unit, never pooled. Values
    an archive migrated from an older schema did not record are NaN, and counted."""
    return _stack({b: _answer_quality_block(sub) for b, sub in stats.blocks(df).items()}, "answer_quality")


def _answer_quality_block(df: pd.DataFrame) -> pd.DataFrame:
    from layerlab.analysis.results import answer_quality

    nan = float("nan")
    rows = []
    for s in stats.scenario_order(df):
        for arm in stats.arm_order(df):
            cell = df[(df["scenario"] == s) & (df[stats.ARM] == arm)]
            if cell.empty:
                continue
            q = answer_quality(cell)
            share = {k: q[k]["share"] for k in ("exact_match", "contained", "extra_words")}
            rows.append(
                {
                    "scenario": s,
                    stats.ARM: arm,
                    "records": len(cell),
                    "answered": q["answered"],
                    "E": nan if share["exact_match"] is None else share["exact_match"],
                    "contained": nan if share["contained"] is None else share["contained"],
                    "extra words": nan if share["extra_words"] is None else share["extra_words"],
                    "mean token F1": nan if q["token_f1"] is None else q["token_f1"],
                    "not recorded": q.get("not_recorded", 0),
                }
            )
    t = pd.DataFrame(rows)
    missing = int(t["not recorded"].sum()) if len(t) else 0
    t.attrs["detail"] = _units(df) + (
        f" {missing} answered records of an archive migrated from an older schema did not "
        "record containment or F1 (archives hold no reply text): those cells are NaN."
        if missing
        else ""
    )
    return t


def table1(scenarios: Mapping[str, Scenario]) -> pd.DataFrame:
    """Scenario -> layer -> what is injected -> expected behaviour (from the scenario DSL)."""
    rows = [
        {
            "scenario": s.name,
            "layer": s.spec.layer,
            "injected": s.spec.injected,
            "operators": " + ".join(f.op for f in s.spec.faults) or "-",
            "expected behaviour": s.spec.expected_behaviour,
            "answerable": s.spec.answerable,
        }
        for s in scenarios.values()
    ]
    return pd.DataFrame(rows)


def table2(summary: Mapping[str, Any]) -> pd.DataFrame:
    """Deterministic results per scenario (strict/repair success and GF)."""
    rows = []
    for s, per in summary["success"].items():
        gf = summary["grounded_false_positive"][s]
        rows.append(
            {
                "scenario": s,
                **{f"S {m}": per.get(m, float("nan")) for m in (BASELINE, TREATMENT)},
                **{f"GF {m}": gf.get(m, float("nan")) for m in (BASELINE, TREATMENT)},
            }
        )
    return pd.DataFrame(rows)


def table3(audit_result: Mapping[str, Any]) -> pd.DataFrame:
    """Retriever audit, one row per retriever and condition."""
    rows = []
    for name, per in audit_result["retrievers"].items():
        for cond, m in per.items():
            rows.append(
                {
                    "retriever": name,
                    "condition": cond,
                    "top-1 recall": m["top1_recall"],
                    "top-3 recall": m["top3_recall"],
                    "current-version preference": m["current_version_preference"],
                }
            )
    return pd.DataFrame(rows)


FAILURES = {"malformed": "malformed_reply", "provider error": "provider_error"}


def _failure_rates(sub: pd.DataFrame) -> dict[str, float]:
    """Share of records that are malformed replies / provider errors (failures, not refusals)."""
    n = len(sub)
    return {k: float((sub["diagnostic"] == v).sum() / n) if n else 0.0 for k, v in FAILURES.items()}


def failure_note(df: pd.DataFrame) -> str:
    """The caption sentence on reader-side failures, from what the archive holds."""
    units = df["provider"] + "/" + df["model"]
    per = []
    for u in sorted(set(units)):
        sub = df[units == u]
        per.append(
            f"{u} {int((sub['diagnostic'] == FAILURES['malformed']).sum())}"
            f"/{int((sub['diagnostic'] == FAILURES['provider error']).sum())}"
        )
    return (
        " Malformed replies and provider errors are failures on every scenario, never refusals; "
        f"their shares are reported as columns. Malformed/provider-error records by unit: "
        f"{', '.join(per)} (of {len(df)} records)."
    )


def _rate_design(r: pd.DataFrame, what: str = "Intervals") -> str:
    """What a set of cluster-aware rate intervals assumes, for a caption."""
    designs = sorted(set(r["design"]))
    units = int(r["n_units"].max())
    tasks = int(r["n_tasks"].max())
    parts = []
    for d in designs:
        if d == "crossed":
            parts.append(
                f"variance two-way cluster-robust over {units} units and {tasks} tasks (crossed; "
                f"population of units and tasks), widened by t({units - 1})/z"
            )
        elif d == "tasks":
            parts.append(
                f"variance clustered by task ({tasks} tasks); {units} unit(s) < {stats.MIN_UNITS}: "
                "the interval describes these units, not a population of models"
            )
    return (
        f"{what}: Wilson at the design-effect-adjusted sample size, "
        + "; ".join(parts)
        + "; records are not treated as independent (a rate of 0 or 1 uses the number of "
        "independent clusters as its sample size)."
    )


def _effects_design(eff: stats.Effects) -> str:
    return f"Paired effects: {eff.describe()}." + (f" Note: {eff.note}." if eff.note else "")


def table4(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4: success by scenario x arm with cluster-aware intervals, one block per kind of
    unit (real models, reference agents), never pooled (caption in ``attrs``)."""
    return _stack({b: _table4_block(sub) for b, sub in stats.blocks(df).items()}, "table4")


def table4_by_unit(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4 for each unit on its own (the ``block`` column names the unit): the per-model
    view behind the pooled real-model block."""
    units = stats.unit_labels(df)
    return _stack({u: _table4_block(df[units == u]) for u in sorted(set(units))}, "table4")


def _table4_block(df: pd.DataFrame) -> pd.DataFrame:
    r = stats.rates(df, stats.OUTCOME)
    arms = stats.arm_order(df)
    out = []
    for s in stats.scenario_order(df):
        row: dict[str, Any] = {"scenario": s}
        for mode in arms:
            m = r[(r["scenario"] == s) & (r[stats.ARM] == mode)]
            if len(m):
                row.update(
                    {
                        mode: float(m["rate"].iloc[0]),
                        f"{mode} 95% low": float(m["ci_low"].iloc[0]),
                        f"{mode} 95% high": float(m["ci_high"].iloc[0]),
                    }
                )
        sub = r[r["scenario"] == s]
        row["n per mode"] = int(sub["n"].max())
        row["units"] = int(sub["n_units"].max())
        row["interval"] = "/".join(sorted(set(sub["design"])))
        row.update(_failure_rates(df[(df["scenario"] == s) & df[stats.ARM].isin(arms)]))
        out.append(row)
    t = pd.DataFrame(out)
    t.attrs["detail"] = _units(df) + f" {_rate_design(r)}" + failure_note(df)
    return t


def _units_phrase(df: pd.DataFrame) -> str:
    """``a/x, b/y (N records, T tasks)``: the units of one block, for captions."""
    units = sorted(set(stats.unit_labels(df)))
    how = stats.sampling_phrase(df[~df["provider"].map(stats.is_reference)])
    return f"{', '.join(units)} ({len(df)} records, {df['task_id'].nunique()} tasks" + (
        f"; {how})" if how else ")"
    )


def _units(df: pd.DataFrame) -> str:
    return _units_phrase(df) + "."


def table5(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5: GF rates with cluster-aware intervals and paired effects, one block per kind of
    unit (:func:`layerlab.analysis.stats.analyse`), never pooled (caption in ``attrs``)."""
    return _stack({b: _table5_block(a.df, a.eff) for b, a in analysis.items()}, "table5")


def _table5_block(df: pd.DataFrame, eff: stats.Effects) -> pd.DataFrame:
    gf = stats.rates(df, "grounded_false_positive")
    same_prompts = stats.identical_prompts(df, eff.paired.baseline, eff.paired.treatment)
    out = []
    for _, e in eff.table.iterrows():
        s = e["scenario"]
        row: dict[str, Any] = {"scenario": s}
        for mode in (eff.paired.baseline, eff.paired.treatment):
            m = gf[(gf["scenario"] == s) & (gf[stats.ARM] == mode)]
            row[f"GF {mode}"] = float(m["rate"].iloc[0])
            row[f"GF {mode} 95% low"] = float(m["ci_low"].iloc[0])
            row[f"GF {mode} 95% high"] = float(m["ci_high"].iloc[0])
        row.update(
            {
                f"{eff.paired.treatment}-{eff.paired.baseline} (pp)": 100 * float(e["estimate"]),
                "95% low (pp)": 100 * float(e["ci_low"]),
                "95% high (pp)": 100 * float(e["ci_high"]),
                "exactly zero": bool(e["exactly_zero"]),
                "design": str(e["design"]),
            }
        )
        same, pairs = same_prompts.get(s, (0, 0))
        row["identical prompts"] = f"{same}/{pairs}"
        sub = df[(df["scenario"] == s) & df["mitigation"].isin([BASELINE, TREATMENT])]
        row.update(_failure_rates(sub))
        out.append(row)
    t = pd.DataFrame(out)
    t.attrs["detail"] = (
        _units(df) + f" {_rate_design(gf, 'GF intervals')} {_effects_design(eff)}" + failure_note(df)
    )
    return t


def safe_effects_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5 on safe resolution: the paired effects per scenario and block, with each block's
    specificity margin on that outcome in the caption (``analysis`` from
    :func:`layerlab.analysis.stats.analyse` with ``outcome="safe_resolution"``)."""
    parts = {}
    for b, a in analysis.items():
        e = a.eff
        same = stats.identical_prompts(a.df, e.paired.baseline, e.paired.treatment)
        t = pd.DataFrame(
            {
                "scenario": e.table["scenario"],
                "repair-strict (pp)": 100 * e.table["estimate"],
                "95% low (pp)": 100 * e.table["ci_low"],
                "95% high (pp)": 100 * e.table["ci_high"],
                "exactly zero": e.table["exactly_zero"].astype(bool),
                "identical prompts": [
                    "{}/{}".format(*same.get(str(x), (0, 0))) for x in e.table["scenario"]
                ],
                "design": e.table["design"],
            }
        )
        m = a.margin
        t.attrs["detail"] = (
            f"{_units(a.df)} Margin {100 * m['margin']:.1f} pp [{100 * m['ci_low']:.1f}, "
            f"{100 * m['ci_high']:.1f}]: target gain {100 * m['target_gain']:.1f} pp, largest "
            f"off-target change {100 * m['largest_off_target_change']:.1f} pp "
            f"({m['largest_off_target']}); off-target changes whose band excludes 0: "
            f"{m['off_target_distinguishable']}. "
            + _effects_design(e)
        )
        parts[b] = t
    return _stack(parts, "table5_safe")


def crosscheck_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Table 5 cross-checks (:func:`layerlab.analysis.stats.crosschecks`) per block, caption in ``attrs``."""
    return _stack(
        {b: _crosscheck_block(a.df, a.eff) for b, a in analysis.items()}, "table5_crosscheck"
    )


def _crosscheck_block(df: pd.DataFrame, eff: stats.Effects) -> pd.DataFrame:
    t = stats.crosschecks(df, eff)
    by = sorted(set(t["gee clustered by"]))
    n_cl = int(t["gee clusters"].max()) if len(t) else 0
    t.attrs["detail"] = (
        f"GEE clustered by {'/'.join(by)} ({n_cl} clusters; by unit "
        f"needs at least {stats.MIN_UNITS} units), bias-reduced robust covariance, p from "
        "t(clusters - 1); p-values that underflow are printed as bounds. The bootstrap: "
        f"{eff.describe()}."
    )
    return t


def design_comparison(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """Each scenario's paired-effect interval under every bootstrap design, side by side (pp),
    per block."""
    return pd.concat(
        [_design_block(a.designs).assign(block=b) for b, a in analysis.items()], ignore_index=True
    ).pipe(lambda t: t[["block", *[c for c in t.columns if c != "block"]]])


def _design_block(designs: Mapping[str, stats.Effects]) -> pd.DataFrame:
    rows = []
    for d, e in designs.items():
        for _, r in e.table.iterrows():
            rows.append(
                {
                    "scenario": r["scenario"],
                    "design": d,
                    "estimate (pp)": 100 * float(r["estimate"]),
                    "95% low (pp)": 100 * float(r["ci_low"]),
                    "95% high (pp)": 100 * float(r["ci_high"]),
                    "width (pp)": 100 * float(r["ci_high"] - r["ci_low"]),
                    "estimand": e.estimand,
                }
            )
    order = {s: i for i, s in enumerate(next(iter(designs.values())).paired.scenarios)}
    t = pd.DataFrame(rows)
    t = t.sort_values(
        ["scenario", "design"], key=lambda c: c.map(order) if c.name == "scenario" else c
    )
    return t.reset_index(drop=True)


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _ours_rate(t4: pd.DataFrame, scenario: str, mode: str) -> float | None:
    m = t4[t4["scenario"] == scenario]
    return float(m[mode].iloc[0]) if len(m) and mode in m else None


def _block_figures(a: stats.Block, ref: Mapping[str, Any]) -> dict[str, Any]:
    """The archive-derived figures the paper states, for one block (figure name -> ours)."""
    df, eff, margin = a.df, a.eff, a.margin
    t4, t5 = _table4_block(df), _table5_block(df, eff)
    out: dict[str, Any] = {
        "live records": len(df),
        "records with a prompt hash": int(df["prompt_hash"].notna().sum()),
    }
    for s in ref["table4_success_by_scenario_contract"]:
        for mode in (BASELINE, TREATMENT):
            out[f"Table 4 {s} {mode}"] = _ours_rate(t4, s, mode)
    ws = t5[t5["scenario"] == "wrong_session"]
    for mode in (BASELINE, TREATMENT):
        out[f"Table 5 wrong_session GF {mode}"] = (
            float(ws[f"GF {mode}"].iloc[0]) if len(ws) else None
        )
    st = df[(df["scenario"] == "stale_index") & df["grounded"].astype(bool)]
    out["stale_index: grounded records that fail S"] = (
        f"{int((~st['success'].astype(bool)).sum())} of {len(st)}" if len(st) else "no grounded record"
    )
    sd = t5[t5["scenario"] == "schema_drift"]
    if len(sd):
        out["schema_drift paired gain (pp)"] = float(
            sd[f"{eff.paired.treatment}-{eff.paired.baseline} (pp)"].iloc[0]
        )
        out["schema_drift gain 95% interval (pp)"] = (
            f"[{sd['95% low (pp)'].iloc[0]:.1f}, {sd['95% high (pp)'].iloc[0]:.1f}] ({eff.design})"
        )
        for name, alt in a.designs.items():
            if name == eff.design:
                continue
            row = alt.table.set_index("scenario").loc["schema_drift"]
            shown = name != "crossed" or len(alt.paired.units) >= stats.MIN_UNITS
            out[f"schema_drift gain 95% interval, {name} (pp)"] = (
                f"[{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]"
                + ("" if shown else f" (not reported: < {stats.MIN_UNITS} units)")
            )
    tied = str(margin["largest_off_target"]).split(", ")
    which = ", ".join(tied) if len(tied) <= 2 else f"{len(tied)} scenarios tied"
    out["largest off-target change (pp)"] = (
        f"{100 * abs(margin['largest_off_target_change']):.3f} ({which})"
    )
    out["specificity margin (pp)"] = (
        f"{100 * margin['margin']:.3f} [{100 * margin['ci_low']:.1f}, {100 * margin['ci_high']:.1f}]"
    )
    inc = sorted(eff.table.loc[eff.table["includes_zero"] & ~eff.table["exactly_zero"], "scenario"])
    zero = sorted(eff.table.loc[eff.table["exactly_zero"], "scenario"])
    out["intervals including zero"] = ", ".join(inc) or "none"
    out["exactly-zero effects"] = ", ".join(zero) or "none"
    return out


NOTES = {
    "records with a prompt hash": "records ending before the reader carry no prompt",
    "schema_drift gain 95% interval (pp)": "reported design in brackets",
    "specificity margin (pp)": "95% interval from the simultaneous band",
    "exactly-zero effects": "strict and repair outcomes identical on every paired record",
}


def paper_comparison(
    analysis: Mapping[str, stats.Block],
    audit_result: Mapping[str, Any] | None = None,
    reference: Path = paths.DATA / "reference" / "paper_figures.yaml",
) -> pd.DataFrame:
    """Each figure the paper states, beside ours: one column per block of units (real models,
    reference agents; never pooled) from :func:`layerlab.analysis.stats.analyse`, and the corpus and
    retriever audit (no model involved) in a column of its own. ``attrs['blocks']`` names each
    block's units and records."""
    ref = yaml.safe_load(reference.read_text(encoding="utf-8"))
    per = {b: _block_figures(a, ref) for b, a in analysis.items()}
    lm = ref["live_matrix"]
    t5r = ref["table5_groundedness_and_paired_effects"]
    g = t5r["schema_drift_paired_gain_pp"]
    paper: dict[str, Any] = {
        "live records": lm["records"],
        "records with a prompt hash": lm["records_with_prompt_hash"],
    }
    for s, v in ref["table4_success_by_scenario_contract"].items():
        for mode in (BASELINE, TREATMENT):
            paper[f"Table 4 {s} {mode}"] = float(v[mode])
    for mode in (BASELINE, TREATMENT):
        paper[f"Table 5 wrong_session GF {mode}"] = float(
            t5r["wrong_session_grounded_but_failed"][mode]
        )
    paper["stale_index: grounded records that fail S"] = t5r["stale_index"]
    paper["schema_drift paired gain (pp)"] = float(g["estimate"])
    ci = f"[{g['ci95'][0]}, {g['ci95'][1]}]"
    paper["schema_drift gain 95% interval (pp)"] = ci
    for d in ("crossed", "nested", "tasks"):
        paper[f"schema_drift gain 95% interval, {d} (pp)"] = ci
    paper["largest off-target change (pp)"] = float(t5r["largest_off_target_change_pp"])
    paper["specificity margin (pp)"] = float(t5r["specificity_margin_pp"])
    paper["intervals including zero"] = ", ".join(t5r["intervals_including_zero"])
    paper["exactly-zero effects"] = ", ".join(t5r["exactly_zero_effect"])
    figures = list(dict.fromkeys(f for p in per.values() for f in p))
    rows: list[dict[str, Any]] = []
    for f in figures:
        row = {"figure": f, "paper": _fmt(paper.get(f, "-"))}
        for b in analysis:
            v = per[b].get(f)
            row[b] = "-" if v is None else _fmt(v)
        row["corpus and retriever (no model)"] = ""
        row["note"] = NOTES.get(f, "")
        rows.append(row)

    def audit_row(figure: str, paper_v: Any, ours: Any, note: str = "") -> None:
        rows.append(
            {"figure": figure, "paper": _fmt(paper_v), **dict.fromkeys(analysis, ""),
             "corpus and retriever (no model)": _fmt(ours), "note": note}
        )

    if audit_result is not None:
        t3 = ref["table3_retriever_audit"]
        r = audit_result["retrievers"]
        audit_row(
            "Table 3 clean top-1, reported retriever",
            t3["clean_top1_recall_reported"],
            r["tfidf_domain_validity"]["clean"]["top1_recall"],
        )
        audit_row(
            "Table 3 clean top-1 without validity",
            t3["clean_top1_recall_without_validity"],
            r["tfidf_domain"]["clean"]["top1_recall"],
            "ablation tfidf_domain",
        )
        if "corrupted_metadata" in r["tfidf_domain_validity"]:
            cm = r["tfidf_domain_validity"]["corrupted_metadata"]
            audit_row(
                "Table 3 corrupted-metadata top-1",
                t3["corrupted_metadata_top1_recall"],
                cm["top1_recall"],
                "we swap status/year on half of the policies and relabel every domain",
            )
            audit_row(
                "Table 3 corrupted-metadata current-version preference",
                t3["corrupted_metadata_current_version_preference"],
                cm["current_version_preference"],
            )
            ex = r["explicit_domain_filter"]["corrupted_metadata"]
            audit_row(
                "explicit domain filter under corrupted domains (top-1/top-3)",
                "0.0/0.0",
                f"{ex['top1_recall']:.3f}/{ex['top3_recall']:.3f}",
            )
        cues = audit_result["domain_cues"]
        dh = t3["domain_heuristic"]
        audit_row(
            "domain heuristic correct/incorrect/unresolved",
            f"{dh['correct']}/{dh['incorrect']}/{dh['unresolved']}",
            f"{cues['correct']}/{cues['incorrect']}/{cues['unresolved']}",
            "our cue words and questions",
        )
        dq = audit_result["duplicate_query"]["queries"]
        if dq:
            d0 = dq[0]
            audit_row(
                "cross-domain duplicate query",
                t3["cross_domain_duplicate_query"],
                f"reported {d0['top1_correct']['tfidf_domain_validity']}/2, explicit filter "
                f"{d0['top1_correct']['explicit_domain_filter']}/2",
            )
    t = pd.DataFrame(rows)
    if audit_result is None:
        t = t.drop(columns=["corpus and retriever (no model)"])
    t.attrs["blocks"] = {
        b: {"units": a.units, "records": len(a.df), "tasks": int(a.df["task_id"].nunique())}
        for b, a in analysis.items()
    }
    t.attrs["caption"] = CAPTIONS["paper_comparison"] + units_note(
        pd.concat([a.df for a in analysis.values()])
    )
    return t


def table8(df: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Largest strict→repair gains by model × scenario, the top of each block (caption in
    ``attrs``)."""
    parts = {}
    for b, sub in stats.blocks(df).items():
        t = stats.model_gains(sub, top)
        t.attrs["detail"] = (
            f"{_units(sub)} Per-unit rates, no intervals (one unit per row); only gains above "
            f"zero are listed ({len(t)} row(s)), ties at the cut-off of {top} are all kept."
        )
        parts[b] = t
    return _stack(parts, "table8")


def table9(df: pd.DataFrame) -> pd.DataFrame:
    """Provider-level averages per block, with the shares of malformed replies and provider
    errors (caption in ``attrs``)."""
    return _stack({b: _table9_block(sub) for b, sub in stats.blocks(df).items()}, "table9")


def _table9_block(df: pd.DataFrame) -> pd.DataFrame:
    t = stats.provider_averages(df)
    fail = pd.DataFrame([_failure_rates(df[df["provider"] == p]) for p in t["provider"]])
    designs = sorted(set(t["interval"]))
    t = pd.concat([t, fail], axis=1)
    what = {
        "crossed": "two-way cluster-robust over models and tasks (crossed), widened by t(models - 1)/z",
        "tasks": f"clustered by task (fewer than {stats.MIN_UNITS} models: these models only)",
    }
    t.attrs["detail"] = (
        f"{_units(df)} Pooled success interval: Wilson at the design-effect-adjusted "
        f"sample size, variance {'; '.join(what[d] for d in designs if d in what)}; a task's "
        "records across scenarios and arms form one cluster." + failure_note(df)
    )
    return t


def margin_table(analysis: Mapping[str, stats.Block]) -> pd.DataFrame:
    """The specificity margin, one row per block (percentage points), caption in ``attrs``."""
    parts = {b: _margin_row(a.margin) for b, a in analysis.items()}
    t = _stack(parts, "specificity_margin")
    boots = "; ".join(f"{b}: {a.eff.describe()}" for b, a in analysis.items())
    t.attrs["caption"] += (
        " The margin counts an off-target change only when its "
        "simultaneous band excludes zero (the plug-in gain - max|change| is biased low when "
        "off-target effects are zero but noisy). The 95% interval projects a simultaneous "
        "(max-|t|) bootstrap band over all scenarios: it covers the true margin whenever the band "
        f"covers every effect. Bootstrap, {boots}."
    )
    return t


def _margin_row(margin: Mapping[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "target": margin["target"],
                "target gain (pp)": 100 * margin["target_gain"],
                "largest off-target": margin["largest_off_target"],
                "off-target change (pp)": 100 * margin["largest_off_target_change"],
                "off-target distinguishable from 0": margin["off_target_distinguishable"],
                "margin (pp)": 100 * margin["margin"],
                "plug-in margin (pp)": 100 * margin["margin_plugin"],
                "95% low (pp)": 100 * margin["ci_low"],
                "95% high (pp)": 100 * margin["ci_high"],
            }
        ]
    )


def coverage_table(table: pd.DataFrame) -> pd.DataFrame:
    """The coverage suite's table (:mod:`layerlab.analysis.coverage`) for publication, caption in ``attrs``."""
    from layerlab.analysis import coverage

    t = table.copy()
    small = t["units"] < stats.MIN_UNITS
    sims = "/".join(map(str, sorted(set(t.loc[~small, "simulations"])))) or "-"
    sims_small = "/".join(map(str, sorted(set(t.loc[small, "simulations"])))) or "-"
    boots = "/".join(map(str, sorted(set(t["resamples"]))))
    t = t.drop(columns=["simulations", "resamples"])
    t.attrs["caption"] = (
        f"{CAPTIONS['coverage']} {sims} simulated archives per setting ({sims_small} below "
        f"{stats.MIN_UNITS} units), {boots} resamples each; 'checks' counts interval-truth comparisons "
        "(one per simulation, or per zero-effect scenario). Reported intervals must reach "
        f"{coverage.REQUIRED:.0%}; 'labelled' and 'not reported' rows show why the package does "
        "not rely on them (nested: the paper's scheme; records-independent Wilson: the old Table 4 "
        f"interval; crossed with fewer than {stats.MIN_UNITS} units: a population claim from too "
        "few models, covering only by being nearly as wide as the scale). 'mc s.e.' is the "
        "binomial Monte Carlo standard error of the coverage. Rows "
        f"'{coverage.VERDICT}' (identical-prompt settings: both arms independent draws from the "
        "same per-task success probabilities, no effect anywhere) score Table 10's verdict: "
        "'coverage' is the share of null mitigations called ineffective, 'false flag' the share "
        f"called anything else (reported rule: at most {coverage.MAX_FALSE_FLAG:.0%}); beside it "
        "the one-sided per-cell rule it replaced and how often some off-target marginal interval "
        "excludes zero."
    )
    return t


def audit_notes(audit_result: Mapping[str, Any]) -> pd.DataFrame:
    """Domain-cue counts and the cross-domain duplicate query, as a small table."""
    cues = audit_result["domain_cues"]
    rows = [{"item": f"domain cues {k}", "value": str(v)} for k, v in cues.items()]
    for q in audit_result["duplicate_query"]["queries"]:
        for name, n in q["top1_correct"].items():
            rows.append(
                {
                    "item": f"duplicate query ({' & '.join(q['domains'])}) top-1 right, {name}",
                    "value": f"{n}/{len(q['tasks'])}",
                }
            )
    return pd.DataFrame(rows)


def diagnostics(summary: Mapping[str, Any], mode: str = BASELINE) -> pd.DataFrame:
    """Diagnostic-label counts per scenario for one contract mode (which layer failed)."""
    rows = []
    for s, per in summary["diagnostics"].items():
        rows.append({"scenario": s, **per.get(mode, {})})
    df = pd.DataFrame(rows).fillna(0)
    counts = [c for c in df.columns if c != "scenario"]
    return df.astype(dict.fromkeys(counts, int))


def replicates_table(df: pd.DataFrame, outcome: str = "safe_resolution") -> pd.DataFrame:
    """Within-task variability of replicated real-model records (:func:`layerlab.analysis.stats.
    replicate_variability`) on ``outcome``, with the caption naming the decoding settings."""
    t = stats.replicate_variability(df, outcome)
    t.attrs["caption"] = (
        f"{CAPTIONS['replicates_models']} Outcome: {outcome.replace('_', ' ')}. "
        f"Units: {_units_phrase(df)}."
    )
    return t


def exchangeability_table(df: pd.DataFrame, outcome: str = "safe_resolution") -> pd.DataFrame:
    """:func:`layerlab.analysis.stats.identical_prompt_discordance` with its caption."""
    t = stats.identical_prompt_discordance(df, outcome)
    t.attrs["caption"] = (
        f"{CAPTIONS['exchangeability_models']} Outcome: {outcome.replace('_', ' ')}. "
        f"Units: {_units_phrase(df)}."
    )
    return t

"""The paper's stated figures beside ours (``paper_comparison``): one column per block of units,
the corpus and retriever audit in a column of its own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from layerlab import paths
from layerlab.analysis import stats
from layerlab.reporting.format.display import points
from layerlab.reporting.paper.tables.captions import CAPTIONS, units_note
from layerlab.reporting.paper.tables.effects import table5_block
from layerlab.reporting.paper.tables.rates import table4_block


def _pp(v: float, digits: int = 1, of_share: bool = True) -> str:
    """The comparison table's points: a sign only when negative (``12.5``)."""
    return points(v, digits, share=of_share, sign="minus")


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _ours_rate(t4: pd.DataFrame, scenario: str, mode: str) -> float | None:
    m = t4[t4["scenario"] == scenario]
    return float(m[mode].iloc[0]) if len(m) and mode in m else None


def _block_figures(a: stats.Block, ref: Mapping[str, Any]) -> dict[str, Any]:
    """The archive-derived figures the paper states, for one block (figure name -> ours)."""
    df, eff, margin = a.df, a.eff, a.margin
    t4, t5 = table4_block(df), table5_block(df, eff)
    out: dict[str, Any] = {
        "live records": len(df),
        "records with a prompt hash": int(df["prompt_hash"].notna().sum()),
    }
    for s in ref["table4_success_by_scenario_contract"]:
        for mode in (stats.BASELINE, stats.TREATMENT):
            out[f"Table 4 {s} {mode}"] = _ours_rate(t4, s, mode)
    ws = t5[t5["scenario"] == "wrong_session"]
    for mode in (stats.BASELINE, stats.TREATMENT):
        out[f"Table 5 wrong_session GF {mode}"] = (
            float(ws[f"GF {mode}"].iloc[0]) if len(ws) else None
        )
    st = df[(df["scenario"] == "stale_index") & df["grounded"].astype(bool)]
    out["stale_index: grounded records that fail S"] = (
        f"{int((~st['success'].astype(bool)).sum())} of {len(st)}"
        if len(st)
        else "no grounded record"
    )
    sd = t5[t5["scenario"] == "schema_drift"]
    if len(sd):
        out["schema_drift paired gain (pp)"] = float(
            sd[f"{eff.paired.treatment}-{eff.paired.baseline} (pp)"].iloc[0]
        )
        out["schema_drift gain 95% interval (pp)"] = (
            f"[{_pp(sd['95% low (pp)'].iloc[0], of_share=False)}, "
            f"{_pp(sd['95% high (pp)'].iloc[0], of_share=False)}] ({eff.design})"
        )
        for name, alt in a.designs.items():
            if name == eff.design:
                continue
            row = alt.table.set_index("scenario").loc["schema_drift"]
            shown = name != "crossed" or len(alt.paired.units) >= stats.MIN_UNITS
            out[f"schema_drift gain 95% interval, {name} (pp)"] = (
                f"[{_pp(row['ci_low'])}, {_pp(row['ci_high'])}]"
                + ("" if shown else f" (not reported: < {stats.MIN_UNITS} units)")
            )
    tied = str(margin["largest_off_target"]).split(", ")
    which = ", ".join(tied) if len(tied) <= 2 else f"{len(tied)} scenarios tied"
    out["largest off-target change (pp)"] = (
        f"{_pp(abs(margin['largest_off_target_change']), 3)} ({which})"
    )
    out["specificity margin (pp)"] = (
        f"{_pp(margin['margin'], 3)} [{_pp(margin['ci_low'])}, {_pp(margin['ci_high'])}]"
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
        for mode in (stats.BASELINE, stats.TREATMENT):
            paper[f"Table 4 {s} {mode}"] = float(v[mode])
    for mode in (stats.BASELINE, stats.TREATMENT):
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
            {
                "figure": figure,
                "paper": _fmt(paper_v),
                **dict.fromkeys(analysis, ""),
                "corpus and retriever (no model)": _fmt(ours),
                "note": note,
            }
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

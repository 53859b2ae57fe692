"""Recompute the archive-based paper tables — the registry's entries marked ``recompute``
(:data:`layerlab.reporting.paper.tables.RECOMPUTED`: Tables 4, 5, 5 on safe resolution, 8, 9, the
specificity margin, the statsmodels cross-checks, the answer quality, the side-by-side with the
paper's stated figures and, given mitigation archives, the specificity matrix, Table 10) — from
archives alone, with no provider calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from layerlab import paths
from layerlab.analysis import stats
from layerlab.reporting.paper.tables import RECOMPUTED, REGISTRY


def recompute(
    archives: Sequence[Path],
    out: Path,
    n_boot: int = 10_000,
    seed: int = 0,
    policy_level: bool | None = None,
    with_audit: bool = True,
    matrix_archives: Sequence[Path] | None = None,
    allow_partial: bool = False,
    allow_mixed: bool = False,
    design: stats.Design = "auto",
) -> dict[str, Any]:
    """Compute and write every archive-based table into ``out``; return the headline figures.

    Validation happens before anything is written: a bad archive raises and leaves ``out``
    untouched, and so do an unfinished run or archives of mixed provenance unless allowed —
    then every table's caption carries the stamp (``PARTIAL``, ``MIXED PROVENANCE``).
    """
    from layerlab.archive import vet

    stamps = vet([Path(a) for a in archives], allow_mixed=allow_mixed, allow_partial=allow_partial)
    stamp = "".join(f"[{s}] " for s in stamps)
    df = stats.records_frame(archives)
    base, treat = stats.contract_arms()
    contract = {base, treat} <= set(df[stats.ARM])
    if not contract and not matrix_archives:
        raise ValueError(
            f"archives hold no {treat!r}/{base!r} pairs (arms: {', '.join(stats.arm_order(df))}); "
            "for a run of mitigation arms, give it to --matrix as well (recompute RUN --matrix RUN)"
        )
    inputs: dict[str, Any] = {"records": df} if contract else {}
    analysis: dict[str, stats.Block] = {}
    if contract:  # a run of mitigation arms alone (no contract treatment) gets Table 10 only
        analysis = stats.analyse(
            df, n_boot=n_boot, seed=seed, policy_level=policy_level, design=design
        )
        inputs["analysis"] = analysis
        inputs["safe_analysis"] = stats.analyse(
            df,
            n_boot=n_boot,
            seed=seed,
            policy_level=policy_level,
            design=design,
            outcome="safe_resolution",
        )
    audit_result = None
    if with_audit and contract:
        from layerlab.corpus import build as corpus_mod
        from layerlab.faults.scenario import load_scenarios
        from layerlab.scoring import audit

        c, key = corpus_mod.load(paths.CORPUS_DIR), corpus_mod.load_answer_key(paths.CORPUS_DIR)
        audit_result = audit.audit(c, key, audit.conditions_from(c, load_scenarios()))
    if contract:
        inputs["audit"] = audit_result
    mx = None
    if matrix_archives:
        from layerlab.analysis import specificity
        from layerlab.archive.manifest import book_for

        mdf = specificity.matrix_frame(matrix_archives)
        arms = book_for(matrix_archives, mdf[stats.ARM])  # what the arms were, not what is installed
        mx = specificity.matrix(mdf, arms, n_boot=n_boot, seed=seed, policy_level=policy_level)
        inputs.update(matrix=mx, matrix_records=mdf)
    built = {  # every recomputed table whose inputs are at hand (Table 10: mitigation archives)
        t.id: t.build(*(inputs[i] for i in t.inputs))
        for t in RECOMPUTED
        if set(t.inputs) <= set(inputs)
    }
    for name, frame in built.items():
        table = REGISTRY[name]
        caption = table.caption_of(frame)
        if stamps:  # the stamp travels in every format: caption (md, tex) and a column (csv)
            frame = frame.assign(stamp=" ".join(stamps))
        table.write(frame, Path(out), stamp + caption)
    t4 = built.get("table4")
    return {
        "records": len(df),
        "stamps": stamps,
        "provider_error_records": int((df["diagnostic"] == "provider_error").sum()),
        "n_boot": n_boot,
        "seed": seed,
        "policy_level": policy_level,
        "blocks": {b: _headline(a, t4[t4["block"] == b]) for b, a in analysis.items()},
        "skipped": None
        if contract
        else f"no {treat!r}/{base!r} pairs in the archives: only the specificity matrix "
        "(Table 10) was computed",
        "written": sorted(f"{REGISTRY[n].stem}.{x}" for n in built for x in ("csv", "md", "tex")),
        "specificity_matrix": None
        if mx is None
        else {r["mitigation"]: r["verdict"] for _, r in mx.summary.iterrows()},
    }


def _headline(a: stats.Block, t4: Any) -> dict[str, Any]:
    """One block's headline figures (success per scenario, the target gain, the margin)."""
    eff, margin = a.eff, a.margin
    sd = eff.table.set_index("scenario").loc[stats.TARGET]
    return {
        "units": list(eff.paired.units),
        "records": len(a.df),
        "design": eff.design,
        "design_label": stats.DESIGN_LABELS[eff.design],
        "note": eff.note,
        "success": {
            r["scenario"]: {
                m: round(float(r[m]), 4) for m in (stats.BASELINE, stats.TREATMENT) if m in r
            }
            for _, r in t4.iterrows()
        },
        "schema_drift_gain": {
            "estimate": round(float(sd["estimate"]), 4),
            "ci95": [round(float(sd["ci_low"]), 4), round(float(sd["ci_high"]), 4)],
            "by_design": {
                d: [
                    round(float(e.table.set_index("scenario").loc[stats.TARGET, c]), 4)
                    for c in ("ci_low", "ci_high")
                ]
                for d, e in a.designs.items()
            },
        },
        "specificity_margin": {
            k: (round(v, 4) if isinstance(v, float) else v) for k, v in margin.items()
        },
        "exactly_zero": sorted(eff.table.loc[eff.table["exactly_zero"], "scenario"]),
    }

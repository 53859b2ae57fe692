"""The analysis's results as text cells: what a run's tables, ``layerlab compare`` and the
mitigation matrix and ``layerlab surface`` print. The library (:mod:`layerlab.analysis`) returns numbers — ``results.json``
entries, a :class:`~layerlab.analysis.compare.Comparison`, a matrix — and this module turns them
into rows of strings, every rate through :func:`~layerlab.reporting.format.display.rate` and every
percentage point through :func:`~layerlab.reporting.format.display.points`, at the terminal's
rules (``"-"`` for an absent value; a run's rates as shares to 3 decimals with their interval,
``layerlab compare``'s as percentages to 1 decimal; its differences in signed points, ``+0.0``
for none)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from layerlab.reporting.format.display import points, rate

if TYPE_CHECKING:
    from layerlab.analysis.compare import Comparison

NONE = "-"  # an absent value in the terminal's tables (and the HTML report's)


# --- a run's results (results.json) ------------------------------------------------------------


def rate_cell(r: Mapping[str, Any]) -> str:
    """A rate of ``results.json`` (``{"rate", "ci_low", "ci_high"}``) as ``0.812 [0.771, 0.847]``
    (``-`` for an empty cell, ``not recorded (N)`` when records of an archive migrated from an
    older schema did not record the label)."""
    if r.get("not_recorded"):
        return f"not recorded ({r['not_recorded']})"
    return rate(r.get("rate"), (r.get("ci_low"), r.get("ci_high")), missing=NONE)


def share_cell(s: Mapping[str, Any]) -> str:
    """A failure share (``{"share", "k"}``) as ``12.5% (30)``."""
    if s.get("share") is None:
        return NONE
    return f"{rate(s['share'], percent=True, suffix='%')} ({s['k']})"


def answer_cell(a: Mapping[str, Any] | None) -> str:
    """``0.10|0.35|0.42 (120)``: exact match and containment shares and mean token F1 over the
    answered records (their count in brackets); ``-`` for a value not recorded."""
    if not a or not a.get("answered"):
        return NONE
    parts = (a["exact_match"]["share"], a["contained"]["share"], a["token_f1"])
    return "|".join(rate(v, digits=2, missing=NONE) for v in parts) + f" ({a['answered']})"


def results_table(res: Mapping[str, Any], reference: bool | None = None) -> pd.DataFrame:
    """One row per model and arm of ``results.json`` (``res``), formatted for display.

    ``reference``: ``True`` only reference agents, ``False`` only models, ``None`` both.
    """
    from layerlab.analysis.results import arm_order

    rows = []
    for m in res["models"]:
        if reference is not None and m["reference_agent"] != reference:
            continue
        for arm in arm_order(m["arms"]):
            c = m["arms"][arm]
            rows.append(
                {
                    "model": f"{m['provider']}/{m['model']}",
                    "arm": arm,
                    "records": c["records"],
                    "S": rate_cell(c["S"]),
                    "safe resolution": rate_cell(c["safe"]),
                    "GF": rate_cell(c["GF"]),
                    "malformed": share_cell(c["malformed"]),
                    "provider error": share_cell(c["provider_error"]),
                    "E|contained|F1 (answered)": answer_cell(c.get("answer_quality")),
                }
            )
    return pd.DataFrame(rows)


def usage_table(usage: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per model of ``results.json``'s ``usage``
    (:func:`layerlab.analysis.results.usage_summary`): calls, mean latency, tokens in/out, cost
    (``-`` where no price is known), compute time and what it measures."""
    from layerlab.analysis.results import COMPUTE_CPU

    rows = []
    for model, u in usage.items():
        cost = u.get("cost_usd")
        rows.append(
            {
                "model": model,
                "calls": u["answered_calls"],
                "latency (mean s)": NONE
                if u.get("latency_s_mean") is None
                else f"{u['latency_s_mean']:.2f}",
                "tokens in/out": f"{u['prompt_tokens']}/{u['completion_tokens']}",
                "cost (USD)": NONE
                if cost is None
                else f"{cost:.4f} ({u['priced_calls']} priced calls)",
                "compute (s)": f"{u['compute_s']:.1f}",
                "compute measures": "server CPU"
                if u["compute"] == COMPUTE_CPU
                else "call wall time",
            }
        )
    return pd.DataFrame(rows)


def passk_rows(res_model: Mapping[str, Any], k: int | None = None) -> list[dict[str, Any]]:
    """Rows of the terminal's pass@k table for one ``results.json`` model entry: per arm and
    scenario, S and safe resolution beside their pass@k and pass^k at ``k`` (default: the
    epochs; :mod:`layerlab.analysis.passk`)."""
    from layerlab.analysis.passk import OUTCOMES
    from layerlab.analysis.units import ARM, arm_order, scenario_order

    per = res_model.get("by_scenario") or {}
    arms = pd.DataFrame({ARM: sorted({a for v in per.values() for a in v})})
    rows = []
    for scenario in scenario_order(pd.DataFrame({"scenario": list(per)})):  # the DSL's order
        for arm in arm_order(arms):  # the baseline first
            pk = per[scenario].get(arm, {}).get("pass_k")
            if not pk:
                continue
            c = per[scenario][arm]
            kk = str(k or pk["epochs"])
            row: dict[str, Any] = {"model": f"{res_model['provider']}/{res_model['model']}",
                                   "arm": arm, "scenario": scenario}  # fmt: skip
            for short in OUTCOMES.values():
                if short not in pk:
                    continue
                row[short] = rate(c[short].get("rate"), missing=NONE)
                row[f"pass@{kk} {short}"] = rate(pk[short]["pass@k"].get(kk), missing=NONE)
                row[f"pass^{kk} {short}"] = rate(pk[short]["pass^k"].get(kk), missing=NONE)
            rows.append(row)
    return rows


# --- layerlab compare ---------------------------------------------------------------------------


def _percent(v: float | None, ci: Sequence[float | None] | None = None) -> str:
    """``layerlab compare``'s rate: a percentage without its sign (the header says %)."""
    return rate(v, ci, percent=True, missing=NONE)


def _pp(v: float | None, ci: Sequence[float | None] | None) -> str:
    """``layerlab compare``'s difference: signed points and their interval, ``+0.0`` for none."""
    if v is None or ci is None:
        return NONE
    return points(v, interval=ci, share=True, sign="always", missing=NONE)


def comparison(c: Comparison) -> pd.DataFrame:
    """A comparison's cells formatted: rates in % with their interval, the difference in
    percentage points with its interval."""
    t = c.table
    return pd.DataFrame(
        {
            "scenario": t["scenario"],
            "arm": t["arm"],
            "tasks": t["tasks"],
            "this run %": [_percent(v, ci) for v, ci in zip(t["this_run"], t["this_run_ci"], strict=True)],
            "other %": [_percent(v, ci) for v, ci in zip(t["other"], t["other_ci"], strict=True)],
            "difference pp": [_pp(v, ci) for v, ci in zip(t["difference"], t["difference_ci"], strict=True)],
        }
    )  # fmt: skip


def comparison_title(c: Comparison) -> str:
    """One line naming the pair, its kind and the common cells."""
    return (
        f"{c.unit} vs {c.other_unit} — {c.kind} — from {c.other_source}: {c.tasks} common tasks, "
        f"{len(c.scenarios)} scenarios, arms {', '.join(c.arms)}"
    )


def paper_beside(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's stated figures beside the run's rates
    (:func:`layerlab.analysis.compare.paper_beside`), formatted."""
    return pd.DataFrame(
        {
            "unit": df["unit"],
            "scenario": df["scenario"],
            "arm": df["arm"],
            "tasks": df["tasks"],
            "this run %": [_percent(v, ci) for v, ci in zip(df["this_run"], df["this_run_ci"], strict=True)],
            "paper %": [_percent(v) for v in df["paper"]],
        }
    )  # fmt: skip


# --- the mitigation matrix (Table 10 of a run) ----------------------------------------------------


def _on_target(out: pd.DataFrame) -> str:
    """One mitigation's target outcomes as ``stale_index safe 0/16 → 16/16`` (pooled over its
    targets when there are more than two, named by their count)."""
    if out.empty:
        return NONE
    if len(out) > 2:
        kinds = "/".join(sorted(set(out["outcome"])))
        return (
            f"{len(out)} scenarios {kinds} {out['baseline_k'].sum()}/{out['baseline_n'].sum()} → "
            f"{out['arm_k'].sum()}/{out['arm_n'].sum()}"
        )
    return "; ".join(
        f"{r.scenario} {r.outcome} {r.baseline_k}/{r.baseline_n} → {r.arm_k}/{r.arm_n}"
        for r in out.itertuples(index=False)
    )


def _scenarios(names: str) -> str:
    """A list of scenarios as given, or by its count from three on."""
    return names if names.count(",") < 2 else f"{names.count(',') + 1} scenarios"


def matrix(mx: Any, df: pd.DataFrame | None = None) -> pd.DataFrame:
    """A matrix's per-mitigation summary formatted: target gain and margin in percentage points
    with their simultaneous intervals, the largest off-target change and the verdict; given the
    records ``df``, also the judged outcome on the targets, baseline → arm
    (:func:`layerlab.analysis.compare.matrix_outcomes`)."""
    from layerlab.analysis.compare import matrix_outcomes

    s = mx.summary
    extra = {}
    if df is not None:
        outs = matrix_outcomes(mx, df)
        extra["outcome on target"] = [
            _on_target(outs[outs["mitigation"] == m]) for m in s["mitigation"]
        ]

    def pp(v: float, lo: float, hi: float) -> str:
        return points(v, interval=(lo, hi), share=True, sign="always", missing=NONE)

    return pd.DataFrame(
        {
            "mitigation": s["mitigation"],
            "targets": [_scenarios(t) for t in s["targets"]],
            "target gain pp": [
                pp(*r) for r in s[["target gain", "target gain low", "target gain high"]].values
            ],
            "largest off-target": [_scenarios(t) for t in s["largest off-target"]],
            "margin pp": [pp(*r) for r in s[["margin", "margin low", "margin high"]].values],
            "verdict": s["verdict"],
            **extra,
            "P(specific) at this size": [
                rate(v, digits=2, missing=NONE) for v in s["p specific"]
            ],
        }
    )


# --- the reliability surface (analysis/surface) --------------------------------------------------


def _estimate_cell(e: Any) -> str:
    return rate(e.rate, (e.ci_low, e.ci_high), missing=NONE)


def surface_table(curves: Sequence[Any]) -> pd.DataFrame:
    """One row per curve point (:func:`layerlab.analysis.surface.surface`): unit, arm, layer
    (scenario), λ, records, S and safe resolution with their 95% intervals, pass^k of safe
    resolution for each k > 1 the run's epochs allow (``-`` where a point has none)."""
    ks = sorted({k for c in curves for p in c.points for k in p.pass_hat["safe"] if k > 1})
    rows = []
    for c in curves:
        for p in c.points:
            row = {"model": c.unit, "arm": c.arm, "layer": f"{c.layer} ({c.scenario})",
                   "λ": f"{p.intensity:g}", "records": str(p.records),
                   "S": _estimate_cell(p.rates["S"]), "safe resolution": _estimate_cell(p.rates["safe"])}  # fmt: skip
            for k in ks:
                row[f"pass^{k} safe"] = rate(p.pass_hat["safe"].get(k), missing=NONE)
            rows.append(row)
    return pd.DataFrame(rows)


_METRIC_WORDS = {"safe": "safe resolution", "S": "strict success S"}


def tolerance_line(t: Any) -> str:
    """One line per :class:`~layerlab.analysis.surface.Tolerance`: how far along λ the metric
    stays at or above the threshold, whether the data decide it, and the first λ it falls at."""
    c = t.curve
    head = f"{c.unit} {c.arm} {c.layer} ({c.scenario}): {_METRIC_WORDS[t.metric]} >= {rate(t.threshold)}"
    error = f"{t.error:.1%}".replace(".0%", "%")
    if t.verdict == "below":
        said = f"below already at λ = {t.falls_at:g}" + (" (decided)" if t.falls_decided else "")
    elif t.verdict == "tolerates":
        said = f"tolerates up to λ = {t.holds_to:g} (decided: 95% lower bounds >= it, error <= {error})"
    else:
        decided = "at no λ" if t.decided_to is None else f"only up to λ = {t.decided_to:g}"
        said = (f"holds up to λ = {t.holds_to:g} by the estimates, inconclusive: the 95% lower "
                f"bounds decide it {decided} (error <= {error})")  # fmt: skip
    if t.falls_at is not None and t.verdict != "below":
        said += f"; falls below at λ = {t.falls_at:g}" + (" (decided)" if t.falls_decided else "")
    elif t.falls_at is None:
        said += f"; never below up to λ = {max(t.tested):g}, the largest tested"
    return f"{head}: {said}"

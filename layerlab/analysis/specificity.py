"""The mitigation × scenario specificity matrix (Table 10) and the archive it is computed from.

Each cell is the paired effect of a mitigation arm against the baseline arm on the scenario's
judged outcome — strict success on answerable scenarios, safe resolution on unsafe ones (the
scorer's ``safe_resolution`` label is exactly that, see :attr:`ScenarioSpec.outcome`) — with its
method's interval (:func:`layerlab.analysis.stats.arm_effects`: a score interval or the calibrated
bootstrap, at policy level when question variants share policies). A mitigation *targets* the
scenarios whose layer it names. Per mitigation: the target gain (smallest effect over its target
scenarios), the largest off-target change, the specificity margin (target gain minus the largest
absolute off-target change) projected from the simultaneous band, and a verdict by the rule in
:data:`VERDICT_RULE` (:func:`judge`, intersection-union: the target's 95% interval, each
off-target cell's 90% equivalence interval against its layer's δ, and the simultaneous band for
over-broad, named in either direction), with the probability of each verdict at the run's size
(:mod:`layerlab.analysis.planning`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from layerlab import paths
from layerlab.analysis import exact
from layerlab.analysis.bootstrap import point_estimates
from layerlab.analysis.effects import (
    Effects,
    arm_effects,
    marginal,
    marginals,
    specificity_margin,
)
from layerlab.analysis.effects import band as effect_band
from layerlab.analysis.rates import z_score
from layerlab.analysis.records import records_frame
from layerlab.analysis.units import blocks
from layerlab.faults.scenario import Scenario, known_scenarios
from layerlab.mitigations import MitigationSet, book, load_mitigations, targets

OUTCOME = "safe_resolution"  # = success on answerable scenarios, structured non-answer elsewhere
# the verdict vocabulary: its one owner (tables, gate, findings and notebooks read these)
SPECIFIC, INEFFECTIVE, INCONCLUSIVE = "specific", "ineffective", "inconclusive"
OVER_BROAD = "over-broad"  # every over-broad verdict starts with it: "over-broad (harm, gain)"
HARM, GAIN = "harm", "gain"  # the directions an off-target change is named by
VERDICTS = (
    SPECIFIC,
    f"{OVER_BROAD} ({HARM})",
    f"{OVER_BROAD} ({GAIN})",
    f"{OVER_BROAD} ({HARM}, {GAIN})",
    INEFFECTIVE,
    INCONCLUSIVE,
)
DELTA = 0.10  # the equivalence margin: an off-target change within ±DELTA counts as none
POWER_EFFECT = 0.20  # the target gain the design's power is stated at
VERDICT_RULE = (
    "Verdict (intersection-union: each claim is tested at level α = 5% and a verdict is a claim "
    "with that error rate). Over-broad (harm) if some off-target cell's simultaneous 95% band "
    "(family-wise over all of the mitigation's cells) lies entirely below zero, over-broad (gain) "
    "if entirely above (it appears to solve a failure of a layer it does not target), over-broad "
    "(harm, gain) if both; the line names the cell and its band. Otherwise specific if every "
    "target cell's 95% interval lies above zero and every off-target cell's 90% interval lies "
    "within ±δ (two one-sided tests of equivalence, TOST, per cell: specific is a conjunction, so "
    "no multiplicity correction is due, and it is false at most α of the time whenever some "
    "off-target change is δ or larger or the target gain is 0 or less); ineffective if the target "
    "gain's one-sided 95% upper bound lies below δ; otherwise inconclusive, with the cell that "
    "keeps it open. Inconclusive means too few tasks to tell, not no effect: an unchanged "
    "off-target cell's 90% interval fits within ±δ only from n > z²(1-δ)/δ tasks (25 at δ = 10 "
    "pp; policies, when question variants of a policy are clustered), and a sampled system needs "
    "epochs. The per-cell 95% intervals in the tables are marginal; the verdict reads the band "
    "only for over-broad."
)
ARCHIVE_DIR = paths.ARCHIVES / "mitigations"


def is_over_broad(verdict: str) -> bool:
    return str(verdict).startswith(OVER_BROAD)


@dataclass(frozen=True)
class Matrix:
    """Cells (one row per mitigation × scenario) and the per-mitigation summary."""

    cells: pd.DataFrame
    summary: pd.DataFrame
    baseline: str
    note: str
    delta: float = DELTA
    methods: str = ""  # which interval method each cell used and how the band is calibrated
    margin: float | None = None  # the margin asked for: one for every cell, None each layer's
    alpha: float = 0.05
    seed: int = 0


@dataclass(frozen=True)
class Judgement:
    """One mitigation's verdict and the simultaneous band it was judged by (see
    :data:`VERDICT_RULE`). ``harm``/``gain``: off-target scenarios whose band excludes zero;
    ``wide``: off-target scenarios whose band is not within ±δ; ``reason``: why the verdict is not
    specific (empty when it is); ``mde``: the smallest target gain the design shows with 80%
    power; ``power``: its power at :data:`POWER_EFFECT`."""

    verdict: str
    target_low: float
    target_high: float
    harm: tuple[str, ...]
    gain: tuple[str, ...]
    band: dict[str, tuple[float, float]]
    wide: tuple[str, ...] = ()
    reason: str = ""
    mde: float = float("nan")
    power: float = float("nan")
    delta: float = DELTA
    tost: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    alpha: float = 0.05


def specific_floor(alpha: float = 0.05, delta: float = DELTA) -> int:
    """The fewest tasks (policies, when clustered) at which an off-target cell with no changed
    task can show equivalence: its (1 - 2 alpha) score interval ±z²/(n + z²) fits within ±delta
    only from ``n > z² (1 - delta) / delta`` (25 at alpha 5% and delta 10 pp)."""
    z2 = z_score(2 * alpha) ** 2
    return int(math.floor(z2 * (1 - delta) / delta)) + 1


def verdict_label(
    target_low: float,
    harm: Sequence[str],
    gain: Sequence[str],
    target_high: float = float("nan"),
    wide: Sequence[str] = (),
    delta: float = DELTA,
) -> str:
    """The verdict from the target's band, the off-target cells flagged each way and those whose
    band is not within ±``delta`` (:data:`VERDICT_RULE`). No target (nan bounds): over-broad,
    ineffective when every off-target band is within ±δ, otherwise inconclusive."""
    dirs = [d for d, flagged in ((HARM, harm), (GAIN, gain)) if flagged]
    if dirs:
        return f"{OVER_BROAD} ({', '.join(dirs)})"
    if target_low != target_low:  # no target cell
        return INCONCLUSIVE if wide else INEFFECTIVE
    if target_low > 0 and not wide:
        return SPECIFIC
    if target_high < delta:
        return INEFFECTIVE
    return INCONCLUSIVE


def _band_text(lo: float, hi: float) -> str:
    return f"[{100 * lo:+.1f}, {100 * hi:+.1f}] pp"


def layer_margins(scenarios: Mapping[str, Scenario] | None = None) -> dict[str, float]:
    """Scenario -> the equivalence margin δ of its layer (``roles.yaml``'s
    ``equivalence_margin``; a scenario of several layers takes the smallest)."""
    from layerlab.faults.roles import load_roles

    roles = load_roles()
    return {
        n: min(roles.margin(part) for part in s.spec.layer.split("+"))
        for n, s in (scenarios or known_scenarios()).items()
    }


def cell_margins(cells: Sequence[str], delta: float | Mapping[str, float] | None) -> dict[str, float]:
    """Each cell's δ: one number for every cell, a mapping by scenario, or (None) the spec's
    margin of the cell's layer (:func:`layer_margins`)."""
    if isinstance(delta, int | float):
        return dict.fromkeys(cells, float(delta))
    by = layer_margins() if delta is None else delta
    return {s: float(by.get(s, DELTA)) for s in cells}


def judge(
    eff: Effects,
    target: Sequence[str],
    off_target: Sequence[str],
    alpha: float | None = None,
    delta: float | Mapping[str, float] | None = DELTA,
    n_flip: int = exact.N_FLIP,
) -> Judgement:
    """The verdict of :data:`VERDICT_RULE`: over-broad from one simultaneous band over
    ``target`` and ``off_target`` cells (:func:`layerlab.analysis.effects.band`); specific from
    each target's marginal (1 - alpha) interval and each off-target cell's (1 - 2 alpha)
    interval (TOST against ±``delta``); ineffective from the targets' one-sided upper bounds
    (Bonferroni over several targets: the smallest gain is below delta if any one is). With no
    target the verdict can only be over-broad, ineffective or inconclusive. ``reason`` says why
    the verdict is not specific, naming the cell and its interval."""
    alpha = eff.alpha if alpha is None else alpha
    cells, k = [*target, *off_target], len(target)
    dd = cell_margins(cells, delta)
    bd = effect_band(eff, cells, alpha, n_flip)
    band = {s: (float(a), float(b)) for s, a, b in zip(cells, bd.low, bd.high, strict=True)}
    harm = tuple(s for s in off_target if band[s][1] < 0)
    gain = tuple(s for s in off_target if band[s][0] > 0)
    asks = [(off_target, 2 * alpha), (target, alpha), (target, 2 * alpha / max(k, 1))]
    (o_lo, o_hi), (lo95, hi95), (_, up) = marginals(eff, asks)
    tost = {s: (float(a), float(b)) for s, a, b in zip(off_target, o_lo, o_hi, strict=True)}
    wide = tuple(s for s in off_target if not (-dd[s] < tost[s][0] and tost[s][1] < dd[s]))
    delta = min((dd[s] for s in target), default=min(dd.values(), default=DELTA))
    t_lo = t_hi = float("nan")
    mde = power = float("nan")
    reasons = []
    if k:
        j = int(np.argmin(lo95))
        t_lo, t_hi = float(lo95[j]), float(np.min(up))
        crit = z_score(alpha)
        mde = exact.mde(float(bd.se[j]), float(bd.n[j]), crit)
        power = exact.power_at(POWER_EFFECT, float(bd.se[j]), float(bd.n[j]), crit)
        if not t_lo > 0 and not t_hi < delta:
            reasons.append(
                f"target {target[j]} 95% interval {_band_text(t_lo, float(hi95[j]))} "
                f"includes 0 and reaches δ {100 * delta:g} pp"
            )
    verdict = verdict_label(t_lo, harm, gain, t_hi, wide, delta)
    if wide and not (harm or gain):
        worst = max(wide, key=lambda s: tost[s][1] - tost[s][0])
        names = ", ".join(wide) if len(wide) <= 3 else f"{len(wide)} cells"
        reasons.append(
            f"off-target {names} not shown within ±{100 * dd[worst]:g} pp (90% interval of "
            f"{worst}: {_band_text(*tost[worst])})"
        )
    reason = ""
    if verdict == INCONCLUSIVE:
        reason = "; ".join(reasons)
        floor = specific_floor(alpha, min(dd[s] for s in off_target)) if off_target else 0
        n = _clusters(eff)
        if wide and n < floor:
            unit = "policies" if eff.policy_level else "tasks"
            reason += (
                f"; specific needs at least {floor} {unit} with unchanged off-target outcomes "
                f"(this run: {n})"
            )
    elif is_over_broad(verdict):
        reason = "; ".join(
            f"off-target {s} {'harm' if s in harm else 'gain'}: band {_band_text(*band[s])} "
            "excludes 0"
            for s in off_target
            if s in harm or s in gain
        )
    elif verdict == INEFFECTIVE and k:
        reason = (
            f"target gain's one-sided 95% upper bound {100 * t_hi:+.1f} pp lies below δ "
            f"{100 * delta:g} pp"
        )
    return Judgement(
        verdict, t_lo, t_hi, harm, gain, band, wide, reason, mde, power, delta, tost, alpha
    )


def _clusters(eff: Effects) -> int:
    """The independent units of the design's equivalence tests: policies or tasks."""
    p = eff.paired
    return len(np.unique(p.policy)) if eff.policy_level else len(p.tasks)


def scenario_layers(scenarios: Mapping[str, Scenario] | None = None) -> dict[str, str]:
    """Scenario -> its layer label, from the scenario DSL (default: every scenario layerlab
    ships, so a run over the transport scenarios has its target cells)."""
    return {n: s.spec.layer for n, s in (scenarios or known_scenarios()).items()}


def matrix(
    df: pd.DataFrame,
    spec: MitigationSet | book.ArmBook | None = None,
    scenarios: Mapping[str, Scenario] | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
    policy_level: bool | None = None,
    alpha: float = 0.05,
    delta: float | Mapping[str, float] | None = None,
    outcome: str = OUTCOME,
) -> Matrix:
    """The specificity matrix of every mitigation arm in ``df`` against the baseline arm; the
    arms' layers and stages from ``spec`` (recompute, compare and gate pass the archives' own
    definitions, :func:`layerlab.archive.manifest.book_for`; default: the installed spec).
    ``policy_level``: None resamples by policy when question variants share policies
    (:func:`layerlab.analysis.effects.resolve_policy_level`); the probability of each verdict
    at this size is :func:`layerlab.analysis.planning.with_chances`'s to add. ``delta``: one equivalence margin for every cell,
    a margin per scenario, or None for each layer's margin in ``roles.yaml``
    (:func:`layer_margins`). ``outcome``: the binary column judged (default the judged outcome,
    :data:`OUTCOME`; the conversational matrix passes a conversation's)."""
    spec = spec or load_mitigations()
    layers = scenario_layers(scenarios)
    present = list(dict.fromkeys(df["mitigation"]))
    if spec.baseline not in present:
        raise ValueError(f"archives hold no baseline arm {spec.baseline!r} to compare against")
    arms = [a for a in spec.matrix_arms if a in present]
    arms += [a for a in present if a not in arms and a != spec.baseline and a not in spec.arms]
    if not arms:
        raise ValueError("archives hold no mitigation arm besides the baseline")
    cells, summary, note, methods, used = [], [], "", "", []
    for name in arms:
        eff = arm_effects(df, name, spec.baseline, outcome, n_boot, seed, policy_level, alpha)
        used += list(eff.methods)
        note, methods = eff.note, eff.method_phrase(used)  # every arm's cells, not the last's
        scen = list(eff.paired.scenarios)
        tgt = set(targets(spec.arm(name), layers)) if name in spec.arms else set()
        tgt_names = [s for s in scen if s in tgt]
        off_names = [s for s in scen if s not in tgt]
        j = judge(eff, tgt_names, off_names, alpha, delta)
        cells += _cell_rows(name, eff, tgt, j)
        summary.append(_summary_row(name, eff, tgt_names, off_names, j, spec, alpha))
    one = delta if isinstance(delta, int | float) else None
    shown = DELTA if one is None else float(one)
    if one is None and summary:
        shown = min(float(r["delta"]) for r in summary)
    return Matrix(
        pd.DataFrame(cells), pd.DataFrame(summary), spec.baseline, note, shown, methods, one,
        alpha, seed,
    )  # fmt: skip


def _cell_rows(name: str, eff: Effects, tgt: set[str], j: Judgement) -> list[dict[str, Any]]:
    """One matrix cell per scenario: its effect, marginal 95% interval, band and (off target)
    the 90% interval the equivalence test reads."""
    t = eff.table.set_index("scenario")
    nan = (float("nan"), float("nan"))
    rows = []
    for s in eff.paired.scenarios:
        e = t.loc[s]
        rows.append(
            {
                "mitigation": name,
                "scenario": s,
                "target": s in tgt,
                "estimate": float(e["estimate"]),
                "ci_low": float(e["ci_low"]),
                "ci_high": float(e["ci_high"]),
                "band_low": j.band[s][0],
                "band_high": j.band[s][1],
                "tost_low": j.tost.get(s, nan)[0],
                "tost_high": j.tost.get(s, nan)[1],
                "exactly_zero": bool(e["exactly_zero"]),
                "n_pairs": int(e["n_pairs"]),
                "method": str(e["method"]),
            }
        )
    return rows


def _summary_row(
    name: str,
    eff: Effects,
    tgt_names: list[str],
    off_names: list[str],
    j: Judgement,
    spec: MitigationSet | book.ArmBook,
    alpha: float,
) -> dict[str, Any]:
    """A mitigation's row of the summary: target gain, the largest off-target change, the margin
    (one owner: :func:`specificity_margin`, projected from the band) and the verdict."""
    if tgt_names and off_names:
        m = specificity_margin(eff, target=tgt_names, off_target=off_names, alpha=alpha)
        gain, margin, m_lo, m_hi = m["target_gain"], m["margin"], m["ci_low"], m["ci_high"]
        off_change = float(m["largest_off_target_change"])
        worst_name = m["largest_off_target"] if abs(off_change) > 0 else "none (all 0)"
    else:
        est = point_estimates(eff.paired)
        scen = list(eff.paired.scenarios)
        gain = float(min(est[scen.index(s)] for s in tgt_names)) if tgt_names else float("nan")
        margin = m_lo = m_hi = float("nan")
        off_change, worst_name = float("nan"), "none (all 0)"
    g_hi = float("nan")
    if tgt_names:
        lo95, hi95 = marginal(eff, tgt_names, alpha)
        g_hi = float(hi95[int(np.argmin(lo95))])
    wide = max(j.tost, key=lambda s: j.tost[s][1] - j.tost[s][0]) if j.tost else ""
    a = spec.arms.get(name)
    return {
        "mitigation": name,
        "layers": "+".join(a.layers) if a else "?",
        "stage": "+".join(a.stages) if a else "?",
        "targets": ", ".join(tgt_names) or "-",
        "target gain": gain,
        "target gain low": j.target_low,
        "target gain high": g_hi,
        "largest off-target": worst_name,
        "off-target change": off_change,
        "widest off-target": wide or "-",
        "widest off-target low": j.tost[wide][0] if wide else float("nan"),
        "widest off-target high": j.tost[wide][1] if wide else float("nan"),
        "margin": margin,
        "margin low": float(m_lo),
        "margin high": float(m_hi),
        "off-target harm": ", ".join(j.harm) or "-",
        "off-target gain": ", ".join(j.gain) or "-",
        "verdict": j.verdict,
        "reason": j.reason,
        "mde": j.mde,
        "power": j.power,
        "delta": j.delta,
        "policy level": eff.policy_level,
        "tasks": len(eff.paired.tasks),
        "floor": specific_floor(alpha, j.delta),
    }


def matrix_frame(archives: Sequence[Path | str] | None = None) -> pd.DataFrame:
    """Records of the mitigation archives (default: the committed one) as a DataFrame."""
    return records_frame(list(archives or [ARCHIVE_DIR]))


# --- blocks: the reference agent's matrix and each real model's, never pooled ------------------


def block_frames(archives: Sequence[Path | str] | None = None) -> dict[str, pd.DataFrame]:
    """Mitigation-matrix records by kind of unit (:func:`layerlab.analysis.stats.blocks`): default the
    committed deterministic archive and every real model's (``data/archives/
    local_model_mitigations``)."""
    if archives is None:
        archives = [ARCHIVE_DIR, *paths.archives_in(paths.LOCAL_MODEL_MITIGATIONS)]
    return blocks(matrix_frame(archives))

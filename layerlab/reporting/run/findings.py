"""What the report says first: per model (and per reference agent), sentences built from the
numbers — overall strict success per arm, the scenarios where it fails, the contract treatment's
(repair's) paired gain on its target scenario with its interval, and, when the run holds
mitigation arms, each mitigation's verdict with its off-target changes.

A target (a team's own system, ``run live --target``) leads with what *the system* did, layer by
layer, each failing layer with what it does not check and what the layer's guard would change
(:mod:`layerlab.analysis.layers`, from the roles and mitigation specs); the contract arms
(strict/repair: layerlab validating payloads before the system sees them) are the harness's,
said apart, never as the system's failure or gain.

Everything here is computed from records (:func:`layerlab.analysis.results.summarize` and the
paired bootstrap of :mod:`layerlab.analysis.effects`), seeded, so the same inputs give the same
sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from layerlab.analysis import effects, results, stats
from layerlab.reporting.format import display

FAIL_BELOW = 0.5  # a scenario "fails" when its safe resolution under the baseline arm is below
N_BOOT = 2_000  # bootstrap resamples of the paired gains and the matrix (seeded)
SEED = 0
# the measures a figure may show: results.json key, label
MEASURES = (
    ("S", "strict success S"),
    ("safe", "safe resolution"),
    ("GF", "grounded false positive GF"),
)


@dataclass(frozen=True)
class Finding:
    """The sentences about one model or reference agent."""

    unit: str
    reference: bool
    sentences: tuple[str, ...]
    system: tuple[str, ...] = ()  # a target's layers, what the system did (first)
    harness: tuple[str, ...] = ()  # a target's contract arms: layerlab's, not the system's


def _unit(m: dict[str, Any]) -> str:
    return f"{m['provider']}/{m['model']}"


def _pp(x: float) -> str:
    return display.points(100 * x)


def _overall(m: dict[str, Any]) -> str:
    arms = results.arm_order(m["arms"])
    per = "; ".join(f"{a} {results.fmt_rate(m['arms'][a]['S'])}" for a in arms)
    return (
        f"{m['records']:,} records over {m['tasks']} tasks and {len(m['by_scenario'])} scenarios. "
        f"Strict success S by arm: {per}."
    )


def _failures(m: dict[str, Any], base: str) -> str:
    cells = {s: per[base] for s, per in m["by_scenario"].items() if base in per}
    rated = {s: c for s, c in cells.items() if c["safe"].get("rate") is not None}
    if not rated:
        return f"No scenario has a safe-resolution rate under {base}."
    failing = sorted(
        (s for s, c in rated.items() if c["safe"]["rate"] < FAIL_BELOW),
        key=lambda s: (rated[s]["safe"]["rate"], s),
    )
    if not failing:
        low = min(rated, key=lambda s: (rated[s]["safe"]["rate"], s))
        return (
            f"Under {base} its safe resolution is at least {FAIL_BELOW:.0%} in every scenario; "
            f"the lowest is {low} at {results.fmt_rate(rated[low]['safe'])}."
        )

    def cell(s: str) -> str:
        gf = rated[s]["GF"]
        extra = f", GF {results.fmt_rate(gf)}" if gf.get("rate") else ""
        return f"{s} {results.fmt_rate(rated[s]['safe'])}{extra}"

    held = [s for s in rated if s not in failing]
    tail = f" It holds in {', '.join(held)}." if held else " It holds in none."
    return (
        f"Under {base} it fails in {len(failing)} of {len(rated)} scenarios "
        f"(safe resolution below {FAIL_BELOW:.0%}; GF where answers were grounded yet wrong): "
        + "; ".join(cell(s) for s in failing)
        + "."
        + tail
    )


def _repair_gain(m: dict[str, Any], df: pd.DataFrame) -> str | None:
    base, treat, target = stats.BASELINE, stats.TREATMENT, stats.TARGET
    per = m["by_scenario"].get(target, {})
    if base not in per or treat not in per:
        return None
    eff = effects.arm_effects(df, treat, base, n_boot=N_BOOT, seed=SEED)
    row = eff.table.set_index("scenario").loc[target]
    est, lo, hi = float(row["estimate"]), float(row["ci_low"]), float(row["ci_high"])
    verb = "raises" if lo > 0 else "lowers" if hi < 0 else "does not detectably change"
    return (
        f"{treat.capitalize()} {verb} S on {target} from {results.fmt_rate(per[base]['S'])} "
        f"under {base} to {results.fmt_rate(per[treat]['S'])}: a paired gain of {_pp(est)} "
        f"points [{_pp(lo)}, {_pp(hi)}] (95% bootstrap interval over tasks, {N_BOOT:,} "
        f"resamples, seed {SEED})."
    )


def _matrix(df: pd.DataFrame, arms: Any = None) -> list[str]:
    """One sentence per verdict of the specificity matrix, when the records hold mitigation arms
    beyond the contract pair: each mitigation with its target gain and off-target changes.
    ``arms``: the run's own definitions (``book_for``; default: the installed spec)."""
    from layerlab.analysis import specificity
    from layerlab.mitigations import load_mitigations

    spec = load_mitigations()
    book = arms or spec
    present = set(df[results.ARM])
    if book.baseline not in present or not present - set(spec.contract_arms):
        return []
    mx = specificity.matrix(df, book, n_boot=N_BOOT, seed=SEED)
    by_verdict: dict[str, list[str]] = {}
    for _, r in mx.summary.iterrows():
        what = (
            [
                f"{_pp(r['target gain'])} [{_pp(r['target gain low'])}, "
                f"{_pp(r['target gain high'])}] on {r['targets']}"
            ]
            if r["targets"] != "-"
            else ["no target scenario"]
        )
        what += [
            f"off-target {kind} on {r[f'off-target {kind}']}"
            for kind in ("harm", "gain")
            if r[f"off-target {kind}"] != "-"
        ]
        by_verdict.setdefault(str(r["verdict"]), []).append(
            f"{r['mitigation']} ({'; '.join(what)})"
        )
    head = (
        f"Mitigation matrix, {len(mx.summary)} mitigations against {mx.baseline} (safe "
        f"resolution, target gain in points with its simultaneous 95% band, {N_BOOT:,} "
        "resamples)"
    )
    return [f"{head} — {v}: {', '.join(names)}." for v, names in sorted(by_verdict.items())]


def findings(res: dict[str, Any], df: pd.DataFrame, defined: Any = None) -> list[Finding]:
    """One :class:`Finding` per model, then per reference agent (``res`` is
    :func:`layerlab.analysis.results.summarize` of ``df``; ``defined`` the runs' own definitions
    of their arms, :func:`~layerlab.archive.manifest.book_for`)."""
    from layerlab.analysis import layers
    from layerlab.models.agents import is_target

    out = []
    for m in sorted(res["models"], key=lambda m: m["reference_agent"]):
        sub = df[(df["provider"] == m["provider"]) & (df["model"] == m["model"])]
        arms = results.arm_order(m["arms"])
        base = stats.BASELINE if stats.BASELINE in arms else arms[0]
        if is_target(m["provider"]) and base == stats.BASELINE:
            found = layers.unit_findings(sub, n_boot=N_BOOT, seed=SEED)
            system = tuple(layers.lines({**found, "harness": []}))
            gain = _repair_gain(m, sub)
            harness = tuple(e["line"] for e in found["harness"]) + ((gain,) if gain else ())
            said = [_overall(m), *_matrix(sub, defined)]
            out.append(Finding(_unit(m), False, tuple(said), system, harness))
            continue
        said = [_overall(m), _failures(m, base), _repair_gain(m, sub), *_matrix(sub, defined)]
        out.append(Finding(_unit(m), m["reference_agent"], tuple(s for s in said if s)))
    return out


def long_rates(res: dict[str, Any], reference: bool, key: str = "S") -> pd.DataFrame:
    """Rates of one measure (``S``, ``safe``, ``GF``) by unit × scenario × arm, for a figure."""
    rows = []
    for m in res["models"]:
        if m["reference_agent"] != reference:
            continue
        for s, per in m["by_scenario"].items():
            for arm, c in per.items():
                r = c[key]
                if r.get("rate") is None:
                    continue
                rows.append(
                    {
                        "unit": _unit(m),
                        "scenario": s,
                        "arm": arm,
                        "rate": r["rate"],
                        "ci_low": r["ci_low"],
                        "ci_high": r["ci_high"],
                        "n": r["n"],
                    }
                )
    return pd.DataFrame(rows)


def varying(long: pd.DataFrame) -> bool:
    """Whether a measure's rates differ between cells (a flat measure is not worth a figure)."""
    return not long.empty and long["rate"].round(6).nunique() > 1

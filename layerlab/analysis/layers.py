"""A system's behaviour per reliability layer: what a team reads first about its own system.

For one unit (a target: ``run live --target``), on the baseline arm, per scenario of the DSL:
how many questions the system resolved safely (strict success on an answerable scenario, a
structured non-answer on an unsafe one: the scorer's ``safe_resolution``; a correct abstention
is a resolution, never a failure), what the failing records' diagnostics were, and one line
generated from the specs — what a system failing the layer did and does not check
(``data/specs/roles.yaml``, ``findings``) and what the layer's guard would change (its entry in
``data/specs/mitigations.yaml``: its description, and, when the run holds that arm, its measured
effect and verdict from :func:`layerlab.analysis.specificity.matrix`). Nothing is written per run.

The contract layer is the harness's, not the system's: the contract arms (strict/repair) are
layerlab validating each tool payload before the system sees it, so their scenario is reported
apart (``harness``). The fault-free negative control (``roles.yaml``) is the system's own
baseline (``control``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.analysis.units import ARM, unit_labels
from layerlab.faults.roles import Roles, load_roles
from layerlab.faults.scenario import Scenario, known_scenarios, load_scenarios
from layerlab.mitigations import MitigationSet, load_mitigations

N_BOOT = 2_000  # bootstrap resamples of a guard's measured effect (seeded)
SEED = 0
JUDGED_BY = (
    "safe resolution: strict success on an answerable scenario, a structured non-answer on an "
    "unsafe one (a correct abstention is a resolution, not a failure)"
)
HARNESS_NOTE = (
    "layerlab's own contract arms validate each tool payload before the system sees it: their "
    "scenario measures the harness, not the system"
)


def _flag(sub: pd.DataFrame, label: str) -> pd.Series:
    return sub[label].fillna(False).astype(bool)


def _counts(sub: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(sub["diagnostic"].value_counts().items())}


def _breakdown(diag: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(diag.items(), key=lambda kv: (-kv[1], kv[0])))


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def _first_sentence(text: str) -> str:
    return text.split(". ", 1)[0].rstrip(".")


def _contract_layers(spec: MitigationSet) -> set[str]:
    return {layer for a in spec.contract_arms for layer in spec.arms[a].layers}


def _guard(
    guard: str,
    scenario: str,
    before: int,
    n: int,
    df: pd.DataFrame,
    spec: MitigationSet,
    mx: Any,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """What the layer's guard would change: its description and, when the run holds the arm,
    its safe resolutions on the scenario, the paired effect and the matrix's verdict (its band at
    level ``alpha``)."""
    arm = spec.arms[guard]
    desc = _first_sentence(arm.description)
    out: dict[str, Any] = {"arm": guard, "description": arm.description, "measured": False}
    rows = mx.summary.set_index("mitigation") if mx is not None else None
    if rows is None or guard not in rows.index:
        out["line"] = (
            f"Its guard `{guard}` ({desc}) is not in this run: add `--mitigation {guard}` (or "
            "`--mitigation all`) to measure what it changes."
        )
        return out
    cells = mx.cells[(mx.cells["mitigation"] == guard) & (mx.cells["scenario"] == scenario)]
    if cells.empty:  # the arm ran, but not on this scenario (an unfinished run)
        out["line"] = (
            f"Its guard `{guard}` ({desc}) has no record paired with the baseline on {scenario} "
            "in this run: finish the run (--resume) to measure what it changes."
        )
        return out
    sub = df[(df[ARM] == guard) & (df["scenario"] == scenario)]
    after = int(_flag(sub, "safe_resolution").sum())
    row = rows.loc[guard]
    c = cells.iloc[0]
    flagged = [
        f"off-target {kind} on {row[f'off-target {kind}']}"
        for kind in ("harm", "gain")
        if row[f"off-target {kind}"] != "-"
    ]
    out.update(
        measured=True,
        resolved=after,
        n=len(sub),
        effect=round(float(c["estimate"]), 4),
        band=[round(float(c["band_low"]), 4), round(float(c["band_high"]), 4)],
        verdict=str(row["verdict"]),
    )
    out["line"] = (
        f"Its guard `{guard}` ({desc}): in this run {before} of {n} → {after} of {len(sub)} safely "
        f"resolved "
        f"({_pp(c['estimate'])} points [{_pp(c['band_low'])}, {_pp(c['band_high'])}], "
        f"simultaneous {100 * (1 - alpha):.3g}% band); verdict {row['verdict']}"
        + (f" ({'; '.join(flagged)})" if flagged else "")
        + "."
    )
    return out


def _system_line(
    layer: str, name: str, sc: Scenario, n: int, ok: int, failed: pd.DataFrame, roles: Roles
) -> str:
    head = f"{layer} ({name})"
    answerable = sc.spec.answerable
    if failed.empty:
        what = "correct" if answerable else "a structured non-answer"
        tail = "" if answerable else " (safe resolutions, not failures)"
        return f"{head}: holds — {what} in {ok} of {n} questions{tail}."
    counts = _counts(failed)
    if not answerable and "ok" in counts:  # the right value, answered where it should abstain
        counts["right value, answered anyway"] = counts.pop("ok")
    diag = _breakdown(counts)
    texts = [roles.findings[p] for p in layer.split("+") if p in roles.findings]
    answered = int(_flag(failed, "answered").sum())
    k = len(failed) if answerable else answered
    if not texts or not k:
        return (
            f"{head}: not resolved in {len(failed)} of {n} questions (diagnostics: {diag}); "
            f"expected: {sc.spec.expected_behaviour}."
        )
    did = "; ".join(t.did for t in texts)
    lacks = "; ".join(t.lacks for t in texts)
    other = len(failed) - k
    more = f"; {other} more failed otherwise" if other else ""
    return f"{head}: {did} in {k} of {n} {name} questions{more} (diagnostics: {diag}): {lacks}."


def unit_findings(
    df: pd.DataFrame,
    spec: MitigationSet | None = None,
    roles: Roles | None = None,
    scenarios: Mapping[str, Scenario] | None = None,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """The per-layer findings of one unit's records ``df`` (every arm it holds): ``layers`` (the
    system's, failing layers first, each with its ``line`` and its guard), ``harness`` (the
    contract arms' scenario) and ``control`` (the fault-free scenario); JSON-ready, seeded. The
    guards' verdicts at level ``alpha`` (an until-decided run's: its look's)."""
    from layerlab.analysis import specificity

    spec = spec or load_mitigations()
    roles = roles or load_roles()
    scen = dict(scenarios or known_scenarios())  # a run may hold the store variant
    base = spec.baseline
    present = set(df[ARM])
    if base not in present:
        raise ValueError(f"no baseline arm {base!r} in the records: no findings per layer")
    mx, note = None, ""
    if present - set(spec.contract_arms) - {base}:
        try:
            nine = scenarios or load_scenarios()  # the guards' matrix: the paper's nine
            mx = specificity.matrix(df, spec, nine, n_boot=n_boot, seed=seed, alpha=alpha)
        except ValueError as exc:  # e.g. an unfinished run with no pair of some arm
            note = f"guards not measured: {exc}"
    contract = _contract_layers(spec)
    b = df[df[ARM] == base]
    layers, harness, control = [], [], None
    for i, (name, sc) in enumerate(scen.items()):
        sub = b[b["scenario"] == name]
        if sub.empty:
            continue
        layer, n = sc.spec.layer, len(sub)
        safe = _flag(sub, "safe_resolution")
        ok, failed = int(safe.sum()), sub[~safe]
        entry: dict[str, Any] = {
            "scenario": name,
            "layer": layer,
            "answerable": bool(sc.spec.answerable),
            "n": n,
            "resolved": ok,
            "failed": n - ok,
            "answered": int(_flag(sub, "answered").sum()),
            "diagnostics": _counts(failed),
        }
        if name == roles.negative_control:
            entry["line"] = (
                f"Without faults ({name}): correct in {ok} of {n} questions"
                + (f" (failures: {_breakdown(entry['diagnostics'])})" if n - ok else "")
                + "."
            )
            control = entry
            continue
        if set(layer.split("+")) & contract:
            per = {}
            for a in spec.contract_arms:
                s = df[(df[ARM] == a) & (df["scenario"] == name)]
                if not s.empty:
                    per[a] = {"success": int(_flag(s, "success").sum()), "n": len(s)}
            said = "; ".join(
                f"under {a} ({_first_sentence(spec.arms[a].description)}) {c['success']} of "
                f"{c['n']} correct"
                for a, c in per.items()
            )
            entry["arms"] = per
            entry["line"] = f"Harness, not the system — {layer} ({name}): {said}."
            harness.append(entry)
            continue
        entry["line"] = _system_line(layer, name, sc, n, ok, failed, roles)
        texts = [roles.findings[p] for p in layer.split("+") if p in roles.findings]
        if failed.empty or not texts:
            entry["guard"] = None
        else:
            entry["guard"] = _guard(texts[0].guard, name, ok, n, df, spec, mx, alpha)
        entry["order"] = (not (n - ok), ok / n, i)
        layers.append(entry)
    layers.sort(key=lambda e: e.pop("order"))
    return {
        "unit": str(unit_labels(df).iloc[0]),
        "baseline": base,
        "judged_by": JUDGED_BY,
        "layers": layers,
        "harness": harness,
        "harness_note": HARNESS_NOTE,
        "control": control,
        "guards_measured": mx is not None,
        "note": note,
        "n_boot": n_boot,
        "seed": seed,
    }


def findings(df: pd.DataFrame, **kw: Any) -> list[dict[str, Any]]:
    """:func:`unit_findings` of every unit of ``df`` holding the baseline arm, in unit order."""
    labels = unit_labels(df)
    base = (kw.get("spec") or load_mitigations()).baseline
    out = []
    for u in sorted(set(labels)):
        sub = df[labels == u]
        if base in set(sub[ARM]):
            out.append(unit_findings(sub, **kw))
    return out


def lines(found: Mapping[str, Any]) -> list[str]:
    """A unit's findings as the lines a team reads, in order: each layer of the system (with its
    guard's line when it fails), the fault-free control, then the harness's contract scenario."""
    out = []
    for e in found["layers"]:
        out.append(e["line"] + (f" {e['guard']['line']}" if e.get("guard") else ""))
    if found.get("control"):
        out.append(found["control"]["line"])
    out += [e["line"] for e in found["harness"]]
    return out

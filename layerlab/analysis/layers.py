"""A system's behaviour per reliability layer: what a team reads first about its own system.

For one unit (a target: ``run live --target``), on the baseline arm, per scenario of the DSL:
how many questions the system resolved safely (strict success on an answerable scenario, a
structured non-answer on an unsafe one: the scorer's ``safe_resolution``; a correct abstention
is a resolution, never a failure), how the others failed and their diagnostics, and what the
specs say of the layer — what a system failing it did and does not check
(``data/specs/roles.yaml``, ``findings``) and what the layer's guard would change (its entry in
``data/specs/mitigations.yaml``, the transport layer's in ``mitigations_transport.yaml``: its
description, and, when the run holds that arm, its measured
effect and verdict from :func:`layerlab.analysis.specificity.matrix`). Nothing is written per run.

Numbers only: every count is taken from the records the diagnostics table counts
(:func:`layerlab.analysis.results.table_diagnostics`); the sentences a team reads are written
from them by :mod:`layerlab.reporting.run.findings`.

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
from layerlab.mitigations import MitigationSet, load_mitigations, load_run_mitigations
from layerlab.mitigations.book import ArmBook, definition_of, shipped
from layerlab.scoring.score import table_diagnostic

N_BOOT = 2_000  # bootstrap resamples of a guard's measured effect (seeded)
SEED = 0


def _flag(sub: pd.DataFrame, label: str) -> pd.Series:
    return sub[label].fillna(False).astype(bool)


def _counts(sub: pd.DataFrame) -> dict[str, int]:
    return {str(k): int(v) for k, v in sorted(sub["diagnostic"].value_counts().items())}


def _contract_layers(spec: MitigationSet) -> set[str]:
    return {layer for a in spec.contract_arms for layer in spec.arms[a].layers}


def guard_of(layer: str, named: str, present: set[str], book: ArmBook) -> str:
    """The run's own guard of ``layer`` (a scenario's layer, ``a+b`` for several): the roles'
    guard ``named`` when the run holds it; else an arm the run holds that the shipped spec does
    not define (a plug-in's or a team's arms file), no stack, targeting the layer (the fewest
    other layers first, then in the run's order); else ``named``, which the run lacks."""
    if named in present:
        return named
    parts, ours = set(layer.split("+")), shipped().arms
    own = [
        (len(set(d.layers) - parts), i, n)
        for i, (n, d) in enumerate(book.arms.items())
        if n in present and n not in ours and not d.is_stack and parts & set(d.layers)
    ]
    return min(own)[2] if own else named


def installed(spec: MitigationSet) -> ArmBook:
    """The installed spec's arms as a book (where no run's own definitions are given)."""
    defined = {n: definition_of(a) for n, a in spec.arms.items()}
    return ArmBook(spec.baseline, defined, "the installed mitigation spec")


def _description(guard: str, spec: MitigationSet, book: ArmBook) -> str:
    """The guard's description: the installed spec's; for an arm it no longer defines (a
    plug-in not importable now), what the run's manifest says of it."""
    if guard in spec.arms:
        return str(spec.arms[guard].description)
    d = book.arm(guard)
    by = ", ".join(f"{dist} {v}" for dist, v in d.plugins)
    return (
        f"a plug-in arm of kind {', '.join(d.kinds)} on {', '.join(d.layers)}"
        + (f" (from {by})" if by else "")
        + "."
    )


def _guard(
    guard: str,
    scenario: str,
    df: pd.DataFrame,
    spec: MitigationSet,
    mx: Any,
    alpha: float = 0.05,
    book: ArmBook | None = None,
) -> dict[str, Any]:
    """What the layer's guard would change: its arm and description and, when the run holds the
    arm, its safe resolutions on the scenario, the paired effect and the matrix's verdict (its
    band at level ``alpha``). ``state``: ``absent`` (not in the run), ``unpaired`` (no record
    paired with the baseline on the scenario) or ``measured``."""
    what = _description(guard, spec, book or installed(spec))
    out: dict[str, Any] = {"arm": guard, "description": what, "measured": False}
    rows = mx.summary.set_index("mitigation") if mx is not None else None
    if rows is None or guard not in rows.index:
        return {**out, "state": "absent"}
    cells = mx.cells[(mx.cells["mitigation"] == guard) & (mx.cells["scenario"] == scenario)]
    if cells.empty:  # the arm ran, but not on this scenario (an unfinished run)
        return {**out, "state": "unpaired"}
    sub = df[(df[ARM] == guard) & (df["scenario"] == scenario)]
    row = rows.loc[guard]
    c = cells.iloc[0]
    return {
        **out,
        "state": "measured",
        "measured": True,
        "resolved": int(_flag(sub, "safe_resolution").sum()),
        "n": len(sub),
        "effect": round(float(c["estimate"]), 4),
        "band": [round(float(c["band_low"]), 4), round(float(c["band_high"]), 4)],
        "level": round(1 - alpha, 4),
        "verdict": str(row["verdict"]),
        "off_target": {
            kind: str(row[f"off-target {kind}"])
            for kind in ("harm", "gain")
            if row[f"off-target {kind}"] != "-"
        },
    }


# How a record that was not safely resolved failed, from its labels: it answered (wrongly, or
# where it should have abstained), abstained where an answer was expected, ended before the
# reader, or failed outright (a malformed reply, a provider or target error, a step limit).
FAILED = ("malformed_reply", "provider_error", "step_limit")
KINDS = ("answered", "abstained", "ended_early", "failed")


def failure_kinds(failed: pd.DataFrame) -> dict[str, int]:
    """The failing records ``failed`` by :data:`KINDS` (each record in exactly one)."""
    broke = failed["diagnostic"].isin(FAILED)
    answered = _flag(failed, "answered") & ~broke
    reached = _flag(failed, "reached_reader") if "reached_reader" in failed else ~answered
    return {
        "answered": int(answered.sum()),
        "abstained": int((~answered & ~broke & reached).sum()),
        "ended_early": int((~answered & ~broke & ~reached).sum()),
        "failed": int(broke.sum()),
    }


def answer_causes(failed: pd.DataFrame) -> dict[str, int]:
    """What the archive can say of the wrong answers among ``failed`` (answered, not safe), each
    count out of ``answered`` (they overlap): a required document not delivered (R ✗), no valid
    citation (G ✗), a wrong value a delivered document states (grounded, E ✗), the expected value
    without S (E ✓)."""
    a = failed[_flag(failed, "answered") & ~failed["diagnostic"].isin(FAILED)]
    return {
        "answered": len(a),
        "retrieval_missed": int((~_flag(a, "retrieval_ok")).sum()),
        "citation_invalid": int((~_flag(a, "citation_ok")).sum()),
        "grounded_wrong": int((_flag(a, "grounded") & ~_flag(a, "exact_match")).sum()),
        "exact_match": int(_flag(a, "exact_match").sum()),
    }


def _entry(name: str, sc: Scenario, sub: pd.DataFrame) -> dict[str, Any]:
    """One scenario's numbers on the baseline arm, all from its records ``sub``: ``table`` is
    its column of the diagnostics table, ``diagnostics`` the failing records' part of it."""
    safe = _flag(sub, "safe_resolution")
    failed = sub[~safe]
    table = pd.Series(
        [
            table_diagnostic(d, s, r)
            for d, s, r in zip(sub["diagnostic"], _flag(sub, "success"), safe, strict=True)
        ],
        dtype=object,
    ).value_counts()
    return {
        "scenario": name,
        "layer": sc.spec.layer,
        "answerable": bool(sc.spec.answerable),
        "expected": sc.spec.expected_behaviour,
        "n": len(sub),
        "resolved": int(safe.sum()),
        "failed": len(failed),
        "answered": int(_flag(sub, "answered").sum()),
        "diagnostics": _counts(failed),
        "table": {str(k): int(v) for k, v in sorted(table.items())},
        "kinds": failure_kinds(failed),
        "causes": answer_causes(failed),
    }


def unit_findings(
    df: pd.DataFrame,
    spec: MitigationSet | None = None,
    roles: Roles | None = None,
    scenarios: Mapping[str, Scenario] | None = None,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    alpha: float = 0.05,
    arms: ArmBook | None = None,
) -> dict[str, Any]:
    """The per-layer findings of one unit's records ``df`` (every arm it holds): ``layers`` (the
    system's, failing layers first, each with its ``line`` and its guard), ``harness`` (the
    contract arms' scenario) and ``control`` (the fault-free scenario); JSON-ready, seeded. The
    guards' verdicts at level ``alpha`` (an until-decided run's: its look's). ``arms``: the
    run's own definitions of its arms (:func:`~layerlab.archive.manifest.book_for`), from which
    a layer's guard is the run's own (:func:`guard_of`: a plug-in's guard of the layer)."""
    from layerlab.analysis import specificity

    spec = spec or load_run_mitigations()  # a transport layer's guard is mitigations_transport's
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
            mx = specificity.matrix(df, arms or spec, nine, n_boot=n_boot, seed=seed,
                                    alpha=alpha)  # fmt: skip
        except ValueError as exc:  # e.g. an unfinished run with no pair of some arm
            note = f"guards not measured: {exc}"
    contract = _contract_layers(spec)
    book = arms or installed(spec)
    b = df[df[ARM] == base]
    layers, harness, control = [], [], None
    for i, (name, sc) in enumerate(scen.items()):
        sub = b[b["scenario"] == name]
        if sub.empty:
            continue
        entry = _entry(name, sc, sub)
        layer, n, ok = entry["layer"], entry["n"], entry["resolved"]
        if name == roles.negative_control:
            control = entry
            continue
        if set(layer.split("+")) & contract:
            entry["arms"], entry["arm_order"] = {}, list(spec.contract_arms)  # JSON sorts keys
            for a in spec.contract_arms:
                s = df[(df[ARM] == a) & (df["scenario"] == name)]
                if not s.empty:
                    entry["arms"][a] = {
                        "success": int(_flag(s, "success").sum()),
                        "n": len(s),
                        "description": spec.arms[a].description,
                    }
            harness.append(entry)
            continue
        texts = [roles.findings[p] for p in layer.split("+") if p in roles.findings]
        entry["did"] = [t.did for t in texts]
        entry["lacks"] = [t.lacks for t in texts]
        if not entry["failed"] or not texts:
            entry["guard"] = None
        else:
            guard = guard_of(layer, texts[0].guard, present, book)
            entry["guard"] = _guard(guard, name, df, spec, mx, alpha, book)
        entry["order"] = (not (n - ok), ok / n, i)
        layers.append(entry)
    layers.sort(key=lambda e: e.pop("order"))
    return {
        "unit": str(unit_labels(df).iloc[0]),
        "baseline": base,
        "layers": layers,
        "harness": harness,
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

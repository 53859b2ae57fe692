"""The real models' reliability surface as a paper table: per model and faulted layer, safe
resolution at each tested intensity λ with its 95% interval, pass^k of safe resolution at the
smallest and largest λ (each k > 1 up to the run's epochs), and how far along λ the layer keeps
:data:`THRESHOLD` (:func:`layerlab.analysis.surface.tolerance`)."""

from __future__ import annotations

import pandas as pd

from layerlab.analysis import surface
from layerlab.reporting.format.display import MISSING, rate
from layerlab.reporting.paper.tables.captions import CAPTIONS, units_phrase

THRESHOLD = 0.9
"""The share of safe resolution a layer must keep (the notebook's and the docs' default)."""


def tolerance_cell(t: surface.Tolerance) -> str:
    """A tolerance in a few words: ``below at λ = 0 (decided)``, ``to λ = 0.25 (decided)`` or
    ``to λ = 0.25 by the estimates, decided at no λ``."""
    if t.verdict == "below":
        return f"below at λ = {t.falls_at:g}" + (" (decided)" if t.falls_decided else "")
    if t.verdict == "tolerates":
        return f"to λ = {t.holds_to:g} (decided)"
    decided = "no λ" if t.decided_to is None else f"λ = {t.decided_to:g}"
    return f"to λ = {t.holds_to:g} by the estimates, decided at {decided}"


def surface_models(df: pd.DataFrame, threshold: float = THRESHOLD) -> pd.DataFrame:
    """One row per model, arm and faulted scenario of the swept records ``df`` (the committed
    real-model surfaces): safe resolution with its interval at each λ, pass^k at the smallest
    and largest λ for each k > 1 up to the epochs, and the tolerance of ``threshold``; the
    caption names the units and decoding."""
    curves = [c for c in surface.surface(df) if c.scenario != surface.CLEAN]
    doses = sorted({p.intensity for c in curves for p in c.points})
    ks = sorted({k for c in curves for p in c.points for k in p.pass_hat["safe"] if k > 1})
    rows = []
    for c in curves:
        row = {"model": c.unit, "arm": c.arm, "layer": f"{c.layer} ({c.scenario})",
               "records per λ": str(c.points[-1].records)}  # fmt: skip
        for x in doses:
            p = c.at(x)
            e = None if p is None else p.rates["safe"]
            row[f"safe, λ = {x:g}"] = MISSING if e is None else rate(e.rate, (e.ci_low, e.ci_high))
        for k in ks:
            for x in (doses[0], doses[-1]):
                p = c.at(x)
                row[f"pass^{k}, λ = {x:g}"] = rate(None if p is None else p.pass_hat["safe"].get(k),
                                                   missing=MISSING)  # fmt: skip
        row[f"keeps {rate(threshold)}"] = tolerance_cell(surface.tolerance(c, threshold))
        rows.append(row)
    t = pd.DataFrame(rows)
    t.attrs["caption"] = (
        f"{CAPTIONS['surface_models']} Threshold {rate(threshold)}; pass^k: the chance that k of "
        f"a task's epochs, drawn without replacement, are all safe, averaged over the tasks (k = "
        f"{', '.join(map(str, ks)) or 'none: one epoch'}). Units: {units_phrase(df)}."
    )
    return t

"""Statistics from archives: cluster-aware rates, paired effects with a crossed (two-way)
bootstrap, the specificity margin, and statsmodels cross-checks.

Design. Every provider–model *unit* answers the same tasks, so units and tasks are **crossed**:
a task that is hard for one model tends to be hard for the others. The default bootstrap therefore
resamples units and tasks *jointly* (one draw of tasks shared by every drawn unit, the
"pigeonhole" bootstrap). The paper's **nested** scheme (units, then tasks independently inside
each unit) stays available and is labelled; it assumes task difficulty is not shared and
under-covers when it is. With fewer than :data:`MIN_UNITS` units the units are not treated as a
sample of models: intervals resample **tasks only** and describe *these* units.

Calibration. The crossed bootstrap counts the unit × task residual variance about three times and
a percentile interval over few units is too narrow (a z where a t belongs). Intervals are therefore
the bootstrap's percentile deviations rescaled to the two-way cluster-robust variance
(Cameron–Gelbach–Miller: unit + task − cell) and widened by ``t(U-1)/z``. Tasks-only intervals
get the same treatment over their G task clusters: the task-clustered variance with its G/(G-1)
factor, widened by ``t(ν)/z`` with ν ≤ G-1 the kurtosis-matched degrees of freedom of that
variance (the raw percentile interval over 2 units x 80 tasks of skewed difficulty covered 93.8%).
Scenario rates use the same variance inside a Wilson interval at the design-effect-adjusted
sample size.

Speed. Resamples are multinomial *counts*, so one replicate's mean is ``cu · D · ct`` — matrix
products over chunks of replicates, no per-replicate Python. :func:`plain_loop_bootstrap` is the
textbook loop over the very same draws, kept as the reference the tests and ``make bench`` compare
against.

Generic. Every public function takes the arm column, baseline and treatment arms, outcome and
scenarios as parameters; today's values are the defaults in the constant block below (schema v2).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.archive import load_records
from layerlab.mitigations import contract_pair

# --- the one constant block: arm column, arms, outcome, target, unit key, small-sample rule -----
ARM = "mitigation"  # the arm column (archive schema v2)
# baseline arm (no mitigation) and the treatment compared with it: the contract arms, named by
# the mitigations spec
BASELINE, TREATMENT = contract_pair()
OUTCOME = "success"  # binary outcome column
TARGET = "schema_drift"  # the treatment's target scenario (layer)
UNIT_COLUMNS = ("provider", "model")  # one provider–model unit
# Providers whose "models" are deterministic reference agents (layerlab.models.agents), not models.
REFERENCE_PROVIDERS = frozenset({"layerlab", "deterministic"})
# The two kinds of unit, in table order; statistics are computed per block, never pooled.
BLOCK_MODELS = "real models"
BLOCK_REFERENCE = "reference agents (deterministic baselines)"
MIN_UNITS = 5  # fewer units: tasks-only intervals about these units, said so
ALPHA = 0.05
N_BOOT = 10_000

Design = Literal["auto", "crossed", "nested", "tasks"]
DESIGN_LABELS = {
    "crossed": "crossed: units and tasks resampled jointly (two-way)",
    "nested": "nested (paper's scheme): units, then tasks independently within each unit",
    "tasks": "tasks only: these units, not a sample of models",
}
ESTIMANDS = {
    "crossed": "population of units and tasks",
    "nested": "population of units (tasks assumed independent across units)",
    "tasks": "these units' mean over the task population",
}


def records_frame(archives: Sequence[Path | str] | None = None) -> pd.DataFrame:
    """Checked archives (files or run folders) as one DataFrame; a run given twice counts once.

    Default: the committed reference-agent archive.
    """
    from layerlab import paths

    folders = [Path(a) for a in (archives or [paths.ARCHIVES / "reference_agents"])]
    recs = load_records(folders)
    if not recs:
        raise ValueError("no records in the given archives")
    df = pd.DataFrame([r.__dict__ for r in recs])
    df.attrs["runs"] = run_settings(folders)
    return df


def run_settings(folders: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Per run id, what a caption of real-model numbers must name: decoding (temperature),
    reply schema, tasks and replicates, from the runs' manifests (archives without one: none)."""
    from layerlab import archive as archive_mod

    out: dict[str, dict[str, Any]] = {}
    for f in folders:
        folder = f if f.is_dir() else f.parent
        if not (folder / archive_mod.MANIFEST).exists():
            continue
        m = archive_mod.read_manifest(folder)
        settings = m.get("settings") or {}
        sampling = m.get("sampling") or {
            "temperature": settings.get("temperature"),
            "replicates": m.get("replicates", 1),
        }
        out[str(m.get("run_id"))] = {
            "temperature": sampling.get("temperature"),
            "top_p": sampling.get("top_p"),
            "replicates": sampling.get("replicates", m.get("replicates", 1)),
            "reply_schema": (
                m.get("reply_schema", "layerlab.reply-schema/1")
                if m.get("response_format", "none") != "none"
                else None
            ),
            "n_tasks": m.get("n_tasks"),
        }
    return out


def sampling_phrase(df: pd.DataFrame) -> str:
    """``greedy (temperature 0), reply schema 2, 1 replicate``: how the real-model records of
    ``df`` were drawn, one phrase per distinct setting (empty without manifests); captions put
    it beside the block's task count."""
    runs = df.attrs.get("runs") or {}
    phrases = []
    for rid in sorted(set(df["run_id"].astype(str))):
        r = runs.get(rid)
        if r is None:
            continue
        t = r["temperature"]
        dec = (
            "server-default temperature (not sent)"
            if t is None
            else ("greedy (temperature 0)" if t == 0 else f"sampled at temperature {t:g}")
        )
        if r.get("top_p") is not None:
            dec += f", top-p {r['top_p']:g}"
        schema = r["reply_schema"]
        parts = [dec]
        if schema:
            parts.append(f"reply schema {schema.rsplit('/', 1)[-1]}")
        reps = int(r["replicates"] or 1)
        parts.append(f"{reps} replicate{'s' if reps != 1 else ''}")
        if ", ".join(parts) not in phrases:
            phrases.append(", ".join(parts))
    return "; ".join(phrases)


def arm_pairs(
    df: pd.DataFrame, baseline: str = BASELINE, treatment: str = TREATMENT, *columns: str
) -> pd.DataFrame:
    """The (unit, scenario, task, replicate) pairs that reached the reader in both arms, with
    each arm's ``prompt_hash`` and ``columns`` suffixed ``_a`` (baseline) and ``_b``."""
    keys = ["provider", "model", "scenario", "task_id", "replicate"]
    cols = [*keys, "prompt_hash", *columns]
    a = df.loc[(df[ARM] == baseline) & df["reached_reader"], cols]
    b = df.loc[(df[ARM] == treatment) & df["reached_reader"], cols]
    return a.merge(b, on=keys, suffixes=("_a", "_b"))


def identical_prompts(df: pd.DataFrame, baseline: str = BASELINE, treatment: str = TREATMENT) -> dict[str, tuple[int, int]]:
    """Per scenario: (pairs whose baseline and treatment prompts are byte-identical, pairs that
    reached the reader in both arms). Where every pair is identical, a difference between the
    arms is the model's draw, not the arm (exactly zero under greedy decoding with shared
    replies)."""
    m = arm_pairs(df, baseline, treatment)
    out = {}
    for s, sub in m.groupby("scenario", sort=False):
        same = int((sub["prompt_hash_a"] == sub["prompt_hash_b"]).sum())
        out[str(s)] = (same, len(sub))
    return out


def _z(alpha: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2))


def _t_over_z(n_units: int, alpha: float) -> float:
    """Small-sample widening t(U-1)/z for intervals whose variance is led by U clusters."""
    from scipy.stats import t

    if n_units < 2:
        return 1.0
    return float(t.ppf(1 - alpha / 2, n_units - 1)) / _z(alpha)


def wilson(k: float, n: float, alpha: float = ALPHA) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (``n`` may be an effective,
    non-integer sample size)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    z = _z(alpha)
    p = min(max(k / n, 0.0), 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # at p = 0 or 1 the bound is exact; clip rounding so it never crosses the estimate
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


@functools.cache
def _dsl_order() -> tuple[str, ...]:
    from layerlab.faults.scenario import load_scenarios

    return tuple(load_scenarios())


def scenario_order(df: pd.DataFrame) -> list[str]:
    """Scenarios present in ``df``: DSL order first, then any others sorted."""
    known = _dsl_order()
    present = list(dict.fromkeys(df["scenario"]))
    return [s for s in known if s in present] + sorted(s for s in present if s not in known)


def arm_order(df: pd.DataFrame, arm: str = ARM, baseline: str = BASELINE) -> list[str]:
    """Arms present in ``df``: the baseline first, then the others sorted."""
    return sorted(df[arm].unique(), key=lambda m: (m != baseline, m))


def unit_labels(df: pd.DataFrame) -> pd.Series:
    """``provider/model`` per record (the unit key)."""
    out = df[UNIT_COLUMNS[0]].astype(str)
    for c in UNIT_COLUMNS[1:]:
        out = out + "/" + df[c].astype(str)
    return out


def is_reference(provider: str) -> bool:
    """Whether a provider's records come from a deterministic reference agent, not a model."""
    return provider in REFERENCE_PROVIDERS


def blocks(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The records split by kind of unit: real models first, then reference agents.

    Every table and figure that counts both computes each block on its own (the reference
    agents are deterministic baselines; pooling them with models would misstate both).
    Empty blocks are left out.
    """
    ref = df["provider"].astype(str).map(is_reference).astype(bool)
    out = {}
    if (~ref).any():
        out[BLOCK_MODELS] = df[~ref]
    if ref.any():
        out[BLOCK_REFERENCE] = df[ref]
    return out


def resolve_design(design: Design, n_units: int, shares_tasks: bool, min_units: int) -> str:
    """``auto``: crossed when units share tasks, nested when they do not; tasks only below
    ``min_units`` units. An explicit design is honoured."""
    if design != "auto":
        return design
    if n_units < min_units:
        return "tasks"
    return "crossed" if shares_tasks else "nested"


# --- cluster-robust variance of a mean (one-way and two-way) --------------------------------


def _cluster_var(sums: NDArray[np.float64], counts: NDArray[np.float64], mean: Any) -> Any:
    """Cluster-robust variance of a ratio mean from per-cluster sums and counts (axis 0 = clusters),
    with the G/(G-1) small-sample factor."""
    g = (counts > 0).sum(axis=0)
    n = counts.sum(axis=0)
    resid = ((sums - mean * counts) ** 2).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(
            (g > 1) & (n > 0), resid / np.maximum(n, 1e-300) ** 2 * g / np.maximum(g - 1, 1), 0.0
        )
    return v


def two_way_variance(
    values: NDArray[np.float64],
    weights: NDArray[np.float64],
    cluster_of_task: NDArray[np.int64],
    design: str,
) -> NDArray[np.float64]:
    """Variance of the weighted mean of ``values[u, s, t]`` for each ``s``.

    ``weights`` are record counts per cell (0 where a cell is missing). ``crossed``: two-way
    cluster-robust (units + task clusters − unit × cluster cells; Cameron, Gelbach and Miller),
    floored at the larger one-way variance, which the crossed variance never falls below.
    ``tasks``: clustered by task cluster only. ``nested``: clustered by unit only.
    """
    w = np.asarray(weights, dtype=float)
    y = values * w
    mean = y.sum(axis=(0, 2)) / np.maximum(w.sum(axis=(0, 2)), 1e-300)
    n_c = int(cluster_of_task.max()) + 1 if cluster_of_task.size else 0
    onehot = np.zeros((cluster_of_task.size, n_c))
    onehot[np.arange(cluster_of_task.size), cluster_of_task] = 1.0
    cell_y, cell_n = y @ onehot, w @ onehot  # (U, S, C): per unit x cluster cell
    v_unit = _cluster_var(y.sum(axis=2), w.sum(axis=2), mean)
    v_task = _cluster_var(cell_y.sum(axis=0).T, cell_n.sum(axis=0).T, mean)
    if design == "tasks":
        return np.asarray(v_task)
    if design == "nested":
        return np.asarray(v_unit)
    cy = cell_y.transpose(0, 2, 1).reshape(-1, y.shape[1])
    cn = cell_n.transpose(0, 2, 1).reshape(-1, y.shape[1])
    v_cell = _cluster_var(cy, cn, mean)
    return np.asarray(np.maximum(v_unit + v_task - v_cell, np.maximum(v_unit, v_task)))


# --- rates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    """A cluster-aware rate: estimate, interval and what the interval assumes."""

    k: int
    n: int
    rate: float
    ci_low: float
    ci_high: float
    design: str
    n_units: int
    n_tasks: int
    n_effective: float
    wilson_records_low: float
    wilson_records_high: float


def cluster_rate(
    sub: pd.DataFrame,
    outcome: str = OUTCOME,
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
    cluster: str = "task_id",
) -> Rate:
    """Rate of ``outcome`` over the records of ``sub`` with an interval that respects clustering
    (units × ``cluster``); see :func:`rate_interval`. When some records did not record
    ``outcome`` (null: an archive migrated from an older schema), the rate and interval are NaN
    with design ``not recorded``: no value is imputed for them."""
    y = sub[outcome].astype(float).to_numpy()
    if len(y) == 0:
        return rate_interval(np.zeros((0, 0)), np.zeros((0, 0)), design, min_units, alpha)
    if np.isnan(y).any():
        nan = float("nan")
        k = int(np.nansum(y))
        return Rate(k, len(y), nan, nan, nan, "not recorded", 0, 0, 0.0, nan, nan)
    units, ui = np.unique(unit_labels(sub).to_numpy(), return_inverse=True)
    tasks, ti = np.unique(sub[cluster].to_numpy(), return_inverse=True)
    sums = np.zeros((len(units), len(tasks)))
    counts = np.zeros((len(units), len(tasks)))
    np.add.at(sums, (ui, ti), y)
    np.add.at(counts, (ui, ti), 1.0)
    return rate_interval(sums, counts, design, min_units, alpha)


def rate_interval(
    sums: NDArray[np.float64],
    counts: NDArray[np.float64],
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> Rate:
    """A rate from per (unit, task) success sums and record counts, with a cluster-aware interval.

    The variance is two-way cluster-robust over units and tasks (crossed, at least ``min_units``
    units, widened by t(U-1)/z) or clustered by task (tasks only: these units); the interval is
    Wilson's at the effective sample size ``p(1-p) / variance``, capped at the record count. A
    rate of exactly 0 or 1 has no sampled variance: its effective size is the number of
    independent clusters (units when crossed, tasks otherwise), so the bound stays honest.
    ``wilson_records_*`` treats every record as independent, kept for comparison only.
    """
    k, n = float(sums.sum()), float(counts.sum())
    if n == 0:
        nan = float("nan")
        return Rate(0, 0, nan, nan, nan, "none", 0, 0, 0.0, nan, nan)
    U, T = sums.shape
    d = resolve_design(design, U, True, min_units)
    if d == "nested":
        d = "crossed"  # rates have no nested variant: units share tasks by construction
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    var = float(two_way_variance(means[:, None, :], counts[:, None, :], np.arange(T), d)[0])
    if d == "crossed":
        var *= _t_over_z(U, alpha) ** 2
    p = k / n
    if p in (0.0, 1.0):
        n_eff = float(U if d == "crossed" else T)
    elif var <= 0:
        n_eff = n
    else:
        n_eff = float(min(n, p * (1 - p) / var))
    lo, hi = wilson(p * n_eff, n_eff, alpha)
    rlo, rhi = wilson(k, n, alpha)
    return Rate(int(round(k)), int(n), p, lo, hi, d, U, T, n_eff, rlo, rhi)


def rates(
    df: pd.DataFrame,
    label: str = OUTCOME,
    arm: str = ARM,
    baseline: str = BASELINE,
    design: Design = "auto",
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> pd.DataFrame:
    """Rate of ``label`` by scenario × arm with cluster-aware intervals (see :func:`cluster_rate`)."""
    rows = []
    for s in scenario_order(df):
        for mode in arm_order(df, arm, baseline):
            cell = df[(df["scenario"] == s) & (df[arm] == mode)]
            r = cluster_rate(cell, label, design, min_units, alpha)
            rows.append(
                {
                    "scenario": s,
                    ARM: mode,
                    "n": r.n,
                    "k": r.k,
                    "rate": r.rate,
                    "ci_low": r.ci_low,
                    "ci_high": r.ci_high,
                    "design": r.design,
                    "n_units": r.n_units,
                    "n_tasks": r.n_tasks,
                    "n_effective": r.n_effective,
                    "wilson_records_low": r.wilson_records_low,
                    "wilson_records_high": r.wilson_records_high,
                }
            )
    return pd.DataFrame(rows)


# --- paired layout ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Paired:
    """Treatment-minus-baseline differences laid out for resampling.

    ``diff[u, s, t]`` is the paired difference of unit ``u``, scenario ``s``, task ``t`` (means over
    replicates when an archive holds several); ``valid`` marks cells that exist. Tasks are the
    union over units, so units that share tasks share an index; ``policy[t]`` is the task's
    policy (the cluster of correlated question variants).
    """

    units: tuple[str, ...]
    scenarios: tuple[str, ...]
    tasks: tuple[str, ...]
    diff: NDArray[np.float64]
    valid: NDArray[np.bool_]
    policy: NDArray[np.int64]
    treatment: str = TREATMENT
    baseline: str = BASELINE
    outcome: str = OUTCOME

    @property
    def shares_tasks(self) -> bool:
        """Whether any task is answered by two or more units (units and tasks are crossed)."""
        return bool((self.valid.any(axis=1).sum(axis=0) >= 2).any())


def paired(
    df: pd.DataFrame,
    outcome: str = OUTCOME,
    treatment: str = TREATMENT,
    baseline: str = BASELINE,
    arm: str = ARM,
    scenarios: Sequence[str] | None = None,
) -> Paired:
    """Pair arm ``treatment`` with arm ``baseline`` by (unit, scenario, task).

    Records of one cell (replicates) are averaged per arm before differencing.
    """
    sub = df[df[arm].isin([treatment, baseline])]
    if scenarios is not None:
        sub = sub[sub["scenario"].isin(list(scenarios))]
    keys = ["unit", "scenario", "task_id", "policy_id"]
    frame = pd.DataFrame(
        {
            "unit": unit_labels(sub).to_numpy(),
            "scenario": sub["scenario"].to_numpy(),
            "task_id": sub["task_id"].to_numpy(),
            "policy_id": sub["policy_id"].to_numpy(),
            "arm": sub[arm].to_numpy(),
            "y": sub[outcome].astype(float).to_numpy(),
        }
    )
    means = frame.groupby([*keys, "arm"], sort=False)["y"].mean().unstack("arm")
    if treatment not in means or baseline not in means:
        raise ValueError(f"archives hold no {treatment!r}/{baseline!r} pairs (arm column {arm!r})")
    wide = (means[treatment] - means[baseline]).dropna().rename("d").reset_index()
    if wide.empty:
        raise ValueError(f"archives hold no {treatment!r}/{baseline!r} pairs (arm column {arm!r})")
    units = tuple(sorted(wide["unit"].unique()))
    present = set(wide["scenario"])
    order = list(scenarios) if scenarios is not None else scenario_order(df)
    scen = tuple(s for s in order if s in present)
    tasks = tuple(sorted(wide["task_id"].unique()))
    pol_of_task = wide.drop_duplicates("task_id").set_index("task_id")["policy_id"]
    pols = {p: i for i, p in enumerate(sorted(set(pol_of_task)))}
    policy = np.array([pols[pol_of_task[t]] for t in tasks], dtype=np.int64)
    ui = wide["unit"].map({u: i for i, u in enumerate(units)}).to_numpy()
    si = wide["scenario"].map({s: i for i, s in enumerate(scen)}).to_numpy()
    ti = wide["task_id"].map({t: i for i, t in enumerate(tasks)}).to_numpy()
    diff = np.zeros((len(units), len(scen), len(tasks)))
    valid = np.zeros(diff.shape, dtype=bool)
    diff[ui, si, ti] = wide["d"].to_numpy()
    valid[ui, si, ti] = True
    return Paired(units, scen, tasks, diff, valid, policy, treatment, baseline, outcome)


def point_estimates(p: Paired) -> NDArray[np.float64]:
    """Mean paired difference per scenario over all valid pairs."""
    return (p.diff * p.valid).sum(axis=(0, 2)) / np.maximum(p.valid.sum(axis=(0, 2)), 1)


# --- the bootstrap: draws, counts, vectorised statistic and the plain-loop reference --------


def _counts(draws: NDArray[np.int64], n: int) -> NDArray[np.float64]:
    """Multinomial counts over ``n`` bins of each row of ``draws`` (last axis = draws)."""
    rows = int(np.prod(draws.shape[:-1]))
    flat = draws.reshape(rows, -1) + (n * np.arange(rows))[:, None]
    c = np.bincount(flat.ravel(), minlength=rows * n).reshape(*draws.shape[:-1], n)
    return c.astype(np.float64)


@dataclass(frozen=True)
class _Plan:
    """Index tables for resampling: per-unit task (or policy) lists and the cluster of each task."""

    design: str
    policy_level: bool
    n_clusters: int
    cluster_of_task: NDArray[np.int64]  # (T,) cluster index per task
    members: list[NDArray[np.int64]] = field(default_factory=list)  # tasks of each cluster
    unit_clusters: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    unit_n: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    balanced: bool = False  # every unit answered every cluster
    identity: bool = False  # clusters are the tasks themselves
    D: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))  # (T, U*S) diffs
    V: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 0)))  # (T, U*S) valid


def _plan(p: Paired, design: str, policy_level: bool) -> _Plan:
    T = len(p.tasks)
    cot = p.policy if policy_level else np.arange(T, dtype=np.int64)
    n_c = int(cot.max()) + 1
    members = [np.flatnonzero(cot == c) for c in range(n_c)]
    # clusters each unit answered (for nested: draws stay within the unit's own clusters)
    has = np.zeros((len(p.units), n_c), dtype=bool)
    has[:, cot] |= p.valid.any(axis=1)
    unit_n = has.sum(axis=1).astype(np.int64)
    uc = np.zeros((len(p.units), max(int(unit_n.max()), 1)), dtype=np.int64)
    for u in range(len(p.units)):
        idx = np.flatnonzero(has[u])
        uc[u, : len(idx)] = idx
    U, S, _ = p.diff.shape
    return _Plan(
        design,
        policy_level,
        n_c,
        cot,
        members,
        uc,
        unit_n,
        balanced=bool(has.all()),
        identity=not policy_level,
        D=np.ascontiguousarray(p.diff.reshape(U * S, T).T),
        V=np.ascontiguousarray(p.valid.reshape(U * S, T).T.astype(np.float64)),
    )


def _draw(rng: np.random.Generator, plan: _Plan, b: int, n_units: int) -> dict[str, Any]:
    """One chunk of resampling draws (indices), shared by the vectorised and the plain loop."""
    if plan.design == "tasks":
        units = np.broadcast_to(np.arange(n_units), (b, n_units))
    else:
        units = rng.integers(0, n_units, size=(b, n_units))
    if plan.design == "nested":
        width = plan.unit_clusters.shape[1]
        if plan.balanced:  # every unit answered every cluster: draw cluster indices directly
            return {"units": units, "clusters": rng.integers(0, width, size=(b, n_units, width))}
        n = plan.unit_n[units]  # (b, U)
        pick = (rng.random((b, n_units, width)) * n[..., None]).astype(np.int64)
        clusters = plan.unit_clusters[units[..., None], pick]
        keep = np.arange(width)[None, None, :] < n[..., None]
        clusters = np.where(keep, clusters, plan.n_clusters)  # overflow bin, dropped
        return {"units": units, "clusters": clusters}
    return {"units": units, "clusters": rng.integers(0, plan.n_clusters, size=(b, plan.n_clusters))}


def _chunk_stat(p: Paired, plan: _Plan, dr: dict[str, Any]) -> NDArray[np.float64]:
    U, S, T = p.diff.shape
    units, clusters = dr["units"], dr["clusters"]
    b = units.shape[0]
    D, V = plan.D, plan.V  # (T, U*S)
    if plan.design != "nested":
        ccount = _counts(clusters, plan.n_clusters)  # (b, C)
        tcount = ccount if plan.identity else ccount[:, plan.cluster_of_task]  # (b, T)
        ucount = _counts(units, U)  # (b, U)
        num = ((tcount @ D).reshape(b, U, S) * ucount[..., None]).sum(axis=1)
        den = ((tcount @ V).reshape(b, U, S) * ucount[..., None]).sum(axis=1)
    else:
        ccount = _counts(clusters, plan.n_clusters + 1)[..., : plan.n_clusters]  # (b, U, C)
        tcount = ccount if plan.identity else ccount[..., plan.cluster_of_task]  # (b, U, T)
        flat = tcount.reshape(b * U, T)
        # every draw against every unit's columns, then keep the drawn unit's: one BLAS call
        cols = units.reshape(-1, 1) * S + np.arange(S)[None, :]  # (b*U, S)
        num = np.take_along_axis(flat @ D, cols, axis=1).reshape(b, U, S).sum(axis=1)
        den = np.take_along_axis(flat @ V, cols, axis=1).reshape(b, U, S).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(den > 0, num / np.where(den > 0, den, 1), np.nan))


def bootstrap(
    p: Paired,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    chunk: int = 2000,
    design: str = "crossed",
) -> NDArray[np.float64]:
    """Bootstrap replicates of the mean paired difference per scenario, shape ``(n_boot, S)``.

    ``design``: ``crossed`` draws units and task clusters with replacement, the tasks shared by
    every drawn unit; ``nested`` draws units, then task clusters independently within each drawn
    unit (the paper's scheme); ``tasks`` keeps every unit once and draws task clusters. A task
    cluster is a task, or with ``policy_level`` a policy (all its question variants together).
    The same draws serve every scenario, so cross-scenario quantities are bootstrapped jointly.
    """
    if design not in DESIGN_LABELS:
        raise ValueError(f"design: expected one of {sorted(DESIGN_LABELS)}, got {design!r}")
    rng = np.random.default_rng(seed)
    plan = _plan(p, design, policy_level)
    out = np.empty((n_boot, len(p.scenarios)))
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        out[start : start + b] = _chunk_stat(p, plan, _draw(rng, plan, b, len(p.units)))
    return out


def plain_loop_bootstrap(
    p: Paired,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    chunk: int = 2000,
    design: str = "crossed",
) -> NDArray[np.float64]:
    """The textbook loop (replicate → drawn unit → scenario) over the same draws as
    :func:`bootstrap`: the reference its results and speed are checked against."""
    rng = np.random.default_rng(seed)
    plan = _plan(p, design, policy_level)
    out = np.empty((n_boot, len(p.scenarios)))
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        dr = _draw(rng, plan, b, len(p.units))
        for r in range(b):
            num = np.zeros(len(p.scenarios))
            den = np.zeros(len(p.scenarios))
            for j, u in enumerate(dr["units"][r]):
                cl = dr["clusters"][r, j] if design == "nested" else dr["clusters"][r]
                tasks = np.concatenate([plan.members[c] for c in cl if c < plan.n_clusters])
                for s in range(len(p.scenarios)):
                    num[s] += p.diff[u, s, tasks].sum()
                    den[s] += p.valid[u, s, tasks].sum()
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start + r] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    return out


# --- paired effects --------------------------------------------------------------------------


@dataclass(frozen=True)
class Effects:
    """Paired effects per scenario with their bootstrap and what the intervals assume.

    ``replicates`` are raw bootstrap replicates; ``scale`` is the per-scenario factor that maps
    their deviations from the estimate to the calibrated interval (see :meth:`calibrated`).
    """

    table: pd.DataFrame
    replicates: NDArray[np.float64]
    paired: Paired
    note: str
    design: str
    estimand: str
    scale: NDArray[np.float64]
    n_boot: int
    seed: int
    policy_level: bool
    alpha: float

    def calibrated(self) -> NDArray[np.float64]:
        """Replicates rescaled around the estimate so their spread matches the interval's."""
        est = point_estimates(self.paired)
        return est + self.scale * (self.replicates - est)

    def describe(self) -> str:
        """One sentence for captions: design, units counted and what the interval assumes."""
        p = self.paired
        lvl = "policies (all variants together)" if self.policy_level else "tasks"
        txt = (
            f"{DESIGN_LABELS[self.design]}; {len(p.units)} unit(s), {len(p.tasks)} tasks, "
            f"{lvl} resampled, {self.n_boot} resamples (seed {self.seed}); estimand: "
            f"{ESTIMANDS[self.design]}"
        )
        if self.design == "crossed":
            txt += (
                "; percentile deviations rescaled to the two-way cluster-robust variance and "
                f"widened by t({len(p.units) - 1})/z"
            )
        elif self.design == "tasks":
            n_cl = len(np.unique(p.policy)) if self.policy_level else len(p.tasks)
            txt += (
                "; percentile deviations rescaled to the task-clustered variance (with its "
                f"G/(G-1) factor) and widened by t(df)/z, df at most {n_cl - 1} (matched to the "
                "kurtosis of the task residuals)"
            )
        elif self.design == "nested":
            txt += (
                "; raw percentile interval without small-sample correction: under-covers with "
                "task effects shared across units or strong between-unit heterogeneity"
            )
        return txt


def paired_effects(
    df: pd.DataFrame,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = ALPHA,
    design: Design = "auto",
    outcome: str = OUTCOME,
    treatment: str = TREATMENT,
    baseline: str = BASELINE,
    arm: str = ARM,
    scenarios: Sequence[str] | None = None,
    min_units: int = MIN_UNITS,
) -> Effects:
    """Treatment − baseline ``outcome`` per scenario with bootstrap intervals.

    ``design="auto"`` picks crossed when units share tasks and at least ``min_units`` units are
    present, tasks only with fewer units (labelled in :attr:`Effects.note`).
    """
    p = paired(df, outcome, treatment, baseline, arm, scenarios)
    return effects_from_paired(p, n_boot, seed, policy_level, alpha, design, min_units)


def arm_effects(
    df: pd.DataFrame,
    treatment: str,
    baseline: str,
    outcome: str = OUTCOME,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = ALPHA,
    design: Design = "auto",
    arm: str = ARM,
) -> Effects:
    """Any treatment arm against its baseline on any binary outcome: :func:`paired_effects` with
    the arms first (the specificity matrix's call)."""
    return paired_effects(
        df,
        n_boot,
        seed,
        policy_level,
        alpha,
        design,
        outcome=outcome,
        treatment=treatment,
        baseline=baseline,
        arm=arm,
    )


def cluster_df(
    p: Paired, cluster_of_task: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Per scenario, the degrees of freedom of the task-clustered variance of the mean difference,
    matched to its kurtosis: ``2 / (2/(G-1) + (k-3)/G)`` over the G clusters' residual sums
    (k their kurtosis), at most G-1.

    With normal residuals this is G-1; when a few clusters carry the variance (rare discordant
    tasks, skewed difficulty) it falls towards twice their number, as the variance estimate rests
    on them alone.
    """
    y = (p.diff * p.valid).sum(axis=0)  # (S, T)
    n = p.valid.sum(axis=0).astype(np.float64)
    n_c = int(cluster_of_task.max()) + 1 if cluster_of_task.size else 0
    onehot = np.zeros((cluster_of_task.size, n_c))
    onehot[np.arange(cluster_of_task.size), cluster_of_task] = 1.0
    cy, cn = y @ onehot, n @ onehot  # (S, C)
    g = (cn > 0).sum(axis=1).astype(np.float64)
    mean = cy.sum(axis=1) / np.maximum(cn.sum(axis=1), 1e-300)
    e2 = np.where(cn > 0, cy - mean[:, None] * cn, 0.0) ** 2
    s2, s4 = e2.sum(axis=1), (e2**2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        kurt = np.where(s2 > 0, g * s4 / np.where(s2 > 0, s2, 1.0) ** 2, 3.0)
        inv = 2.0 / np.maximum(g - 1, 1) + (kurt - 3.0) / np.maximum(g, 1)
        df = np.where(inv > 0, 2.0 / np.where(inv > 0, inv, 1.0), np.inf)
    return np.asarray(np.clip(df, 1.0, np.maximum(g - 1, 1.0)))


def small_sample_factor(
    p: Paired, design: str, policy_level: bool, alpha: float = ALPHA
) -> NDArray[np.float64]:
    """Per scenario, the widening of an effect interval for the few clusters that lead its
    variance.

    Crossed: t(U-1)/z over the U units. Tasks only: t(df)/z with df the kurtosis-matched degrees
    of freedom of the task-clustered variance (:func:`cluster_df`, at most G-1 over the G task
    clusters resampled: tasks, or policies with ``policy_level``), applied beside the G/(G-1)
    variance factor the bootstrap's plug-in variance lacks. Nested: 1 (raw percentile, labelled
    as such).
    """
    from scipy.stats import t

    S = len(p.scenarios)
    if design == "crossed":
        return np.full(S, _t_over_z(len(p.units), alpha))
    if design == "tasks":
        cot = p.policy if policy_level else np.arange(len(p.tasks), dtype=np.int64)
        df = cluster_df(p, cot)
        return np.asarray(t.ppf(1 - alpha / 2, df) / _z(alpha))
    return np.ones(S)


def effects_from_paired(
    p: Paired,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = ALPHA,
    design: Design = "auto",
    min_units: int = MIN_UNITS,
) -> Effects:
    """:func:`paired_effects` on an already built :class:`Paired` layout."""
    U = len(p.units)
    d = resolve_design(design, U, p.shares_tasks, min_units)
    est = point_estimates(p)
    reps = bootstrap(p, n_boot, seed, policy_level, design=d)
    scale = np.ones(len(p.scenarios))
    if (d == "crossed" and U >= 2) or d == "tasks":
        # crossed: the two-way variance, t(U-1)/z (units lead it). tasks only: the one-way
        # variance by task cluster with its G/(G-1) factor, t(df <= G-1)/z (the raw percentile
        # interval over 80 tasks with skewed difficulty covered 93.8%; see layerlab.analysis.coverage)
        plan = _plan(p, d, policy_level)
        target_var = two_way_variance(p.diff, p.valid.astype(np.float64), plan.cluster_of_task, d)
        boot_var = np.nanvar(reps, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(boot_var > 0, target_var / np.where(boot_var > 0, boot_var, 1), 1.0)
        scale = np.sqrt(ratio) * small_sample_factor(p, d, policy_level, alpha)
    cal = est + scale * (reps - est)
    lo, hi = np.nanquantile(cal, [alpha / 2, 1 - alpha / 2], axis=0)
    lo, hi = np.clip(lo, -1.0, 1.0), np.clip(hi, -1.0, 1.0)  # a difference of rates
    notes = []
    if U == 1:
        notes.append(
            f"single provider-model unit ({p.units[0]}): intervals reflect task resampling only; "
            "variation between models is not estimable"
        )
    elif d == "tasks":
        notes.append(
            f"{U} units (< {min_units}): intervals resample tasks only and describe these units, "
            "not a population of models"
        )
    elif U < min_units:
        notes.append(f"{U} units (< {min_units}): units treated as a sample of models regardless")
    rows = []
    for i, s in enumerate(p.scenarios):
        zero = bool((p.diff[:, i, :][p.valid[:, i, :]] == 0).all())
        rows.append(
            {
                "scenario": s,
                "estimate": float(est[i]),
                "ci_low": float(lo[i]),
                "ci_high": float(hi[i]),
                "design": d,
                "n_units": U,
                "n_pairs": int(p.valid[:, i, :].sum()),
                "exactly_zero": zero,
                "includes_zero": bool(lo[i] <= 0 <= hi[i]),
            }
        )
    return Effects(
        pd.DataFrame(rows),
        reps,
        p,
        "; ".join(notes),
        d,
        ESTIMANDS[d],
        scale,
        n_boot,
        seed,
        policy_level,
        alpha,
    )


def effects_by_design(
    df: pd.DataFrame,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = ALPHA,
    outcome: str = OUTCOME,
    treatment: str = TREATMENT,
    baseline: str = BASELINE,
    arm: str = ARM,
    scenarios: Sequence[str] | None = None,
) -> dict[str, Effects]:
    """The paired effects under every bootstrap design (crossed, nested, tasks), side by side.

    All three share one paired layout and the same seed; which one a table reports is
    :func:`resolve_design`'s choice (``auto``).
    """
    p = paired(df, outcome, treatment, baseline, arm, scenarios)
    designs: tuple[Design, ...] = ("crossed", "nested", "tasks")
    return {d: effects_from_paired(p, n_boot, seed, policy_level, alpha, design=d) for d in designs}


def pick_design(
    designs: dict[str, Effects], design: Design = "auto", min_units: int = MIN_UNITS
) -> Effects:
    """The design a table reports from :func:`effects_by_design` (``auto``: see
    :func:`resolve_design`)."""
    p = next(iter(designs.values())).paired
    return designs[resolve_design(design, len(p.units), p.shares_tasks, min_units)]


# --- the specificity margin ------------------------------------------------------------------


def simultaneous_band(
    eff: Effects, scenarios: Sequence[str], alpha: float | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Simultaneous (max-|t|) bootstrap band over ``scenarios``: all cover together at 1 − alpha.

    Scenarios whose replicates do not vary (exactly-zero effects) get a band of width zero.
    """
    alpha = eff.alpha if alpha is None else alpha
    idx = [list(eff.paired.scenarios).index(s) for s in scenarios]
    est = point_estimates(eff.paired)[idx]
    cal = eff.calibrated()[:, idx]
    sd = np.nanstd(cal, axis=0)
    live = sd > 0
    if not live.any():
        return est.copy(), est.copy()
    zmax = np.nanmax(np.abs(cal[:, live] - est[live]) / sd[live], axis=1)
    c = float(np.nanquantile(zmax, 1 - alpha))
    # a difference of two rates lies in [-1, 1]; clipping the band there loses no coverage
    return np.clip(est - c * sd, -1.0, 1.0), np.clip(est + c * sd, -1.0, 1.0)


def specificity_margin(
    eff: Effects,
    target: str | Sequence[str] = TARGET,
    off_target: Sequence[str] | None = None,
    alpha: float | None = None,
) -> dict[str, Any]:
    """Target-layer gain minus the largest absolute off-target change, with a covering interval.

    With several targets the gain is the smallest target gain. The interval projects a
    simultaneous bootstrap band: [low gain − max |off-target band|, high gain − max distance of an
    off-target band from 0]. It covers the true margin whenever the band covers every effect, also
    when off-target effects are exactly zero but noisy (where the percentile interval of
    ``gain − max|change|`` is biased). ``margin`` counts an off-target change only when its band
    excludes zero (the plug-in ``margin_plugin`` is biased low by the noise of the maximum).
    ``largest_off_target`` names every scenario tied for the largest plug-in change.
    """
    scen = list(eff.paired.scenarios)
    targets = [target] if isinstance(target, str) else list(target)
    for t in targets:
        if t not in scen:
            raise ValueError(f"target scenario {t!r} not in archives ({scen})")
    off = [s for s in (off_target if off_target is not None else scen) if s not in targets]
    missing = [s for s in off if s not in scen]
    if missing:
        raise ValueError(f"off-target scenarios {missing} not in archives ({scen})")
    if not off:
        raise ValueError("no off-target scenarios to compare against")
    est_all = point_estimates(eff.paired)
    est = {s: float(est_all[scen.index(s)]) for s in scen}
    lo, hi = simultaneous_band(eff, [*targets, *off], alpha)
    k = len(targets)
    t_lo, t_hi = lo[:k], hi[:k]
    o_lo, o_hi = lo[k:], hi[k:]
    gain = min(est[t] for t in targets)
    abs_off = np.array([abs(est[s]) for s in off])
    worst = float(abs_off.max())
    tied = [s for s, a in zip(off, abs_off, strict=True) if math.isclose(a, worst, abs_tol=1e-12)]
    excludes_zero = (o_lo > 0) | (o_hi < 0)
    counted = float(np.where(excludes_zero, abs_off, 0.0).max())
    dist0 = np.where(excludes_zero, np.minimum(np.abs(o_lo), np.abs(o_hi)), 0.0)
    return {
        "target": ", ".join(targets),
        "target_gain": gain,
        "largest_off_target": ", ".join(tied),
        "largest_off_target_change": est[tied[0]],
        "off_target_distinguishable": ", ".join(
            s for s, e in zip(off, excludes_zero, strict=True) if e
        )
        or "-",
        "margin": gain - counted,
        "margin_plugin": gain - worst,
        "ci_low": float(t_lo.min() - np.maximum(np.abs(o_lo), np.abs(o_hi)).max()),
        "ci_high": float(t_hi.min() - dist0.max()),
        "design": eff.design,
        "n_units": len(eff.paired.units),
    }


@dataclass(frozen=True)
class Block:
    """One kind of unit's records and their paired-effect analysis (see :func:`analyse`)."""

    name: str
    df: pd.DataFrame
    designs: dict[str, Effects]
    eff: Effects
    margin: dict[str, Any]

    @property
    def units(self) -> list[str]:
        return sorted(set(unit_labels(self.df)))


def effects_long(analysis: Mapping[str, Block]) -> pd.DataFrame:
    """Every block's reported paired effects, one under the other with a ``block`` column."""
    return pd.concat(
        [a.eff.table.assign(block=b) for b, a in analysis.items()], ignore_index=True
    )


def analyse(
    df: pd.DataFrame,
    n_boot: int = N_BOOT,
    seed: int = 0,
    policy_level: bool = False,
    design: Design = "auto",
    outcome: str = OUTCOME,
) -> dict[str, Block]:
    """Paired effects (every design), the reported design and the specificity margin, computed
    for each block of :func:`blocks` on its own: real models and reference agents are never
    pooled. Every block uses the same seed. ``outcome``: the binary column compared (strict
    success S by default; ``safe_resolution`` asks whether repair changes safe behaviour)."""
    out = {}
    for name, sub in blocks(df).items():
        designs = effects_by_design(
            sub, n_boot=n_boot, seed=seed, policy_level=policy_level, outcome=outcome
        )
        eff = pick_design(designs, design)
        out[name] = Block(name, sub, designs, eff, specificity_margin(eff))
    return out

# --- Tables 8 and 9 --------------------------------------------------------------------------


def model_gains(
    df: pd.DataFrame,
    top: int = 10,
    outcome: str = OUTCOME,
    treatment: str = TREATMENT,
    baseline: str = BASELINE,
    arm: str = ARM,
) -> pd.DataFrame:
    """Table 8: the largest positive treatment − baseline gains by model × scenario.

    Only gains above zero are listed (no padding with zero rows); a tie at the cut-off keeps
    every tied row, so the table may hold more than ``top`` rows.
    """
    g = df.groupby([*UNIT_COLUMNS, "scenario", arm])[outcome].mean().unstack(arm)
    cols = [*UNIT_COLUMNS, "scenario", baseline, treatment, "gain"]
    if baseline not in g or treatment not in g:
        return pd.DataFrame(columns=cols)
    g = g.dropna(subset=[baseline, treatment]).reset_index()
    g["gain"] = g[treatment] - g[baseline]
    g = g[g["gain"] > 1e-12].sort_values(
        ["gain", *UNIT_COLUMNS, "scenario"], ascending=[False, *[True] * (len(UNIT_COLUMNS) + 1)]
    )
    if len(g) > top:
        cut = g["gain"].iloc[top - 1]
        g = g[g["gain"] >= cut - 1e-12]
    return g[cols].reset_index(drop=True)


def provider_averages(
    df: pd.DataFrame,
    outcome: str = OUTCOME,
    arm: str = ARM,
    baseline: str = BASELINE,
    min_units: int = MIN_UNITS,
    alpha: float = ALPHA,
) -> pd.DataFrame:
    """Table 9: provider-level averages (all scenarios pooled; not a capability ranking), with a
    cluster-aware interval for the pooled success (tasks clustered across scenarios and arms)."""
    rows = []
    arms = arm_order(df, arm, baseline)
    for prov, sub in sorted(df.groupby("provider"), key=lambda kv: kv[0]):
        row: dict[str, Any] = {
            "provider": prov,
            "models": sub["model"].nunique(),
            "records": len(sub),
        }
        for mode in arms:
            m = sub[sub[arm] == mode]
            row[f"{outcome} {mode}"] = float(m[outcome].mean()) if len(m) else float("nan")
        r = cluster_rate(sub, outcome, "auto", min_units, alpha)
        row[f"{outcome} overall"] = r.rate
        row["95% low"] = r.ci_low
        row["95% high"] = r.ci_high
        row["interval"] = r.design
        # NaN when some records did not record it (an archive migrated from an older schema)
        row["grounded false positive"] = float(
            sub["grounded_false_positive"].astype(float).mean(skipna=False)
        )
        rows.append(row)
    return pd.DataFrame(rows)


# --- cross-checks ----------------------------------------------------------------------------


def mcnemar_exact_log10(n01: int, n10: int) -> float:
    """log10 of the exact (binomial) two-sided McNemar p-value, summed in log space so it stays
    finite where the p-value itself underflows to 0."""
    from scipy.special import gammaln, logsumexp

    n = n01 + n10
    if n == 0:
        return 0.0
    i = np.arange(min(n01, n10) + 1)
    log_terms = gammaln(n + 1) - gammaln(i + 1) - gammaln(n - i + 1) + n * math.log(0.5)
    lp = float(logsumexp(log_terms)) + math.log(2)
    return min(0.0, lp / math.log(10))


def format_p(log10_p: float) -> str:
    """A p-value for print: 3 significant digits, or a bound ``< 1e-k`` below 1e-300."""
    if log10_p >= -300:
        return f"{10**log10_p:.3g}"
    return f"< 1e{-math.floor(-log10_p)}"


def _gee_risk_difference(
    y: NDArray[np.float64], x: NDArray[np.float64], groups: NDArray[np.int64]
) -> tuple[float, float, str]:
    """Risk difference, its robust standard error and the covariance used, from a Gaussian GEE
    (bias-reduced robust covariance; the plain robust one where the bias reduction breaks down)."""
    import statsmodels.api as sm

    model = sm.GEE(
        y,
        sm.add_constant(x),
        groups=groups,
        family=sm.families.Gaussian(),
        cov_struct=sm.cov_struct.Exchangeable(),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cov_type in ("bias_reduced", "robust"):
            res = model.fit(cov_type=cov_type)
            se = float(np.asarray(res.bse)[1])
            if math.isfinite(se):
                return float(np.asarray(res.params)[1]), se, cov_type
    return float(np.asarray(res.params)[1]), float("nan"), "none"


def crosschecks(
    df: pd.DataFrame,
    eff: Effects,
    outcome: str | None = None,
    treatment: str | None = None,
    baseline: str | None = None,
    arm: str = ARM,
    min_units: int = MIN_UNITS,
) -> pd.DataFrame:
    """statsmodels cross-checks per scenario, and whether each agrees with the bootstrap about the
    effect being distinguishable from zero.

    Exact McNemar on the paired outcomes (p printed as a bound when it underflows), and a GEE
    linear-probability model of the outcome on the arm — the risk difference, so it is estimable
    when an arm's rate is 0 — clustered by unit (with at least ``min_units`` units; p from
    t(U−1)) or by task otherwise, with a bias-reduced robust covariance.
    """
    from scipy.stats import t as t_dist

    outcome = outcome or eff.paired.outcome
    treatment = treatment or eff.paired.treatment
    baseline = baseline or eff.paired.baseline
    rows = []
    boot = eff.table.set_index("scenario")
    for s in eff.paired.scenarios:
        sub = df[(df["scenario"] == s) & df[arm].isin([treatment, baseline])]
        sub = sub.assign(unit=unit_labels(sub).to_numpy())
        wide = sub.pivot_table(
            index=["unit", "task_id"], columns=arm, values=outcome, aggfunc="mean"
        ).dropna()
        st, rp = wide[baseline] > 0.5, wide[treatment] > 0.5
        n01, n10 = int((~st & rp).sum()), int((st & ~rp).sum())
        lp = mcnemar_exact_log10(n01, n10)
        boot_sig = not bool(boot.loc[s, "includes_zero"])
        row: dict[str, Any] = {
            "scenario": s,
            f"discordant {baseline}-only": n10,
            f"discordant {treatment}-only": n01,
            "mcnemar exact p": format_p(lp),
            "mcnemar log10 p": lp,
            "mcnemar agrees": (lp < math.log10(0.05)) == boot_sig,
        }
        units = sub["unit"].nunique()
        by = "unit" if units >= min_units else "task_id"
        n_cl = int(sub[by].nunique())
        y = sub[outcome].astype(float).to_numpy()
        if n01 + n10 == 0 and bool((wide[treatment] == wide[baseline]).all()):
            row.update(
                {
                    "gee clustered by": by.replace("_id", ""),
                    "gee clusters": n_cl,
                    "gee risk difference": float("nan"),
                    "gee p": "",
                    "gee agrees": "not estimable (identical paired outcomes: effect exactly 0)",
                }
            )
        elif y.min() == y.max():
            row.update(
                {
                    "gee clustered by": by.replace("_id", ""),
                    "gee clusters": n_cl,
                    "gee risk difference": 0.0,
                    "gee p": "",
                    "gee agrees": "not estimable (constant outcome)",
                }
            )
        else:
            x = (sub[arm] == treatment).astype(float).to_numpy()
            groups = pd.factorize(sub[by])[0]
            coef, se, cov_type = _gee_risk_difference(y, x, groups)
            if not math.isfinite(se):
                p_txt, agrees = "", "not estimable (robust covariance undefined)"
            elif se > 0:
                log_p = float(t_dist.logsf(abs(coef) / se, n_cl - 1)) + math.log(2)
                lp_gee = min(0.0, log_p / math.log(10))
                p_txt = format_p(lp_gee)
                agrees = str((lp_gee < math.log10(0.05)) == boot_sig).lower()
            else:  # no variation left around the fit: the p-value is 0 or 1 exactly
                p_txt = "0 (no residual variation)" if coef != 0 else "1"
                agrees = str((coef != 0) == boot_sig).lower()
            row.update(
                {
                    "gee clustered by": by.replace("_id", ""),
                    "gee clusters": n_cl,
                    "gee risk difference": coef,
                    "gee p": p_txt,
                    "gee agrees": agrees,
                }
            )
        rows.append(row)
    return pd.DataFrame(rows)


# --- replicates: within-task variability of sampled decoding -------------------------------------


def replicate_variability(df: pd.DataFrame, outcome: str = OUTCOME) -> pd.DataFrame:
    """Per unit x scenario x arm of a replicated archive (``replicate`` 0..R-1 per task): how
    much a task's outcome varies between draws, and what that does to the rate's interval.

    ``within-task variance`` is the mean over tasks of the replicates' variance, ``ICC`` the
    share of the outcome's variance that lies between tasks (1: every draw of a task agrees;
    0: the task does not matter), ``tasks that flip`` the share of tasks whose draws disagree.
    Intervals: clustered by task over all R replicates, the same over replicate 0 alone (what a
    one-draw archive would report), and Wilson over the records as if independent. A design
    effect of ``1 + (R - 1) ICC`` is why R replicates of a task count as fewer than R tasks.
    """
    rows = []
    keys = ["provider", "model", "scenario", ARM]
    for (provider, model, scenario, arm), sub in df.groupby(keys, sort=False):
        per_task = sub.groupby("task_id")[outcome].agg(["mean", "var", "count"])
        reps = int(per_task["count"].max())
        within = float(per_task["var"].fillna(0.0).mean()) if reps > 1 else float("nan")
        between = float(per_task["mean"].var(ddof=1)) - within / max(reps, 1)
        total = max(between, 0.0) + within
        icc = max(between, 0.0) / total if total > 0 else float("nan")
        all_r = cluster_rate(sub, outcome, design="tasks")
        first = cluster_rate(sub[sub["replicate"] == sub["replicate"].min()], outcome, design="tasks")
        rows.append(
            {
                "unit": f"{provider}/{model}",
                "scenario": scenario,
                ARM: arm,
                "tasks": len(per_task),
                "replicates": reps,
                "rate": all_r.rate,
                "tasks that flip": float(((per_task["mean"] > 0) & (per_task["mean"] < 1)).mean()),
                "within-task variance": within,
                "ICC": icc,
                "design effect": 1 + (reps - 1) * icc if icc == icc else float("nan"),
                "95% low": all_r.ci_low,
                "95% high": all_r.ci_high,
                "replicate 0 low": first.ci_low,
                "replicate 0 high": first.ci_high,
                "width vs replicate 0": (all_r.ci_high - all_r.ci_low)
                / max(first.ci_high - first.ci_low, 1e-12),
                "records-independent low": all_r.wilson_records_low,
                "records-independent high": all_r.wilson_records_high,
            }
        )
    return pd.DataFrame(rows)


def identical_prompt_discordance(
    df: pd.DataFrame, outcome: str = "safe_resolution", baseline: str = BASELINE,
    treatment: str = TREATMENT,
) -> pd.DataFrame:
    """Are the arms exchangeable where their prompts are byte-identical? Per unit x scenario:
    the (task, replicate) pairs whose two prompts coincide, how many of them disagree on
    ``outcome`` in each direction, and the exact two-sided sign test of that split (under
    exchangeable draws each direction is equally likely, whatever the decoding)."""
    from scipy.stats import binomtest

    m = arm_pairs(df, baseline, treatment, outcome)
    m = m[m["prompt_hash_a"] == m["prompt_hash_b"]]
    rows = []
    for (provider, model, scenario), sub in m.groupby(["provider", "model", "scenario"], sort=False):
        only_a = int((sub[f"{outcome}_a"] & ~sub[f"{outcome}_b"]).sum())
        only_b = int((~sub[f"{outcome}_a"] & sub[f"{outcome}_b"]).sum())
        n = only_a + only_b
        rows.append(
            {
                "unit": f"{provider}/{model}",
                "scenario": scenario,
                "identical pairs": len(sub),
                f"{baseline} only": only_a,
                f"{treatment} only": only_b,
                "sign-test p": float(binomtest(only_a, n).pvalue) if n else 1.0,
            }
        )
    return pd.DataFrame(rows)

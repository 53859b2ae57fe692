"""The paired layout and the bootstrap: treatment-minus-baseline differences per (unit,
scenario, task), multinomial resampling counts and the vectorised statistic.

Every provider–model *unit* answers the same tasks, so units and tasks are **crossed**. The
default (``crossed``) draw resamples units and tasks jointly (one draw of tasks shared by every
drawn unit, the "pigeonhole" bootstrap); the paper's ``nested`` scheme (units, then tasks
independently inside each unit) and ``tasks`` (every unit once, tasks drawn) are labelled
alternatives. Resamples are multinomial *counts*, so one replicate's mean is ``cu · D · ct`` —
matrix products over chunks of replicates, no per-replicate Python. :func:`plain_loop_bootstrap`
is the textbook loop over the very same draws, kept as the reference the tests and
``make bench`` compare against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.analysis.units import (
    ARM,
    DESIGN_LABELS,
    N_BOOT,
    OUTCOME,
    contract_arms,
    scenario_order,
    unit_labels,
)


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
    treatment: str
    baseline: str
    outcome: str = OUTCOME

    @property
    def shares_tasks(self) -> bool:
        """Whether any task is answered by two or more units (units and tasks are crossed)."""
        return bool((self.valid.any(axis=1).sum(axis=0) >= 2).any())


PAIR_KEYS = ("unit", "scenario", "task_id", "policy_id")  # what a pair shares


def arm_records(
    df: pd.DataFrame,
    treatment: str,
    baseline: str,
    outcome: str,
    arm: str = ARM,
    scenarios: Sequence[str] | None = None,
) -> pd.DataFrame:
    """The two arms' records as the pairing reads them: :data:`PAIR_KEYS`, ``arm`` and the
    outcome ``y`` as a float (the one owner of that frame: paired effects and planning)."""
    sub = df[df[arm].isin([treatment, baseline])]
    if scenarios is not None:
        sub = sub[sub["scenario"].isin(list(scenarios))]
    return pd.DataFrame(
        {
            "unit": unit_labels(sub).to_numpy(),
            "scenario": sub["scenario"].to_numpy(),
            "task_id": sub["task_id"].to_numpy(),
            "policy_id": sub["policy_id"].to_numpy(),
            "arm": sub[arm].to_numpy(),
            "y": sub[outcome].astype(float).to_numpy(),
        }
    )


def paired(
    df: pd.DataFrame,
    outcome: str = OUTCOME,
    treatment: str | None = None,
    baseline: str | None = None,
    arm: str = ARM,
    scenarios: Sequence[str] | None = None,
) -> Paired:
    """Pair arm ``treatment`` with arm ``baseline`` by (unit, scenario, task).

    Records of one cell (replicates) are averaged per arm before differencing; the arms default
    to the contract pair (:func:`~layerlab.analysis.units.contract_arms`).
    """
    baseline, treatment = contract_arms(baseline, treatment)
    frame = arm_records(df, treatment, baseline, outcome, arm, scenarios)
    keys = list(PAIR_KEYS)
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

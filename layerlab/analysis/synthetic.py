"""Synthetic archives with known truth, for testing the statistics and measuring their coverage.

The generating model is the one real model archives follow: every provider–model unit answers the
same tasks (units and tasks are crossed). For unit ``u``, scenario ``s`` and task ``t``::

    p_baseline  = clip(base_rate + a_u + b_t)
    p_treatment = clip(base_rate + a_u + b_t + effect_s + g_us + h_st + k_sp)

with ``a_u ~ N(0, unit_sd)`` (between-unit heterogeneity of the rate), ``b_t`` with mean 0 and
sd ``task_sd`` (task difficulty shared by every unit: normal, or with ``task_dist="skewed"`` a
centred exponential, so most tasks sit near the floor and a few are much easier, as with a small
real model), ``g_us ~ N(0, unit_effect_sd)`` (between-unit
heterogeneity of the effect) and ``h_st ~ N(0, task_effect_sd)`` (a task effect on the difference
shared by every unit) and ``k_sp = ±policy_effect`` with fair signs (an effect shared by the
question variants of task ``t``'s policy ``p``; 0 by default). Outcomes are independent Bernoulli
draws given those probabilities, so a scenario whose population effect is 0 is still *noisy*
(``zero_effect="noisy"``, the default); ``zero_effect="exact"`` copies the baseline outcomes
instead (deterministic agents).

Truth is what an interval should cover: the population effect and rate (an expectation over
units and tasks, computed by seeded numerical integration because of the clipping) and the
conditional truth of the units actually drawn (their mean over the task population).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.analysis.bootstrap import Paired
from layerlab.analysis.units import ARM, contract_arms, contract_target
from layerlab.archive import SCHEMA_VERSION

DEFAULT_EFFECTS: Mapping[str, float] = {
    "clean": 0.0,
    "stale_index": 0.0,
    "schema_drift": 0.4,
    "partial_timeout": 0.0,
}


@dataclass(frozen=True)
class Setting:
    """One synthetic design: units, tasks, effects and the variance components above."""

    name: str = "synthetic"
    n_units: int = 9
    n_policies: int = 80
    variants: int = 3
    effects: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_EFFECTS))
    base_rate: float = 0.4
    unit_sd: float = 0.05
    unit_effect_sd: float = 0.03
    task_sd: float = 0.1
    task_effect_sd: float = 0.05
    zero_effect: Literal["noisy", "exact"] = "noisy"
    target: str = ""  # the scenario the treatment targets ("": the contract target, roles.yaml)
    task_dist: Literal["normal", "skewed", "beta"] = "normal"
    task_beta: tuple[float, float] = (2.0, 2.0)  # with task_dist "beta": p_task ~ Beta(a, b)
    replicates: int = 1  # records per arm and task (averaged into one pair, as archives are)
    # an effect shared by a policy's question variants: +policy_effect or -policy_effect per
    # policy and scenario (fair signs, mean 0), drawn from a stream of its own (the other draws
    # do not move when it is set)
    policy_effect: float = 0.0

    def __post_init__(self) -> None:
        if not self.target:
            object.__setattr__(self, "target", contract_target())


@dataclass(frozen=True)
class Sample:
    """One simulated archive as arrays ``(U, S, T)``, with the truth it was drawn from."""

    setting: Setting
    seed: int
    scenarios: tuple[str, ...]
    baseline: NDArray[np.bool_]
    treatment: NDArray[np.bool_]
    true_effect: NDArray[np.float64]  # (S,) population
    true_effect_units: NDArray[np.float64]  # (S,) these units, mean over the task population
    true_rate: NDArray[np.float64]  # (S,) population baseline rate
    true_rate_units: NDArray[np.float64]  # (S,) these units' baseline rate
    # (U, S, T, R) every replicate's outcome; ``baseline``/``treatment`` are their means (the
    # outcomes themselves at one replicate)
    baseline_records: NDArray[np.bool_] | None = None
    treatment_records: NDArray[np.bool_] | None = None

    @property
    def n_tasks(self) -> int:
        return self.baseline.shape[2]

    def task_ids(self) -> tuple[NDArray[np.object_], NDArray[np.object_], NDArray[np.int64]]:
        v = self.setting.variants
        idx = np.arange(self.n_tasks)
        policies = np.array([f"d-{i:03d}" for i in idx // v], dtype=object)
        var = idx % v + 1
        return policies + "-q" + var.astype(str).astype(object), policies, var

    def paired(self) -> Paired:
        """The layout :func:`layerlab.analysis.stats.paired` builds from :meth:`frame`, without pandas."""
        tasks, policies, _ = self.task_ids()
        order = np.argsort(tasks, kind="stable")
        pol = {p: i for i, p in enumerate(sorted(set(policies)))}
        units = tuple(f"prov{u % 3}/model{u}" for u in range(self.setting.n_units))
        uorder = np.argsort(np.array(units, dtype=object), kind="stable")
        diff = self.treatment.astype(float) - self.baseline.astype(float)
        baseline, treatment = contract_arms()
        return Paired(
            tuple(units[i] for i in uorder),
            self.scenarios,
            tuple(tasks[order]),
            diff[uorder][:, :, order],
            np.ones(diff.shape, dtype=bool),
            np.array([pol[p] for p in policies[order]], dtype=np.int64),
            treatment,
            baseline,
        )

    def frame(self, arm: str = ARM) -> pd.DataFrame:
        """The sample as an archive-schema records DataFrame."""
        tasks, policies, var = self.task_ids()
        U, S, T = self.baseline.shape
        baseline, treatment = contract_arms()
        base_rec = (
            self.baseline[..., None] if self.baseline_records is None else self.baseline_records
        )
        treat_rec = (
            self.treatment[..., None] if self.treatment_records is None else self.treatment_records
        )
        parts = []
        for u in range(U):
            for si, s in enumerate(self.scenarios):
                for mode, rec in ((baseline, base_rec[u, si]), (treatment, treat_rec[u, si])):
                    for r in range(rec.shape[1]):
                        parts.append(
                            pd.DataFrame(
                                {
                                    "provider": f"prov{u % 3}",
                                    "model": f"model{u}",
                                    "scenario": s,
                                    arm: mode,
                                    "task_id": tasks,
                                    "policy_id": policies,
                                    "variant": var,
                                    "success": rec[:, r].astype(bool),
                                }
                            )
                        )
        df = pd.concat(parts, ignore_index=True)
        df["schema_version"] = SCHEMA_VERSION
        df["run_id"] = f"synthetic-{self.seed}"
        df["grounded_false_positive"] = False
        # a synthetic reader never fails to reply: failures are wrong answers, not malformed ones
        df["diagnostic"] = np.where(df["success"], "ok", "reader")
        return df


def _task_effects(rng: np.random.Generator, st: Setting, n: int) -> NDArray[np.float64]:
    """Task difficulties ``b_t``: mean 0, sd ``task_sd``; normal or right-skewed (exponential);
    with ``task_dist="beta"`` a Beta(a, b) draw minus its mean (``base_rate`` is then its mean, so
    the per-task success probability is the Beta draw and ``task_sd`` is not read)."""
    if st.task_dist == "skewed":
        return st.task_sd * (rng.exponential(1.0, n) - 1.0)
    if st.task_dist == "beta":
        a, b = st.task_beta
        return rng.beta(a, b, n) - a / (a + b)
    return rng.normal(0.0, st.task_sd, n)


def _expected(
    base: float, a: NDArray[np.float64], b: NDArray[np.float64], shift: NDArray[np.float64]
) -> float:
    return float(np.clip(base + a + b + shift, 0.0, 1.0).mean())


def simulate(setting: Setting, seed: int = 0, truth_draws: int = 200_000) -> Sample:
    """Draw one archive from ``setting`` (seeded) and compute the truth it should be judged by."""
    rng = np.random.default_rng(seed)
    st = setting
    scen = tuple(st.effects)
    U, S, T = st.n_units, len(scen), st.n_policies * st.variants
    eff = np.array([st.effects[s] for s in scen])
    a = rng.normal(0.0, st.unit_sd, U)
    b = _task_effects(rng, st, T)
    g = rng.normal(0.0, st.unit_effect_sd, (U, S))
    h = rng.normal(0.0, st.task_effect_sd, (S, T))
    if st.policy_effect:  # its own stream, so the draws above and below stay as they were
        signs = np.random.default_rng([seed, 104_729]).choice([-1.0, 1.0], (S, st.n_policies))
        h = h + st.policy_effect * np.repeat(signs, st.variants, axis=1)
    base_p = np.clip(st.base_rate + a[:, None, None] + b[None, None, :], 0, 1)
    base_p = np.broadcast_to(base_p, (U, S, T))
    treat_p = np.clip(
        st.base_rate
        + a[:, None, None]
        + b[None, None, :]
        + eff[None, :, None]
        + g[..., None]
        + h[None, :, :],
        0,
        1,
    )
    R = max(st.replicates, 1)
    base_r = rng.random((U, S, T, R)) < base_p[..., None]
    treat_r = rng.random((U, S, T, R)) < treat_p[..., None]
    if st.zero_effect == "exact":
        zero = eff == 0
        treat_r[:, zero] = base_r[:, zero]
    baseline = base_r[..., 0] if R == 1 else base_r.mean(axis=3)
    treatment = treat_r[..., 0] if R == 1 else treat_r.mean(axis=3)
    # truth by seeded integration over fresh unit and task draws (independent of the sample)
    trng = np.random.default_rng([seed, 7919])
    ta = trng.normal(0.0, st.unit_sd, truth_draws)
    tb = _task_effects(trng, st, truth_draws)
    tg = trng.normal(0.0, st.unit_effect_sd, truth_draws)
    th = trng.normal(0.0, st.task_effect_sd, truth_draws)
    if st.policy_effect:  # a fresh policy's effect: ±policy_effect with fair signs
        th = th + st.policy_effect * np.random.default_rng([seed, 7919, 1]).choice(
            [-1.0, 1.0], truth_draws
        )
    zero_shift = np.zeros(truth_draws)
    rate = _expected(st.base_rate, ta, tb, zero_shift)
    true_effect = np.empty(S)
    true_rate = np.full(S, rate)
    true_units = np.empty(S)
    rate_units = np.empty(S)
    n_t = min(truth_draws, max(truth_draws // max(U, 1), 20_000))
    ub, uh = tb[:n_t], th[:n_t]
    for si in range(S):
        exact_zero = st.zero_effect == "exact" and eff[si] == 0
        true_effect[si] = (
            0.0 if exact_zero else _expected(st.base_rate, ta, tb, eff[si] + tg + th) - rate
        )
        per_unit_eff, per_unit_rate = [], []
        for u in range(U):
            r_u = _expected(st.base_rate + a[u], np.zeros(1), ub, np.zeros(n_t))
            t_u = _expected(st.base_rate + a[u], np.zeros(1), ub, eff[si] + g[u, si] + uh)
            per_unit_rate.append(r_u)
            per_unit_eff.append(0.0 if exact_zero else t_u - r_u)
        true_units[si] = float(np.mean(per_unit_eff))
        rate_units[si] = float(np.mean(per_unit_rate))
    return Sample(
        st,
        seed,
        scen,
        baseline,
        treatment,
        true_effect,
        true_units,
        true_rate,
        rate_units,
        base_r,
        treat_r,
    )


def synthetic_frame(
    n_units: int = 9,
    n_policies: int = 80,
    variants: int = 3,
    effects: Mapping[str, float] | None = None,
    base_rate: float = 0.3,
    unit_sd: float = 0.03,
    seed: int = 0,
    task_sd: float = 0.0,
    task_effect_sd: float = 0.0,
    unit_rate_sd: float = 0.0,
    zero_effect: Literal["noisy", "exact"] = "exact",
) -> pd.DataFrame:
    """A records DataFrame: ``n_units`` units x scenarios x policies x variants x 2 arms.

    ``effects`` maps scenario -> population treatment − baseline effect (default: schema_drift
    0.5, clean 0.0); ``unit_sd`` is the between-unit sd of the effect. Zero effects copy the
    baseline by default (deterministic agents); pass ``zero_effect="noisy"`` for noisy zeros.
    See :func:`simulate` for the full model and its truth.
    """
    setting = Setting(
        n_units=n_units,
        n_policies=n_policies,
        variants=variants,
        effects=dict(effects or {"clean": 0.0, "schema_drift": 0.5}),
        base_rate=base_rate,
        unit_sd=unit_rate_sd,
        unit_effect_sd=unit_sd,
        task_sd=task_sd,
        task_effect_sd=task_effect_sd,
        zero_effect=zero_effect,
    )
    return simulate(setting, seed, truth_draws=1_000).frame()

"""The coverage suite's settings and sizes (:mod:`layerlab.analysis.coverage` runs them): the
synthetic designs with known truth, the verdict each truth calls for, and how many simulations
each gets."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from layerlab.analysis import synthetic
from layerlab.analysis.units import MIN_UNITS

ONE_UNIT_TASKS = (16, 40, 80)  # the shapes users run: one unit, few tasks
BOUNDARY_TASKS = (40, 80)  # an off-target effect of exactly ±δ: specific's own null
CLUSTERED_POLICIES = (27, 80)  # 3 question variants per policy: 81 and 240 tasks
SAMPLED_TASKS = (80, 240)  # a sampled system, 3 epochs per task


def _null(setting: synthetic.Setting) -> synthetic.Setting:
    """``setting`` with identical prompts in both arms over the nine DSL scenarios: no effect,
    no effect heterogeneity, independent draws (truth exactly zero everywhere)."""
    from layerlab.faults.scenario import load_scenarios

    return replace(
        setting,
        effects=dict.fromkeys(load_scenarios(), 0.0),
        unit_effect_sd=0.0,
        task_effect_sd=0.0,
        zero_effect="noisy",
    )


@functools.cache
def all_settings() -> tuple[synthetic.Setting, ...]:
    """The coverage settings, in table order (built on first use: the null settings span the
    DSL's scenarios)."""
    base = synthetic.Setting()
    # the real archives' design: 2 small models x one question variant of 80 policies, most tasks
    # near the floor and a few much easier (skewed difficulty)
    small = replace(
        base,
        n_units=2,
        n_policies=80,
        variants=1,
        task_dist="skewed",
        base_rate=0.15,
        task_sd=0.3,
    )
    return (
        replace(base, name="9 units, moderate heterogeneity"),
        replace(base, name="9 units, shared task effect", task_sd=0.15, task_effect_sd=0.25),
        replace(base, name="9 units, strong heterogeneity", unit_sd=0.1, unit_effect_sd=0.15),
        replace(
            base,
            name="9 units, no heterogeneity",
            unit_sd=0.0,
            unit_effect_sd=0.0,
            task_sd=0.0,
            task_effect_sd=0.0,
        ),
        replace(base, name="2 units", n_units=2),
        replace(base, name="3 units", n_units=3),
        replace(base, name="27 units", n_units=27),
        replace(small, name="2 units x 80 tasks, skewed difficulty"),
        replace(_null(small), name="identical prompts, 2 units x 80 tasks x 9 scenarios"),
        replace(
            _null(replace(base, n_policies=80, variants=1)),
            name="identical prompts, 9 units x 80 tasks x 9 scenarios",
        ),
        *one_unit_settings(),
        *team_settings(),
    )


def _one_unit() -> tuple[synthetic.Setting, str, str, Callable[..., dict[str, float]]]:
    """What the one-unit settings share: one unit answering each task once (Beta(2,2) task
    probabilities around 0.5, no effect heterogeneity), its target scenario, the first
    off-target scenario, and ``effects(**{scenario: effect})`` over the nine DSL scenarios (0
    where not named)."""
    from layerlab.faults.scenario import load_scenarios

    scen = list(load_scenarios())
    one = synthetic.Setting(
        n_units=1,
        variants=1,
        unit_sd=0.0,
        unit_effect_sd=0.0,
        task_effect_sd=0.0,
        task_dist="beta",
        base_rate=0.5,
    )
    off = next(x for x in scen if x != one.target)

    def effects(**kw: float) -> dict[str, float]:
        return {x: kw.get(x, 0.0) for x in scen}

    return one, one.target, off, effects


def one_unit_settings() -> tuple[synthetic.Setting, ...]:
    """One unit x 16, 40 and 80 tasks over the nine DSL scenarios (the shape of every committed
    real-model, agent and user-pipeline block): a Beta(2,2) mid-range null, a near-ceiling target
    (each task flips with probability 0.95), a rare-success target (0.15), replicates with ICC 0.2
    (three records per arm and task, Beta(2,2) task probabilities, +20 pp target), +20 pp on the
    target alone (the power) and a real +25 pp off-target gain beside a +40 pp target."""
    one, target, off, effects = _one_unit()

    floor = replace(one, task_dist="normal", task_sd=0.0, base_rate=0.0)
    kinds = (
        ("Beta(2,2) null", _null(one)),
        ("near-ceiling target", replace(floor, effects=effects(**{target: 0.95}))),
        ("rare-success target", replace(floor, effects=effects(**{target: 0.15}))),
        (
            "replicates ICC 0.2, +20 pp target",
            replace(one, replicates=3, effects=effects(**{target: 0.2})),
        ),
        ("+20 pp target", replace(one, effects=effects(**{target: 0.2}))),
        (
            f"+25 pp off-target gain ({off})",
            replace(one, effects=effects(**{target: 0.4, off: 0.25})),
        ),
    )
    return tuple(
        replace(st, name=f"1 unit x {n} tasks, {kind}", n_policies=n)
        for n in ONE_UNIT_TASKS
        for kind, st in kinds
    )


def team_settings() -> tuple[synthetic.Setting, ...]:
    """The designs a team's verdict rests on, one unit each: an off-target effect of exactly +δ
    (0 -> δ of tasks) or -δ (δ -> 0) beside a +50 pp target at 40 and 80 tasks (where "specific"
    is false by the least: its error rate); the policy-clustered null (3 question variants per
    policy sharing an effect of ±15 pp, mean 0) at 27 and 80 policies, judged by policy as the
    library does (and by task beside it, not reported); a sampled system (3 epochs per task,
    per-task rates Beta(0.3, 0.3), every arm re-drawn) at 80 and 240 tasks, null and with a
    +40 pp target; and a +15 pp off-target gain beside a +40 pp target at 40 and 80 tasks."""
    from layerlab.analysis import specificity as sp

    one, target, off, effects = _one_unit()

    d = sp.DELTA
    flat = replace(one, task_dist="normal", task_sd=0.0)
    out = []
    for n in BOUNDARY_TASKS:
        for sign, base, name in ((1, 0.0, f"0 -> {d:.0%}"), (-1, d, f"{d:.0%} -> 0")):
            out.append(
                replace(
                    flat,
                    name=f"1 unit x {n} tasks, off-target {sign * 100 * d:+.0f} pp "
                    f"({name} of tasks), +50 pp target",
                    n_policies=n,
                    base_rate=base,
                    effects=effects(**{target: 0.5, off: sign * d}),
                )
            )
    for g in CLUSTERED_POLICIES:
        out.append(
            replace(
                _null(one),
                name=f"1 unit x {3 * g} tasks ({g} policies x 3 variants), ±15 pp per policy, null",
                n_policies=g,
                variants=3,
                policy_effect=0.15,
            )
        )
    sampled = replace(one, task_beta=(0.3, 0.3), replicates=3)
    for n in SAMPLED_TASKS:
        out.append(replace(_null(sampled), name=f"1 unit x {n} tasks x 3 epochs, sampled, null",
                           n_policies=n))  # fmt: skip
        out.append(
            replace(
                sampled,
                name=f"1 unit x {n} tasks x 3 epochs, sampled, +40 pp target",
                n_policies=n,
                effects=effects(**{target: 0.4}),
            )
        )
    for n in BOUNDARY_TASKS:
        out.append(
            replace(
                one,
                name=f"1 unit x {n} tasks, +15 pp off-target gain ({off})",
                n_policies=n,
                effects=effects(**{target: 0.4, off: 0.15}),
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class Size:
    """How big a coverage run is. Settings with fewer than ``MIN_UNITS`` units are cheap
    and their tasks-only intervals sit closest to the requirement, so they get ``small_sims``
    simulations (a smaller Monte Carlo error) when it is set; null settings (no effect anywhere,
    where the verdict's false-flag rate is measured) get ``null_sims`` when it is set, and the
    one-unit settings with an effect ``one_unit_sims``; settings with an off-target effect of
    exactly ±δ (:func:`on_boundary`) count as null settings."""

    sims: int
    n_boot: int
    seed: int = 0
    small_sims: int | None = None
    null_sims: int | None = None
    one_unit_sims: int | None = None  # one-unit settings with an effect (cheap, many of them)

    def sims_for(self, setting: synthetic.Setting) -> int:
        if self.null_sims is not None and (is_null(setting) or on_boundary(setting)):
            return self.null_sims
        if self.one_unit_sims is not None and setting.n_units == 1:
            return self.one_unit_sims
        if self.small_sims is not None and setting.n_units < MIN_UNITS:
            return self.small_sims
        return self.sims


# null settings: 10,000 archives, so that a false-flag rate near the 5% goal is measured to about
# ± 0.2 pp (at 2,000 the Monte Carlo error, ± 0.5, is as large as the distance to the goal)
FULL = Size(sims=500, n_boot=1000, small_sims=2000, null_sims=10_000, one_unit_sims=500)
REDUCED = Size(sims=24, n_boot=300, null_sims=200)


def is_null(setting: synthetic.Setting) -> bool:
    """Whether ``setting`` has no effect in any scenario (the verdict's truth is ineffective)."""
    return all(v == 0 for v in setting.effects.values())


def on_boundary(setting: synthetic.Setting) -> bool:
    """Whether an off-target effect of ``setting`` is exactly ±δ (where "specific" is false by
    the least, so its error rate is measured there; they get as many archives as null settings)."""
    from layerlab.analysis import specificity as sp

    return any(
        abs(abs(v) - sp.DELTA) < 1e-12 for k, v in setting.effects.items() if k != setting.target
    )


def expected_verdict(setting: synthetic.Setting) -> str:
    """The verdict the truth of ``setting`` calls for: over-broad in the direction of an
    off-target effect, specific with a target gain of at least δ and none off target,
    ineffective with none anywhere."""
    from layerlab.analysis import specificity as sp

    off = [v for k, v in setting.effects.items() if k != setting.target]
    dirs = [
        d
        for d, hit in ((sp.HARM, any(v < 0 for v in off)), (sp.GAIN, any(v > 0 for v in off)))
        if hit
    ]
    if dirs:
        return f"{sp.OVER_BROAD} ({', '.join(dirs)})"
    return sp.SPECIFIC if setting.effects[setting.target] >= sp.DELTA else sp.INEFFECTIVE

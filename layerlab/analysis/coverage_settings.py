"""The coverage suite's settings and sizes (:mod:`layerlab.analysis.coverage` runs them): the
synthetic designs with known truth, the verdict each truth calls for, and how many simulations
each gets."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from layerlab.analysis import synthetic
from layerlab.analysis.units import MIN_UNITS

ONE_UNIT_TASKS = (16, 40, 80)  # the shapes users run: one unit, few tasks


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
    )


def one_unit_settings() -> tuple[synthetic.Setting, ...]:
    """One unit x 16, 40 and 80 tasks over the nine DSL scenarios (the shape of every committed
    real-model, agent and user-pipeline block): a Beta(2,2) mid-range null, a near-ceiling target
    (each task flips with probability 0.95), a rare-success target (0.15), replicates with ICC 0.2
    (three records per arm and task, Beta(2,2) task probabilities, +20 pp target), +20 pp on the
    target alone (the power) and a real +25 pp off-target gain beside a +40 pp target."""
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
    target = one.target
    off = next(x for x in scen if x != target)

    def effects(**kw: float) -> dict[str, float]:
        return {x: kw.get(x, 0.0) for x in scen}

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


@dataclass(frozen=True)
class Size:
    """How big a coverage run is. Settings with fewer than ``MIN_UNITS`` units are cheap
    and their tasks-only intervals sit closest to the requirement, so they get ``small_sims``
    simulations (a smaller Monte Carlo error) when it is set; null settings (no effect anywhere,
    where the verdict's false-flag rate is measured) get ``null_sims`` when it is set, and the
    one-unit settings with an effect ``one_unit_sims``."""

    sims: int
    n_boot: int
    seed: int = 0
    small_sims: int | None = None
    null_sims: int | None = None
    one_unit_sims: int | None = None  # one-unit settings with an effect (cheap, many of them)

    def sims_for(self, setting: synthetic.Setting) -> int:
        if self.null_sims is not None and is_null(setting):
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

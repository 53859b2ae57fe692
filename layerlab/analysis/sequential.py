"""Runs that stop when they have decided (``run live --until-decided``): the look schedule, the
share of the error rate each look spends and the stopping rule, as pure functions (no I/O; the
harness's :mod:`layerlab.harness.live.looks` runs the looks and records them).

A run of at most ``max_tasks`` tasks looks at its records after ``batch``, ``2 × batch``, ...
tasks and last at ``max_tasks`` (:meth:`Plan.sizes`); each look's tasks hold the one before's
(a nested stratified order). Look ``j`` judges every verdict asked for at the level

    α_j = A(t_j) − A(t_{j−1}),   A(t) = α · ln(1 + (e − 1) · t),   t_j = n_j / max_tasks,

the Pocock-type spending function of Lan and DeMets (information measured by tasks): the looks
share α nearly evenly (at the default looks 0.0147, 0.0114, 0.0093, 0.0079, 0.0068). Not the
O'Brien–Fleming type, which spends almost nothing early: "specific" rests on equivalence tests
whose task floor grows with z² (n > z²(1 − δ)/δ), so at O'Brien–Fleming's first-look level of
1.2e-5 an unchanged cell needs 160 tasks, and the README's guard, specific at 48 tasks here,
waited until 72. A verdict is a claim (specific, over-broad, ineffective) judged at its look's level, so it
is false with probability at most α_j; by the union bound over looks, the probability that any
look's verdict is false is at most Σ α_j = A(1) = α (per verdict asked). A verdict that became
conclusive stays decided; the run stops at the first look where every verdict asked is
conclusive, or when ``max_tasks`` tasks are spent (then what is still inconclusive is said so).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from layerlab.analysis.specificity import DELTA, INCONCLUSIVE, INEFFECTIVE, judge

ALPHA = 0.05  # the error rate held across every look of a run (per verdict asked)
BATCH = 24  # tasks per look: the first look's and each look's increment (3 per domain)
MAX_TASKS = 120  # the default budget of tasks: five looks at 24, 48, 72, 96, 120
SPENDING = "Pocock-type spending"  # how every line that states the error rate names it


def spent(t: float, alpha: float = ALPHA) -> float:
    """``A(t) = α ln(1 + (e − 1) t)``: the error rate spent by information fraction ``t``
    (0 at ``t = 0``, ``alpha`` at ``t = 1``; increasing)."""
    if t <= 0:
        return 0.0
    return alpha if t >= 1 else alpha * math.log(1 + (math.e - 1) * t)


def look_sizes(max_tasks: int, batch: int = BATCH) -> tuple[int, ...]:
    """Tasks at each look: ``batch``, ``2 × batch``, ... below ``max_tasks``, then ``max_tasks``."""
    if batch < 1 or max_tasks < 1:
        raise ValueError(f"--batch {batch}, --max-tasks {max_tasks}: expected whole numbers >= 1")
    return (*range(batch, max_tasks, batch), max_tasks)


def levels(sizes: Sequence[int], alpha: float = ALPHA) -> tuple[float, ...]:
    """Each look's level ``α_j = A(t_j) − A(t_{j−1})`` with ``t_j = n_j / n_last``; they sum to
    ``alpha`` (the last look spends what is left, so the sum is exact)."""
    total = sizes[-1]
    cum = [spent(n / total, alpha) for n in sizes]
    out = [b - a for a, b in zip([0.0, *cum[:-1]], cum, strict=True)]
    out[-1] = alpha - sum(out[:-1])
    return tuple(out)


@dataclass(frozen=True)
class Plan:
    """An until-decided run's plan: at most ``max_tasks`` tasks in looks of ``batch`` more each,
    error rate ``alpha`` across the looks, verdicts at the equivalence margin ``delta``."""

    max_tasks: int = MAX_TASKS
    batch: int = BATCH
    alpha: float = ALPHA
    delta: float = DELTA

    def __post_init__(self) -> None:
        look_sizes(self.max_tasks, self.batch)  # refuses a size below 1
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha {self.alpha}: expected a share between 0 and 1")
        if not 0 <= self.delta <= 1:
            raise ValueError(f"--delta {self.delta}: expected a share between 0 and 1")

    @property
    def sizes(self) -> tuple[int, ...]:
        return look_sizes(self.max_tasks, self.batch)

    @property
    def levels(self) -> tuple[float, ...]:
        return levels(self.sizes, self.alpha)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_tasks": self.max_tasks, "batch": self.batch, "alpha": self.alpha,
            "delta": self.delta, "spending": SPENDING, "sizes": list(self.sizes),
            "levels": list(self.levels),
        }  # fmt: skip


@dataclass(frozen=True)
class Look:
    """One look: its number (from 1), tasks and records, the level it judged at and per verdict
    asked its verdict and the reason (empty when specific)."""

    look: int
    tasks: int
    records: int
    alpha: float
    verdicts: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"look": self.look, "tasks": self.tasks, "records": self.records,
                "alpha": self.alpha, "verdicts": {k: dict(v) for k, v in self.verdicts.items()}}  # fmt: skip

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Look:
        return Look(int(d["look"]), int(d["tasks"]), int(d["records"]), float(d["alpha"]),
                    {k: dict(v) for k, v in dict(d.get("verdicts") or {}).items()})  # fmt: skip


def conclusive(verdict: str) -> bool:
    """Whether a verdict decides (anything but inconclusive)."""
    return verdict != INCONCLUSIVE


def decisions(looks: Sequence[Look]) -> dict[str, tuple[str, Look]]:
    """Per verdict asked, the first look at which it was conclusive and that verdict: a verdict
    once decided stays decided."""
    out: dict[str, tuple[str, Look]] = {}
    for lk in looks:
        for name, v in lk.verdicts.items():
            if name not in out and conclusive(v["verdict"]):
                out[name] = (v["verdict"], lk)
    return out


def stopped(plan: Plan, looks: Sequence[Look]) -> bool:
    """Whether the run is over: every verdict asked decided, or the last look made."""
    if not looks:
        return False
    asked = set(looks[-1].verdicts)
    return asked <= set(decisions(looks)) or len(looks) >= len(plan.sizes)


def next_look(plan: Plan, looks: Sequence[Look]) -> int | None:
    """The index (from 0) of the look to make next, None when the run is over."""
    return None if stopped(plan, looks) else len(looks)


def summary(plan: Plan, looks: Sequence[Look]) -> list[str]:
    """One line per verdict asked: decided at which look, after how many tasks and records, at
    what error rate across looks; or, with the budget spent, still inconclusive and why."""
    if not looks:
        return []
    done = decisions(looks)
    last = looks[-1]
    rate = f"error rate ≤ {100 * plan.alpha:g}% across looks ({SPENDING})"
    lines = []
    for name, now in last.verdicts.items():
        if name in done:
            verdict, lk = done[name]
            n = f"{lk.look} look{'s' if lk.look > 1 else ''}"
            line = f"{name}: {verdict} after {n}, {lk.tasks} tasks ({lk.records} records); {rate}"
            if lk is not last and now["verdict"] != verdict:
                line += (f" (at the last look, {last.tasks} tasks, it reads {now['verdict']}: "
                         "compare and gate judge the last look)")  # fmt: skip
        else:
            why = f" ({now['reason']})" if now.get("reason") else ""
            line = f"budget of {plan.max_tasks} tasks spent: {name} still inconclusive{why}"
        lines.append(line)
    return lines


def judged_level(manifest: Mapping[str, Any] | None) -> tuple[float, str]:
    """The level a run's verdicts are judged at, from its manifest, and the sentence that says
    so: :data:`ALPHA` (and ``""``) for a run of fixed size; for an until-decided run the level of
    the look the folder holds (the last, once it has stopped), so that ``compare --matrix`` and
    ``gate`` on the finished run give the verdicts it stopped on."""
    ud = (manifest or {}).get("until_decided") or {}
    sizes, levels_ = ud.get("sizes") or [], ud.get("levels") or []
    if ud.get("tasks") not in sizes or len(levels_) != len(sizes):
        return ALPHA, ""
    j = sizes.index(ud["tasks"])
    level = float(levels_[j])
    total = 100 * float(ud.get("alpha", ALPHA))
    return level, (
        f"verdicts at α = {level:.3g}, the level of look {j + 1} ({ud['tasks']} tasks) of this "
        f"until-decided run: its error rate is ≤ {total:g}% across its looks ({SPENDING})"
    )


# --- the stopping rule on synthetic archives with known truth (tests, the coverage notes) -------


@functools.cache
def _beta_null() -> Any:
    """The coverage suite's one-unit Beta(2,2) null (read once: it loads the scenario DSL)."""
    from layerlab.analysis.coverage_settings import one_unit_settings

    return one_unit_settings()[0]


@dataclass(frozen=True)
class Simulated:
    """One simulated until-decided run: its looks and whether any look's verdict was false
    (a claim the truth does not support: specific or over-broad where nothing has an effect)."""

    looks: tuple[Look, ...]
    false_claim: bool


def simulate_null(
    plan: Plan, seed: int, n_boot: int = 200, base: Any = None, name: str = "guard"
) -> Simulated:
    """The stopping rule on one synthetic target run where the mitigation changes nothing
    anywhere (``base``, a null :class:`~layerlab.analysis.synthetic.Setting`, default the coverage
    suite's one-unit Beta(2,2) null over the nine DSL scenarios, at ``plan.max_tasks`` tasks):
    every look is judged by :func:`~layerlab.analysis.specificity.judge` at its level on the
    first ``n_j`` tasks, as a real run is. Truth: ineffective, so any specific or over-broad
    verdict at any look is false."""
    from dataclasses import replace

    from layerlab.analysis import synthetic
    from layerlab.analysis.coverage_settings import is_null
    from layerlab.analysis.effects import effects_from_paired

    st = base if base is not None else _beta_null()
    if not is_null(st):
        raise ValueError(f"setting {st.name!r}: expected a null setting (no effect anywhere)")
    st = replace(st, n_policies=plan.max_tasks, variants=1)
    full = synthetic.simulate(st, seed, truth_draws=1_000).paired()
    off = [s for s in full.scenarios if s != st.target]
    looks: list[Look] = []
    false = False
    for j, (n, a) in enumerate(zip(plan.sizes, plan.levels, strict=True)):
        p = replace(full, tasks=full.tasks[:n], diff=full.diff[:, :, :n],
                    valid=full.valid[:, :, :n], policy=full.policy[:n])  # fmt: skip
        eff = effects_from_paired(p, n_boot, seed=seed + 1, alpha=a)
        v = judge(eff, [st.target], off, alpha=a, delta=plan.delta)
        false |= v.verdict not in (INEFFECTIVE, INCONCLUSIVE)
        looks.append(Look(j + 1, n, 2 * n * len(full.scenarios), a,
                          {name: {"verdict": v.verdict, "reason": v.reason}}))  # fmt: skip
        if stopped(plan, looks):
            break
    return Simulated(tuple(looks), false)

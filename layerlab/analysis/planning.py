"""What a design can decide: the probability of each verdict at a number of tasks and epochs, by
simulation from a pilot run's own per-task rates through the very rule the tables use
(:func:`layerlab.analysis.specificity.judge`), and the smallest design that decides.

A simulated archive draws tasks with replacement from the pilot's (whole policies, when the
pilot's question variants share policies, so the clustering the statistics see is kept); each
drawn task keeps its per-arm success rates, and each of ``epochs`` records per arm is a Bernoulli
draw at that rate, arms independent given the task. A pilot of one epoch has rates of 0 or 1, so
the simulation repeats its outcomes exactly: right for a deterministic system, an understatement
of the noise of a sampled one (run the pilot with ``--epochs 2`` or more). The off-target cells
are simulated unchanged (the treatment at the baseline's per-task rates): the probability of
"specific" is the design's power for the verdict a team asks for, the target's gain taken from
the pilot; a planning figure for the next run, not a test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.analysis.bootstrap import PAIR_KEYS, Paired, arm_records
from layerlab.analysis.units import ARM

SIMS = 200  # simulated archives per design (Monte Carlo s.e. of a probability <= 3.5 pp)
N_BOOT = 200  # bootstrap draws per simulated archive (only cells of replicate means read them)
N_FLIP = 1000  # sign flips per simulated archive (their noise averages out over the archives)
SIZES = (16, 25, 40, 60, 80, 120, 160, 240)
TARGET_PROBABILITY = 0.8  # a design "decides" when the verdict asked for comes this often


@dataclass(frozen=True)
class Pilot:
    """Per (unit, scenario, task) the success rate of each arm over its epochs, and the task's
    policy: what a simulation draws from."""

    units: tuple[str, ...]
    scenarios: tuple[str, ...]
    tasks: tuple[str, ...]
    policy: NDArray[np.int64]
    treated: NDArray[np.float64]  # (U, S, T) rate of the treatment arm
    base: NDArray[np.float64]  # (U, S, T) rate of the baseline arm
    valid: NDArray[np.bool_]
    epochs: int  # the most records per arm and cell
    treatment: str
    baseline: str
    outcome: str

    @property
    def deterministic(self) -> bool:
        """Every rate is 0 or 1: further epochs would repeat the outcomes."""
        r = np.concatenate([self.treated[self.valid], self.base[self.valid]])
        return bool(np.all((r < 1e-12) | (r > 1 - 1e-12)))


def pilot(
    df: pd.DataFrame, treatment: str, baseline: str, outcome: str, arm: str = ARM
) -> Pilot:
    """The per-task rates of ``treatment`` and ``baseline`` in a run's records."""
    frame = arm_records(df, treatment, baseline, outcome, arm)
    keys = list(PAIR_KEYS)
    agg = frame.groupby([*keys, "arm"], sort=False)["y"].agg(["mean", "size"])
    rate, size = agg["mean"].unstack("arm"), agg["size"].unstack("arm")
    if treatment not in rate or baseline not in rate:
        raise ValueError(f"the run holds no {treatment!r}/{baseline!r} pairs to plan from")
    keep = rate[[treatment, baseline]].notna().all(axis=1)
    rate, size = rate[keep].reset_index(), size[keep]
    if rate.empty:
        raise ValueError(f"the run holds no {treatment!r}/{baseline!r} pairs to plan from")
    units = tuple(sorted(rate["unit"].unique()))
    scen = tuple(dict.fromkeys(rate["scenario"]))
    tasks = tuple(sorted(rate["task_id"].unique()))
    pol = rate.drop_duplicates("task_id").set_index("task_id")["policy_id"]
    pols = {p: i for i, p in enumerate(sorted(set(pol)))}
    policy = np.array([pols[pol[t]] for t in tasks], dtype=np.int64)
    shape = (len(units), len(scen), len(tasks))
    treated, base, valid = np.zeros(shape), np.zeros(shape), np.zeros(shape, bool)
    ui = rate["unit"].map({u: i for i, u in enumerate(units)}).to_numpy()
    si = rate["scenario"].map({s: i for i, s in enumerate(scen)}).to_numpy()
    ti = rate["task_id"].map({t: i for i, t in enumerate(tasks)}).to_numpy()
    treated[ui, si, ti] = rate[treatment].to_numpy()
    base[ui, si, ti] = rate[baseline].to_numpy()
    valid[ui, si, ti] = True
    epochs = int(size[[treatment, baseline]].max().max())
    return Pilot(
        units, scen, tasks, policy, treated, base, valid, epochs, treatment, baseline, outcome
    )


def _draw_tasks(p: Pilot, n_tasks: int, rng: np.random.Generator) -> tuple[NDArray, NDArray]:
    """Task indices of one simulated archive and their (new) policy ids: whole policies drawn
    with replacement when the pilot's policies hold several tasks, single tasks otherwise."""
    members = [np.nonzero(p.policy == k)[0] for k in range(int(p.policy.max()) + 1)]
    if max(len(m) for m in members) <= 1:
        idx = rng.integers(0, len(p.tasks), size=n_tasks)
        return idx, np.arange(n_tasks, dtype=np.int64)
    out: list[NDArray[np.int64]] = []
    pol: list[NDArray[np.int64]] = []
    total = 0
    while total < n_tasks:
        m = members[int(rng.integers(0, len(members)))][: n_tasks - total]
        out.append(m)
        pol.append(np.full(len(m), len(pol), dtype=np.int64))
        total += len(m)
    return np.concatenate(out), np.concatenate(pol)


def simulate(
    p: Pilot,
    n_tasks: int,
    epochs: int,
    rng: np.random.Generator,
    unchanged: Sequence[str] = (),
) -> Paired:
    """One simulated archive of ``n_tasks`` tasks and ``epochs`` records per arm and cell,
    as the paired layout the statistics read; in the ``unchanged`` scenarios the treatment arm
    draws at the baseline's per-task rates (the guard changes nothing there)."""
    idx, policy = _draw_tasks(p, n_tasks, rng)
    keep = np.array([s in set(unchanged) for s in p.scenarios])[None, :, None]
    t = np.where(keep, p.base, p.treated)[:, :, idx]
    b, v = p.base[:, :, idx], p.valid[:, :, idx]
    diff = (rng.binomial(epochs, t) - rng.binomial(epochs, b)) / epochs
    names = tuple(f"sim-{i:04d}" for i in range(n_tasks))
    return Paired(
        p.units, p.scenarios, names, np.where(v, diff, 0.0), v, policy, p.treatment,
        p.baseline, p.outcome,
    )  # fmt: skip


def verdict_probability(
    p: Pilot,
    target: Sequence[str],
    off_target: Sequence[str],
    n_tasks: int,
    epochs: int = 1,
    sims: int = SIMS,
    seed: int = 0,
    alpha: float = 0.05,
    delta: float | Mapping[str, float] | None = None,
) -> dict[str, float]:
    """The share of ``sims`` simulated archives of ``n_tasks`` tasks x ``epochs`` given each
    verdict word (specific, over-broad, ineffective, inconclusive) by
    :func:`~layerlab.analysis.specificity.judge`, in the world the verdict "specific" describes:
    the target cells at the pilot's per-task rates, the off-target cells unchanged (both arms at
    the baseline's per-task rates, drawn independently per epoch). It is the design's power for
    the verdict asked, not a forecast of this guard's verdict: a guard the pilot shows over-broad
    stays over-broad at any size."""
    from layerlab.analysis import specificity
    from layerlab.analysis.effects import effects_from_paired

    d = specificity.cell_margins([*target, *off_target], delta)
    key = (_fingerprint(p), tuple(target), tuple(off_target), n_tasks, epochs, sims, seed, alpha,
           tuple(sorted(d.items())))  # fmt: skip
    if key in _MEMO:
        return dict(_MEMO[key])
    off = list(off_target)
    if p.deterministic and epochs == 1 and off:
        # every simulated off-target cell is the same cell with no change (both arms at the
        # baseline's 0/1 rates): it is never flagged and its equivalence test depends on the
        # tasks alone, so the one with the tightest margin decides for all of them
        off = [min(off, key=lambda s: d[s])]
    rng = np.random.default_rng([seed, n_tasks, epochs, 7_919])
    words = [specificity.SPECIFIC, specificity.OVER_BROAD, specificity.INEFFECTIVE,
             specificity.INCONCLUSIVE]  # fmt: skip
    counts = dict.fromkeys(words, 0)
    # binary cells (a deterministic pilot, one epoch) read score intervals, not the bootstrap
    n_boot = N_BOOT if epochs > 1 or not p.deterministic else 20
    cells = [p.scenarios.index(s) for s in [*target, *off]]
    sub = dataclasses.replace(
        p, scenarios=tuple(p.scenarios[i] for i in cells), treated=p.treated[:, cells],
        base=p.base[:, cells], valid=p.valid[:, cells],
    )  # fmt: skip
    for i in range(sims):
        sim = simulate(sub, n_tasks, epochs, rng, unchanged=off)
        eff = effects_from_paired(sim, n_boot=n_boot, seed=i, alpha=alpha)
        v = specificity.judge(eff, target, off, alpha, d, N_FLIP).verdict
        counts[specificity.OVER_BROAD if specificity.is_over_broad(v) else v] += 1
    _MEMO[key] = {w: c / sims for w, c in counts.items()}
    return dict(_MEMO[key])


_MEMO: dict[tuple[Any, ...], dict[str, float]] = {}  # one process asks the same design often


def _fingerprint(p: Pilot) -> str:
    """A digest of what a simulation draws from."""
    import hashlib

    h = hashlib.sha256()
    for a in (p.treated, p.base, p.valid, p.policy):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((p.scenarios, p.tasks, p.epochs)).encode())
    return h.hexdigest()


def plan(
    p: Pilot,
    target: Sequence[str],
    off_target: Sequence[str],
    sizes: Sequence[int] = SIZES,
    epochs: Sequence[int] = (1,),
    asked: str = "specific",
    sims: int = SIMS,
    seed: int = 0,
    alpha: float = 0.05,
    delta: float | Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """The probability of each verdict per design (tasks x epochs), smallest first; ``decides``
    marks designs whose probability of the verdict ``asked`` (``specific``, or ``conclusive``:
    anything but inconclusive) reaches :data:`TARGET_PROBABILITY`. Epochs above 1 are left out
    for a deterministic pilot (they would repeat the outcomes)."""
    rows: list[dict[str, Any]] = []
    eps = [1] if p.deterministic else list(epochs)
    for k in sorted(set(eps)):
        for n in sorted(set(sizes)):
            pr = verdict_probability(p, target, off_target, n, k, sims, seed, alpha, delta)
            want = 1 - pr["inconclusive"] if asked == "conclusive" else pr[asked]
            rows.append({"tasks": n, "epochs": k, "records per arm": n * k, **pr,
                         "asked": want, "decides": want >= TARGET_PROBABILITY})  # fmt: skip
    out = pd.DataFrame(rows).sort_values(["records per arm", "epochs"]).reset_index(drop=True)
    out.attrs["deterministic"] = p.deterministic
    return out


def arm_cells(
    spec: Any, name: str, scenarios: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The target and off-target scenarios of mitigation ``name`` among ``scenarios``, by the
    layers its definition in ``spec`` names (as the specificity matrix reads them)."""
    from layerlab.analysis.specificity import scenario_layers
    from layerlab.mitigations import targets

    tgt = set(targets(spec.arm(name), scenario_layers())) if name in spec.arms else set()
    return [s for s in scenarios if s in tgt], [s for s in scenarios if s not in tgt]


def plan_records(
    df: pd.DataFrame,
    spec: Any,
    mitigation: str,
    sizes: Sequence[int] = SIZES,
    epochs: Sequence[int] = (1, 3),
    sims: int = SIMS,
    seed: int = 0,
    delta: float | None = None,
    asked: str = "specific",
) -> dict[str, pd.DataFrame]:
    """:func:`plan` for one mitigation of a run's records (the pilot), per block of units,
    against the run's own baseline and arm definitions ``spec``
    (:func:`layerlab.archive.manifest.book_for`)."""
    from layerlab.analysis import specificity
    from layerlab.analysis.units import blocks

    arms = sorted(set(df[ARM]))
    if mitigation not in arms or mitigation == spec.baseline:
        judged = ", ".join(a for a in arms if a != spec.baseline) or "none"
        raise ValueError(
            f"{mitigation!r}: not a mitigation arm of the run (it holds: {judged}; baseline "
            f"{spec.baseline})"
        )
    out = {}
    for block, sub in blocks(df).items():
        p = pilot(sub, mitigation, spec.baseline, specificity.OUTCOME)
        tgt, off = arm_cells(spec, mitigation, p.scenarios)
        margins = specificity.cell_margins([*tgt, *off], delta)
        out[block] = plan(p, tgt, off, sizes, epochs, asked, sims, seed, delta=margins)
    return out


def with_chances(mx: Any, df: pd.DataFrame, sims: int = SIMS) -> Any:
    """``mx`` (a :class:`~layerlab.analysis.specificity.Matrix` of the records ``df``) with the
    probability of each verdict at its size per mitigation (columns ``p specific``, ``p
    over-broad``, ``p ineffective``, ``p inconclusive``, ``epochs``, ``sims``): what a re-run of
    the same tasks x epochs would say if nothing changed off target (:func:`verdict_probability`,
    the matrix's own alpha, margins and seed)."""
    from layerlab.analysis import specificity

    rows = []
    for _, r in mx.summary.iterrows():
        name = str(r["mitigation"])
        cells = mx.cells[mx.cells["mitigation"] == name]
        tgt = [str(s) for s in cells.loc[cells["target"], "scenario"]]
        off = [str(s) for s in cells.loc[~cells["target"], "scenario"]]
        p = pilot(df, name, mx.baseline, specificity.OUTCOME)
        d = specificity.cell_margins([*tgt, *off], mx.margin)
        pr = verdict_probability(p, tgt, off, len(p.tasks), p.epochs, sims, mx.seed, mx.alpha, d)
        rows.append({**{f"p {w}": v for w, v in pr.items()}, "epochs": p.epochs, "sims": sims})
    extra = pd.DataFrame(rows, index=mx.summary.index)
    summary = pd.concat([mx.summary.drop(columns=list(extra.columns), errors="ignore"), extra],
                        axis=1)  # fmt: skip
    return dataclasses.replace(mx, summary=summary)


def advice(table: pd.DataFrame, mitigation: str, asked: str = "specific") -> str:
    """One line: the smallest design that decides, or that none of those tried does."""
    hit = table[table["decides"]]
    what = f"P({asked}) >= {TARGET_PROBABILITY:.1f}"
    note = (
        " (epochs above 1 left out: the pilot's outcomes are 0 or 1 per task, as a deterministic "
        "system's; a sampled system's pilot needs --epochs 2 or more to show its noise)"
        if table.attrs.get("deterministic")
        else ""
    )
    if not hit.empty:
        r = hit.iloc[0]
        return (
            f"{mitigation}: {what} from {int(r['tasks'])} tasks x {int(r['epochs'])} epoch(s) "
            f"(P = {r['asked']:.2f}, {int(r['records per arm'])} records per arm and scenario)"
            + note
        )
    best = table.loc[table["asked"].idxmax()]
    return (
        f"{mitigation}: no design tried reaches {what} (best {best['asked']:.2f} at "
        f"{int(best['tasks'])} tasks x {int(best['epochs'])} epoch(s)); a larger design, or the "
        "pilot's effects are not what the verdict needs (see its reason in compare --matrix)"
        + note
    )

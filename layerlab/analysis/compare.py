"""Comparing runs: a user's run beside other runs and archives — the committed archive of the same
model, the reference agents — and the paper's stated figures.

Runs of different task sets, scenarios or arms cannot be pooled, and the archive tools refuse them
(a record in two runs, mixed task hashes). A comparison therefore never pools: it sets **one
unit of the user's run beside one unit of another source** (a model beside the same model's
committed run, beside another model, beside each reference agent on its own), aligned on the
tasks, scenarios and arms both hold. What alignment dropped is stated — how many records and
tasks of each side, and why (a task, scenario or arm the other side lacks). On the common cells
it gives each side's rate (Clopper–Pearson, clustered by task: :func:`layerlab.analysis.results.rate`) and
the paired difference per scenario and arm with its bootstrap interval (the analysis library's
:func:`~layerlab.analysis.stats.paired_effects`, one unit: tasks resampled, the interval
describing these tasks). Identical runs differ by exactly zero, with [0, 0].

The paper's stated figures (``data/reference/paper_figures.yaml``: nine hosted models, 240 tasks)
are shown beside the user's rates with no difference or interval: they are not the same units or
tasks, and the paper's records are not at hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from layerlab import archive, paths
from layerlab.analysis import stats
from layerlab.analysis.records import records_frame
from layerlab.analysis.results import rate

PAPER_FIGURES = paths.REFERENCE / "paper_figures.yaml"
FOCUS, OTHER = "this run", "other"  # the paired arms of a comparison (column ``source``)
KIND_SAME = "same model"
KIND_MODEL = "other model"
KIND_REFERENCE = "reference agent (deterministic baseline)"


class CompareError(ValueError):
    """A comparison that cannot be made (no common cells, an unreadable source)."""


@dataclass(frozen=True)
class Source:
    """A run folder or archive file as given, its checked records and how complete it is."""

    label: str
    df: pd.DataFrame
    partial: bool

    def units(self) -> list[str]:
        return sorted(set(stats.unit_labels(self.df)))

    def unit(self, u: str) -> pd.DataFrame:
        return self.df[stats.unit_labels(self.df) == u]


@dataclass
class Comparison:
    """One unit of the user's run beside one unit of another source, on their common cells."""

    unit: str
    other_unit: str
    other_source: str
    kind: str
    tasks: int
    scenarios: list[str]
    arms: list[str]
    dropped: list[str]
    table: pd.DataFrame  # scenario, arm, pairs, this run, other, difference [interval]
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "other_unit": self.other_unit,
            "other_source": self.other_source,
            "kind": self.kind,
            "common": {"tasks": self.tasks, "scenarios": self.scenarios, "arms": self.arms},
            "dropped": self.dropped,
            "note": self.note,
            "cells": self.table.to_dict(orient="records"),
        }


@dataclass
class Report:
    """Every comparison of a run, the paper's figures beside it and the sources' state."""

    run: str
    outcome: str
    comparisons: list[Comparison]
    paper: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "outcome": self.outcome,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "paper": None if self.paper is None else self.paper.to_dict(orient="records"),
            "notes": self.notes,
        }


def load(path: Path | str, label: str | None = None) -> Source:
    """A run folder or archive file, checked on its own (so two runs of the same cells can sit
    side by side, which pooling refuses); ``label`` names it in the output (default: the path)."""
    p = Path(path)
    try:
        info = archive.check_path(p)
        df = records_frame(p)
    except archive.ArchiveError as exc:
        raise CompareError(str(exc)) from None
    except ValueError:  # no records
        raise CompareError(f"{p}: holds no records") from None
    return Source(label or str(path), df, bool(info.get("partial")))


def default_sources(run: Source) -> list[Path]:
    """What a run is set beside when nothing else is named: the committed archive of each of
    its local models (``data/archives/local_models/<model>``) and the reference agents."""
    out = []
    for prov, model in run.df[["provider", "model"]].drop_duplicates().itertuples(index=False):
        folder = paths.LOCAL_MODEL_ARCHIVES / str(model)
        if prov == "local" and (folder / archive.ARCHIVE).exists():
            out.append(folder)
    ref = paths.ARCHIVES / "reference_agents"  # not shipped in the wheel
    return [*out, *([ref] if (ref / archive.ARCHIVE).exists() else [])]


def _kind(unit: str, other: str) -> str:
    if stats.is_reference(other.split("/", 1)[0]):
        return KIND_REFERENCE
    return KIND_SAME if unit == other else KIND_MODEL


def _dropped(side: str, df: pd.DataFrame, keep: pd.Series, other: pd.DataFrame) -> list[str]:
    """Sentences: how many records of ``side`` alignment left out, and why."""
    out = []
    gone = df[~keep]
    if gone.empty:
        return out
    for col, what in (("task_id", "task"), ("scenario", "scenario"), (stats.ARM, "arm")):
        missing = sorted(set(df[col]) - set(other[col]))
        if not missing:
            continue
        n = int(df[col].isin(missing).sum())
        names = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        out.append(
            f"{side}: {n} records of {len(missing)} {what}(s) the other side lacks ({names}) dropped"
        )
    return out


def compare_units(
    a: pd.DataFrame,
    b: pd.DataFrame,
    other_source: str,
    outcome: str = stats.OUTCOME,
    n_boot: int = 2_000,
    seed: int = 0,
) -> Comparison:
    """Unit ``a`` (the user's run) beside unit ``b`` on their common tasks, scenarios and arms:
    each side's rate and the paired difference (a − b) per scenario and arm."""
    ua, ub = stats.unit_labels(a).iloc[0], stats.unit_labels(b).iloc[0]
    tasks = set(a["task_id"]) & set(b["task_id"])
    scen = set(a["scenario"]) & set(b["scenario"])
    arms = set(a[stats.ARM]) & set(b[stats.ARM])
    if not (tasks and scen and arms):
        raise CompareError(
            f"{ua} and {ub} ({other_source}) share no cell: "
            f"{len(tasks)} common tasks, {len(scen)} common scenarios, {len(arms)} common arms"
        )

    def keep(df: pd.DataFrame) -> pd.Series:
        return df["task_id"].isin(tasks) & df["scenario"].isin(scen) & df[stats.ARM].isin(arms)

    ka, kb = keep(a), keep(b)
    dropped = _dropped(f"this run ({ua})", a, ka, b) + _dropped(f"{other_source} ({ub})", b, kb, a)
    a, b = a[ka], b[kb]
    pair = pd.concat([a.assign(source=FOCUS), b.assign(source=OTHER)], ignore_index=True)
    pair = pair.assign(provider="compare", model="pair")  # one unit: the two sides are paired
    order = stats.scenario_order(pair)
    arm_list = stats.arm_order(pair)
    rows, notes = [], set()
    for arm in arm_list:
        sub = pair[pair[stats.ARM] == arm]
        eff = stats.paired_effects(
            sub, n_boot=n_boot, seed=seed, outcome=outcome, treatment=FOCUS, baseline=OTHER,
            arm="source", scenarios=order,
        )  # fmt: skip
        notes.add(eff.describe())
        t = eff.table.set_index("scenario")
        for s in order:
            cell = sub[sub["scenario"] == s]
            ra, rb = (
                rate(cell[cell["source"] == FOCUS], outcome),
                rate(cell[cell["source"] == OTHER], outcome),
            )
            e = t.loc[s] if s in t.index else None
            rows.append(
                {
                    "scenario": s,
                    "arm": arm,
                    "tasks": int(cell["task_id"].nunique()),
                    "this_run": ra["rate"],
                    "this_run_ci": [ra["ci_low"], ra["ci_high"]],
                    "other": rb["rate"],
                    "other_ci": [rb["ci_low"], rb["ci_high"]],
                    "difference": None if e is None else round(float(e["estimate"]), 4),
                    "difference_ci": None
                    if e is None
                    else [round(float(e["ci_low"]), 4), round(float(e["ci_high"]), 4)],
                    "pairs": 0 if e is None else int(e["n_pairs"]),
                }
            )
    return Comparison(
        ua,
        ub,
        other_source,
        _kind(ua, ub),
        len(tasks),
        [s for s in order],
        arm_list,
        dropped,
        pd.DataFrame(rows),
        "; ".join(sorted(notes)),
    )


def paper_beside(run: Source, outcome: str = stats.OUTCOME) -> pd.DataFrame | None:
    """Per model of the run, its rate per scenario and contract arm beside the paper's stated
    Table 4 figure (strict success only; None for another outcome or no common cell)."""
    import yaml

    if outcome != "success" or not PAPER_FIGURES.exists():
        return None
    stated = yaml.safe_load(PAPER_FIGURES.read_text(encoding="utf-8")) or {}
    t4 = stated.get("table4_success_by_scenario_contract") or {}
    rows = []
    for u in run.units():
        df = run.unit(u)
        for s, per in t4.items():
            for arm, value in per.items():
                cell = df[(df["scenario"] == s) & (df[stats.ARM] == arm)]
                if cell.empty:
                    continue
                r = rate(cell, outcome)
                rows.append(
                    {
                        "unit": u,
                        "scenario": s,
                        "arm": arm,
                        "this_run": r["rate"],
                        "this_run_ci": [r["ci_low"], r["ci_high"]],
                        "tasks": int(cell["task_id"].nunique()),
                        "paper": float(value),
                    }
                )
    return pd.DataFrame(rows) if rows else None


def compare(
    run: Path | str,
    others: Sequence[Path | str] = (),
    outcome: str = stats.OUTCOME,
    n_boot: int = 2_000,
    seed: int = 0,
    paper: bool = True,
) -> Report:
    """The run beside every unit of every other source (default: :func:`default_sources`), one
    comparison per pair of units, never pooled; and beside the paper's stated figures."""
    focus = load(run)
    if outcome not in focus.df.columns:
        raise CompareError(f"--outcome: {outcome!r} is not an archive label")
    if others:
        sources = [load(o) for o in others]
    else:  # the committed archives, named by their place in the repository
        sources = [load(p, str(p.relative_to(paths.ROOT))) for p in default_sources(focus)]
        if not sources:  # an installed layerlab ships no archives: say so, never print nothing
            raise CompareError(
                f"{run}: nothing to set it beside (no committed archive of its models or of the "
                "reference agents here: an installed layerlab ships none); name runs or archives "
                "after RUN: layerlab compare RUN OTHER..."
            )
    notes = [f"{s.label}: PARTIAL (an unfinished run)" for s in (focus, *sources) if s.partial]
    comps = []
    for u in focus.units():
        for src in sources:
            for v in src.units():
                try:
                    comps.append(
                        compare_units(focus.unit(u), src.unit(v), src.label, outcome, n_boot, seed)
                    )
                except CompareError as exc:
                    notes.append(f"not compared: {exc}")
    return Report(str(run), outcome, comps, paper_beside(focus, outcome) if paper else None, notes)


PAPER_NOTE = (
    "The paper's figures (data/reference/paper_figures.yaml) are 9 hosted models pooled over 240 "
    "tasks: not the same units or tasks, so no difference or interval is computed against them."
)


def verdict_level(run: Path | str) -> tuple[float, str]:
    """The level ``alpha`` a run's verdicts are judged at, and how to state it: 0.05 (Table 10's,
    ``""``), or for an until-decided run (``run live --until-decided``) the level of its last look
    as its manifest records it, so that judging the finished run again gives the verdicts it
    stopped on (:func:`layerlab.analysis.sequential.judged_level`)."""
    from layerlab.analysis import sequential

    p = Path(run)
    try:
        m = archive.read_manifest(p) if p.is_dir() else None
    except archive.ArchiveError:
        m = None  # load() reports an unreadable manifest
    return sequential.judged_level(m)


def matrix_blocks(
    run: Path | str,
    n_boot: int = 2_000,
    seed: int = 0,
    delta: float | None = None,
    alpha: float | None = None,
    chances: bool = True,
) -> dict[str, tuple[Any, pd.DataFrame]]:
    """The mitigation matrix (Table 10) of a run's own records per block of units, with the
    block's records: ``{block: (matrix, records)}`` (see :func:`matrix_summary`); verdicts at
    the equivalence margin ``delta`` (default :data:`layerlab.analysis.specificity.DELTA`) and
    level ``alpha`` (default :func:`verdict_level`: 0.05, an until-decided run's last look's).
    ``chances=False`` leaves out each verdict's probability at this size (simulated, the slow
    part: :func:`layerlab.analysis.planning.with_chances` adds it to a matrix later)."""
    from layerlab.analysis import specificity
    from layerlab.archive.manifest import book_for

    src = load(run)
    arms = sorted(set(src.df[stats.ARM]))
    defined = book_for([run], arms)  # the run's own definitions, not what is installed
    base = defined.baseline
    if base not in arms:
        raise CompareError(
            f"{run}: holds no baseline arm {base!r} (arms: {', '.join(arms)}); run the mitigations "
            f"beside it: layerlab run live ... --mitigation all (or --mitigation {base} "
            "--mitigation <arm> ...)"
        )
    if len(arms) < 2:
        raise CompareError(f"{run}: holds only the baseline arm {base!r}: no mitigation to judge")
    from layerlab.analysis import planning

    a = verdict_level(run)[0] if alpha is None else alpha
    out = {}
    for name, sub in stats.blocks(src.df).items():
        mx = specificity.matrix(sub, defined, n_boot=n_boot, seed=seed, alpha=a, delta=delta)
        out[name] = (planning.with_chances(mx, sub) if chances else mx, sub)  # what it can decide
    return out


def matrix_summary(
    run: Path | str,
    n_boot: int = 2_000,
    seed: int = 0,
    delta: float | None = None,
    alpha: float | None = None,
) -> Mapping[str, Any]:
    """The mitigation matrix (Table 10) of a run's own records: per mitigation arm its target
    gain, largest off-target change, margin and verdict (equivalence margin ``delta``, default
    :data:`layerlab.analysis.specificity.DELTA`; level ``alpha`` as :func:`matrix_blocks`),
    against the run's baseline arm."""
    blocks = matrix_blocks(run, n_boot, seed, delta, alpha)
    return {name: mx for name, (mx, _) in blocks.items()}


# the outcome each matrix cell is judged by (the scorer's safe_resolution), as a reader says it
JUDGED = {True: "S", False: "safe"}
MATRIX_OUTCOME_NOTE = (
    "each scenario is judged by its own outcome: strict success S on an answerable scenario, "
    "safe resolution (a structured non-answer) on an unsafe one — the scorer's safe_resolution; "
    "outcome on target: the baseline's count → the arm's, on the arm's target scenarios"
)


def matrix_outcomes(mx: Any, df: pd.DataFrame) -> pd.DataFrame:
    """Per mitigation × target scenario of ``mx``: the judged outcome (``S`` on an answerable
    scenario, ``safe`` resolution on an unsafe one) as counts under the baseline and the arm,
    from the records ``df`` the matrix was computed from."""
    rows = []
    cells = mx.cells[mx.cells["target"]]
    for m, s in cells[["mitigation", "scenario"]].itertuples(index=False):
        on = df[df["scenario"] == s]
        b, a = on[on[stats.ARM] == mx.baseline], on[on[stats.ARM] == m]
        rows.append(
            {
                "mitigation": m,
                "scenario": s,
                "outcome": JUDGED[bool(on["answerable"].iloc[0])],
                "baseline_k": int(b["safe_resolution"].fillna(False).astype(bool).sum()),
                "baseline_n": len(b),
                "arm_k": int(a["safe_resolution"].fillna(False).astype(bool).sum()),
                "arm_n": len(a),
            }
        )
    cols = ["mitigation", "scenario", "outcome", "baseline_k", "baseline_n", "arm_k", "arm_n"]
    return pd.DataFrame(rows, columns=cols)

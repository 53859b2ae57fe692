"""pass@k and pass^k over a run's epochs: what repeating a cell says beyond its mean success.

A run of ``--epochs n`` asks every (unit, scenario, arm, task) cell ``n`` times; the archive keeps
each epoch as its own record (``replicate``: the epoch index). For a task with ``n`` epochs of
which ``c`` succeed, over the ``k`` of them drawn without replacement:

- **pass@k** = 1 − C(n−c, k) / C(n, k): at least one of ``k`` tries succeeds (the unbiased
  estimator of Chen et al. 2021, Inspect AI's ``pass_at`` reducer);
- **pass^k** = C(c, k) / C(n, k): all ``k`` tries succeed (τ-bench's reliability measure, Yao et
  al. 2024, Inspect AI's ``pass_k`` reducer).

Each is averaged over the tasks of a unit × arm × scenario cell that have at least ``k`` epochs
(a task with fewer, in a partial run, is left out and ``tasks`` says how many were used). With
``k = 1`` both are the mean of the tasks' success shares, S when every task has the same epochs;
the gap between pass@k and pass^k as ``k`` grows is how far a system is from answering the same
way every time. Computed on strict success S and on safe resolution
(:data:`OUTCOMES`). :func:`identical_units` names the units whose epochs never differed.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb
from typing import Any

import pandas as pd

from layerlab.analysis.records import as_frame
from layerlab.analysis.units import ARM, UNIT_COLUMNS

OUTCOMES = {"success": "S", "safe_resolution": "safe"}
"""The outcomes pass@k and pass^k are computed on: archive label -> short name (results.json)."""
EPOCH = "replicate"  # the archive column holding a record's epoch index
DEFINITION = (
    "per task with n epochs, c of them a success: pass@k = 1 - C(n-c,k)/C(n,k) (at least one of "
    "k tries succeeds; Chen et al. 2021, Inspect AI's pass_at), pass^k = C(c,k)/C(n,k) (all k "
    "succeed; tau-bench, Inspect AI's pass_k); each the mean over the tasks with >= k epochs"
)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of ``k`` of ``n`` epochs, ``c`` of them successes,
    drawn without replacement, succeeds: 1 − C(n−c, k)/C(n, k)."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The probability that all ``k`` of ``n`` epochs, ``c`` of them successes, drawn without
    replacement, succeed: C(c, k)/C(n, k)."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k: expected 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")


def task_counts(df: pd.DataFrame, outcome: str) -> pd.DataFrame:
    """Per unit × arm × scenario × task: ``n`` epochs and ``c`` of them true on ``outcome``.
    A task with a record that did not record ``outcome`` (null: an archive migrated from an
    older schema) is left out."""
    keys = [*UNIT_COLUMNS, ARM, "scenario", "task_id"]
    y = df[outcome]
    frame = df[keys].assign(y=y.fillna(False).astype(bool).astype(int), known=y.notna())
    agg = frame.groupby(keys, sort=True).agg(n=("y", "size"), c=("y", "sum"), known=("known", "all"))
    return agg[agg["known"]].drop(columns="known").reset_index()


def cell(counts: pd.DataFrame, k: int) -> dict[str, Any]:
    """pass@k and pass^k of one cell's tasks (``n`` and ``c`` columns): the means over the tasks
    with at least ``k`` epochs, and how many they are (no task: both null)."""
    usable = counts[counts["n"] >= k]
    if usable.empty:
        return {"pass@k": None, "pass^k": None, "tasks": 0}
    at = [pass_at_k(int(n), int(c), k) for n, c in zip(usable["n"], usable["c"], strict=True)]
    hat = [pass_hat_k(int(n), int(c), k) for n, c in zip(usable["n"], usable["c"], strict=True)]
    return {"pass@k": sum(at) / len(at), "pass^k": sum(hat) / len(hat), "tasks": len(at)}


def epochs(df: pd.DataFrame) -> int:
    """The most epochs any cell of ``df`` has (1 for an archive without the column)."""
    if df.empty or EPOCH not in df:
        return 1
    return int(df.groupby([*UNIT_COLUMNS, ARM, "scenario", "task_id"])[EPOCH].nunique().max())


def table(df: pd.DataFrame, ks: Sequence[int] | None = None) -> pd.DataFrame:
    """pass@k and pass^k per unit × arm × scenario × outcome × k, for ``ks`` (default 1 … n,
    n the most epochs of any cell): one row each with ``pass@k``, ``pass^k``, ``tasks``."""
    n = epochs(df)
    rows = []
    for label, short in OUTCOMES.items():
        if label not in df:
            continue
        counts = task_counts(df, label)
        for key, sub in counts.groupby([*UNIT_COLUMNS, ARM, "scenario"], sort=True):
            for k in ks or range(1, n + 1):
                rows.append({**dict(zip([*UNIT_COLUMNS, ARM, "scenario"], key, strict=True)),
                             "outcome": short, "k": k, **cell(sub, k)})  # fmt: skip
    return pd.DataFrame(rows)


def by_scenario(df: pd.DataFrame, digits: int = 4) -> dict[str, dict[str, dict[str, Any]]]:
    """One unit's records as ``results.json`` shows them: per scenario, per arm, the epochs
    and per outcome ``{"pass@k": {k: value}, "pass^k": {k: value}, "tasks": {k: n}}`` for
    k = 1 … n (rounded to ``digits``); empty when no cell has more than one epoch."""
    if epochs(df) < 2:
        return {}
    t = table(df)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (scenario, arm), sub in t.groupby(["scenario", ARM], sort=False):
        entry: dict[str, Any] = {"epochs": int(sub["k"].max())}
        for short, o in sub.groupby("outcome", sort=False):
            entry[str(short)] = {
                name: {str(k): _round(v, digits) for k, v in zip(o["k"], o[name], strict=True)}
                for name in ("pass@k", "pass^k", "tasks")
            }
        out.setdefault(str(scenario), {})[str(arm)] = entry
    return out


def _round(v: Any, digits: int) -> Any:
    if v is None or v != v:
        return None
    return int(v) if isinstance(v, int) else round(float(v), digits)


def identical_units(df: pd.DataFrame, labels: Sequence[str]) -> list[str]:
    """The units (``provider/model``) whose every cell asked more than once gave the same
    ``labels`` in each epoch: its epochs added no information (it looks deterministic)."""
    if df.empty or EPOCH not in df:
        return []
    out = []
    for (provider, model), sub in df.groupby(list(UNIT_COLUMNS), sort=True):
        g = sub.groupby([ARM, "scenario", "task_id"], sort=False)
        repeated = g[EPOCH].transform("nunique") > 1
        if not repeated.any():
            continue
        same = sub[repeated].groupby([ARM, "scenario", "task_id"])[list(labels)].nunique(
            dropna=False)  # fmt: skip
        if (same <= 1).all().all():
            out.append(f"{provider}/{model}")
    return out


def deterministic_notes(records: Sequence[Any], requested: int, labels: Sequence[str]) -> list[str]:
    """One line per unit of a run of ``requested`` epochs whose records had the same outcome
    (``labels``) in every epoch (records: archive :class:`~layerlab.archive.Record` objects)."""
    if requested < 2 or not records:
        return []
    df = as_frame(records)
    return [
        f"--epochs {requested}: every record of {unit} had the same outcome in each epoch: the "
        "system looks deterministic, its epochs added no information (pass@k = pass^k = S)"
        for unit in identical_units(df, labels)
    ]

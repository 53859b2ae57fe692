"""Statistics from archives: rates with Wilson intervals, paired repair effects with a
hierarchical bootstrap, the specificity margin, and statsmodels cross-checks.

Strict and repair outcomes are paired by provider, model, scenario and task. The bootstrap
follows the paper: resample provider–model *units* with replacement, then task pairs within
each selected unit; optionally a middle level resamples *policy units* (the three question
variants of a policy are correlated) and then variants within each policy. It is vectorised
numpy over a seeded :class:`numpy.random.Generator`, in chunks of replicates, and the same
replicate indices serve every scenario so that cross-scenario quantities (the specificity margin)
are bootstrapped jointly.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.archive import load_records
from layerlab.mitigation import contract_pair

TARGET = "schema_drift"
BASELINE, TREATMENT = contract_pair()  # the contract arms, named by the mitigations spec


def records_frame(archives: Sequence[Path | str] | None = None) -> pd.DataFrame:
    """Checked archives (files or run folders) as one DataFrame; a run given twice counts once.

    Default: the committed reference-agent archive.
    """
    from layerlab import paths

    recs = load_records([Path(a) for a in (archives or [paths.ARCHIVES / "reference_agents"])])
    if not recs:
        raise ValueError("no records in the given archives")
    return pd.DataFrame([r.__dict__ for r in recs])


def wilson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (statsmodels)."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return (float("nan"), float("nan"))
    lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
    return float(lo), float(hi)


@functools.cache
def _dsl_order() -> tuple[str, ...]:
    from layerlab.scenario import load_scenarios

    return tuple(load_scenarios())


def scenario_order(df: pd.DataFrame) -> list[str]:
    """Scenarios present in ``df``: DSL order first, then any others sorted."""
    known = _dsl_order()
    present = list(dict.fromkeys(df["scenario"]))
    return [s for s in known if s in present] + sorted(s for s in present if s not in known)


def rates(df: pd.DataFrame, label: str = "success") -> pd.DataFrame:
    """Rate, n and Wilson 95% interval of ``label`` by scenario x mitigation arm."""
    rows = []
    for s in scenario_order(df):
        for mode in sorted(df["mitigation"].unique(), key=lambda m: (m != BASELINE, m)):
            cell = df[(df["scenario"] == s) & (df["mitigation"] == mode)]
            k, n = int(cell[label].sum()), len(cell)
            lo, hi = wilson(k, n)
            rows.append(
                {
                    "scenario": s,
                    "mitigation": mode,
                    "n": n,
                    "k": k,
                    "rate": k / n if n else float("nan"),
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Paired:
    """Repair-minus-strict differences laid out for resampling.

    ``diff[u, s, i]`` is the paired difference of unit ``u``, scenario ``s``, item ``i``;
    ``valid`` marks items that exist (units may have different task sets); ``cluster[u, i]``
    is the item's policy index (for the optional policy level).
    """

    units: tuple[str, ...]
    scenarios: tuple[str, ...]
    diff: NDArray[np.float64]
    valid: NDArray[np.bool_]
    cluster: NDArray[np.int64]
    n_items: NDArray[np.int64]


def paired(
    df: pd.DataFrame, label: str = "success", a: str = TREATMENT, b: str = BASELINE
) -> Paired:
    """Pair mode ``a`` with mode ``b`` by (provider, model, scenario, task)."""
    keys = ["provider", "model", "scenario", "task_id", "policy_id"]
    left = df.loc[df["mitigation"] == a, [*keys, label]].rename(columns={label: a})
    right = df.loc[df["mitigation"] == b, [*keys, label]].rename(columns={label: b})
    wide = left.merge(right, on=keys, how="inner")
    if wide.empty:
        raise ValueError(f"archives hold no {a!r}/{b!r} pairs")
    wide["unit"] = wide["provider"] + "/" + wide["model"]
    wide["d"] = wide[a].astype(float) - wide[b].astype(float)
    units = tuple(sorted(wide["unit"].unique()))
    scenarios = tuple(s for s in scenario_order(df) if s in set(wide["scenario"]))
    per_unit_tasks = {u: sorted(wide.loc[wide["unit"] == u, "task_id"].unique()) for u in units}
    t_max = max(len(v) for v in per_unit_tasks.values())
    diff = np.zeros((len(units), len(scenarios), t_max))
    valid = np.zeros((len(units), len(scenarios), t_max), dtype=bool)
    cluster = np.zeros((len(units), t_max), dtype=np.int64)
    s_idx = {s: i for i, s in enumerate(scenarios)}
    for ui, u in enumerate(units):
        sub = wide[wide["unit"] == u]
        t_idx = {t: i for i, t in enumerate(per_unit_tasks[u])}
        policies = {p: i for i, p in enumerate(sorted(sub["policy_id"].unique()))}
        ti = sub["task_id"].map(t_idx).to_numpy()
        si = sub["scenario"].map(s_idx).to_numpy()
        diff[ui, si, ti] = sub["d"].to_numpy()
        valid[ui, si, ti] = True
        cluster[ui, ti] = sub["policy_id"].map(policies).to_numpy()
    n_items = np.array([len(per_unit_tasks[u]) for u in units], dtype=np.int64)
    return Paired(units, scenarios, diff, valid, cluster, n_items)


def point_estimates(p: Paired) -> NDArray[np.float64]:
    """Mean paired difference per scenario over all valid pairs."""
    return (p.diff * p.valid).sum(axis=(0, 2)) / np.maximum(p.valid.sum(axis=(0, 2)), 1)


def bootstrap(
    p: Paired,
    n_boot: int = 10_000,
    seed: int = 0,
    policy_level: bool = False,
    chunk: int = 500,
) -> NDArray[np.float64]:
    """Hierarchical bootstrap replicates of the mean paired difference, shape ``(n_boot, S)``.

    Level 1 resamples units with replacement; level 2 resamples items (task pairs) within each
    selected unit — or, with ``policy_level``, policies within the unit and then items within
    each selected policy.
    """
    rng = np.random.default_rng(seed)
    U = len(p.units)
    out = np.empty((n_boot, len(p.scenarios)))
    t_max = p.diff.shape[2]
    if policy_level:
        groups = [
            [
                np.flatnonzero((p.cluster[u] == c) & (np.arange(t_max) < p.n_items[u]))
                for c in range(int(p.cluster[u, : p.n_items[u]].max()) + 1)
            ]
            for u in range(U)
        ]
        g_max = max(len(g) for g in groups)
        v_max = max(len(x) for g in groups for x in g)
        members = np.zeros((U, g_max, v_max), dtype=np.int64)
        sizes = np.zeros((U, g_max), dtype=np.int64)
        n_groups = np.array([len(g) for g in groups])
        for u, g in enumerate(groups):
            for c, idx in enumerate(g):
                members[u, c, : len(idx)] = idx
                sizes[u, c] = len(idx)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        units = rng.integers(0, U, size=(b, U))
        if not policy_level:
            n = p.n_items[units]  # (b, U)
            items = (rng.random((b, U, t_max)) * n[:, :, None]).astype(np.int64)
            mask = np.arange(t_max)[None, None, :] < n[:, :, None]
        else:
            ng = n_groups[units]
            gpick = (rng.random((b, U, g_max)) * ng[:, :, None]).astype(np.int64)  # (b, U, G)
            gsize = sizes[units[:, :, None], gpick]  # (b, U, G)
            vpick = (rng.random((b, U, g_max, v_max)) * gsize[..., None]).astype(np.int64)
            items = members[units[:, :, None, None], gpick[..., None], vpick].reshape(b, U, -1)
            mask = (
                (np.arange(g_max)[None, None, :] < ng[:, :, None])[..., None]
                & (np.arange(v_max)[None, None, None, :] < gsize[..., None])
            ).reshape(b, U, -1)
        # gather (b, U, S, items) without materialising more than one chunk
        d = p.diff[
            units[:, :, None, None],
            np.arange(len(p.scenarios))[None, None, :, None],
            items[:, :, None, :],
        ]
        v = p.valid[
            units[:, :, None, None],
            np.arange(len(p.scenarios))[None, None, :, None],
            items[:, :, None, :],
        ]
        w = v & mask[:, :, None, :]
        out[start : start + b] = (d * w).sum(axis=(1, 3)) / np.maximum(w.sum(axis=(1, 3)), 1)
    return out


@dataclass(frozen=True)
class Effects:
    table: pd.DataFrame
    replicates: NDArray[np.float64]
    paired: Paired
    note: str


def paired_effects(
    df: pd.DataFrame,
    n_boot: int = 10_000,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = 0.05,
) -> Effects:
    """Repair − strict success per scenario with hierarchical bootstrap percentile intervals."""
    p = paired(df)
    est = point_estimates(p)
    reps = bootstrap(p, n_boot, seed, policy_level)
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    note = ""
    if len(p.units) == 1:
        note = (
            f"single provider-model unit ({p.units[0]}): intervals reflect task resampling only; "
            "variation between models is not estimable"
        )
    rows = []
    for i, s in enumerate(p.scenarios):
        zero = bool((p.diff[:, i, :][p.valid[:, i, :]] == 0).all())
        rows.append(
            {
                "scenario": s,
                "estimate": float(est[i]),
                "ci_low": float(lo[i]),
                "ci_high": float(hi[i]),
                "n_units": len(p.units),
                "n_pairs": int(p.valid[:, i, :].sum()),
                "exactly_zero": zero,
                "includes_zero": bool(lo[i] <= 0 <= hi[i]),
            }
        )
    return Effects(pd.DataFrame(rows), reps, p, note)


def specificity_margin(eff: Effects, target: str = TARGET, alpha: float = 0.05) -> dict[str, Any]:
    """Target-layer gain minus the largest absolute off-target change, with a joint interval."""
    scen = list(eff.paired.scenarios)
    if target not in scen:
        raise ValueError(f"target scenario {target!r} not in archives ({scen})")
    ti = scen.index(target)
    off = [i for i in range(len(scen)) if i != ti]
    est = point_estimates(eff.paired)
    if not off:
        raise ValueError("no off-target scenarios to compare against")
    worst = off[int(np.argmax(np.abs(est[off])))]
    margin = est[ti] - np.abs(est[off]).max()
    reps = eff.replicates[:, ti] - np.abs(eff.replicates[:, off]).max(axis=1)
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2])
    return {
        "target": target,
        "target_gain": float(est[ti]),
        "largest_off_target": scen[worst],
        "largest_off_target_change": float(est[worst]),
        "margin": float(margin),
        "ci_low": float(lo),
        "ci_high": float(hi),
    }


def model_gains(df: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Table 8: the largest strict→repair success gains by model × scenario."""
    g = (
        df.groupby(["provider", "model", "scenario", "mitigation"])["success"]
        .mean()
        .unstack("mitigation")
    )
    g = g.dropna(subset=[BASELINE, TREATMENT]).reset_index()
    g["gain"] = g[TREATMENT] - g[BASELINE]
    g = g.sort_values(
        ["gain", "provider", "model", "scenario"], ascending=[False, True, True, True]
    )
    return (
        g[["provider", "model", "scenario", BASELINE, TREATMENT, "gain"]]
        .head(top)
        .reset_index(drop=True)
    )


def provider_averages(df: pd.DataFrame) -> pd.DataFrame:
    """Table 9: provider-level averages (all scenarios pooled; not a capability ranking)."""
    rows = []
    for prov, sub in sorted(df.groupby("provider"), key=lambda kv: kv[0]):
        row: dict[str, Any] = {
            "provider": prov,
            "models": sub["model"].nunique(),
            "records": len(sub),
        }
        for mode in (BASELINE, TREATMENT):
            m = sub[sub["mitigation"] == mode]
            row[f"success {mode}"] = float(m["success"].mean()) if len(m) else float("nan")
        row["success overall"] = float(sub["success"].mean())
        row["grounded false positive"] = float(sub["grounded_false_positive"].mean())
        rows.append(row)
    return pd.DataFrame(rows)


def crosschecks(df: pd.DataFrame, eff: Effects) -> pd.DataFrame:
    """statsmodels cross-checks per scenario: exact McNemar on the paired outcomes, and a GEE
    logistic model of success on contract mode clustered by unit × policy; with whether each
    agrees with the bootstrap about the effect being distinguishable from zero."""
    import statsmodels.api as sm
    from statsmodels.stats.contingency_tables import mcnemar

    rows = []
    boot = eff.table.set_index("scenario")
    for s in eff.paired.scenarios:
        sub = df[df["scenario"] == s]
        wide = sub.pivot_table(
            index=["provider", "model", "task_id", "policy_id"],
            columns="mitigation",
            values="success",
            aggfunc="first",
        ).dropna()
        st, rp = wide[BASELINE].astype(bool), wide[TREATMENT].astype(bool)
        n01, n10 = int((~st & rp).sum()), int((st & ~rp).sum())
        table = [[int((st & rp).sum()), n10], [n01, int((~st & ~rp).sum())]]
        p_mc = float(mcnemar(table, exact=True).pvalue) if n01 + n10 else 1.0
        b = boot.loc[s]
        boot_sig = not bool(b["includes_zero"])
        row: dict[str, Any] = {
            "scenario": s,
            "discordant strict-only": n10,
            "discordant repair-only": n01,
            "mcnemar exact p": p_mc,
            "mcnemar agrees": (p_mc < 0.05) == boot_sig,
        }
        rates_ = sub.groupby("mitigation")["success"].mean()
        if n01 + n10 == 0:
            row.update(
                {
                    "gee log-odds": float("nan"),
                    "gee p": float("nan"),
                    "gee agrees": "not estimable (identical paired outcomes: effect exactly 0)",
                }
            )
        elif len(rates_) < 2 or rates_.min() <= 0.0 or rates_.max() >= 1.0:
            row.update(
                {
                    "gee log-odds": float("nan"),
                    "gee p": float("nan"),
                    "gee agrees": "not estimable (a mode has rate 0 or 1)",
                }
            )
        else:
            y = sub["success"].astype(float).to_numpy()
            x = sm.add_constant((sub["mitigation"] == TREATMENT).astype(float).to_numpy())
            groups = pd.factorize(sub["provider"] + "/" + sub["model"] + "/" + sub["policy_id"])[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = sm.GEE(
                    y,
                    x,
                    groups=groups,
                    family=sm.families.Binomial(),
                    cov_struct=sm.cov_struct.Exchangeable(),
                ).fit()
            coef, pv = float(res.params[1]), float(res.pvalues[1])
            row.update(
                {
                    "gee log-odds": coef,
                    "gee p": pv,
                    "gee agrees": str((pv < 0.05) == boot_sig).lower(),
                }
            )
        rows.append(row)
    return pd.DataFrame(rows)


def arm_effects(
    df: pd.DataFrame,
    treatment: str,
    baseline: str,
    label: str = "success",
    n_boot: int = 10_000,
    seed: int = 0,
    policy_level: bool = False,
    alpha: float = 0.05,
) -> Effects:
    """Treatment − baseline arm on ``label`` per scenario, with hierarchical bootstrap
    percentile intervals: the generic form of :func:`paired_effects` (any two arms of the
    ``mitigation`` column, any binary outcome column), built on :func:`paired`,
    :func:`point_estimates` and :func:`bootstrap`."""
    p = paired(df, label, treatment, baseline)
    est = point_estimates(p)
    reps = bootstrap(p, n_boot, seed, policy_level)
    lo, hi = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    note = ""
    if len(p.units) == 1:
        note = (
            f"single provider-model unit ({p.units[0]}): intervals reflect task resampling only; "
            "variation between models is not estimable"
        )
    rows = []
    for i, s in enumerate(p.scenarios):
        rows.append(
            {
                "scenario": s,
                "estimate": float(est[i]),
                "ci_low": float(lo[i]),
                "ci_high": float(hi[i]),
                "n_units": len(p.units),
                "n_pairs": int(p.valid[:, i, :].sum()),
                "exactly_zero": bool((p.diff[:, i, :][p.valid[:, i, :]] == 0).all()),
                "includes_zero": bool(lo[i] <= 0 <= hi[i]),
            }
        )
    return Effects(pd.DataFrame(rows), reps, p, note)

"""Cross-checks of the paired-effect intervals: exact McNemar and a clustered GEE per scenario,
and whether the arms are exchangeable where their prompts are byte-identical, and how many arm
pairs saw identical inputs."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from layerlab.analysis.effects import Effects
from layerlab.analysis.records import INPUT
from layerlab.analysis.units import ARM, MIN_UNITS, contract_arms, unit_labels


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
    """statsmodels cross-checks per scenario, and whether each agrees with the cell's interval
    (Tango's score interval or the bootstrap, :func:`layerlab.analysis.exact.cell_methods`) about
    the effect being distinguishable from zero.

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


# --- identical inputs: are the arms exchangeable where nothing differs? ---------------------------


def arm_pairs(
    df: pd.DataFrame, baseline: str | None = None, treatment: str | None = None, *columns: str
) -> pd.DataFrame:
    """The (unit, scenario, task, replicate) pairs that reached the reader in both arms (default:
    the contract pair), with each arm's ``prompt_hash``, ``input_hash`` (where the frame has
    it) and ``columns`` suffixed ``_a`` (baseline) and ``_b``."""
    baseline, treatment = contract_arms(baseline, treatment)
    keys = ["provider", "model", "scenario", "task_id", "replicate"]
    inputs = [INPUT] if INPUT in df.columns else []
    cols = [*keys, "prompt_hash", *inputs, *columns]
    a = df.loc[(df[ARM] == baseline) & df["reached_reader"], cols]
    b = df.loc[(df[ARM] == treatment) & df["reached_reader"], cols]
    return a.merge(b, on=keys, suffixes=("_a", "_b"))


@dataclass(frozen=True)
class SameInputs:
    """One scenario's arm pairs: how many saw byte-identical inputs, of how many pairs whose
    inputs are recorded, and how many pairs' inputs are not recorded."""

    same: int
    pairs: int
    not_recorded: int = 0

    def __str__(self) -> str:
        if self.not_recorded and not self.pairs:
            return "not recorded"
        tail = f" ({self.not_recorded} not recorded)" if self.not_recorded else ""
        return f"{self.same}/{self.pairs}{tail}"


def identical_inputs(
    df: pd.DataFrame, baseline: str | None = None, treatment: str | None = None
) -> dict[str, SameInputs]:
    """Per scenario: the pairs (both arms reached the reader) whose two arms gave the reader or
    system byte-identical input — a model's prompt; an agent's or target's tool observations,
    in order (the frame's ``input_hash``, :func:`layerlab.analysis.records.input_column`;
    without that column, the prompt hash). A pair whose input is not recorded (an agent or
    target archive older than the column) is counted apart, never as identical. Where every
    pair is identical, a difference between the arms is the model's draw, not the arm (exactly
    zero under greedy decoding with shared replies)."""
    m = arm_pairs(df, baseline, treatment)
    col = INPUT if INPUT in df.columns else "prompt_hash"
    out = {}
    for s, sub in m.groupby("scenario", sort=False):
        a, b = sub[f"{col}_a"], sub[f"{col}_b"]
        known = a.notna() & b.notna()
        same = int((known & (a == b)).sum())
        out[str(s)] = SameInputs(same, int(known.sum()), int((~known).sum()))
    return out


def identical_prompt_discordance(
    df: pd.DataFrame,
    outcome: str = "safe_resolution",
    baseline: str | None = None,
    treatment: str | None = None,
) -> pd.DataFrame:
    """Are the arms exchangeable where their prompts are byte-identical? Per unit x scenario:
    the (task, replicate) pairs whose two prompts coincide, how many of them disagree on
    ``outcome`` in each direction, and the exact two-sided sign test of that split (under
    exchangeable draws each direction is equally likely, whatever the decoding)."""
    from scipy.stats import binomtest

    baseline, treatment = contract_arms(baseline, treatment)
    m = arm_pairs(df, baseline, treatment, outcome)
    m = m[m["prompt_hash_a"] == m["prompt_hash_b"]]
    rows = []
    for (provider, model, scenario), sub in m.groupby(
        ["provider", "model", "scenario"], sort=False
    ):
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

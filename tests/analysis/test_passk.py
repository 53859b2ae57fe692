"""pass@k and pass^k (layerlab.analysis.passk) against Inspect AI's own epoch reducers.

One fixture of per-sample epoch scores is reduced twice: by layerlab's table (from an archive-
shaped record frame) and by Inspect AI's ``pass_at`` and ``pass_k`` reducers with its ``mean``
metric; the numbers must agree to 1e-12. Inspect runs offline: reducers and metrics are pure
functions of the scores, no model is asked. A brute force over every k-subset of the epochs
checks both estimators without either library's formula.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from layerlab.analysis import passk

# samples x epochs of 0/1 scores: random ones, plus the edges (none, all, one success)
_RNG = np.random.default_rng(20240613)
N_EPOCHS = 5
SCORES: list[list[int]] = [
    *(list(map(int, _RNG.random(N_EPOCHS) < p)) for p in _RNG.uniform(0, 1, 37)),
    [0] * N_EPOCHS,
    [1] * N_EPOCHS,
    [1] + [0] * (N_EPOCHS - 1),
]
# a partial run: some tasks with fewer epochs (Inspect: NaN where fewer than k; layerlab: left out)
RAGGED: list[list[int]] = [s[: 2 + i % (N_EPOCHS - 1)] for i, s in enumerate(SCORES)]


def _frame(scores: list[list[int]], outcome: str = "success") -> pd.DataFrame:
    rows = [
        {"provider": "openai", "model": "m", "mitigation": "strict", "scenario": "clean",
         "task_id": f"t{i:02d}", "replicate": e, outcome: bool(v)}  # fmt: skip
        for i, sample in enumerate(scores)
        for e, v in enumerate(sample)
    ]
    return pd.DataFrame(rows)


def _inspect(scores: list[list[int]], k: int) -> tuple[float, float]:
    """Inspect AI's pass@k and pass^k: each sample's epochs reduced by ``pass_at(k)`` and
    ``pass_k(k)``, then Inspect's ``mean`` metric over the samples whose reduction is defined."""
    from inspect_ai.scorer import SampleScore, Score, mean, pass_at, pass_k

    out = []
    for reducer in (pass_at(k), pass_k(k)):
        reduced = [reducer([Score(value=float(v)) for v in sample]) for sample in scores]
        defined = [SampleScore(score=r) for r in reduced if not math.isnan(float(r.value))]
        out.append(float(mean()(defined)))
    return out[0], out[1]


def _layerlab(scores: list[list[int]], k: int, outcome: str = "success") -> dict:
    t = passk.table(_frame(scores, outcome), ks=[k])
    (row,) = t[t["outcome"] == passk.OUTCOMES[outcome]].to_dict("records")
    return row


@pytest.mark.parametrize("scores", [pytest.param(SCORES, id="5-epochs"), pytest.param(RAGGED, id="ragged")])
@pytest.mark.parametrize("k", range(1, N_EPOCHS + 1))
def test_pass_at_k_and_pass_hat_k_equal_inspect_ais_reducers(scores, k) -> None:
    import inspect_ai

    assert inspect_ai.__version__ == "0.3.285"  # the version requirements.lock pins
    at, hat = _inspect(scores, k)
    row = _layerlab(scores, k)
    assert abs(row["pass@k"] - at) <= 1e-12 and abs(row["pass^k"] - hat) <= 1e-12, (k, row, at, hat)
    assert row["tasks"] == sum(len(s) >= k for s in scores)
    # safe resolution is reduced the same way
    safe = _layerlab(scores, k, "safe_resolution")
    assert abs(safe["pass@k"] - at) <= 1e-12 and abs(safe["pass^k"] - hat) <= 1e-12


def _brute(sample: list[int], k: int) -> tuple[float, float]:
    """Over every k-subset of the epochs: the share with a success, the share all successes."""
    subsets = list(itertools.combinations(sample, k))
    return (sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets))


def test_the_estimators_are_the_shares_of_k_subsets_of_the_epochs() -> None:
    for sample in SCORES[:12] + SCORES[-3:]:
        n, c = len(sample), sum(sample)
        for k in range(1, n + 1):
            at, hat = _brute(sample, k)
            assert passk.pass_at_k(n, c, k) == pytest.approx(at, abs=1e-12)
            assert passk.pass_hat_k(n, c, k) == pytest.approx(hat, abs=1e-12)


def test_k_of_1_is_s_and_k_widens_the_gap_between_one_and_all() -> None:
    df = _frame(SCORES)
    t = passk.table(df)
    s = t[t["outcome"] == "S"].set_index("k")
    assert s.loc[1, "pass@k"] == pytest.approx(df["success"].mean(), abs=1e-12)
    assert s.loc[1, "pass^k"] == pytest.approx(df["success"].mean(), abs=1e-12)
    assert list(s.index) == list(range(1, N_EPOCHS + 1))  # k = 1 ... n by default
    assert s["pass@k"].is_monotonic_increasing and s["pass^k"].is_monotonic_decreasing
    assert s.loc[N_EPOCHS, "pass@k"] > s.loc[N_EPOCHS, "pass^k"]


def test_bad_counts_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"expected 0 <= c <= n and 1 <= k <= n, got n=3 c=1 k=4"):
        passk.pass_at_k(3, 1, 4)
    with pytest.raises(ValueError, match="got n=3 c=4 k=1"):
        passk.pass_hat_k(3, 4, 1)


def test_results_show_pass_k_only_for_runs_of_more_than_one_epoch() -> None:
    """One epoch: pass@1 = pass^1 = S, nothing added; three: per scenario and arm, k = 1 ... 3."""
    one = _frame([s[:1] for s in SCORES])
    assert passk.by_scenario(one) == {}
    three = passk.by_scenario(_frame([s[:3] for s in SCORES]))
    entry = three["clean"]["strict"]
    assert entry["epochs"] == 3 and set(entry["S"]["pass@k"]) == {"1", "2", "3"}
    assert entry["S"]["tasks"]["3"] == len(SCORES)


def test_a_unit_whose_epochs_never_differ_is_named() -> None:
    same = _frame([[v] * 3 for v in (0, 1, 1, 0)])
    assert passk.identical_units(same, ["success"]) == ["openai/m"]
    assert passk.identical_units(_frame(SCORES), ["success"]) == []
    assert passk.identical_units(_frame([[1], [0]]), ["success"]) == []  # one epoch: nothing to say

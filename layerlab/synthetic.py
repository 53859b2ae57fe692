"""Synthetic archives with known truth, for testing and benchmarking the statistics.

Each provider–model unit gets its own true repair effect per scenario, drawn around a
population effect; outcomes are Bernoulli draws from a seeded Generator, in the archive schema.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from layerlab.archive import SCHEMA_VERSION
from layerlab.mitigation import contract_pair

BASELINE, TREATMENT = contract_pair()


def synthetic_frame(
    n_units: int = 9,
    n_policies: int = 80,
    variants: int = 3,
    effects: Mapping[str, float] | None = None,
    base_rate: float = 0.3,
    unit_sd: float = 0.03,
    seed: int = 0,
) -> pd.DataFrame:
    """A records DataFrame: ``n_units`` units x scenarios x policies x variants x 2 modes.

    ``effects`` maps scenario -> population repair − strict effect (default: schema_drift 0.5,
    clean 0.0). Unit effects are ``effect + N(0, unit_sd)``, clipped to feasible rates; strict
    success is Bernoulli(``base_rate``), repair success Bernoulli(``base_rate`` + unit effect).
    """
    rng = np.random.default_rng(seed)
    effects = dict(effects or {"clean": 0.0, "schema_drift": 0.5})
    n = n_policies * variants
    idx = np.arange(n)
    policies = np.array([f"d-{i:02d}" for i in idx // variants], dtype=object)
    var = idx % variants + 1
    tasks = policies + "-q" + var.astype(str).astype(object)
    parts = []
    for u in range(n_units):
        for s, eff in effects.items():
            g = (
                float(np.clip(eff + rng.normal(0.0, unit_sd), -base_rate, 1 - base_rate))
                if eff != 0
                else 0.0
            )
            strict = rng.random(n) < base_rate
            repair = rng.random(n) < base_rate + g if eff != 0 else strict.copy()
            for mode, ok in ((BASELINE, strict), (TREATMENT, repair)):
                parts.append(
                    pd.DataFrame(
                        {
                            "provider": f"prov{u % 3}",
                            "model": f"model{u}",
                            "scenario": s,
                            "mitigation": mode,
                            "task_id": tasks,
                            "policy_id": policies,
                            "variant": var,
                            "success": ok,
                        }
                    )
                )
    df = pd.concat(parts, ignore_index=True)
    df["schema_version"] = SCHEMA_VERSION
    df["run_id"] = f"synthetic-{seed}"
    df["grounded_false_positive"] = False
    return df

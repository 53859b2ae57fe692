"""Table 6: representative task outcomes, traced through the pipeline by the reference reader
(``table6``) or read from a real model's archive labels (``table6_archive``). The cases are chosen
by rule in :func:`layerlab.reporting.records.explore.representative_cases`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd


def table6(cases: Sequence[tuple[str, str, str, str]], reader: str = "extractive") -> pd.DataFrame:
    """Table 6: representative task outcomes, each row traced through the pipeline.

    "Unknown" means no usable answer under the benchmark contract.
    """
    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios
    from layerlab.reporting.records.explore import trace

    c, k, scen = corpus_mod.load(), corpus_mod.load_answer_key(), load_scenarios()
    rows = []
    for case, task_id, scenario, mode in cases:
        t = trace(task_id, scenario, mode, reader, corpus=c, key=k, scenarios=scen)
        ans = t.out.answer if t.out is not None and t.out.status == "answered" else None
        rows.append(
            {
                "case": case,
                "task": task_id,
                "scenario": scenario,
                "mode": mode,
                "expected": t.entry.expected_answer,
                "answer": ans if ans is not None else "Unknown",
                "S": t.labels.success,
                "grounded": t.labels.grounded,
                "diagnostic": t.labels.diagnostic,
            }
        )
    return pd.DataFrame(rows)


def outcome_of(row: Any) -> str:
    """What a record's reader did, from its archive labels (the archive keeps no answer text)."""
    if not row["reached_reader"]:
        return f"ended before the reader ({row['stage']})"
    if row["diagnostic"] in ("malformed_reply", "provider_error"):
        return str(row["diagnostic"]).replace("_", " ")
    if row["abstained"]:
        return "abstained"
    return "answered" if row["answered"] else "no answer"


def table6_archive(df: pd.DataFrame, cases: Sequence[tuple[str, str, str, str]]) -> pd.DataFrame:
    """Table 6's cases for every unit of an archive (e.g. a real model), from labels alone.

    Archives keep no answer text, so a row says what the reader did (answered, abstained,
    malformed reply, ...) and how it was scored; the reply itself stays in the private cache.
    """
    rows = []
    units = sorted(set(zip(df["provider"], df["model"], strict=True)))
    for case, task_id, scenario, arm in cases:
        for provider, model in units:
            sel = df[
                (df["provider"] == provider)
                & (df["model"] == model)
                & (df["task_id"] == task_id)
                & (df["scenario"] == scenario)
                & (df["mitigation"] == arm)
            ]
            for _, r in sel.sort_values("replicate").iterrows():
                rows.append(
                    {
                        "case": case,
                        "unit": f"{provider}/{model}",
                        "task": task_id,
                        "scenario": scenario,
                        "mitigation": arm,
                        "replicate": int(r["replicate"]),
                        "reader": outcome_of(r),
                        "S": bool(r["success"]),
                        "grounded": None if pd.isna(r["grounded"]) else bool(r["grounded"]),
                        "safe": bool(r["safe_resolution"]),
                        "diagnostic": r["diagnostic"],
                    }
                )
    return pd.DataFrame(rows)

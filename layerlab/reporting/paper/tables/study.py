"""Table 7: the focused LangChain study (:mod:`layerlab.harness.study`) per arm, and by condition."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from layerlab.faults.roles import load_roles


def table7(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Table 7: per arm, strict success on answerable cells and safe resolution on unsafe ones."""
    from layerlab.harness.study import ARMS

    df = pd.DataFrame(list(rows))
    control = load_roles().negative_control  # the clean scenario
    out = []
    for arm in ARMS:
        a = df[df["mitigation"] == arm]
        ans, uns, clean = a[a["answerable"]], a[~a["answerable"]], a[a["scenario"] == control]
        wrong_controls = int((ans["control"] == "refuse").sum())
        out.append(
            {
                "arm": arm,
                "cells": len(a),
                "strict success, answerable": f"{int(ans['success'].sum())}/{len(ans)}",
                "safe resolution, unsafe": f"{int(uns['safe_resolution'].sum())}/{len(uns)}",
                "clean strict success": float(clean["success"].mean())
                if len(clean)
                else float("nan"),
                "unsafe cells answered": f"{int(uns['answered'].sum())}/{len(uns)}",
                "grounded but failing, unsafe": f"{int(uns['grounded_false_positive'].sum())}/{len(uns)}",
                "controls firing on answerable cells": wrong_controls,
            }
        )
    return pd.DataFrame(out)


def table7_by_condition(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per condition and arm: strict success, safe resolution and which control fired."""
    from layerlab.harness.study import ARMS

    df = pd.DataFrame(list(rows))
    order = list(dict.fromkeys(df["scenario"]))
    out = []
    for cond in order:
        row: dict[str, Any] = {
            "condition": cond,
            "answerable": bool(df[df["scenario"] == cond]["answerable"].iloc[0]),
        }
        for arm in ARMS:
            a = df[(df["scenario"] == cond) & (df["mitigation"] == arm)]
            row[f"{arm} S"] = f"{int(a['success'].sum())}/{len(a)}"
            row[f"{arm} safe"] = f"{int(a['safe_resolution'].sum())}/{len(a)}"
        c = df[(df["scenario"] == cond) & (df["mitigation"] == "controls")]
        fired = {
            (str(k), layer if isinstance(layer, str) else "-")  # null: no layer applies
            for k, layer in zip(c["control"], c["control_layer"], strict=True)
        }
        row["controls fired"] = ", ".join(f"{k} ({layer})" for k, layer in sorted(fired))
        out.append(row)
    return pd.DataFrame(out)

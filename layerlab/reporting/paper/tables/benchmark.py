"""Tables of the benchmark's design and its model-free runs: the scenarios (Table 1), the
deterministic harness (Table 2, diagnostics) and the retriever audit (Table 3, its notes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from layerlab.analysis import stats
from layerlab.faults.scenario import Scenario


def table1(scenarios: Mapping[str, Scenario]) -> pd.DataFrame:
    """Scenario -> layer -> what is injected -> expected behaviour (from the scenario DSL)."""
    rows = [
        {
            "scenario": s.name,
            "layer": s.spec.layer,
            "injected": s.spec.injected,
            "operators": " + ".join(f.op for f in s.spec.faults) or "-",
            "expected behaviour": s.spec.expected_behaviour,
            "answerable": s.spec.answerable,
        }
        for s in scenarios.values()
    ]
    return pd.DataFrame(rows)


def table2(summary: Mapping[str, Any]) -> pd.DataFrame:
    """Deterministic results per scenario (strict/repair success and GF)."""
    rows = []
    for s, per in summary["success"].items():
        gf = summary["grounded_false_positive"][s]
        rows.append(
            {
                "scenario": s,
                **{f"S {m}": per.get(m, float("nan")) for m in (stats.BASELINE, stats.TREATMENT)},
                **{f"GF {m}": gf.get(m, float("nan")) for m in (stats.BASELINE, stats.TREATMENT)},
            }
        )
    return pd.DataFrame(rows)


BEYOND = " (beyond the paper)"
"""The label Table 3's extra rows carry after the retriever's name (not the paper's rows)."""


def table3(audit_result: Mapping[str, Any]) -> pd.DataFrame:
    """Retriever audit, one row per retriever and condition: the paper's retrievers, then any
    ``beyond_paper`` rows (the dense retriever, the store-backed example), labelled so."""
    rows = []
    blocks = [(audit_result["retrievers"], ""), (audit_result.get("beyond_paper") or {}, BEYOND)]
    for block, label in blocks:
        for name, per in block.items():
            for cond, m in per.items():
                rows.append(
                    {
                        "retriever": _shown(name) + label,
                        "condition": cond,
                        "top-1 recall": m["top1_recall"],
                        "top-3 recall": m["top3_recall"],
                        "current-version preference": m["current_version_preference"],
                    }
                )
    frame = pd.DataFrame(rows)
    extra = list(audit_result.get("beyond_paper") or {})
    if extra:
        from layerlab.reporting.paper.tables.captions import CAPTIONS

        teams = [f"{_shown(n)} is {n}" for n in extra if _shown(n) != n]
        frame.attrs["caption"] = (
            f"{CAPTIONS['table3']} Rows marked{BEYOND} are not the paper's: "
            + ", ".join(_shown(n) for n in extra)
            + ". The dense retrievers score wordllama static embeddings (offline)"
            + (f"; a team's own retriever is named by its factory ({'; '.join(teams)})"
               if teams else "")  # fmt: skip
            + "."
        )
    return frame


def _shown(spec: str) -> str:
    """A retriever's name in Table 3: a team's ``KIND:MODULE:FACTORY`` by its factory."""
    return spec.rpartition(":")[2] if spec.count(":") == 2 else spec


def audit_notes(audit_result: Mapping[str, Any]) -> pd.DataFrame:
    """Domain-cue counts and the cross-domain duplicate query, as a small table."""
    cues = audit_result["domain_cues"]
    rows = [{"item": f"domain cues {k}", "value": str(v)} for k, v in cues.items()]
    for q in audit_result["duplicate_query"]["queries"]:
        for name, n in q["top1_correct"].items():
            rows.append(
                {
                    "item": f"duplicate query ({' & '.join(q['domains'])}) top-1 right, {name}",
                    "value": f"{n}/{len(q['tasks'])}",
                }
            )
    return pd.DataFrame(rows)


def diagnostics(summary: Mapping[str, Any], mode: str | None = None) -> pd.DataFrame:
    """Diagnostic-label counts per scenario for one contract mode (default: the baseline; which
    layer failed)."""
    mode = stats.BASELINE if mode is None else mode
    rows = []
    for s, per in summary["diagnostics"].items():
        rows.append({"scenario": s, **per.get(mode, {})})
    df = pd.DataFrame(rows).fillna(0)
    counts = [c for c in df.columns if c != "scenario"]
    return df.astype(dict.fromkeys(counts, int))

"""Figures with seaborn, saved deterministically (fixed style, size and dpi; no timestamps).

Each function builds one figure from a library result and returns it; :func:`save` writes
``figures/<name>.png`` and ``.pdf``. Re-running a save on the same data writes the same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from layerlab import paths  # noqa: E402
from layerlab.mitigation import contract_pair  # noqa: E402

STYLE = {
    "axes.spines.right": False,
    "axes.spines.top": False,
    "font.family": "DejaVu Sans",
    "svg.hashsalt": "layerlab",
    "pdf.fonttype": 42,
}
BASELINE, TREATMENT = contract_pair()
PALETTE = {BASELINE: "#4c72b0", TREATMENT: "#dd8452"}


def _setup() -> None:
    sns.set_theme(style="whitegrid", context="paper")
    plt.rcParams.update(STYLE)  # type: ignore[arg-type]


def save(fig: Any, name: str, out_dir: Path | None = None) -> list[str]:
    """Write ``name.png`` and ``name.pdf``; close the figure; return the file names written."""
    out = Path(out_dir or paths.FIGURES)
    out.mkdir(parents=True, exist_ok=True)
    import io

    from layerlab._io import atomic_write_bytes

    names = []
    for ext, meta in (
        ("png", {"Software": None}),
        ("pdf", {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None}),
    ):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=150, bbox_inches="tight", metadata=meta)
        atomic_write_bytes(out / f"{name}.{ext}", buf.getvalue())
        names.append(f"{name}.{ext}")
    plt.close(fig)
    return names


def success_heatmap(
    table: pd.DataFrame, title: str, columns: tuple[str, str] = (BASELINE, TREATMENT)
) -> Any:
    """Scenario × contract-mode success rates as an annotated heatmap; one panel per ``block``
    (kind of unit) when the table has that column, so blocks are never pooled."""
    _setup()
    parts = list(table.groupby("block", sort=False)) if "block" in table else [("", table)]
    fig, axes = plt.subplots(
        1, len(parts), figsize=(4.2 * len(parts), 4.4), squeeze=False, sharey=True
    )
    for i, (ax, (block, t)) in enumerate(zip(axes[0], parts, strict=True)):
        data = t.set_index("scenario")[list(columns)]
        data.columns = [BASELINE, TREATMENT]
        sns.heatmap(
            data,
            annot=True,
            fmt=".3f",
            vmin=0,
            vmax=1,
            cmap="viridis",
            cbar=i == len(parts) - 1,
            cbar_kws={"label": "strict success S"},
            ax=ax,
            linewidths=0.5,
        )
        ax.set_xlabel("contract mode")
        ax.set_ylabel("")
        if block:
            n = f", n={int(t['n per mode'].max())} per cell" if "n per mode" in t else ""
            ax.set_title(f"{block}{n}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def grounded_false_positives(table: pd.DataFrame, title: str) -> Any:
    """Groundedness false positives (grounded ∧ ¬S) by scenario and mode; one panel per
    ``block`` (kind of unit) when the table has that column."""
    _setup()
    parts = list(table.groupby("block", sort=False)) if "block" in table else [("", table)]
    fig, axes = plt.subplots(
        1, len(parts), figsize=(6.0 * len(parts), 3.6), squeeze=False, sharey=True
    )
    for ax, (block, t) in zip(axes[0], parts, strict=True):
        long = t.melt(
            id_vars="scenario", value_vars=[f"GF {BASELINE}", f"GF {TREATMENT}"], var_name="mode", value_name="GF"
        )
        long["mode"] = long["mode"].str.replace("GF ", "", regex=False)
        sns.barplot(long, y="scenario", x="GF", hue="mode", palette=PALETTE, ax=ax, orient="h")
        ax.set_xlim(0, 1)
        ax.set_xlabel("share grounded in retrieved evidence yet failing S")
        ax.set_ylabel("")
        if block:
            n = f", n={int(t['n per mode'].max())} per bar" if "n per mode" in t else ""
            ax.set_title(f"{block}{n}", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def paired_effects_forest(effects: pd.DataFrame, title: str) -> Any:
    """Repair − strict success per scenario with bootstrap 95% intervals; one panel per
    ``block`` (kind of unit) when the table has that column."""
    _setup()
    parts = list(effects.groupby("block", sort=False)) if "block" in effects else [("", effects)]
    fig, axes = plt.subplots(
        1, len(parts), figsize=(6.0 * len(parts), 3.8), squeeze=False, sharey=True
    )
    for ax, (block, part) in zip(axes[0], parts, strict=True):
        e = part.iloc[::-1].reset_index(drop=True)
        y = range(len(e))
        est = 100 * e["estimate"]
        ax.hlines(list(y), 100 * e["ci_low"], 100 * e["ci_high"], color="#333333", linewidth=2)
        ax.plot(est, list(y), "o", color=PALETTE[TREATMENT])
        ax.axvline(0, color="#999999", linewidth=1, linestyle="--")
        ax.set_yticks(list(y), e["scenario"])
        ax.set_xlabel("repair − strict success (percentage points)")
        if block:
            ax.set_title(block, fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def specificity_heatmap(cells: pd.DataFrame, title: str) -> Any:
    """Mitigation × scenario paired effects (pp) as a diverging heatmap; target cells boxed."""
    _setup()
    rows = list(dict.fromkeys(cells["mitigation"]))
    cols = list(dict.fromkeys(cells["scenario"]))
    data = (
        cells.pivot(index="mitigation", columns="scenario", values="estimate").loc[rows, cols] * 100
    )
    fig, ax = plt.subplots(figsize=(1.0 * len(cols) + 2.6, 0.42 * len(rows) + 1.8))
    sns.heatmap(
        data,
        annot=True,
        fmt=".0f",
        vmin=-100,
        vmax=100,
        center=0,
        cmap="RdBu",
        cbar_kws={"label": "effect vs baseline (pp)"},
        ax=ax,
        linewidths=0.5,
        annot_kws={"fontsize": 7},
    )
    for _, c in cells[cells["target"]].iterrows():
        ax.add_patch(
            plt.Rectangle(
                (cols.index(c["scenario"]), rows.index(c["mitigation"])),
                1,
                1,
                fill=False,
                edgecolor="#222222",
                linewidth=1.6,
            )
        )
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_xticklabels(ax.get_xticklabels(), rotation=35, ha="right")
    ax.set_title(title)
    return fig


def retriever_ablation(table3: pd.DataFrame, title: str) -> Any:
    """Required-document top-1 recall per retriever and condition."""
    _setup()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    sns.barplot(
        table3,
        y="retriever",
        x="top-1 recall",
        hue="condition",
        ax=ax,
        orient="h",
        palette="colorblind",
    )
    ax.set_xlim(0, 1)
    ax.set_ylabel("")
    ax.set_title(title)
    ax.legend(title="condition", loc="lower right", fontsize=7, title_fontsize=8)
    return fig


def rates_by_scenario(long: pd.DataFrame, title: str, label: str = "strict success S") -> Any:
    """Small multiples, one panel per unit (model or agent): a rate by scenario, one point per
    arm with its 95% interval. ``long`` has ``unit, scenario, arm, rate, ci_low, ci_high, n``."""
    _setup()
    units = list(dict.fromkeys(long["unit"]))
    scenarios = list(dict.fromkeys(long["scenario"]))
    arms = list(dict.fromkeys(long["arm"]))
    fig, axes = plt.subplots(
        len(units), 1, figsize=(7.2, 1.1 + 1.9 * len(units)), sharex=True, squeeze=False
    )
    colours = sns.color_palette("colorblind" if len(arms) <= 10 else "tab20", len(arms))
    step = min(0.18, 0.8 / max(len(arms), 1))  # every arm's point stays within its scenario
    for ax, unit in zip(axes[:, 0], units, strict=True):
        sub = long[long["unit"] == unit]
        for j, arm in enumerate(arms):
            a = sub[sub["arm"] == arm].set_index("scenario").reindex(scenarios)
            x = [i + (j - (len(arms) - 1) / 2) * step for i in range(len(scenarios))]
            err = [a["rate"] - a["ci_low"], a["ci_high"] - a["rate"]]
            colour = PALETTE.get(arm, colours[j]) if len(arms) <= 2 else colours[j]
            ax.errorbar(x, a["rate"], yerr=err, fmt="o", ms=4, capsize=2, color=colour, label=arm)
        n = int(sub["n"].max()) if len(sub) else 0
        ax.set_title(f"{unit}  (n = {n} records per point)", fontsize=9, loc="left")
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel(label, fontsize=8)
    axes[-1, 0].set_xticks(range(len(scenarios)), scenarios, rotation=30, ha="right")
    axes[0, 0].legend(title="arm", fontsize=7, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=10, y=1.0 + 0.06 / len(units))
    return fig

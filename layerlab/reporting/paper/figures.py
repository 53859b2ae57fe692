"""Figures with seaborn, saved deterministically (fixed style, size and dpi; no timestamps).

Each function builds one figure from a library result and returns it; :func:`save` writes
``figures/<name>.png`` and ``.pdf`` and :func:`show` does the same and returns the figure for
inline display in a notebook. Re-running a save on the same data writes the same bytes.

Units are never pooled: a figure over records draws one panel per provider–model unit, real models
first, reference agents (deterministic baselines) after, each labelled what it is
(:func:`layerlab.reporting.format.display.unit_kind`), with the records or task pairs each point counts. Rates carry
the library's cluster-aware Clopper-Pearson intervals (:func:`layerlab.analysis.stats.rates`), effects the
interval each cell's method gives (:func:`layerlab.analysis.stats.paired_effects`: Tango's score interval
where tasks alone are resampled and the pairs are binary, else the calibrated bootstrap; the title names
it); nothing here computes an interval of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from layerlab import paths
from layerlab.analysis import exact, stats  # noqa: E402
from layerlab.analysis.records import as_frame  # noqa: E402
from layerlab.mitigations import contract_pair  # noqa: E402
from layerlab.reporting.format import display

STYLE = {
    "axes.spines.right": False,
    "axes.spines.top": False,
    "font.family": "DejaVu Sans",
    "svg.hashsalt": "layerlab",
    "pdf.fonttype": 42,
}
BASELINE_COLOUR, TREATMENT_COLOUR = "#4c72b0", "#dd8452"  # the contract pair's arms
FOREST_COLUMNS = 2  # forest panels per row: each stays legible at page width


def palette() -> dict[str, str]:
    """The contract pair's colours, keyed by the arms the mitigations spec names."""
    base, treat = contract_pair()
    return {base: BASELINE_COLOUR, treat: TREATMENT_COLOUR}


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


class Figure:
    """A saved figure: shown inline in a notebook as the PNG just written (the same bytes as the
    file), with the files it was written to as its text form."""

    def __init__(self, png: bytes, files: list[str]) -> None:
        self.png = png
        self.files = files

    def _repr_png_(self) -> bytes:
        return self.png

    def __repr__(self) -> str:
        return f"<figure: {', '.join(self.files)}>"


def show(fig: Any, name: str, out_dir: Path | None = None) -> Figure:
    """:func:`save` ``fig`` and return it for inline display (a notebook cell's last value)."""
    out = Path(out_dir or paths.FIGURES)
    files = save(fig, name, out)
    return Figure((out / f"{name}.png").read_bytes(), [f"figures/{f}" for f in files])


# --- units: one panel each, never pooled ---------------------------------------------------------


Records: TypeAlias = pd.DataFrame | Iterable[Any]


def _frame(data: Records) -> pd.DataFrame:
    """Records as one frame: a records frame, several (models and a baseline block, say) or
    archive :class:`~layerlab.archive.Record` values."""
    if isinstance(data, pd.DataFrame):
        return data
    items: list[Any] = list(data)
    if items and all(isinstance(d, pd.DataFrame) for d in items):
        return pd.concat(items, ignore_index=True)
    return as_frame(items)


def unit_order(df: pd.DataFrame) -> list[str]:
    """Units (``provider/model``): real models first, then reference agents, each sorted."""
    units = sorted(set(stats.unit_labels(df)))
    return sorted(units, key=lambda u: (display.unit_kind(u.split("/", 1)[0]) != display.REAL_MODEL, u))


def unit_rates(data: Records, outcome: str = stats.OUTCOME) -> pd.DataFrame:
    """Rate of ``outcome`` per unit × scenario × arm with its cluster-aware 95% interval
    (:func:`layerlab.analysis.stats.rates` on each unit's records alone: a unit's interval resamples its
    tasks). Columns ``unit, kind, scenario, arm, rate, ci_low, ci_high, n, design``."""
    df = _frame(data)
    labels = stats.unit_labels(df)
    rows = []
    for unit in unit_order(df):
        r = stats.rates(df[labels == unit], outcome)
        for _, c in r.iterrows():
            rows.append(
                {
                    "unit": unit,
                    "kind": display.unit_kind(unit.split("/", 1)[0]),
                    "scenario": c["scenario"],
                    "arm": c[stats.ARM],
                    "rate": c["rate"],
                    "ci_low": c["ci_low"],
                    "ci_high": c["ci_high"],
                    "n": int(c["n"]),
                    "design": c["design"],
                }
            )
    return pd.DataFrame(rows)


def _n_text(ns: Iterable[int]) -> str:
    vals = sorted(set(int(n) for n in ns))
    if not vals:
        return "n = 0"
    return f"n = {vals[0]:,}" if len(vals) == 1 else f"n = {vals[0]:,}–{vals[-1]:,}"


def rates_by_scenario(long: pd.DataFrame, title: str, label: str = "strict success S") -> Any:
    """Small multiples, one panel per unit (model or agent, labelled which): a rate by scenario,
    one point per arm with its 95% interval, the records each point counts in the panel title.
    ``long`` has ``unit, scenario, arm, rate, ci_low, ci_high, n``."""
    _setup()
    units = list(dict.fromkeys(long["unit"]))
    scenarios = list(dict.fromkeys(long["scenario"]))
    arms = list(dict.fromkeys(long["arm"]))
    fig, axes = plt.subplots(
        len(units), 1, figsize=(7.2, 1.1 + 1.9 * len(units)), sharex=True, squeeze=False
    )
    colours = sns.color_palette("colorblind" if len(arms) <= 10 else "tab20", len(arms))
    step = min(0.18, 0.8 / max(len(arms), 1))  # every arm's point stays within its scenario
    pal = palette()
    for ax, unit in zip(axes[:, 0], units, strict=True):
        sub = long[long["unit"] == unit]
        for j, arm in enumerate(arms):
            a = sub[sub["arm"] == arm].set_index("scenario").reindex(scenarios)
            x = [i + (j - (len(arms) - 1) / 2) * step for i in range(len(scenarios))]
            err = [a["rate"] - a["ci_low"], a["ci_high"] - a["rate"]]
            colour = pal.get(arm, colours[j]) if len(arms) <= 2 else colours[j]
            ax.errorbar(x, a["rate"], yerr=err, fmt="o", ms=4, capsize=2, color=colour, label=arm)
        ax.set_title(
            f"{display.unit_label(unit)}  ({_n_text(sub['n'])} records per point)",
            fontsize=9,
            loc="left",
        )
        ax.set_ylim(-0.05, 1.05)
        ax.set_ylabel(label, fontsize=8)
    axes[-1, 0].set_xticks(range(len(scenarios)), scenarios, rotation=30, ha="right")
    axes[0, 0].legend(title="arm", fontsize=7, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=10, y=1.0 + 0.06 / len(units))
    return fig


def rates_by_unit(
    data: Records,
    title: str,
    outcome: str = stats.OUTCOME,
    label: str = "strict success S",
) -> Any:
    """:func:`rates_by_scenario` of :func:`unit_rates`: every unit in its own panel (real models
    first, reference agents after, each labelled), cluster-aware 95% intervals. The title gains
    the units counted; each panel names its records per point."""
    long = unit_rates(data, outcome)
    units = list(dict.fromkeys(long["unit"]))
    designs = "/".join(sorted(set(long["design"])))
    what = f"{len(units)} unit(s), one panel each; 95% cluster-aware Clopper-Pearson intervals ({designs})"
    return rates_by_scenario(long, f"{title}\n{what}", label)


def methods_text(methods: Sequence[str]) -> str:
    """Which interval method the cells used (:func:`layerlab.analysis.exact.cell_methods`), for a
    figure's title: ``95% intervals: Tango's score interval in every cell``."""
    return "95% intervals: " + display.interval_methods(methods)


def paired_effects_by_unit(
    data: Records, title: str, n_boot: int = stats.N_BOOT, seed: int = 0
) -> Any:
    """Treatment − baseline success per scenario, one forest panel per unit, each with its own
    95% intervals (:func:`layerlab.analysis.stats.paired_effects` on that unit's records, tasks
    resampled; each cell's method: :func:`layerlab.analysis.exact.cell_methods`).
    The panel title gives the unit, what it is and the task pairs per scenario.

    Panels sit in a grid two wide (legible at page width, however many units); each non-zero
    effect is written out beside its own interval, on the side with room (toward zero)."""
    _setup()
    df = _frame(data)
    labels = stats.unit_labels(df)
    units = unit_order(df)
    ncols = min(FOREST_COLUMNS, len(units))
    nrows = -(-len(units) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(7.2, 0.9 + 3.1 * nrows), sharey=True, squeeze=False
    )
    methods: list[str] = []
    for i, unit in enumerate(units):
        ax = axes[i // ncols, i % ncols]
        eff = stats.paired_effects(df[labels == unit], n_boot=n_boot, seed=seed)
        methods += list(eff.table["method"])
        e = eff.table.iloc[::-1].reset_index(drop=True)
        y = list(range(len(e)))
        ax.hlines(y, 100 * e["ci_low"], 100 * e["ci_high"], color="#333333", linewidth=2)
        ax.plot(100 * e["estimate"], y, "o", color=TREATMENT_COLOUR, ms=5)
        ax.axvline(0, color="#999999", linewidth=1, linestyle="--")
        for yi, (_, r) in zip(y, e.iterrows(), strict=True):
            if r["estimate"] != 0:  # the interval in numbers, just beside the interval's end
                right = r["estimate"] < 0  # a gain's label sits left of it, a loss's right
                ax.annotate(
                    f"{display.points(100 * r['estimate'])} "
                    f"[{display.points(100 * r['ci_low'])}, {display.points(100 * r['ci_high'])}]",
                    (100 * (r["ci_high"] if right else r["ci_low"]), yi),
                    xytext=(4 if right else -4, 0),
                    textcoords="offset points",
                    ha="left" if right else "right",
                    va="center",
                    fontsize=7,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
                )
        ax.set_yticks(y, e["scenario"])
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlim(-105, 105)
        ax.set_xlabel(f"{eff.paired.treatment} − {eff.paired.baseline} (pp)", fontsize=8)
        kind = display.unit_kind(unit.split("/", 1)[0])
        ax.set_title(
            f"{unit}\n{kind}\n{_n_text(e['n_pairs'])} task pairs per scenario",
            fontsize=8,
            loc="left",
        )
    for j in range(len(units), nrows * ncols):  # an odd count leaves one cell empty
        fig.delaxes(axes[j // ncols, j % ncols])
    boot = (f" (bootstrap: {n_boot:,} resamples of tasks, seed {seed})"
            if exact.BOOTSTRAP in methods else "")  # fmt: skip
    fig.suptitle(
        f"{title}\n{len(units)} unit(s), one panel each; {methods_text(methods)}{boot}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def retriever_ablation(
    table3: pd.DataFrame, n_tasks: int, title: str, metric: str = "top-1 recall"
) -> Any:
    """``metric`` per retriever (rows) and index condition (one marker each), with 95% Wilson
    intervals over the ``n_tasks`` tasks and the value printed beside every point, so a zero is
    as visible as a one. The legend sits below the axes, hiding nothing; a sensitivity retriever
    is labelled as such. Table 3's extra rows (beyond the paper) are left out: the figure is
    the paper's."""
    from layerlab.reporting.paper.tables.benchmark import BEYOND
    from layerlab.system import retrieval

    _setup()
    table3 = table3[~table3["retriever"].str.endswith(BEYOND)]  # the paper's rows only
    retrievers = list(dict.fromkeys(table3["retriever"]))
    conditions = list(dict.fromkeys(table3["condition"]))
    colours = sns.color_palette("colorblind", len(conditions))
    fig, ax = plt.subplots(figsize=(7.0, 0.75 * len(retrievers) + 1.9))
    step = min(0.25, 0.8 / max(len(conditions), 1))
    for j, cond in enumerate(conditions):
        sub = table3[table3["condition"] == cond].set_index("retriever").reindex(retrievers)
        ys = [i + (j - (len(conditions) - 1) / 2) * step for i in range(len(retrievers))]
        for y, v in zip(ys, sub[metric], strict=True):
            lo, hi = stats.wilson(round(float(v) * n_tasks), n_tasks)
            ax.hlines(y, lo, hi, color=colours[j], linewidth=1.4)
            ax.plot(v, y, "o", color=colours[j], ms=5, label=cond if y == ys[0] else None)
            ax.text(hi + 0.012, y, display.percent(v), va="center", fontsize=6.5, color="#333333")
    names = []
    for r in retrievers:
        sees_domain = r in retrieval.REGISTRY and retrieval.REGISTRY[r].explicit_domain
        names.append(f"{r}\n(sensitivity: sees labelled domain)" if sees_domain else r)
    ax.set_yticks(range(len(retrievers)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(-0.02, 1.12)
    ax.set_xticks([0, 0.2, 0.4, 0.6, 0.8, 1.0], ["0%", "20%", "40%", "60%", "80%", "100%"])
    ax.set_xlabel(f"required-document {metric}")
    ax.set_title(
        f"{title}\nn = {n_tasks:,} tasks per point (deterministic retrievers, no model); "
        "95% Wilson intervals over tasks",
        fontsize=9,
    )
    ax.legend(
        title="index condition",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=len(conditions),
        fontsize=7,
        title_fontsize=8,
        frameon=False,
    )
    return fig


def specificity_heatmap(cells: pd.DataFrame, title: str, units: Sequence[str] = ()) -> Any:
    """Mitigation × scenario paired effects (pp) as a diverging heatmap with each cell's 95%
    interval (its method's, :func:`layerlab.analysis.exact.cell_methods`) under its estimate;
    target cells boxed. The title names the unit(s), the task pairs per cell and the methods."""
    _setup()
    rows = list(dict.fromkeys(cells["mitigation"]))
    cols = list(dict.fromkeys(cells["scenario"]))
    grid = cells.set_index(["mitigation", "scenario"])
    data = cells.pivot(index="mitigation", columns="scenario", values="estimate").loc[rows, cols] * 100
    text = [
        [
            f"{display.points(100 * grid.loc[(r, c), 'estimate'], 0)}\n"
            f"[{display.points(100 * grid.loc[(r, c), 'ci_low'], 0)}, "
            f"{display.points(100 * grid.loc[(r, c), 'ci_high'], 0)}]"
            for c in cols
        ]
        for r in rows
    ]
    fig, ax = plt.subplots(figsize=(1.05 * len(cols) + 2.6, 0.55 * len(rows) + 2.0))
    sns.heatmap(
        data,
        annot=pd.DataFrame(text, index=rows, columns=cols),
        fmt="",
        vmin=-100,
        vmax=100,
        center=0,
        cmap="RdBu",
        cbar_kws={"label": "effect vs baseline (pp)"},
        ax=ax,
        linewidths=0.5,
        annot_kws={"fontsize": 6},
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
    who = "; ".join(display.unit_label(u) for u in units)
    ax.set_title(
        f"{title}\n{who + '; ' if who else ''}{_n_text(cells['n_pairs'])} task pairs per cell; "
        "95% intervals in brackets"
        + (f": {display.interval_methods(list(cells['method']))}" if "method" in cells else ""),
        fontsize=9,
    )
    return fig


# --- the reliability surface: one panel per layer, a row per unit and arm ------------------------

SURFACE_COLOURS = {"safe": "#4c72b0", "S": "#dd8452"}  # safe resolution, strict success S
_SURFACE_LABELS = {"safe": "safe resolution", "S": "strict success S"}


def reliability_surface(curves: Sequence[Any], title: str) -> Any:
    """Each layer's safe resolution and strict success S over the fault's intensity λ
    (:func:`layerlab.analysis.surface.surface`'s curves): one column per faulted layer, one row
    per unit × arm (never pooled; the unit labelled what it is), a point per tested λ with the
    run's 95% interval (Clopper-Pearson clustered by task), pass^k of safe resolution for each
    k > 1 the run's epochs allow as thinner lines, and the fault-free scenario's safe resolution
    as a dashed line (every layer's λ = 0 floor)."""
    _setup()
    faulted = [c for c in curves if c.scenario != "clean"]
    rows = list(dict.fromkeys((c.unit, c.arm) for c in faulted))
    cols = list(dict.fromkeys((c.scenario, c.layer) for c in faulted))
    clean = {(c.unit, c.arm): c.points[0] for c in curves if c.scenario == "clean"}
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(2.3 * len(cols) + 0.6, 0.6 + 2.1 * len(rows)),
                             sharex=True, sharey=True, squeeze=False)  # fmt: skip
    by = {(c.unit, c.arm, c.scenario): c for c in faulted}
    for i, (unit, arm) in enumerate(rows):
        for j, (scen, layer) in enumerate(cols):
            ax = axes[i, j]
            c = by.get((unit, arm, scen))
            if c is not None:
                _surface_panel(ax, c, clean.get((unit, arm)))
            if i == 0:
                ax.set_title(f"{layer}\n({scen})", fontsize=8)
            ax.set_ylim(-0.05, 1.05)
            ax.set_xlim(-0.05, 1.05)
        axes[i, 0].set_ylabel(f"{unit}\n{arm}", fontsize=7)
    for ax in axes[-1, :]:
        ax.set_xlabel("intensity λ", fontsize=8)
    axes[0, -1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    kinds = sorted({display.unit_kind(u.split("/", 1)[0]) for u, _ in rows})
    fig.suptitle(f"{title}\n{'; '.join(kinds)}; 95% Clopper-Pearson intervals clustered by task",
                 fontsize=9, y=1.0 + 0.16 / len(rows))  # fmt: skip
    return fig


def _surface_panel(ax: Any, curve: Any, clean: Any) -> None:
    xs = [p.intensity for p in curve.points]
    for short, marker, ms in (("S", "-s", 4.5), ("safe", "-o", 2.5)):  # safe on top: both seen
        est = [p.rates[short] for p in curve.points]
        y = [e.rate for e in est]
        err = [[e.rate - e.ci_low for e in est], [e.ci_high - e.rate for e in est]]
        ax.errorbar(xs, y, yerr=err, fmt=marker, ms=ms, lw=1.2, capsize=2,
                    color=SURFACE_COLOURS[short], label=_SURFACE_LABELS[short])  # fmt: skip
    ks = sorted(k for k in curve.points[0].pass_hat["safe"] if k > 1)
    for k, ls in zip(ks, ("--", ":", "-."), strict=False):  # k = 2, 4, 8: one style each
        y = [p.pass_hat["safe"][k] for p in curve.points]
        ax.plot(xs, y, lw=0.9, ls=ls, color=SURFACE_COLOURS["safe"], label=f"pass^{k} (safe)")
    if clean is not None and clean.rates["safe"].rate is not None:
        ax.axhline(clean.rates["safe"].rate, color="0.55", lw=0.8, ls=(0, (6, 3)), label="clean (safe)")
    ax.set_xticks(xs, [f"{x:g}" for x in xs], fontsize=6, rotation=90 if len(xs) > 6 else 0)
    ax.tick_params(axis="y", labelsize=7)


# --- conversations: S by turn index, one panel per system ----------------------------------------


def conversations_by_turn(rates: Sequence[dict[str, Any]], title: str) -> Any:
    """Strict success S at each turn index of the conversations
    (:func:`layerlab.analysis.conversations.turn_rates`): one panel per system (never pooled; the
    unit labelled what it is), a line per scenario, each point with its exact 95% interval
    (Clopper-Pearson over the conversations with a turn there; none drawn over several epochs),
    the turns counted at each index under the axis."""
    _setup()
    models = list(dict.fromkeys(r["model"] for r in rates))
    scens = list(dict.fromkeys(r["scenario"] for r in rates))
    colours = dict(zip(scens, sns.color_palette("colorblind", len(scens)), strict=True))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 1.6, 3.4),
                             sharey=True, squeeze=False)  # fmt: skip
    step = 0.5 / max(len(scens), 1)
    for ax, model in zip(axes[0], models, strict=True):
        mine = [r for r in rates if r["model"] == model]
        turns = sorted({r["turn"] for r in mine})
        for i, scen in enumerate(scens):
            pts = [r for r in mine if r["scenario"] == scen]
            if not pts:
                continue
            xs = [r["turn"] + (i - (len(scens) - 1) / 2) * step for r in pts]
            ys = [r["S"] for r in pts]
            err = None
            if all(r["interval"] for r in pts):
                err = [[r["S"] - r["interval"][0] for r in pts], [r["interval"][1] - r["S"] for r in pts]]
            ax.errorbar(xs, ys, yerr=err, fmt="-o", ms=3, lw=1.1, capsize=1.5,
                        color=colours[scen], label=scen)  # fmt: skip
        ns = {t: max(r["n"] for r in mine if r["turn"] == t) for t in turns}
        ax.set_xticks(turns, [f"t{t}\nn={ns[t]}" for t in turns], fontsize=7)
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{model}\n({display.unit_kind(model.split('/', 1)[0])})", fontsize=8)
        ax.set_xlabel("turn index (turns counted)", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    axes[0, 0].set_ylabel("strict success S", fontsize=8)
    axes[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), title="scenario",
                       title_fontsize=7)  # fmt: skip
    fig.suptitle(f"{title}\nexact 95% Clopper-Pearson intervals over conversations", fontsize=9, y=1.1)
    return fig

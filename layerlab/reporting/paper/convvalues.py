"""The conversations section's numbers, as macros of ``paper/generated/values.tex``
(:func:`layerlab.reporting.paper.papervalues.values` adds them).

From the generated conversations table (``paper/tables/conversations.csv``: S by turn index,
conversation success, the leak over turns with its interval, the turn where S is lowest) and the
committed conversational archives (the conversations' size; the kind of turn that failed most at
the break and its commonest diagnosis). Names are ``Conv`` + the system (``Extractive``,
``Cautious``) + the scenario in camel case + the quantity: ``STurnZero`` … (S at a turn index),
``Whole`` (conversation success), ``Leak`` (the leak over turns with its exact interval),
``LeakK``/``LeakN`` (its counts), ``LeakConv`` (over conversations), ``Break`` (the turn index),
``BreakKind`` and ``BreakDiagnostic``. A real model's chat chain is one generated sentence,
``ConvModel``: its numbers once its archive is committed under
``data/archives/local_model_conversations/``, else a sentence saying none is.

The session mitigations' matrix (``paper/tables/conversations_matrix.csv``, Table A9): ``ConvMx``
+ the system + the arm in camel case + ``Verdict``, ``Gain`` (the target gain with its 95%
interval, pp) and, for each target scenario, the scenario's cell
(``ConvMxExtractiveUpdateInvalidationStaleToolCache``); ``ConvRefScored`` counts the baseline's turns (Table 21's),
``ConvRefArmScored`` the archive's under every arm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from layerlab.analysis.conversations import baseline
from layerlab.reporting.paper.texvalues import ValuesError, word
from layerlab.reporting.paper.texvalues import camel as _camel
from layerlab.reporting.paper.texvalues import csv_table as _csv
from layerlab.reporting.paper.texvalues import rate as _rate
from layerlab.reporting.paper.texvalues import tex as _tex

REFERENCE = "reference agents"  # the table's block of the reference readers (its label's start)
MODEL = "real models"


def _sizes(runs: dict[str, list[Any]]) -> dict[str, str]:
    from layerlab.corpus import conversations as cv
    from layerlab.faults.scenario import conversation_scenarios

    convs, key = cv.build_from_specs()
    lengths = sorted({len(c.turns) for c in convs})
    scen = conversation_scenarios()
    ref = runs.get("reference") or []
    return {
        "ConvCount": str(len(convs)),
        "ConvTurns": str(len(key)),
        "ConvDomains": word(len({c.domain for c in convs})),
        "ConvMinTurns": word(lengths[0]),
        "ConvMaxTurns": word(lengths[-1]),
        "ConvFaults": word(sum(1 for s in scen.values() if s.operators)),
        "ConvRefScored": f"{len(baseline(ref)):,}".replace(",", "{,}"),
        "ConvRefArmScored": f"{len(ref):,}".replace(",", "{,}"),
    }


def _matrix(tables: Path) -> dict[str, str]:
    """Table A9's verdicts, target gains and target cells (module docstring)."""
    table = _csv(tables, "conversations_matrix")
    out: dict[str, str] = {}
    fixed = {"block", "system", "arm", "layer(s)", "target gain, pp [95% CI]", "verdict"}
    for _, r in table.iterrows():
        name = f"ConvMx{_system(r['system'])}{_camel(r['arm'])}"
        out[f"{name}Verdict"] = _tex(r["verdict"])
        out[f"{name}Gain"] = r["target gain, pp [95% CI]"]
        for col in (c for c in table.columns if c not in fixed):
            if r[col].startswith("*"):
                out[f"{name}{_camel(col)}"] = r[col].removeprefix("*")
    return out


def _leak(r: Any) -> tuple[str, str, str]:
    """A table row's leak over turns: the rate with its interval, k, n."""
    k, _, n = r["leaked turns"].partition("/")
    return r["leak [95% CI]"], k, n


def _system(model: str) -> str:
    return _camel(model.split("/", 1)[-1])


def _reference(table: Any, summaries: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    rows = table[table["block"].str.startswith(REFERENCE)]
    if rows.empty:
        raise ValuesError(
            "conversations.csv: no reference readers' rows (run `layerlab reproduce`)"
        )
    turns = [c for c in table.columns if c.startswith("S t")]
    for _, r in rows.iterrows():
        name = f"Conv{_system(r['system'])}{_camel(r['scenario'])}"
        for col in turns:
            if r[col] != "-":
                out[f"{name}STurn{word(int(col[3:])).title()}"] = r[col]
        out[f"{name}Whole"] = r["conv. S"]
        rate, k, n = _leak(r)
        out[f"{name}Leak"], out[f"{name}LeakK"], out[f"{name}LeakN"] = rate, k, n
        out[f"{name}Break"] = r["breaks at"].removeprefix("t")
        cell = summaries["reference"][r["system"]][r["scenario"]]
        lc = cell["leak_conversations"]
        out[f"{name}LeakConv"] = (
            f"{_rate(lc['rate'])} [{_rate(lc['interval'][0])}, {_rate(lc['interval'][1])}]"
        )
        out[f"{name}BreakKind"] = _tex((cell["break"]["kind"] or "none").replace("_", " "))
        out[f"{name}BreakDiagnostic"] = _tex(
            (cell["break"]["diagnostic"] or "none").replace("_", " ")
        )
    return out


def _model_sentence(table: Any, summaries: dict[str, Any]) -> str:
    """The real models' chat chains in one sentence each (none committed: a sentence saying so)."""
    rows = table[table["block"].str.startswith(MODEL)]
    if rows.empty:
        return ("A real model's chat chain over the conversations is not committed yet; its "
                "rows join the table when it is.")  # fmt: skip
    cells = {m: c for s in summaries.values() for m, c in s.items()}
    parts = []
    for model in dict.fromkeys(rows["system"]):
        mine = rows[rows["system"] == model]
        one = next(iter(cells[model].values()))
        clauses = []
        for _, r in mine.iterrows():
            b = cells[model][r["scenario"]]["break"]
            rate, k, n = _leak(r)
            clauses.append(f"under {r['scenario']} S {r['S t0']} at the opening turn and "
                           f"{r['conv. S']} of the conversations whole, lowest at turn "
                           f"{r['breaks at'].removeprefix('t')} ({b['kind'] or 'none'} turns, most "
                           f"often {b['diagnostic'] or 'none'}), a cross-session leak of {rate} "
                           f"of its turns ({k} of {n})")  # fmt: skip
        parts.append(f"The real model's chat chain ({model}) over {one['conversations']} "
                     f"conversations: " + "; ".join(clauses) + ". " + _decides(one))  # fmt: skip
    return _tex(" ".join(parts))


def _decides(cell: dict[str, Any]) -> str:
    """What a run of this size can decide, from its own counts: the exact 95% interval of none of
    its conversations, the half-width near one half, and none of its turns."""
    from layerlab.analysis.rates import clopper_pearson

    n, turns = cell["conversations"], cell["turns"]
    none_hi = clopper_pearson(0, n)[1]
    lo, hi = clopper_pearson(n // 2, n)
    return (f"At {n} conversations a share of them is known to within an exact 95% interval of "
            f"about {_rate((hi - lo) / 2)} either side near one half (none of {n} still allows "
            f"{_rate(none_hi)}), so this size tells apart only differences of that order between "
            f"scenarios or systems, and over a scenario's {turns} turns no leak bounds the leak rate at "
            f"{_rate(clopper_pearson(0, turns)[1])}; it cannot rank scenarios whose intervals "
            "overlap.")


def values(tables: Path) -> dict[str, str]:
    """The conversations section's macros (module docstring), from ``tables`` and the archives."""
    from layerlab.analysis.conversations import load, summarise

    table = _csv(tables, "conversations")
    runs = load()
    if "reference" not in runs:
        raise ValuesError("data/archives/conversations/reference: missing (run `make "
                          "reference-conversations`)")  # fmt: skip
    summaries = {name: summarise(recs) for name, recs in runs.items()}
    return {**_sizes(runs), **_reference(table, summaries), **_matrix(tables),
            "ConvModel": _model_sentence(table, summaries)}  # fmt: skip


__all__ = ["values"]

"""A conversational run's statistics: per turn, per conversation, over epochs, and the leak.

From the turn records (:class:`~layerlab.archive.turnrecords.TurnRecord`), per system (provider,
model) and arm (:func:`system_label`: the model, with a session mitigation's name in brackets
when the arm is not the baseline ``none``) and per scenario:

* **by turn index** — the turns at each index, their S, safe resolution and GF rates, and the
  leaks: where in a conversation a system breaks;
* **per conversation** — a conversation succeeds in an epoch when every one of its turns does
  (S); the success rate is the mean over conversations and epochs, and **pass^k** over the
  epochs is C(c, k)/C(n, k) per conversation (:func:`~layerlab.analysis.passk.pass_hat_k`),
  averaged over the conversations;
* **the cross-session leak**, reported apart: the share of turns whose reply carried another
  user's conversation, and the share of conversations with at least one, each with its exact
  (Clopper–Pearson) 95% interval (:func:`~layerlab.analysis.rates.clopper_pearson`);
* **the break** — the turn index with the lowest S (the first of ties) and, among its failed
  turns, the kind that failed most and the commonest diagnosis, each with its count: what a
  finding names;
* **the struck answers** — the turns a fault struck, and those of them answered and not safely
  resolved, by diagnosis: what a layer's finding counts (``roles.yaml`` ``conversation_findings``).

:func:`turn_rates` gives S by turn index with exact intervals (what the figures draw),
:func:`baseline` a run's records of the baseline arm, and :func:`load` reads the committed
conversational archives (or the run folders given).

Numbers only; their text is :mod:`layerlab.reporting.format.convtext`'s. Conversations cluster by
policy (one per policy in the shipped DSL), so a conversation is the unit of the intervals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from layerlab import paths
from layerlab.analysis.passk import pass_hat_k
from layerlab.analysis.rates import clopper_pearson
from layerlab.archive.turnrecords import NONE

DIGITS = 4


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def _rate(k: int, n: int) -> dict[str, Any]:
    lo, hi = clopper_pearson(k, n) if n else (float("nan"), float("nan"))
    return {"k": k, "n": n, "rate": _r(k / n) if n else None,
            "interval": [_r(lo), _r(hi)] if n else None}  # fmt: skip


def _cell(recs: Sequence[Any]) -> dict[str, Any]:
    n = len(recs)
    turns: dict[int, list[Any]] = defaultdict(list)
    convs: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in recs:
        turns[r.turn].append(r)
        convs[(r.conversation_id, r.epoch)].append(r)
    by_turn = [
        {"turn": t, "n": len(rs), "S": _r(sum(r.success for r in rs) / len(rs)),
         "safe": _r(sum(r.safe_resolution for r in rs) / len(rs)),
         "GF": _r(sum(r.grounded_false_positive for r in rs) / len(rs)),
         "leaks": sum(r.leak for r in rs)}
        for t, rs in sorted(turns.items())
    ]  # fmt: skip
    whole = {k: all(r.success for r in rs) for k, rs in convs.items()}
    per_conv: dict[str, list[bool]] = defaultdict(list)
    for (cid, _epoch), ok in sorted(whole.items()):
        per_conv[cid].append(ok)
    epochs = min(len(v) for v in per_conv.values())
    passk = {str(k): _r(sum(pass_hat_k(len(v), sum(v), k) for v in per_conv.values())
                        / len(per_conv)) for k in range(1, epochs + 1)}  # fmt: skip
    leaky = {cid for (cid, _e), rs in convs.items() if any(r.leak for r in rs)}
    worst = min(by_turn, key=lambda x: (x["S"], x["turn"]))
    failed = [r for r in turns[worst["turn"]] if not r.success]
    kinds = Counter(r.kind for r in failed).most_common(1)
    diags = Counter(r.diagnostic for r in failed).most_common(1)
    first_leak = min((r.turn for r in recs if r.leak), default=None)
    bad = Counter(r.diagnostic for r in recs
                  if r.struck and r.answered and not r.safe_resolution)  # fmt: skip
    return {
        "turns": n,
        "S": _r(sum(r.success for r in recs) / n),
        "safe": _r(sum(r.safe_resolution for r in recs) / n),
        "GF": _r(sum(r.grounded_false_positive for r in recs) / n),
        "struck": sum(r.struck for r in recs),
        "struck_unsafe_answers": dict(sorted(bad.items())),
        "conversations": len(per_conv),
        "epochs": epochs,
        "conversation_success": _r(sum(whole.values()) / len(whole)),
        "pass_hat_k": passk,
        "leak_turns": _rate(sum(r.leak for r in recs), n),
        "leak_conversations": _rate(len(leaky), len(per_conv)),
        "first_leak_turn": first_leak,
        "by_turn": by_turn,
        "break": {"turn": worst["turn"], "S": worst["S"], "S_turn0": by_turn[0]["S"],
                  "failed": len(failed), "n": worst["n"],
                  "kind": kinds[0][0] if kinds else None,
                  "kind_failed": kinds[0][1] if kinds else 0,
                  "diagnostic": diags[0][0] if diags else None,
                  "diagnostic_failed": diags[0][1] if diags else 0},  # fmt: skip
    }


def system_label(model: str, mitigation: str = NONE) -> str:
    """The key of a system × arm in the summary: ``"<model>"`` for the baseline arm,
    ``"<model> [<mitigation>]"`` for a mitigated one (its findings reported apart)."""
    return model if mitigation == NONE else f"{model} [{mitigation}]"


def summarise(records: Iterable[Any]) -> dict[str, Any]:
    """The run's statistics (module docstring), keyed by :func:`system_label` then scenario,
    in the order first met; plain JSON values."""
    cells: dict[str, dict[str, list[Any]]] = {}
    for r in records:
        label = system_label(r.model, getattr(r, "mitigation", NONE))
        cells.setdefault(label, {}).setdefault(r.scenario, []).append(r)
    return {m: {s: _cell(rs) for s, rs in by.items()} for m, by in cells.items()}


def baseline(records: Iterable[Any]) -> list[Any]:
    """The records of the baseline arm (``none``): a run without arms whole, a run with the
    session mitigations its unmitigated systems (what Table 21 and the figures show; the arms
    are compared with it by :mod:`layerlab.analysis.convmatrix`)."""
    return [r for r in records if getattr(r, "mitigation", NONE) == NONE]


def turn_rates(records: Iterable[Any]) -> list[dict[str, Any]]:
    """S by turn index per system (:func:`system_label`: an arm is a system of its own, never
    pooled with the baseline) and scenario, in the order first met: ``model``, ``scenario``,
    ``turn``, ``k`` successes of ``n`` turns, ``S`` and its exact (Clopper–Pearson) 95%
    ``interval``. A conversation has one turn at an index per epoch, so over one epoch the turns
    at an index are independent conversations; over several a conversation's epochs are
    correlated and the interval is ``None`` (no interval the data do not support)."""
    cells: dict[tuple[str, str], dict[int, list[Any]]] = {}
    epochs: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in records:
        label = system_label(r.model, getattr(r, "mitigation", NONE))
        cells.setdefault((label, r.scenario), {}).setdefault(r.turn, []).append(r)
        epochs[(label, r.scenario)].add(r.epoch)
    out = []
    for (model, scen), turns in cells.items():
        one = len(epochs[(model, scen)]) == 1
        for t, rs in sorted(turns.items()):
            k, n = sum(r.success for r in rs), len(rs)
            out.append({"model": model, "scenario": scen, "turn": t, "k": k, "n": n,
                        "S": _r(k / n), "interval": _rate(k, n)["interval"] if one else None})  # fmt: skip
    return out


def load(archives: Iterable[Path | str] | None = None) -> dict[str, list[Any]]:
    """Each conversational archive's turn records, by its folder's name (default: the committed
    ones, :func:`layerlab.paths.conversation_archives`: the reference readers', then each real
    model's); a run folder (``turns.jsonl``) or a packed archive (``turns.parquet``)."""
    from layerlab.archive import turnrecords

    runs = [Path(a) for a in archives] if archives else paths.conversation_archives()
    return {run.name: turnrecords.read(run) for run in runs}


__all__ = ["baseline", "load", "summarise", "system_label", "turn_rates"]

"""The specificity matrix of the session mitigations, over a conversational run's turn records.

The judged outcome is ``safe_resolution`` (a success on a turn an answerable fault leaves
answerable, a structured non-answer on a turn an unanswerable fault struck;
:mod:`layerlab.scoring.turns`) or, with ``outcome="success"``, S. Two units (:data:`UNITS`):

* ``turn`` — each turn's outcome, paired across arms by (conversation, turn index) and clustered
  by conversation (the intervals resample conversations, as question variants are resampled by
  policy): the change in turn-level success. The scripted user branches on the replies, so two
  arms may say different words at a turn index, or one may end a conversation earlier (its
  missing turns are unpaired and left out);
* ``conversation`` — whether *every* turn of the conversation did (the summary's ``conv S``),
  paired by conversation: what both arms played whatever the branches.

Each arm is paired with the baseline arm (``none``), epochs averaged, and the cells, intervals
and verdicts are
the single-turn matrix's own (:func:`layerlab.analysis.specificity.matrix`: intersection-union,
TOST against each layer's equivalence margin in ``roles.yaml``), with the arms' layers from the
conversational spec (:mod:`layerlab.mitigations.session`) and the scenarios' from
``scenarios_conversation.yaml``. One matrix per system: a reference reader's verdicts are never
pooled with another system's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from layerlab.analysis.specificity import Matrix, matrix
from layerlab.faults.scenario import Scenario, conversation_scenarios, split_variant
from layerlab.mitigations.book import ArmBook

OUTCOMES = ("safe_resolution", "success")
UNITS = ("turn", "conversation")


def conversation_frame(records: Iterable[Any], unit: str = "conversation") -> pd.DataFrame:
    """The rows the matrix pairs. ``conversation``: one per system × arm × scenario ×
    conversation × epoch, ``task_id`` the conversation, ``policy_id`` its cluster, and whether
    every turn succeeded (``success``) and was safely resolved (``safe_resolution``). ``turn``:
    one per turn record, ``task_id`` ``<conversation>#<turn>``, clustered by its conversation
    (``policy_id``)."""
    if unit not in UNITS:
        raise ValueError(f"unit {unit!r}: expected one of {', '.join(UNITS)}")
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in records:
        k: tuple[Any, ...] = (r.provider, r.model, r.mitigation, r.scenario, r.conversation_id,
                              r.epoch)  # fmt: skip
        task, cluster = r.conversation_id, r.policy_id
        if unit == "turn":
            k, task, cluster = (*k, r.turn), f"{r.conversation_id}#{r.turn}", r.conversation_id
        row = rows.setdefault(k, {"provider": r.provider, "model": r.model,
                                  "mitigation": r.mitigation, "scenario": r.scenario,
                                  "task_id": task, "policy_id": cluster,
                                  "epoch": r.epoch, "turns": 0, "success": True,
                                  "safe_resolution": True})  # fmt: skip
        row["turns"] += 1
        row["success"] = row["success"] and bool(r.success)
        row["safe_resolution"] = row["safe_resolution"] and bool(r.safe_resolution)
    return pd.DataFrame(list(rows.values()))


def _scenarios(names: Iterable[str]) -> dict[str, Scenario]:
    """Each scenario named in the records (an intensity variant by its scenario's layer)."""
    known = conversation_scenarios()
    out = {}
    for n in names:
        base = split_variant(n)[0]
        if base not in known:
            raise ValueError(f"scenario {n!r}: not a conversational scenario (expected one of "
                             f"{', '.join(known)})")  # fmt: skip
        out[n] = known[base]
    return out


def _margins(scenarios: Mapping[str, Scenario]) -> dict[str, float]:
    from layerlab.faults.roles import load_roles

    roles = load_roles()
    return {n: min(roles.margin(p) for p in s.spec.layer.split("+")) for n, s in scenarios.items()}


def matrices(records: Iterable[Any], book: ArmBook, outcome: str = OUTCOMES[0],
             n_boot: int = 10_000, seed: int = 0, alpha: float = 0.05,
             delta: float | None = None, unit: str = UNITS[0]) -> dict[str, Matrix]:  # fmt: skip
    """The specificity matrix of every arm against ``book``'s baseline, per system (keyed by
    model), on ``outcome`` (:data:`OUTCOMES`) per ``unit`` (:data:`UNITS`: turns clustered by
    conversation, or whole conversations). ``delta``: one margin for every cell, or None for
    each layer's (``roles.yaml``). ValueError (one line) when a system's records hold no
    baseline arm or no other arm."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
    df = conversation_frame(records, unit)
    if df.empty:
        raise ValueError("no turn records to compare")
    scen = _scenarios(dict.fromkeys(df["scenario"]))
    margins: float | dict[str, float] = delta if delta is not None else _margins(scen)
    out: dict[str, Matrix] = {}
    for model in dict.fromkeys(df["model"]):
        sub = df[df["model"] == model]
        try:
            out[model] = matrix(sub, book, scen, n_boot, seed, unit == "turn", alpha, margins,
                                outcome)  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"{model}: {exc}") from None
    return out


__all__ = ["OUTCOMES", "UNITS", "conversation_frame", "matrices"]

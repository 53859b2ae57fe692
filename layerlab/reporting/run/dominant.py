"""The dominant failure of a failing fault-free layer, from the run's private sample log.

``results.json``'s findings say what the archive can say of the fault-free (clean) scenario's
failures (R, G, grounded, E). The sample log (``run live --sample-log``; private, never in a run
folder or an archive) also knows which documents each wrong answer cited and what was delivered,
so it can say *why*: "cited a document of another policy in 9 of 11 wrong answers".

This is added where a run's findings are shown (the terminal after ``run live``, ``layerlab
report``, the pytest plugin's assert) and only when the sample log is given: ``results.json``
stays a function of the archived records alone, reproducible by anyone holding the archive,
and no private file is written. Counts only: no reply, evidence text or expected answer reaches
the sentence.

Each failing record falls in exactly one category (:data:`WRONG` for a wrong answer, first
that holds, in order; :data:`ABSTAINED` for an abstention), each defined once here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

Entry = Mapping[str, Any]


def _cited(e: Entry) -> list[str]:
    return list((e.get("parsed") or {}).get("citations") or [])


def _delivered(e: Entry) -> dict[str, Entry]:
    return {str(d["doc_id"]): d for d in e.get("evidence") or []}


def _policy(doc_id: str, policies: Mapping[str, str]) -> str:
    from layerlab.corpus.build import policy_of

    return policies.get(doc_id) or policy_of(doc_id)


def _other_policy(e: Entry, policies: Mapping[str, str]) -> bool:
    return any(_policy(d, policies) != e["policy_id"] for d in _cited(e))


def _superseded(e: Entry, policies: Mapping[str, str]) -> bool:
    got = _delivered(e)
    return any(d in got and got[d].get("status") != "current" for d in _cited(e))


def _not_stated(e: Entry, policies: Mapping[str, str]) -> bool:
    return e["verdict"].get("grounded") is False


def _uncited(e: Entry, policies: Mapping[str, str]) -> bool:
    return not e["verdict"].get("citation_ok")


Rule = Callable[[Entry, Mapping[str, str]], bool]
# A wrong answer's category: key -> (words, counted "in K of A wrong answers"; rule). The first
# rule that holds decides; a wrong answer no rule takes is "misread".
WRONG: dict[str, tuple[str, Rule | None]] = {
    "other_policy": ("it cited a document of another policy", _other_policy),
    "superseded": ("it cited a superseded version of the question's policy", _superseded),
    "not_stated": ("its value is in no delivered document", _not_stated),
    "uncited": ("it cited no delivered document", _uncited),
    "misread": ("it cited the current document of the question's policy yet gave another "
                "value", None),  # fmt: skip
}
# An abstention's category: whether the required documents were delivered (R ✓)
ABSTAINED: dict[str, str] = {
    "delivered": "the required document was delivered",
    "not_delivered": "the required document was not delivered",
}


def wrong_category(e: Entry, policies: Mapping[str, str]) -> str:
    """The :data:`WRONG` category of one wrong answer's entry."""
    return next(k for k, (_, rule) in WRONG.items() if rule is None or rule(e, policies))


def counts(
    entries: Sequence[Entry], unit: str, scenario: str, arm: str,
    policies: Mapping[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Of ``unit``'s failing records on ``scenario`` under ``arm``: ``wrong`` (answered, E ✗)
    and ``abstained`` (abstentions that reached the reader), each by category."""
    pol = policies or {}
    wrong = dict.fromkeys(WRONG, 0)
    abst = dict.fromkeys(ABSTAINED, 0)
    for e in entries:
        if (f"{e['provider']}/{e['model']}", e["scenario"], e["mitigation"]) != (
            unit, scenario, arm
        ) or e["verdict"].get("safe_resolution"):  # fmt: skip
            continue
        v = e["verdict"]
        if v.get("answered") and not v.get("exact_match"):
            wrong[wrong_category(e, pol)] += 1
        elif e.get("outcome") == "abstained":
            abst["delivered" if v.get("retrieval_ok") else "not_delivered"] += 1
    return {"wrong": wrong, "abstained": abst}


def sentence(c: Mapping[str, Any]) -> str | None:
    """``From the private sample log: in 9 of 11 wrong answers it cited …; in 7 of 7
    abstentions the required document was delivered.`` (None: nothing to say)."""
    parts = []
    w, a = c["wrong"], c["abstained"]
    if sum(w.values()):
        top = max(WRONG, key=lambda k: w[k])  # ties: the first defined
        parts.append(f"in {w[top]} of {sum(w.values())} wrong answers {WRONG[top][0]}")
    if sum(a.values()):
        top = max(ABSTAINED, key=lambda k: a[k])
        parts.append(f"in {a[top]} of {sum(a.values())} abstentions {ABSTAINED[top]}")
    return f"From the private sample log: {'; '.join(parts)}." if parts else None


def _policies(corpus_dir: Path | None) -> dict[str, str]:
    """doc id -> policy of the run's built corpus (default: the committed one), when it can be
    loaded; ids it lacks are read as ``<policy>-<suffix>``."""
    try:
        from layerlab.corpus import build as corpus_mod

        return dict(corpus_mod.load(corpus_dir).policy_by_doc())
    except Exception:  # the corpus is optional here: the id convention still says the policy
        return {}


def for_run(
    found: Sequence[Mapping[str, Any]], log: Path | None,
    run_ids: str | Collection[str] | None = None, corpus_dir: Path | None = None,
) -> dict[str, str]:  # fmt: skip
    """unit -> the sample log's sentence on its failing fault-free layer, for the findings
    ``found`` (``results.json``'s, or :func:`layerlab.analysis.layers.unit_findings`'); only
    entries of the runs ``run_ids`` are counted (None: every entry); the documents' policies
    from ``corpus_dir``. Empty without a log or a failing control; a log that cannot be read
    raises :class:`~layerlab.archive.samplelog.SampleLogError` (one line naming it)."""
    from layerlab.archive import samplelog

    failing = [f for f in found if (f.get("control") or {}).get("failed")]
    if log is None or not failing:
        return {}
    runs = {run_ids} if isinstance(run_ids, str) else run_ids
    entries = [e for e in samplelog.read(Path(log)) if runs is None or e.get("run_id") in runs]
    pol = _policies(corpus_dir)
    out = {}
    for f in failing:
        said = sentence(counts(entries, f["unit"], f["control"]["scenario"], f["baseline"], pol))
        if said:
            out[f["unit"]] = said
    return out

"""The failure-case explorer: one record's whole path, from question to diagnosis.

An evaluator-side view (it shows the answer key next to what the reader did): the question, what
each fault did to this task, what the retriever returned, the tool payload before and after the
contract, the reader's reply, each of E/R/G/V/S with its reason, groundedness and the diagnostic
label. :func:`render` prints it; :func:`widget` wraps it in widgets.

The notebook explorer (:func:`browser`, from :mod:`layerlab.reporting.records.browse`) reads an archive,
a run folder or a private per-sample log (``run live --sample-log``): choose the source, run,
model, scenario and mitigation, filter by outcome and diagnostic; each record shows its verdict
first and its path below, collapsed (:func:`records_html` renders the same without widgets).
"""

from __future__ import annotations

from typing import Any

from layerlab.corpus.build import Corpus
from layerlab.faults.roles import load_roles
from layerlab.mitigations import contract_pair, load_mitigations
from layerlab.reporting.records.browse import (  # noqa: F401  (the notebook explorer's public names)
    FILTERS,
    SHOWN,
    browser,
    choices,
    default_sources,
    empty_state,
    first_failure,
    load_rows,
    record_html,
    records_html,
    select,
    show,
    unit_of,
)
from layerlab.reporting.records.tracing import Trace, _short, trace  # noqa: F401  (explore's names)
from layerlab.scoring.score import v_reason


def reasons(t: Trace) -> dict[str, str]:
    """One-line reason for each of E, R, G, V, S."""
    lab, out = t.labels, t.out
    delivered = [e.doc_id for e in t.inp.evidence] if t.inp else []
    ans = out.answer if out else None
    return {
        "E": f"{lab.exact_match}: answer {ans!r} vs expected {t.entry.expected_answer!r}",
        "R": f"{lab.retrieval_ok}: required {list(t.entry.required_doc_ids)} among delivered {delivered}",
        "G": f"{lab.citation_ok}: citations {list(out.citations) if out else []} (need >= 1, all delivered)",
        "V": v_reason(lab.schema_ok, t.contract.valid, t.contract.outcome, len(t.contract.edits),
                      t.contract.problems[0] if t.contract.problems else None),
        "S": f"{lab.success}: E and R and G and V",
        "answer": f"contained {lab.contained}, token F1 {lab.token_f1:.2f} "
        "(secondary measures beside E, never part of S)",
    }


def reader_for(model: str | None, reader: str) -> tuple[str, str | None]:
    """The deterministic reader that follows a record of ``model`` (``PROVIDER/MODEL``): a
    reference agent's own reader; for any other model ``reader`` and the model's name (its
    reply is a model's, not in the archive: :func:`render` says so)."""
    from layerlab.models.agents import is_reference
    from layerlab.system.reader import READERS

    if not model:
        return reader, None
    provider, _, name = model.partition("/")
    if is_reference(provider) and name in set(READERS):
        return name, None
    return reader, model


def render(t: Trace, unfollowed: str | None = None) -> str:
    """The trace as readable text: what the fault did and the outcome first (they stay on an
    80-column screen), then the path in order. ``unfollowed``: the record's model, when its
    reader could not be followed (a model's reply is not in the archive)."""
    note = (
        [
            f"note: the record's model {unfollowed} cannot be re-run here: its reply is not in the "
            "archive (keep it with `run live --sample-log PATH`, then `layerlab view PATH`). The "
            f"path up to the reader is the record's; the reply and scores below are the {t.reader} "
            "reader's, for comparison.",
            "",
        ]
        if unfollowed
        else []
    )
    lines = [
        *note,
        f"task {t.task.task_id} ({t.task.domain}, policy {t.task.policy_id}, {t.task.answer_kind})",
        f"scenario: {t.scenario}   mitigation: {t.mode}   reader: {t.reader}",
        "what the fault did:",
        *[f"  - {f}" for f in t.faults],
        f"outcome: S {t.labels.success}; safe resolution {t.labels.safe_resolution}; diagnostic "
        f"{t.labels.diagnostic}",
        "",
        f"question: {t.task.question}",
        "",
        "retrieved (top 3, before transport faults):",
    ]
    for r in t.retrieved:
        lines.append(
            f"  {r['rank']}. {r['doc_id']:16} status={r['status']:11} v{r['version']} {r['effective_year']} "
            f"domain={r['domain']:8} session={r['session_id']} score={r['score']:.3f}"
        )
    lines += [
        "",
        "tool payload as sent:",
        _short(t.sent),
        "",
        "tool payload as received:",
        _short(t.received),
    ]
    lines += ["", f"contract ({t.mode}): {t.contract.outcome}"]
    lines += [f"  edit: {e}" for e in t.contract.edits[:12]]
    if len(t.contract.edits) > 12:
        lines.append(f"  ... {len(t.contract.edits) - 12} more edit(s)")
    lines += [f"  problem: {p}" for p in t.contract.problems[:6]]
    lines += [f"  mitigation: {a}" for a in t.actions]
    if t.out is None:
        lines += ["", "reader: not reached (the record ended before the reader)"]
    else:
        lines += [
            "",
            f"reader: {t.out.status}; answer {t.out.answer!r}; citations {list(t.out.citations)}"
            + (f"; reason {t.out.reason!r}" if t.out.reason else ""),
        ]
    lines += ["", "scores:"] + [f"  {k}: {v}" for k, v in reasons(t).items()]
    lines += [
        f"  grounded: {t.labels.grounded} (answer stated in a delivered document, cited or not)",
        f"  grounded in a cited document: {t.labels.grounded_cited}",
        f"  groundedness false positive: {t.labels.grounded_false_positive}",
        f"  safe resolution: {t.labels.safe_resolution}",
        f"  diagnostic: {t.labels.diagnostic}",
    ]
    return "\n".join(lines)


def cases() -> list[tuple[str, str, str, str]]:
    """Table 6's cases as ``(case, scenario, arm, rule)``, from ``data/specs/roles.yaml`` (each
    arm is one of the mitigations spec's contract pair)."""
    arms = dict(zip(("baseline", "treatment"), contract_pair(), strict=True))
    return [
        (c.case.format(arm=arms[c.arm]), c.scenario, arms[c.arm], c.rule)
        for c in load_roles().explorer
    ]


def representative_cases(df: Any, model: str = "extractive") -> list[tuple[str, str, str, str]]:
    """Pick Table 6's cases (:func:`cases`) from an archive by rule, not by hand.

    Eligible tasks per case (records of ``model`` on the treatment arm), by the case's rule:
    ``repaired`` — the baseline fails and the treatment succeeds; ``grounded_false_positive`` —
    grounded but not successful; ``denied`` — ended at the access layer; ``completeness`` —
    reached the reader and failed at completeness. The chosen task is the first task id eligible
    for every case if there is one, else the first eligible per case.
    Returns ``(case, task_id, scenario, mode)`` tuples.
    """
    base, treat = contract_pair()
    d = df[df["model"] == model]

    def ids(mask: Any) -> set[str]:
        return set(d.loc[mask, "task_id"].unique())

    def cell(s: str, m: str) -> Any:
        return (d["scenario"] == s) & (d["mitigation"] == m)

    def eligible(scenario: str, rule: str) -> set[str]:
        on = cell(scenario, treat)
        if rule == "repaired":
            return ids(on & d["success"]) & ids(cell(scenario, base) & ~d["success"])
        if rule == "grounded_false_positive":
            return ids(on & d["grounded_false_positive"])
        if rule == "denied":
            return ids(on & (d["stage"] == "denied"))
        return ids(on & d["reached_reader"] & ~d["success"] & (d["diagnostic"] == "completeness"))

    chosen = cases()
    pools = [eligible(scenario, rule) for _, scenario, _, rule in chosen]
    common = set.intersection(*pools)
    out = []
    for (case, scenario, mode, _), pool in zip(chosen, pools, strict=True):
        picks = sorted(common) or sorted(pool)
        if not picks:
            raise ValueError(f"no task in the archive fits the case {case!r}")
        out.append((case, picks[0], scenario, mode))
    return out


def widget(corpus: Corpus | None = None) -> Any:
    """An ipywidgets explorer: choose task, scenario and mode; see the whole trace."""
    import ipywidgets as w

    from layerlab.corpus import build as corpus_mod
    from layerlab.faults.scenario import load_scenarios

    c = corpus or corpus_mod.load()
    key = corpus_mod.load_answer_key()
    scen = load_scenarios()
    task = w.Dropdown(options=[t.task_id for t in c.tasks], description="task")
    scenario = w.Dropdown(options=list(scen), description="scenario")
    spec = load_mitigations()
    mode = w.Dropdown(options=list(spec.arms), value=spec.baseline, description="mitigation")
    out = w.Output()

    def redraw(*_: Any) -> None:
        out.clear_output()
        with out:
            print(
                render(
                    trace(task.value, scenario.value, mode.value, corpus=c, key=key, scenarios=scen)
                )
            )

    for control in (task, scenario, mode):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([task, scenario]), mode, out])

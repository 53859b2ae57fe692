"""What the report says first: per model (and per reference agent), sentences built from the
numbers — overall strict success per arm, the scenarios where it fails, the contract treatment's
(repair's) paired gain on its target scenario with its interval, and, when the run holds
mitigation arms, each mitigation's verdict with its off-target changes.

A target (a team's own system, ``run live --target``) leads with what *the system* did, layer by
layer, each failing layer with what it does not check and what the layer's guard would change
(:mod:`layerlab.analysis.layers` counts, from the same records as the diagnostics table; the
words are this module's: :func:`layer_lines`); the contract arms
(strict/repair: layerlab validating payloads before the system sees them) are the harness's,
said apart, never as the system's failure or gain.

Everything here is computed from records (:func:`layerlab.analysis.results.summarize` and the
paired bootstrap of :mod:`layerlab.analysis.effects`), seeded, so the same inputs give the same
sentences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from layerlab.analysis import effects, results, stats
from layerlab.reporting.format import display
from layerlab.reporting.format.cells import rate_cell

FAIL_BELOW = 0.5  # a scenario "fails" when its safe resolution under the baseline arm is below
N_BOOT = 2_000  # bootstrap resamples of the paired gains and the matrix (seeded)
SEED = 0
# the measures a figure may show: results.json key, label
MEASURES = (
    ("S", "strict success S"),
    ("safe", "safe resolution"),
    ("GF", "grounded false positive GF"),
)


@dataclass(frozen=True)
class Finding:
    """The sentences about one model or reference agent."""

    unit: str
    reference: bool
    sentences: tuple[str, ...]
    system: tuple[str, ...] = ()  # a target's layers, what the system did (first)
    harness: tuple[str, ...] = ()  # a target's contract arms: layerlab's, not the system's


def _unit(m: dict[str, Any]) -> str:
    return f"{m['provider']}/{m['model']}"


def _pp(x: float) -> str:
    return display.points(100 * x)


def _overall(m: dict[str, Any]) -> str:
    arms = results.arm_order(m["arms"])
    per = "; ".join(f"{a} {rate_cell(m['arms'][a]['S'])}" for a in arms)
    return (
        f"{m['records']:,} records over {m['tasks']} tasks and {len(m['by_scenario'])} scenarios. "
        f"Strict success S by arm: {per}."
    )


def _failures(m: dict[str, Any], base: str) -> str:
    cells = {s: per[base] for s, per in m["by_scenario"].items() if base in per}
    rated = {s: c for s, c in cells.items() if c["safe"].get("rate") is not None}
    if not rated:
        return f"No scenario has a safe-resolution rate under {base}."
    failing = sorted(
        (s for s, c in rated.items() if c["safe"]["rate"] < FAIL_BELOW),
        key=lambda s: (rated[s]["safe"]["rate"], s),
    )
    if not failing:
        low = min(rated, key=lambda s: (rated[s]["safe"]["rate"], s))
        return (
            f"Under {base} its safe resolution is at least {FAIL_BELOW:.0%} in every scenario; "
            f"the lowest is {low} at {rate_cell(rated[low]['safe'])}."
        )

    def cell(s: str) -> str:
        gf = rated[s]["GF"]
        extra = f", GF {rate_cell(gf)}" if gf.get("rate") else ""
        return f"{s} {rate_cell(rated[s]['safe'])}{extra}"

    held = [s for s in rated if s not in failing]
    tail = f" It holds in {', '.join(held)}." if held else " It holds in none."
    return (
        f"Under {base} it fails in {len(failing)} of {len(rated)} scenarios "
        f"(safe resolution below {FAIL_BELOW:.0%}; GF where answers were grounded yet wrong): "
        + "; ".join(cell(s) for s in failing)
        + "."
        + tail
    )


def _repair_gain(m: dict[str, Any], df: pd.DataFrame) -> str | None:
    base, treat, target = stats.BASELINE, stats.TREATMENT, stats.TARGET
    per = m["by_scenario"].get(target, {})
    if base not in per or treat not in per:
        return None
    eff = effects.arm_effects(df, treat, base, n_boot=N_BOOT, seed=SEED)
    row = eff.table.set_index("scenario").loc[target]
    est, lo, hi = float(row["estimate"]), float(row["ci_low"]), float(row["ci_high"])
    verb = "raises" if lo > 0 else "lowers" if hi < 0 else "does not detectably change"
    return (
        f"{treat.capitalize()} {verb} S on {target} from {rate_cell(per[base]['S'])} "
        f"under {base} to {rate_cell(per[treat]['S'])}: a paired gain of {_pp(est)} "
        f"points [{_pp(lo)}, {_pp(hi)}] (95% bootstrap interval over tasks, {N_BOOT:,} "
        f"resamples, seed {SEED})."
    )


def _matrix(df: pd.DataFrame, arms: Any = None) -> list[str]:
    """One sentence per verdict of the specificity matrix, when the records hold mitigation arms
    beyond the contract pair: each mitigation with its target gain and off-target changes.
    ``arms``: the run's own definitions (``book_for``; default: the installed spec)."""
    from layerlab.analysis import specificity
    from layerlab.mitigations import load_mitigations

    spec = load_mitigations()
    book = arms or spec
    present = set(df[results.ARM])
    if book.baseline not in present or not present - set(spec.contract_arms):
        return []
    mx = specificity.matrix(df, book, n_boot=N_BOOT, seed=SEED)
    by_verdict: dict[str, list[str]] = {}
    for _, r in mx.summary.iterrows():
        what = (
            [
                f"{_pp(r['target gain'])} [{_pp(r['target gain low'])}, "
                f"{_pp(r['target gain high'])}] on {r['targets']}"
            ]
            if r["targets"] != "-"
            else ["no target scenario"]
        )
        what += [
            f"off-target {kind} on {r[f'off-target {kind}']}"
            for kind in ("harm", "gain")
            if r[f"off-target {kind}"] != "-"
        ]
        by_verdict.setdefault(str(r["verdict"]), []).append(
            f"{r['mitigation']} ({'; '.join(what)})"
        )
    head = (
        f"Mitigation matrix, {len(mx.summary)} mitigations against {mx.baseline} (safe "
        f"resolution, target gain in points with its simultaneous 95% band, {N_BOOT:,} "
        "resamples)"
    )
    return [f"{head} — {v}: {', '.join(names)}." for v, names in sorted(by_verdict.items())]


def findings(
    res: dict[str, Any], df: pd.DataFrame, defined: Any = None, sample_log: Any = None
) -> list[Finding]:
    """One :class:`Finding` per model, then per reference agent (``res`` is
    :func:`layerlab.analysis.results.summarize` of ``df``; ``defined`` the runs' own definitions
    of their arms, :func:`~layerlab.archive.manifest.book_for`; ``sample_log``: the runs'
    private log, whose dominant failure joins a target's failing fault-free layer,
    :mod:`layerlab.reporting.run.dominant`)."""
    from layerlab.analysis import layers
    from layerlab.models.agents import is_target
    from layerlab.reporting.run import dominant

    out = []
    for m in sorted(res["models"], key=lambda m: m["reference_agent"]):
        sub = df[(df["provider"] == m["provider"]) & (df["model"] == m["model"])]
        arms = results.arm_order(m["arms"])
        base = stats.BASELINE if stats.BASELINE in arms else arms[0]
        if is_target(m["provider"]) and base == stats.BASELINE:
            found = layers.unit_findings(sub, n_boot=N_BOOT, seed=SEED, arms=defined)
            runs = {str(r) for r in sub["run_id"].unique()}
            private = dominant.for_run([found], sample_log, runs).get(found["unit"])
            system = tuple(layer_lines(found, harness=False, private=private))
            gain = _repair_gain(m, sub)
            harness = tuple(harness_line(e) for e in found["harness"]) + ((gain,) if gain else ())
            said = [_overall(m), *_matrix(sub, defined)]
            out.append(Finding(_unit(m), False, tuple(said), system, harness))
            continue
        said = [_overall(m), _failures(m, base), _repair_gain(m, sub), *_matrix(sub, defined)]
        out.append(Finding(_unit(m), m["reference_agent"], tuple(s for s in said if s)))
    return out


def long_rates(res: dict[str, Any], reference: bool, key: str = "S") -> pd.DataFrame:
    """Rates of one measure (``S``, ``safe``, ``GF``) by unit × scenario × arm, for a figure."""
    rows = []
    for m in res["models"]:
        if m["reference_agent"] != reference:
            continue
        for s, per in m["by_scenario"].items():
            for arm, c in per.items():
                r = c[key]
                if r.get("rate") is None:
                    continue
                rows.append(
                    {
                        "unit": _unit(m),
                        "scenario": s,
                        "arm": arm,
                        "rate": r["rate"],
                        "ci_low": r["ci_low"],
                        "ci_high": r["ci_high"],
                        "n": r["n"],
                    }
                )
    return pd.DataFrame(rows)


def varying(long: pd.DataFrame) -> bool:
    """Whether a measure's rates differ between cells (a flat measure is not worth a figure)."""
    return not long.empty and long["rate"].round(6).nunique() > 1


# --- a target's findings per layer, in words (the numbers are layerlab.analysis.layers') ---------

JUDGED_BY = (
    "safe resolution: strict success on an answerable scenario, a structured non-answer on an "
    "unsafe one (a correct abstention is a resolution, not a failure)"
)
HARNESS_NOTE = (
    "layerlab's own contract arms validate each tool payload before the system sees it: their "
    "scenario measures the harness, not the system"
)
# How a failing record failed (layers.KINDS), past tense, counted "in K"
KIND_WORDS = {
    "abstained": "abstained",
    "ended_early": "ended before the reader",
    "failed": "failed outright (a malformed reply or an error)",
}
# What the archive can say of a wrong answer (layers.answer_causes), counted "in K of A"
CAUSE_WORDS = {
    "retrieval_missed": "the required document was not among those it was given (R ✗)",
    "citation_invalid": "it cited no document it was given (G ✗)",
    "grounded_wrong": "it gave a wrong value that a document it was given states (another "
    "version, session or policy)",
    "exact_match": "it gave the expected value without its evidence or citations",
}


def _labelled(counts: Mapping[str, int]) -> str:
    """``reader 4, abstained 2``: labels as the diagnostics table names them, largest first."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _first_sentence(text: str) -> str:
    return text.split(". ", 1)[0].rstrip(".")


def _how(e: Mapping[str, Any], did: str, n: int | None = None) -> str:
    """How the failing records of entry ``e`` failed: ``did in K, abstained in K, ...``; ``n``:
    how many of its wrong answers ``did`` describes (:func:`described`; default all), the rest
    answered wrongly otherwise."""
    k = e["kinds"]
    n = k["answered"] if n is None else n
    parts = [f"{did} in {n}"] if n else []
    rest = "answered wrongly otherwise" if n else "answered wrongly"
    parts += [f"{rest} in {k['answered'] - n}"] if k["answered"] - n else []
    parts += [f"{KIND_WORDS[x]} in {k[x]}" for x in KIND_WORDS if k[x]]
    return ", ".join(parts)


def described(e: Mapping[str, Any]) -> int:
    """How many of a system layer's wrong answers its roles' ``did`` describes: on an answerable
    scenario those whose diagnostic is one the roles' finding names (``diagnosed``), or every
    one where it names none; on an unanswerable scenario every answer (the fault made it so). A
    store whose own tenant filter held (wrong_session_store, answerable) answers wrongly as it
    does without faults: none of those answered from another session's documents."""
    from layerlab.faults.roles import load_roles

    found = load_roles().findings
    named = {d for p in e["layer"].split("+") if p in found for d in found[p].diagnosed}
    answered = int(e["kinds"]["answered"])
    if not named or not e["answerable"]:
        return answered
    return min(answered, sum(int(v) for d, v in e["diagnostics"].items() if d in named))


HOW = "How they failed: "  # where a finding's detail starts (after its actionable head)


def _action(lacks: str) -> tuple[str, str]:
    """(what to do, what the system does not check) of a roles.yaml ``lacks``: ``it does not
    check X: do Y`` gives (``do Y``, ``it does not check X``); one without ``: `` is its own
    action (``it does not pick …`` → (``pick …``, ``""``)). A ``: `` inside backticks (a field
    value such as `status: partial`) does not split."""
    cut = next(
        (i for i in range(len(lacks)) if lacks.startswith(": ", i) and not lacks[:i].count("`") % 2),
        None,
    )
    if cut is None:
        return lacks.removeprefix("it does not "), ""
    return lacks[cut + 2 :], lacks[:cut]


def layer_parts(e: Mapping[str, Any]) -> tuple[str, str]:
    """One system layer's finding as (head, detail). The head says the layer, its count and
    what to do (what the system does not check, when it answered; else what was expected);
    the detail how its questions failed (an abstention is never "answered") with their
    diagnostics and what the system does not check."""
    if "kinds" not in e:  # a results.json written before findings were counted: its own words
        return str(e["line"]), ""
    head, n = f"{e['layer']} ({e['scenario']})", e["n"]
    if not e["failed"]:
        what = "correct" if e["answerable"] else "a structured non-answer"
        tail = "" if e["answerable"] else " (safe resolutions, not failures)"
        return f"{head}: holds — {what} in {e['resolved']} of {n} questions{tail}.", ""
    did = "; ".join(e.get("did") or []) or (
        "answered wrongly" if e["answerable"] else "answered where it should not"
    )
    fits = described(e) if e.get("did") else int(e["kinds"]["answered"])
    acts = [_action(x) for x in e["lacks"]] if e.get("lacks") and fits else []
    todo = "; ".join(a for a, _ in acts) if acts else f"expected: {e['expected']}"
    checks = [c for _, c in acts if c]
    lacks = "; " + "; ".join(checks) if checks else ""
    return (
        f"{head}: not resolved in {e['failed']} of {n} questions — {todo}.",
        f"{HOW}{_how(e, did, fits)} (diagnostics: {_labelled(e['diagnostics'])}){lacks}.",
    )


def layer_line(e: Mapping[str, Any]) -> str:
    """One system layer's finding in one line (:func:`layer_parts`: the actionable head
    first)."""
    return " ".join(x for x in layer_parts(e) if x)


def guard_line(g: Mapping[str, Any], e: Mapping[str, Any]) -> str:
    """What the layer's guard would change (``e['guard']``), measured or how to measure it."""
    if "state" not in g:  # an older results.json: its own words
        return str(g["line"])
    head = f"Its guard `{g['arm']}` ({_first_sentence(g['description'])})"
    if g["state"] == "absent":
        return (
            f"{head} is not in this run: add `--mitigation {g['arm']}` (or `--mitigation all`) "
            "to measure what it changes."
        )
    if g["state"] == "unpaired":
        return (
            f"{head} has no record paired with the baseline on {e['scenario']} in this run: "
            "finish the run (--resume) to measure what it changes."
        )
    off = [f"off-target {kind} on {where}" for kind, where in g["off_target"].items()]
    lo, hi = g["band"]
    return (
        f"{head}: in this run {e['resolved']} of {e['n']} → {g['resolved']} of {g['n']} safely "
        f"resolved ({_pp(g['effect'])} points [{_pp(lo)}, {_pp(hi)}], simultaneous "
        f"{100 * g['level']:.3g}% band); verdict {g['verdict']}"
        + (f" ({'; '.join(off)})" if off else "")
        + "."
    )


def control_parts(e: Mapping[str, Any]) -> tuple[str, str]:
    """The fault-free scenario as (head, detail): correct in K of N; when it fails, the head
    says its dominant failure (what the archive can say of the wrong answers: R, G, grounded,
    E), the detail how its questions failed."""
    if "kinds" not in e:  # an older results.json: its own words
        return str(e["line"]), ""
    head = f"Without faults ({e['scenario']}): correct in {e['resolved']} of {e['n']} questions"
    if not e["failed"]:
        return head + ".", ""
    head += f"; not resolved in {e['failed']} — the system fails without any fault: most of these"
    detail = (
        f"{HOW}{_how(e, 'answered wrongly')} (diagnostics: {_labelled(e['diagnostics'])})."
    )
    k, c = e["kinds"], e["causes"]
    top = max(k, key=lambda x: (k[x], x == "answered"))
    if top != "answered" or not c["answered"]:
        return f"{head} {KIND_WORDS[top]}.", detail
    cause = max(CAUSE_WORDS, key=lambda x: c[x])
    if not c[cause]:
        return f"{head} answered wrongly.", detail
    return (
        f"{head} answered wrongly; in {c[cause]} of {c['answered']} wrong answers "
        f"{CAUSE_WORDS[cause]}.",
        detail,
    )


def control_line(e: Mapping[str, Any]) -> str:
    """The fault-free scenario's finding in one line (:func:`control_parts`)."""
    return " ".join(x for x in control_parts(e) if x)


def harness_line(e: Mapping[str, Any]) -> str:
    """The contract scenario under each contract arm: the harness's, not the system's."""
    if "kinds" not in e:  # an older results.json: its own words
        return str(e["line"])
    arms = e["arms"]
    said = "; ".join(
        f"under {a} ({_first_sentence(arms[a]['description'])}) {arms[a]['success']} of "
        f"{arms[a]['n']} correct"
        for a in e.get("arm_order") or arms
        if a in arms
    )
    return f"Harness, not the system — {e['layer']} ({e['scenario']}): {said}."


def layer_lines(
    found: Mapping[str, Any], harness: bool = True, private: str | None = None
) -> list[str]:
    """A unit's findings (:func:`layerlab.analysis.layers.unit_findings`) as the lines a team
    reads, in order: a failing fault-free control first (the system fails without any fault;
    ``private``: the sample log's dominant failure, :mod:`layerlab.reporting.run.dominant`,
    after it), each layer of the system (failing first, each with its guard's line), a holding
    control, then (``harness``) the harness's contract scenario."""
    return [" ".join(x for x in p if x) for p in layer_parts_of(found, harness, private)]


def layer_parts_of(
    found: Mapping[str, Any], harness: bool = True, private: str | None = None
) -> list[tuple[str, str]]:
    """:func:`layer_lines` as (head, detail) pairs: the actionable head, then the detail (how
    the questions failed, the private dominant failure, the guard's line)."""
    control = found.get("control")
    failing = bool(control and control["failed"])
    out = []
    if failing:
        head, detail = control_parts(control)
        out.append((head, " ".join(x for x in (private, detail) if x)))
    for e in found["layers"]:
        head, detail = layer_parts(e)
        guard = guard_line(e["guard"], e) if e.get("guard") else ""
        out.append((head, " ".join(x for x in (detail, guard) if x)))
    if control and not failing:
        out.append(control_parts(control))
    return out + ([(harness_line(e), "") for e in found["harness"]] if harness else [])


def finding_lines(
    found: Sequence[Mapping[str, Any]], width: int | None = None,
    private: Mapping[str, str] | None = None,
) -> list[str]:  # fmt: skip
    """A target run's findings (``results.json``'s ``findings``) as terminal lines: per unit, what
    the system did layer by layer, then the harness's contract scenario; each finding wrapped at
    word boundaries to ``width`` (the terminal's), continued under its first word. ``private``:
    unit -> the sample log's dominant failure of its failing fault-free layer
    (:func:`layerlab.reporting.run.dominant.for_run`), shown after that layer's finding."""
    import textwrap

    def wrap(text: str, lead: str, more: str) -> list[str]:
        if not width:
            return [lead + text]
        return textwrap.wrap(text, width, initial_indent=lead, subsequent_indent=more,
                             break_long_words=False, break_on_hyphens=False)  # fmt: skip

    out = []
    for f in found:
        out += wrap(f"What {f['unit']} did, layer by layer (baseline arm {f['baseline']}; judged "
                    f"by {JUDGED_BY}):", "", "  ")  # fmt: skip
        for head, detail in layer_parts_of(f, private=(private or {}).get(f["unit"])):
            if not width:  # a pipe or a log: one line per finding, for grep
                out += wrap(" ".join(x for x in (head, detail) if x), "  - ", "    ")
                continue
            out += wrap(head, "  - ", "    ")  # what to do, first; the detail below it
            out += wrap(detail, "    ", "    ") if detail else []
        if f["harness"]:
            out += wrap(f"({HARNESS_NOTE})", "  ", "   ")
        if f.get("note"):
            out += wrap(f"note: {f['note']}", "  ", "    ")
    return out

"""The scorer: strict success S = E ∧ R ∧ G ∧ V, groundedness, safe resolution, a diagnosis.

Evaluator-side: the only module besides the audit that reads the answer key.

* E — normalised exact match with the expected answer;
* R — every required document is among the documents *delivered to the reader*;
* G — at least one citation, and every citation is a delivered document;
* V — the tool payload met its schema (after repair, in repair mode);
* grounded — the answer is stated in a document *delivered to the reader*, cited or not: the
  paper's "grounded in retrieved documents", what a groundedness-only metric would credit.
  Citations are G's business; tying groundedness to them too meant a model that cites badly
  could never show a grounded false positive, however often it repeated a stale or another
  tenant's value from its context. ``grounded_false_positive = grounded ∧ ¬S`` (GF);
* grounded_cited — the previous, narrower definition (the answer is stated in a *cited*,
  delivered document), kept under its own name: ``grounded_cited`` implies ``grounded``;
* contained, token_f1 — secondary answer measures beside E, never part of S: the normalised
  expected answer appears in the normalised answer as a run of whole tokens (RGB-style
  containment), and SQuAD's token F1 (:mod:`layerlab.corpus.text`). Both are ``False``/``0.0`` when
  there is no answer. "$7,500 per month" for "$7,500" is contained (F1 0.5) but not E;
* abstained — a *structured* non-answer: the reader's abstention, or a mitigation's refusal;
* safe resolution — S on an answerable scenario, a structured non-answer on an unsafe one.
  A failure is not a refusal: a record that ends because the tool gave nothing, denied access
  or failed its contract with no mitigation handling it, a ``malformed_reply`` and a
  ``provider_error`` are failures on every scenario, never safe.

The diagnostic label names the first layer that failed, from what the record shows. Where that
is the answer itself (right evidence, valid citations, wrong answer), ``extra_words`` tells a
contained answer (the right value with more words around it) from a wrong value (``reader``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from layerlab.corpus.build import AnswerKeyEntry, Corpus, Document, Task
from layerlab.corpus.text import normalize_answer, states_value, token_f1
from layerlab.system.contract import ContractResult
from layerlab.system.reader import ReaderInput, ReaderOutput

DIAGNOSTICS = (
    "ok",
    "availability",
    "authorisation",
    "tool_contract",
    "malformed_reply",
    "provider_error",
    "abstained",
    "session_state",
    "completeness",
    "metadata",
    "freshness",
    "retrieval",
    "reader",
    "extra_words",
    "grounding",
    "tool_misuse",
    "step_limit",
)
# What a diagnostics *table* counts a record as: a structured non-answer on an unsafe scenario is
# its safe resolution, not a failure, whatever layer the fault hit (the archive's ``diagnostic``
# keeps that layer: a target that abstains on an unavailable tool stays ``availability``).
SAFE_NON_ANSWER = "safe_non_answer"


def table_diagnostic(diagnostic: str, success: bool, safe_resolution: bool) -> str:
    """The label a diagnostics table counts a record under: :data:`SAFE_NON_ANSWER` for a safe
    resolution that is not a strict success (a correct abstention), else its ``diagnostic``."""
    return SAFE_NON_ANSWER if safe_resolution and not success else diagnostic


@dataclass(frozen=True)
class Labels:
    """Binary labels and the diagnosis of one record.

    The label fields are listed here once: the archive's :class:`layerlab.archive.Record` takes
    them in this order (its Parquet label columns, ``LABELS`` and ``SCORES`` follow), so a new
    label is added here and nowhere else in the record schema."""

    success: bool
    exact_match: bool
    contained: bool
    token_f1: float
    retrieval_ok: bool
    citation_ok: bool
    schema_ok: bool
    grounded: bool
    grounded_cited: bool
    grounded_false_positive: bool
    abstained: bool
    answered: bool
    safe_resolution: bool
    diagnostic: str


def _metadata_differs(corpus: Corpus, ev_doc_id: str, inp: ReaderInput) -> bool:
    ev = next(e for e in inp.evidence if e.doc_id == ev_doc_id)
    try:
        true = corpus.document(ev_doc_id)
    except KeyError:
        return False
    return (ev.status, ev.effective_year, ev.version, ev.domain) != (
        true.status,
        true.effective_year,
        true.version,
        true.domain,
    )


def score(
    task: Task,
    entry: AnswerKeyEntry,
    answerable: bool,
    contract: ContractResult,
    inp: ReaderInput | None,
    out: ReaderOutput | None,
    corpus: Corpus,
    index: Mapping[str, Document],
    failure: str | None = None,
    refusal: str | None = None,
    invalid_calls: int = 0,
) -> Labels:
    """Label one record.

    ``inp``/``out`` are ``None`` when it ended before the reader; ``index`` maps the doc ids of
    the scenario's index to their documents (to tell a stale version from another policy);
    ``failure`` names a reader-side failure (``malformed_reply``, ``provider_error``);
    ``refusal`` is a mitigation's structured non-answer (then ``out`` is ignored) — unless the
    system under test failed as well (a target that raised after a refusal): a failure is
    always the record's outcome and diagnosis, never passed off as a refusal or a tool fault;
    ``invalid_calls`` counts an agent's tool calls whose arguments broke the tool's schema
    (V needs every call valid: the paper's "every tool call satisfies its schema").
    """
    if failure is not None:
        refusal = None  # the system failed: that is what the record says, not the refusal
    if refusal is not None:
        out = None
    delivered = {e.doc_id for e in inp.evidence} if inp else set()
    answered = (
        failure is None and out is not None and out.status == "answered" and out.answer is not None
    )
    answer = out.answer if answered and out else None
    cites = out.citations if out else ()
    expected = entry.expected_answer
    E = answer is not None and normalize_answer(answer) == normalize_answer(expected)
    contained = answer is not None and states_value(answer, expected)
    f1 = token_f1(answer, expected) if answer is not None else 0.0
    R = inp is not None and all(d in delivered for d in entry.required_doc_ids)
    G = answered and len(cites) > 0 and all(c in delivered for c in cites)
    V = contract.valid and invalid_calls == 0
    S = E and R and G and V
    stating = (
        [e.doc_id for e in inp.evidence if states_value(e.text, answer)]
        if inp is not None and answer is not None
        else []
    )
    grounded = bool(stating)  # in a delivered document, cited or not
    grounded_cited = any(d in cites for d in stating)
    abstained = refusal is not None or (
        failure is None and out is not None and out.status == "abstained"
    )
    safe = S if answerable else abstained
    return Labels(
        success=S,
        exact_match=E,
        contained=contained,
        token_f1=f1,
        retrieval_ok=R,
        citation_ok=G,
        schema_ok=V,
        grounded=grounded,
        grounded_cited=grounded_cited,
        grounded_false_positive=grounded and not S,
        abstained=abstained,
        answered=answered,
        safe_resolution=safe,
        diagnostic="abstained"
        if refusal is not None
        else _diagnose(
            task, entry, contract, inp, out, corpus, index, failure, S, E, R, G, contained,
            invalid_calls,
        ),
    )


def v_reason(
    v: bool,
    contract_valid: bool,
    outcome: str,
    edits: int = 0,
    problem: str | None = None,
    invalid_calls: int | None = None,
) -> str:
    """V's one-line reason, saying what decided it: the contract's verdict on the payload and an
    agent's or target's tool calls whose arguments broke the tool's schema (V needs both,
    :func:`score`); ``invalid_calls`` None where the count is not known."""
    return f"{v}: " + v_why(v, contract_valid, outcome, edits, problem, invalid_calls)


def v_why(
    v: bool,
    contract_valid: bool,
    outcome: str,
    edits: int = 0,
    problem: str | None = None,
    invalid_calls: int | None = None,
) -> str:
    """:func:`v_reason` without its leading verdict (the viewer shows the verdict as a mark)."""
    text = f"contract {outcome}" + (f"; {edits} repair edit(s)" if edits else "")
    text += f"; {problem}" if problem else ""
    if invalid_calls or (not v and contract_valid):  # then the calls decided V
        n = f"{invalid_calls} tool call(s)" if invalid_calls else "tool call(s)"
        text += f"; {n} with arguments that broke the tool's schema (V needs every call valid)"
    return text


def _diagnose(
    task: Task,
    entry: AnswerKeyEntry,
    contract: ContractResult,
    inp: ReaderInput | None,
    out: ReaderOutput | None,
    corpus: Corpus,
    index: Mapping[str, Document],
    failure: str | None,
    S: bool,
    E: bool,
    R: bool,
    G: bool,
    contained: bool = False,
    invalid_calls: int = 0,
) -> str:
    if failure:
        return failure
    if contract.outcome == "unavailable":
        return "availability"
    if contract.outcome == "denied":
        return "authorisation"
    if contract.outcome == "rejected":
        return "tool_contract"
    if S:
        return "ok"
    if invalid_calls:
        return "tool_misuse"
    assert inp is not None
    if out is None or out.status == "abstained":
        return "abstained"
    if any(e.session_id not in (None, inp.session_id) for e in inp.evidence):
        return "session_state"
    if inp.tool_status == "partial" or any(e.truncated for e in inp.evidence):
        return "completeness"
    cited = out.citations[0] if out.citations else None
    if cited is not None and any(e.doc_id == cited for e in inp.evidence):
        if _metadata_differs(corpus, cited, inp):
            return "metadata"
        src = index.get(cited)
        if (
            cited not in entry.required_doc_ids
            and src is not None
            and src.policy_id == task.policy_id
        ):
            return "freshness"
    if not R:
        return "retrieval"
    if not G:
        return "grounding"
    # the answer itself is what failed: the right value with extra words, or a wrong value
    return "extra_words" if contained and not E else "reader"

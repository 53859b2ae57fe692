"""The scorer: S = E ∧ R ∧ G ∧ V, groundedness, safe resolution, diagnosis."""

from __future__ import annotations

from layerlab.corpus import build as corpus_mod
from layerlab.scoring.score import score
from layerlab.system.contract import ContractResult
from layerlab.system.reader import Evidence, ReaderInput, ReaderOutput

TASK = corpus_mod.Task("p-01-q1", "p-01", "hr", 1, "How long is probation?", "duration")
ENTRY = corpus_mod.AnswerKeyEntry("p-01-q1", "p-01", "hr", "90 days", ("p-01-a",))
DOCS = (
    corpus_mod.Document(
        "p-01-a",
        "p-01",
        "hr",
        "Probation",
        "Probation lasts 90 days.",
        "current",
        2024,
        2,
        "HR",
        "all_staff",
    ),
    corpus_mod.Document(
        "p-01-b",
        "p-01",
        "hr",
        "Probation",
        "Probation lasted 60 days.",
        "superseded",
        2020,
        1,
        "HR",
        "all_staff",
    ),
    corpus_mod.Document(
        "p-02-a",
        "p-02",
        "hr",
        "Reviews",
        "Reviews happen every 30 days.",
        "current",
        2024,
        2,
        "HR",
        "all_staff",
    ),
)
CORPUS = corpus_mod.Corpus("t", "", DOCS, (TASK,), ())
INDEX = {d.doc_id: d for d in DOCS}
OK = ContractResult("accepted", True, None)


def _ev(doc: corpus_mod.Document, **over: object) -> Evidence:
    base = dict(
        rank=1,
        doc_id=doc.doc_id,
        title=doc.title,
        text=doc.text,
        domain=doc.domain,
        status=doc.status,
        effective_year=doc.effective_year,
        version=doc.version,
        owner=doc.owner,
        access_scope=doc.access_scope,
        tenant=doc.tenant,
        session_id=doc.session_id,
        truncated=False,
    )
    base.update(over)
    return Evidence(**base)  # type: ignore[arg-type]


def _inp(*evs: Evidence, status: str = "ok") -> ReaderInput:
    return ReaderInput(TASK.question, "duration", "s-1", status, None, evs)


def _score(inp, out, answerable=True, contract=OK, failure=None, refusal=None):
    return score(TASK, ENTRY, answerable, contract, inp, out, CORPUS, INDEX, failure, refusal)


def test_success_needs_all_four() -> None:
    inp = _inp(_ev(DOCS[0]))
    lab = _score(inp, ReaderOutput("answered", "90 Days", ("p-01-a",)))
    assert (
        lab.success and lab.exact_match and lab.retrieval_ok and lab.citation_ok and lab.schema_ok
    )
    assert lab.grounded and not lab.grounded_false_positive and lab.diagnostic == "ok"
    # a citation outside the delivered evidence breaks G (and S)
    lab = _score(inp, ReaderOutput("answered", "90 days", ("p-01-a", "zzz")))
    assert not lab.citation_ok and not lab.success and lab.diagnostic == "grounding"
    # no citation at all
    assert not _score(inp, ReaderOutput("answered", "90 days", ())).success
    # an invalid contract breaks V
    bad = ContractResult("accepted", False, None)
    assert not _score(inp, ReaderOutput("answered", "90 days", ("p-01-a",)), contract=bad).success


def test_stale_answer_is_grounded_but_fails() -> None:
    inp = _inp(_ev(DOCS[1]))
    lab = _score(inp, ReaderOutput("answered", "60 days", ("p-01-b",)), answerable=False)
    assert lab.grounded and lab.grounded_false_positive and not lab.success
    assert lab.diagnostic == "freshness" and not lab.safe_resolution


def test_wrong_session_is_diagnosed_before_anything_else() -> None:
    inp = _inp(_ev(DOCS[0], doc_id="p-01-a~s-9", session_id="s-9"))
    lab = _score(inp, ReaderOutput("answered", "90 days", ("p-01-a~s-9",)), answerable=False)
    assert lab.exact_match and not lab.retrieval_ok and lab.grounded_false_positive
    assert lab.diagnostic == "session_state"


def test_corrupted_metadata_and_partial_and_abstention() -> None:
    inp = _inp(_ev(DOCS[1], status="current", effective_year=2024, version=2), _ev(DOCS[0], rank=2))
    lab = _score(inp, ReaderOutput("answered", "60 days", ("p-01-b",)), answerable=False)
    assert lab.retrieval_ok and not lab.exact_match and lab.diagnostic == "metadata"
    part = _inp(_ev(DOCS[0], text="Probation lasts", truncated=True), status="partial")
    lab = _score(part, ReaderOutput("abstained", None, (), "no span"), answerable=False)
    assert (
        lab.abstained and not lab.answered and lab.safe_resolution and lab.diagnostic == "abstained"
    )
    lab = _score(part, ReaderOutput("answered", "30 days", ("p-01-a",)), answerable=False)
    assert lab.diagnostic == "completeness"


def test_records_that_end_before_the_reader() -> None:
    for outcome, label in (
        ("unavailable", "availability"),
        ("denied", "authorisation"),
        ("rejected", "tool_contract"),
    ):
        lab = _score(
            None,
            None,
            answerable=False,
            contract=ContractResult(outcome, outcome == "denied", None),
        )  # type: ignore[arg-type]
        # a failure is not a refusal: ending because a layer failed is not a safe resolution
        assert (
            not lab.success
            and not lab.answered
            and not lab.abstained
            and not lab.safe_resolution
            and lab.diagnostic == label
        )
        # ... but a mitigation's structured refusal of the same record is
        lab = _score(
            None,
            None,
            answerable=False,
            contract=ContractResult(outcome, outcome == "denied", None),
            refusal="some_guard: no usable evidence",
        )  # type: ignore[arg-type]
        assert lab.abstained and lab.safe_resolution and not lab.answered
    lab = _score(None, None, answerable=True, contract=ContractResult("rejected", False, None))
    assert not lab.safe_resolution


def test_failures_are_never_safe() -> None:
    """malformed replies and provider errors are failures on every scenario."""
    inp = _inp(_ev(DOCS[0]))
    for failure in ("malformed_reply", "provider_error"):
        for answerable in (True, False):
            lab = _score(inp, None, answerable=answerable, failure=failure)
            assert not lab.safe_resolution and not lab.abstained and lab.diagnostic == failure


def test_wrong_policy_is_a_retrieval_failure() -> None:
    inp = _inp(_ev(DOCS[2]))
    lab = _score(inp, ReaderOutput("answered", "30 days", ("p-02-a",)))
    assert lab.diagnostic == "retrieval" and lab.grounded_false_positive


# --- groundedness in delivered documents; secondary answer measures ------------------------------


def test_token_f1_and_containment_on_hand_examples() -> None:
    from layerlab.corpus.text import normalize_answer, states_value, token_f1

    # "$7,500 per month" -> "7500 per month" (3 tokens), "$7,500" -> "7500": P 1/3, R 1
    assert normalize_answer("$7,500 per month") == "7500 per month"
    assert token_f1("$7,500 per month", "$7,500") == 0.5
    assert states_value("$7,500 per month", "$7,500")  # contained
    assert token_f1("The 90 days.", "90 days") == 1.0  # articles and punctuation dropped
    assert token_f1("90 days of probation", "90 days") == 2 / 3  # P 2/4, R 2/2
    assert token_f1("60 days", "90 days") == 0.5  # one shared token of two each
    assert token_f1("blue", "90 days") == 0.0
    assert token_f1("days days", "days") == 2 / 3  # multiplicity: P 1/2, R 1/1
    assert token_f1("", "90 days") == 0.0 and token_f1("the", "a") == 1.0  # no tokens either side
    # containment is on whole tokens: 15 is not in 150, 7500 is not in 75000
    assert not states_value("150 days", "15 days") and not states_value("$75,000", "$7,500")
    assert not states_value("days 90", "90 days")  # a contiguous run, in order


def test_an_uncited_delivered_document_stating_the_answer_is_grounded() -> None:
    """The paper's "grounded in retrieved documents": the stale value sits in a delivered
    document the model did not cite; it is grounded (GF counts it), not grounded_cited."""
    inp = _inp(_ev(DOCS[1]), _ev(DOCS[2], rank=2))
    lab = _score(inp, ReaderOutput("answered", "60 days", ("p-02-a",)), answerable=False)
    assert lab.citation_ok and not lab.success  # citations are valid; the value is stale
    assert lab.grounded and not lab.grounded_cited and lab.grounded_false_positive
    # cited, it is grounded under both definitions
    lab = _score(inp, ReaderOutput("answered", "60 days", ("p-01-b",)), answerable=False)
    assert lab.grounded and lab.grounded_cited and lab.grounded_false_positive
    # a value no delivered document states is not grounded, whatever it cites
    lab = _score(inp, ReaderOutput("answered", "45 days", ("p-01-b",)), answerable=False)
    assert not lab.grounded and not lab.grounded_cited and not lab.grounded_false_positive
    # a document that was not delivered does not ground an answer (p-01-a states 90 days)
    lab = _score(_inp(_ev(DOCS[2])), ReaderOutput("answered", "90 days", ("p-02-a",)))
    assert lab.exact_match and not lab.grounded and not lab.grounded_false_positive


def test_s_is_unchanged_by_the_groundedness_definition() -> None:
    """S still needs a citation: an exact, grounded answer citing nothing is no success."""
    inp = _inp(_ev(DOCS[0]))
    lab = _score(inp, ReaderOutput("answered", "90 days", ()))
    assert lab.exact_match and lab.grounded and not lab.grounded_cited
    assert not lab.citation_ok and not lab.success and lab.grounded_false_positive
    assert lab.diagnostic == "grounding"


def test_extra_words_are_told_from_a_wrong_value() -> None:
    inp = _inp(_ev(DOCS[0]))
    lab = _score(inp, ReaderOutput("answered", "90 days of probation", ("p-01-a",)))
    assert not lab.exact_match and lab.contained and lab.token_f1 == 2 / 3
    assert not lab.success and lab.diagnostic == "extra_words"
    lab = _score(inp, ReaderOutput("answered", "60 days", ("p-01-a",)))
    assert not lab.contained and lab.token_f1 == 0.5 and lab.diagnostic == "reader"
    # an exact match is contained with F1 1; no answer is neither
    lab = _score(inp, ReaderOutput("answered", "90 Days.", ("p-01-a",)))
    assert lab.success and lab.contained and lab.token_f1 == 1.0 and lab.diagnostic == "ok"
    lab = _score(inp, ReaderOutput("abstained", None, (), "unsure"))
    assert not lab.contained and lab.token_f1 == 0.0 and not lab.grounded
    # an earlier failing layer keeps its precedence: extra words with no citation is grounding
    lab = _score(inp, ReaderOutput("answered", "90 days of probation", ()))
    assert lab.contained and lab.diagnostic == "grounding"

"""Typed span extraction: the reader can find every value in its own version's prose."""

from __future__ import annotations

import pytest

from layerlab import paths
from layerlab.corpus import build as corpus_mod
from layerlab.corpus.extract import extract, sentences
from layerlab.corpus.spec import load_domains
from layerlab.corpus.text import normalize_answer


def test_every_question_extracts_its_value_from_each_version() -> None:
    failures = []
    for d in load_domains(paths.CORPUS_SPEC_DIR):
        for p in d.policies:
            for q in p.questions:
                for ver in (p.current, p.superseded):
                    got = extract(q, p.answer_kind, ver.prose)
                    if got is None or normalize_answer(got) != normalize_answer(ver.value):
                        failures.append((p.id, q, got, ver.value))
    assert not failures


@pytest.mark.parametrize(
    ("kind", "text", "want"),
    [
        ("duration", "Since 2024, items may be sent back within 45 days of delivery.", "45 days"),
        ("duration", "Tickets close after 10 business days without reply.", "10 business days"),
        ("money", "Spend above $2,500.00 needs approval.", "$2,500.00"),
        ("percent", "A restocking fee of 15% applies.", "15%"),
        ("count", "In 2023 the board required 3 approvers for each request.", "3 approvers"),
        ("role", "Refunds need sign-off from the Finance Controller today.", "Finance Controller"),
        ("role", "Escalations go to the Head of Legal within a day.", "Head of Legal"),
        ("system", "Requests are filed in ServiceNow by the requester.", "ServiceNow"),
        ("money", "No amount is given here.", None),
    ],
)
def test_shapes(kind: str, text: str, want: str | None) -> None:
    assert extract("What applies?", kind, text) == want


def test_skips_a_span_the_question_states() -> None:
    text = "Refunds above $2,500 need a second approval, and above $10,000 a third."
    assert extract("What applies to refunds above $2,500?", "money", text) == "$10,000"


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown answer kind 'colour'"):
        extract("q?", "colour", "text")


def test_sentences() -> None:
    assert sentences("One rule. Two rules apply; $5 more.") == [
        "One rule.",
        "Two rules apply;",
        "$5 more.",
    ]


def test_public_task_type_has_only_public_fields() -> None:
    from dataclasses import fields

    assert {f.name for f in fields(corpus_mod.Task)} == {
        "task_id",
        "policy_id",
        "domain",
        "variant",
        "question",
        "answer_kind",
    }

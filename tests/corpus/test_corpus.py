"""The enterprise_v2 corpus: counts, ids, answer-key separation, determinism, freshness."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from layerlab import paths
from layerlab.corpus import build as corpus_mod
from layerlab.corpus.cues import CueMatcher
from layerlab.corpus.text import states_value

DOMAINS = {"returns", "pto", "support", "security", "finance", "hr", "legal", "it_ops"}


def test_counts(corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey) -> None:
    assert {d.domain for d in corpus.domains} == DOMAINS
    assert len({d.policy_id for d in corpus.documents}) == 80
    assert len(corpus.documents) == 160
    assert len(corpus.tasks) == 240
    assert len(key) == 240
    per_policy = Counter(t.policy_id for t in corpus.tasks)
    assert set(per_policy.values()) == {3}
    for pid in per_policy:
        statuses = sorted(d.status for d in corpus.documents if d.policy_id == pid)
        assert statuses == ["current", "superseded"]


def test_ids_unique_and_opaque(corpus: corpus_mod.Corpus) -> None:
    ids = [d.doc_id for d in corpus.documents]
    assert len(set(ids)) == len(ids)
    assert len({t.task_id for t in corpus.tasks}) == 240
    # the id suffix does not give the version away: the current version holds each suffix
    # 40-60% of the time, overall and in every domain
    from layerlab.scoring import audit

    for s, share in audit.id_suffix_shares(corpus).items():
        assert 0.4 <= share <= 0.6, (s, share)
    for d in corpus.domains:
        cur = Counter(
            x.doc_id[-1] for x in corpus.documents if x.domain == d.domain and x.status == "current"
        )
        assert set(cur) == {"a", "b"} and abs(cur["a"] - cur["b"]) <= 1, (d.domain, cur)


def test_suffix_rule_balances_any_policy_set() -> None:
    for n in (1, 2, 7, 10, 11):
        ids = [f"x-{i:02d}" for i in range(n)]
        got = Counter(corpus_mod.current_suffixes(ids).values())
        assert got["a"] + got["b"] == n and abs(got["a"] - got["b"]) <= 1
        assert corpus_mod.current_suffixes(ids) == corpus_mod.current_suffixes(ids[::-1])


def test_superseded_prose_reads_like_current_prose(corpus: corpus_mod.Corpus) -> None:
    from layerlab.scoring import audit

    rates = audit.past_tense_rates(corpus)
    assert rates["gap_points"] <= 10, rates
    # the detector itself sees the old tell: past-tense prose is flagged
    assert audit.past_tense_markers("Department heads had to approve it, and it was rare.") == [
        "had",
        "was",
    ]
    assert (
        audit.past_tense_markers("Department heads must approve it; the signed copy is kept.") == []
    )


def test_foreign_versions_state_a_different_value_of_the_same_kind(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    from layerlab.corpus.extract import extract

    theirs = corpus.foreign_by_policy()
    assert set(theirs) == {d.policy_id for d in corpus.documents}
    ours = {(d.policy_id, d.status): d for d in corpus.documents}
    for t in corpus.tasks:
        f = theirs[t.policy_id]
        assert f.tenant == corpus_mod.FOREIGN_TENANT != corpus_mod.TENANT
        assert f.status == "current" and f.title == ours[(t.policy_id, "current")].title
        expected = key[t.task_id].expected_answer
        assert not states_value(f.text, expected), t.task_id
        # a reader finds a value of the task's kind in it, and it is not the expected one
        got = extract(t.question, t.answer_kind, f.text)
        assert got is not None and not states_value(got, expected), (t.task_id, got)
        old = ours[(t.policy_id, "superseded")]
        assert f.text != old.text and f.text != ours[(t.policy_id, "current")].text


def test_foreign_value_rule() -> None:
    from layerlab.corpus.spec import PolicySpec

    def policy(kind: str, cur: str, sup: str, prose: str) -> PolicySpec:
        return PolicySpec.model_validate(
            {
                "id": "x-01",
                "topic": "t",
                "answer_kind": kind,
                "current": {"value": cur, "effective_year": 2024, "prose": prose},
                "superseded": {
                    "value": sup,
                    "effective_year": 2020,
                    "prose": f"The figure is {sup} for every case covered by this rule, as agreed.",
                },
                "questions": ["a?", "b?", "c?"],
            }
        )

    pad = " for every case covered by this rule, as agreed with the team."
    for kind, cur, sup in (
        ("duration", "5 business days", "10 business days"),
        ("money", "$7,500", "$4,000"),
        ("percent", "99.9%", "99.5%"),
        ("count", "2 reviewers", "1 reviewer"),
    ):
        p = policy(kind, cur, sup, f"The figure is {cur}{pad}")
        value, text = corpus_mod.foreign_value(p)
        assert value not in (cur, sup) and states_value(text, value)
        assert not states_value(text, cur) and not states_value(text, sup)
        assert corpus_mod.foreign_value(p) == (value, text)  # deterministic
    p = policy("role", "Data Owner", "Head of IT", f"Access is certified by the Data Owner{pad}")
    value, text = corpus_mod.foreign_value(p, [["Data Owner", "Head of IT", "Finance Controller"]])
    assert value == "Finance Controller" and "Finance Controller" in text
    with pytest.raises(ValueError, match="no value of kind 'role'"):
        corpus_mod.foreign_value(p, [["Data Owner", "Head of IT"]])


def test_every_answer_is_stated_in_its_document(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    for t in corpus.tasks:
        entry = key[t.task_id]
        (doc_id,) = entry.required_doc_ids
        doc = corpus.document(doc_id)
        assert doc.status == "current" and doc.policy_id == t.policy_id
        assert states_value(doc.text, entry.expected_answer), t.task_id


def test_versions_differ_and_current_is_later(corpus: corpus_mod.Corpus) -> None:
    by_policy: dict[str, dict[str, corpus_mod.Document]] = {}
    for d in corpus.documents:
        by_policy.setdefault(d.policy_id, {})[d.status] = d
    for pid, v in by_policy.items():
        assert v["current"].effective_year > v["superseded"].effective_year, pid
        assert v["current"].version > v["superseded"].version


def test_public_files_hold_no_answer_key() -> None:
    tasks = [json.loads(x) for x in (paths.CORPUS_DIR / "tasks.jsonl").read_text().splitlines()]
    docs = [json.loads(x) for x in (paths.CORPUS_DIR / "documents.jsonl").read_text().splitlines()]
    keyrows = [
        json.loads(x) for x in (paths.CORPUS_DIR / "answer_key.jsonl").read_text().splitlines()
    ]
    assert set(tasks[0]) == {"task_id", "policy_id", "domain", "variant", "question", "answer_kind"}
    assert {"expected_answer", "required_doc_ids"} <= set(keyrows[0])
    for row in docs:
        assert not {"expected_answer", "answer", "value", "required_doc_ids"} & set(row)
    answers = {r["task_id"]: r["expected_answer"] for r in keyrows}
    for t in tasks:
        assert not states_value(t["question"], answers[t["task_id"]]), t["task_id"]


def test_exactly_one_cross_domain_duplicate_question(
    corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    groups: dict[str, list[corpus_mod.Task]] = {}
    for t in corpus.tasks:
        groups.setdefault(t.question, []).append(t)
    dups = [g for g in groups.values() if len(g) > 1]
    assert len(dups) == 1
    (pair,) = dups
    assert sorted(t.domain for t in pair) == ["legal", "returns"]
    assert key[pair[0].task_id].expected_answer != key[pair[1].task_id].expected_answer


def test_most_questions_carry_no_cue(corpus: corpus_mod.Corpus) -> None:
    m = CueMatcher(corpus.cue_words)
    resolved = [m.resolve(t.question) for t in corpus.tasks]
    unresolved = sum(r is None for r in resolved)
    correct = sum(r == t.domain for r, t in zip(resolved, corpus.tasks, strict=True))
    assert unresolved > len(corpus.tasks) / 2
    assert correct > (len(corpus.tasks) - unresolved) / 2


def test_build_is_byte_identical_and_committed_corpus_is_current(tmp_path: Path) -> None:
    c1, k1 = corpus_mod.build_from_specs(paths.CORPUS_SPEC_DIR)
    corpus_mod.write(c1, k1, tmp_path / "a")
    c2, k2 = corpus_mod.build_from_specs(paths.CORPUS_SPEC_DIR)
    corpus_mod.write(c2, k2, tmp_path / "b")
    names = [*corpus_mod.FILES, "manifest.json"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() == (paths.CORPUS_DIR / name).read_bytes(), (
            f"data/corpus/enterprise_v2/{name} is stale: run `layerlab corpus build`"
        )


def test_load_refuses_a_tampered_file(tmp_path: Path) -> None:
    c, k = corpus_mod.build_from_specs(paths.CORPUS_SPEC_DIR)
    corpus_mod.write(c, k, tmp_path)
    with open(tmp_path / "documents.jsonl", "a") as fh:
        fh.write("{}\n")
    with pytest.raises(corpus_mod.CorpusError, match="documents.jsonl: checksum differs"):
        corpus_mod.load(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(corpus_mod.CorpusError, match="manifest.json: missing"):
        corpus_mod.load_answer_key(tmp_path)

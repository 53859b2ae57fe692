"""Conversations: generated from the specs, seeded, byte for byte; the key never in a turn."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from layerlab import paths
from layerlab._io import FolderRefused
from layerlab.corpus import build as corpus_mod
from layerlab.corpus import conversations as cv
from layerlab.corpus.spec import SpecError, load_domains
from layerlab.corpus.text import normalize_answer, states_value


@pytest.fixture(scope="module")
def built() -> tuple[tuple[cv.Conversation, ...], cv.ConversationKey]:
    return cv.build_from_specs()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_two_builds_write_the_same_bytes(tmp_path: Path) -> None:
    hashes = cv.spec_hashes()
    for name in ("a", "b"):
        convs, key = cv.build_from_specs()
        cv.write_folder(convs, key, tmp_path / name, hashes)
    a, b = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert set(a) == {*cv.FILES, "manifest.json"} and a == b


def test_the_seed_decides_the_conversations(tmp_path: Path) -> None:
    spec = cv.load_spec()
    domains = load_domains(paths.CORPUS_SPEC_DIR)
    one = cv.build(domains, spec)[0]
    other = cv.build(domains, spec.model_copy(update={"seed": spec.seed + 1}))[0]
    assert one == cv.build(domains, spec)[0]
    assert [len(c.turns) for c in one] != [len(c.turns) for c in other]


def test_at_least_80_conversations_of_3_to_6_turns_over_the_eight_domains(built) -> None:
    convs, key = built
    assert len(convs) >= 80
    assert {len(c.turns) for c in convs} <= set(range(3, 7))
    assert {c.domain for c in convs} == {d.domain for d in corpus_mod.load().domains}
    kinds = Counter(k.kind for k in key.values())
    assert set(kinds) == set(cv.KINDS) and kinds["opening"] == len(convs)
    assert all(kinds[k] >= 10 for k in cv.KINDS), kinds
    assert len(key) == sum(len(c.turns) for c in convs)


def test_the_opening_is_a_question_variant_and_every_later_turn_needs_the_earlier(built) -> None:
    convs, key = built
    corpus = corpus_mod.load()
    questions = {(t.policy_id, t.variant): t.question for t in corpus.tasks}
    for c in convs:
        assert c.turns[0].text == questions[(c.policy_ids[0], c.variant)]
        for t in c.turns[1:]:
            # a follow-up names no value and asks with a pronoun, an ellipsis or a reference back
            assert key[(c.conversation_id, t.index)].kind != "opening"


def test_each_kind_keys_the_version_it_asks_about(built) -> None:
    convs, key = built
    corpus = corpus_mod.load()
    docs = {d.doc_id: d for d in corpus.documents}
    for c in convs:
        published = {d.doc_id: d for t in c.turns for d in t.publishes}
        keys = [key[(c.conversation_id, t.index)] for t in c.turns]
        first = keys[0]
        for t, k in zip(c.turns, keys, strict=True):
            grounds = [published.get(i) or docs[i] for i in k.required_doc_ids]
            for doc, ans in zip(grounds, k.expected_answers, strict=False):
                if k.kind != "since_when":
                    assert states_value(doc.text, ans), (c.conversation_id, t.index)
            if k.kind == "since_when":
                assert k.expected_answers == (str(grounds[0].effective_year),)
            if k.kind == "update":
                new = t.publishes[0]
                assert k.required_doc_ids == (new.doc_id,) and t.retires
                assert new.status == "current" and new.effective_year == cv.load_spec().update_year
                old = {
                    normalize_answer(docs[i].text)
                    for i in docs
                    if docs[i].policy_id == new.policy_id
                }
                assert normalize_answer(new.text) not in old
            if k.kind == "recall_first":
                assert k.expected_answers == first.expected_answers
            if k.kind == "multi_hop":
                assert len(k.policy_ids) == 2 and len(set(k.expected_answers)) >= 1
            if k.kind == "clarify":
                assert k.behaviour == "clarify" and not k.expected_answers
            else:
                assert k.behaviour == "answer" and k.expected_answers


def test_a_replacement_is_neither_of_ours_nor_the_other_tenants(built) -> None:
    convs, key = built
    corpus = corpus_mod.load()
    foreign = corpus.foreign_by_policy()
    ans = corpus_mod.load_answer_key()
    ours = {}
    for d in corpus.documents:
        ours.setdefault(d.policy_id, []).append(d.text)
    for c in convs:
        for t in c.turns:
            for new in t.publishes:
                k = key[(c.conversation_id, t.index)]
                value = k.expected_answers[0]
                assert not states_value(foreign[new.policy_id].text, value)
                assert all(not states_value(x, value) for x in ours[new.policy_id])
                assert value not in {
                    e.expected_answer for e in ans.values() if e.policy_id == new.policy_id
                }


def test_no_answer_reaches_a_turn_or_anything_public(built) -> None:
    convs, key = built
    for c in convs:
        answers = {a for t in c.turns for a in key[(c.conversation_id, t.index)].expected_answers}
        public = asdict(c)
        for t in public["turns"]:
            t.pop("publishes")  # the documents published are evidence, as the corpus's are
        strings = list(_strings(public))
        for t in c.turns:
            for said in t.texts():
                assert not [a for a in answers if states_value(said, a)], (c.conversation_id, said)
        assert not [a for a in answers for s in strings if states_value(s, a)], c.conversation_id
        names = {*public, *(n for t in public["turns"] for n in t)}
        assert not names & {f.name for f in fields(cv.TurnKey)} - {
            "conversation_id",
            "turn",
            "policy_ids",
        }


def _strings(obj: object) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in _strings(v)]
    return []


def test_the_builder_refuses_a_template_that_states_an_answer() -> None:
    spec = cv.load_spec()
    domains = load_domains(paths.CORPUS_SPEC_DIR)
    value = domains[0].policies[0].current.value
    said = [f"Was it {value}?"]
    kinds = ("previous_version", "since_when", "update", "recall_first")
    leaky = spec.templates.model_copy(update=dict.fromkeys(kinds, said))
    with pytest.raises(ValueError, match="states the answer"):
        cv.build(domains, spec.model_copy(update={"templates": leaky}))


def test_the_key_is_its_own_file_and_the_public_file_holds_no_answer(tmp_path: Path, built) -> None:
    convs, key = built
    cv.write_folder(convs, key, tmp_path / "c", cv.spec_hashes())
    public = (tmp_path / "c" / "conversations.jsonl").read_text()
    assert "expected_answers" not in public and "required_doc_ids" not in public
    assert cv.load(tmp_path / "c") == convs
    assert dict(cv.load_key(tmp_path / "c")) == dict(key)
    (tmp_path / "c" / "conversations.jsonl").write_text(public.replace("?", "!", 1))
    with pytest.raises(ValueError, match="checksum"):
        cv.load(tmp_path / "c")


def test_the_manifest_records_counts_and_the_clustering(tmp_path: Path, built) -> None:
    convs, key = built
    m = cv.write(convs, key, tmp_path, cv.spec_hashes())
    assert m["counts"]["conversations"] == len(convs) and m["counts"]["domains"] == 8
    assert sum(m["counts"]["by_kind"].values()) == m["counts"]["turns"] == len(key)
    cl = m["clusters"]
    assert cl["unit"] == "policy" and cl["policies"] == 80
    assert cl["conversations_per_policy"] == {"1": 80}
    assert sum(cl["variants"].values()) == len(convs) and set(cl["variants"]) <= {"1", "2", "3"}
    assert cl["with_second_policy"] == sum(len(c.policy_ids) == 2 for c in convs) > 0
    assert m["spec_hash"] == corpus_mod.load().spec_hash


def test_a_folder_that_is_not_a_conversations_folder_is_refused(tmp_path: Path, built) -> None:
    convs, key = built
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    with pytest.raises(FolderRefused, match="not a conversations folder"):
        cv.write_folder(convs, key, tmp_path / "x")
    assert (tmp_path / "x" / "notes.txt").read_text() == "mine"
    cv.write_folder(convs, key, tmp_path / "y")
    cv.write_folder(convs, key, tmp_path / "y")  # its own folder is replaced


def test_a_bad_spec_is_one_line_naming_file_and_field(tmp_path: Path) -> None:
    text = paths.CONVERSATION_SPEC.read_text().replace(
        "with the policy on {other}", "with the policy on {elsewhere}"
    )
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(SpecError) as exc:
        cv.load_spec(tmp_path / "c.yaml")
    line = str(exc.value)
    assert line.count("\n") == 0 and "c.yaml:" in line and "elsewhere" in line
    (tmp_path / "d.yaml").write_text(
        paths.CONVERSATION_SPEC.read_text().replace(
            "    clarification:\n      - The one on {topic}.\n", ""
        )
    )
    with pytest.raises(SpecError, match="clarification"):
        cv.load_spec(tmp_path / "d.yaml")


def test_more_conversations_per_policy_cluster_under_it() -> None:
    spec = cv.load_spec().model_copy(update={"per_policy": 2})
    convs, key = cv.build(load_domains(paths.CORPUS_SPEC_DIR), spec)
    assert len({c.conversation_id for c in convs}) == len(convs) == 160
    cl = cv.clusters(convs)
    assert cl["policies"] == 80 and cl["conversations_per_policy"] == {"2": 80}
    assert len(key) == sum(len(c.turns) for c in convs)

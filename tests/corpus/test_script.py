"""The scripted user: fixed turns; a branched turn chosen by the reply's category; byte for byte."""

from __future__ import annotations

import itertools
import json

import pytest

from layerlab.corpus import conversations as cv
from layerlab.corpus.script import ScriptedUser, category_of, script


@pytest.fixture(scope="module")
def convs() -> tuple[cv.Conversation, ...]:
    return cv.build_from_specs()[0]


def _branched(convs: tuple[cv.Conversation, ...]) -> cv.Conversation:
    return next(c for c in convs if any(t.branches for t in c.turns))


def test_a_branched_turn_follows_the_category_of_the_previous_reply(convs) -> None:
    c = _branched(convs)
    at = next(t.index for t in c.turns if t.branches)
    seen = {}
    for cat in cv.REPLY_CATEGORIES:
        cats = ["answered"] * (len(c.turns) - 1)
        cats[at - 1] = cat
        seen[cat] = script(c, cats)[at]
    assert len(set(seen.values())) == 3  # one text per category
    assert seen["clarification"] == c.turns[at].branches["clarification"]


def test_a_fixed_turn_ignores_the_reply(convs) -> None:
    for c in convs:
        if any(t.branches for t in c.turns):
            continue
        outs = {
            script(c, cats)
            for cats in itertools.product(cv.REPLY_CATEGORIES, repeat=len(c.turns) - 1)
        }
        assert outs == {tuple(t.text for t in c.turns)}


def test_every_script_is_the_same_bytes_from_two_builds(convs) -> None:
    again = cv.build_from_specs()[0]

    def every(cs: tuple[cv.Conversation, ...]) -> bytes:
        rows = []
        for c in cs:
            for cats in itertools.product(cv.REPLY_CATEGORIES, repeat=len(c.turns) - 1):
                if any(t.branches for t in c.turns) or cats == ("answered",) * len(cats):
                    rows.append([c.conversation_id, cats, script(c, cats)])
        return json.dumps(rows, sort_keys=True).encode()

    assert every(convs) == every(again)


def test_the_user_plays_turn_by_turn_and_stops(convs) -> None:
    c = _branched(convs)
    user = ScriptedUser(c)
    said = [user.first()]
    while (nxt := user.reply("clarification")) is not None:
        said.append(nxt)
    assert tuple(said) == script(c, ["clarification"] * (len(c.turns) - 1))
    assert user.turn == len(c.turns) - 1 and user.reply("answered") is None
    with pytest.raises(ValueError, match="has begun"):
        user.first()


def test_bad_categories_and_statuses_are_refused(convs) -> None:
    c = convs[0]
    with pytest.raises(ValueError, match="call first"):
        ScriptedUser(c).reply("answered")
    user = ScriptedUser(c)
    user.first()
    with pytest.raises(ValueError, match="reply category: expected one of"):
        user.reply("maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"expected {len(c.turns) - 1} reply categories"):
        script(c, [])
    assert category_of("answered") == "answered" and category_of(None) == "abstained"
    assert category_of("clarification") == "clarification"
    with pytest.raises(ValueError, match="reply status"):
        category_of("error")

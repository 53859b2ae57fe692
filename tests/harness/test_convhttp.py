"""An HTTP service runs through the conversations: each turn POSTed as JSON (the served history
and memory), its searches through layerlab's tool server with the turn's token (the
conversation's cache in front), its reply read as the reply contract; a tiny service on
127.0.0.1 answers as the Python target `scoped_memory` does, turn for turn."""

from __future__ import annotations

import pytest

from layerlab.corpus import conversations as cv
from layerlab.corpus.build import load
from layerlab.faults.scenario import conversation_scenarios
from layerlab.harness import conversation as hc
from layerlab.harness.targets.spec import TargetError

FIELDS = {"conversation_id", "turn", "session_id", "question", "answer_kind", "history", "memory",
          "tools_url", "tools_token", "mcp_url"}  # fmt: skip


@pytest.fixture(scope="module")
def world():
    convs, key = cv.build_from_specs()
    return convs, hc.Setting(load(), key), conversation_scenarios()


@pytest.fixture()
def service(targets):
    svc = targets.Service()
    yield svc
    svc.close()


def _run(spec, world, scenario, n=10, settings=None):
    convs, setting, scenarios = world
    system = hc.target(spec, settings)
    try:
        return hc.run([system], convs[:n], [scenarios[scenario]], setting)
    finally:
        hc.close_all([system])


def _strip(recs):
    return [(r.conversation_id, r.turn, r.category, r.success, r.leak, r.diagnostic, r.searches,
             r.cache_hits, r.memory_entries, r.history_messages) for r in recs]  # fmt: skip


@pytest.mark.parametrize(("system", "scenario"), [
    ("scoped_memory", "conversation_clean"), ("scoped_memory", "foreign_memory"),
    ("Recorder", "stale_tool_cache"), ("Recorder", "swapped_session")])  # fmt: skip
def test_a_service_answers_as_the_same_system_in_process(targets, service, world, system,
                                                         scenario) -> None:  # fmt: skip
    fn = getattr(targets, system)
    service.system = fn().answer if isinstance(fn, type) else fn
    over_http = _run(service.url, world, scenario, n=16)
    in_process = _run(f"conversation_targets:{system}", world, scenario, n=16)
    assert _strip(over_http) == _strip(in_process)
    assert {r.model for r in over_http} == {"target/http-service"}
    assert len(service.bodies) == len(over_http)
    if system == "Recorder":  # it repeats the first question's search: the cache serves it
        assert sum(r.cache_hits for r in over_http) > 0
    if scenario == "foreign_memory":
        assert sum(r.struck for r in over_http) > 0


def test_each_turn_is_posted_with_what_it_was_served(service, world) -> None:
    recs = _run(service.url, world, "truncated_history")
    assert all(set(b) == FIELDS for b in service.bodies)
    by_turn = {(b["conversation_id"], b["turn"]): b for b in service.bodies}
    for r in recs:
        b = by_turn[(r.conversation_id, r.turn)]
        assert len(b["history"]) == r.history_messages and len(b["memory"]) == r.memory_entries
        assert {m["turn"] for m in b["history"]} <= set(range(1, r.turn))  # turn 0 dropped
        assert all(set(m) == {"turn", "role", "text"} for m in b["history"])


def test_the_tool_server_serves_the_turn_only(service, world) -> None:
    import json
    import urllib.error
    import urllib.request

    service.extra = [("/open_document", {"doc_id": "finance-01-a"}, None),
                     ("/search", {"query": "approval"}, "not-a-token"),
                     ("/search", {"query": "approval", "session_id": "s-other"}, None)]  # fmt: skip
    convs, setting, scenarios = world
    system = hc.target(service.url)
    try:
        recs = hc.run([system], convs[:2], [scenarios["conversation_clean"]], setting)
        replies = service.tool_replies
        assert [code for code, _ in replies] == [200, 403, 403] * len(recs)
        assert all(obs["error"]["code"] == "invalid_call" for _, obs in replies[::3])
        assert all(r.diagnostic == "tool_misuse" for r in recs)  # the open_document call
        assert all(r.searches >= 1 for r in recs)  # the invalid call is counted as a call
        ended = service.bodies[0]  # a turn's token ends with its turn
        req = urllib.request.Request(ended["tools_url"] + "/search", method="POST",
                                     data=json.dumps({"query": "approval"}).encode(),
                                     headers={"Authorization": f"Bearer {ended['tools_token']}",
                                              "Content-Type": "application/json"})  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)  # noqa: S310
        assert err.value.code == 403
    finally:
        hc.close_all([system])


def test_an_error_or_a_late_reply_fails_the_turn_and_the_user_moves_on(service, world) -> None:
    service.status = 500
    recs = _run(service.url, world, "conversation_clean", n=2)
    assert recs and all(r.diagnostic == "provider_error" for r in recs)
    service.status, service.delay = 200, 0.5
    recs = _run(service.url, world, "conversation_clean", n=1, settings={"timeout": "0.1"})
    assert recs and all(r.diagnostic == "timeout" and not r.success for r in recs)
    assert len(recs) == len(world[0][0].turns)


def test_nothing_listening_is_one_line() -> None:
    with pytest.raises(TargetError, match="nothing answers there") as err:
        hc.target("http://127.0.0.1:9/turn")
    assert "\n" not in str(err.value)

"""A model as a conversational reader (harness/convmodel.py), without a model: a stand-in for
litellm answers as a chat model would, so what the chain sends, reads, caches and fails on is
checked offline. The real model's run is `make local-conversations`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from layerlab.corpus import conversations as cv
from layerlab.corpus.build import load
from layerlab.faults.scenario import conversation_scenarios
from layerlab.harness import conversation as hc
from layerlab.harness.convmodel import ModelReader
from layerlab.harness.live.settings import LiveRunError
from layerlab.models.cache import ResponseCache
from layerlab.models.llm import ProviderSettings
from layerlab.models.routing import Endpoint, Route
from layerlab.system import convprompt


class FakeLitellm:
    """Answers every request with the first search result's text's first dollar amount (or
    abstains), citing it; ``fail``: raises that exception instead."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = fail

    async def acompletion(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        if self.fail is not None:
            raise self.fail
        last = kwargs["messages"][-1]["content"]
        head = next((ln for ln in last.splitlines() if ln.startswith("[1] doc_id: ")), None)
        amount = next((w.rstrip(".,") for w in last.split() if w.startswith("$")), None)
        reply = ({"status": "answered", "answer": amount, "citations": [head.split(": ")[1]],
                  "reason": None} if head and amount else
                 {"status": "abstained", "answer": None, "citations": [], "reason": "none"})  # fmt: skip
        msg = SimpleNamespace(content=json.dumps(reply), tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=msg)],
                               usage=SimpleNamespace(prompt_tokens=10, completion_tokens=5))  # fmt: skip


@pytest.fixture(scope="module")
def world() -> tuple[Any, Any, Any]:
    convs, key = cv.build_from_specs()
    return convs, key, hc.Setting(load(), key)


def _reader(tmp_path: Any, fake: FakeLitellm, **settings: Any) -> ModelReader:
    route = Route(model="openai/fake", endpoints=[Endpoint(None, asyncio.Semaphore(1))],
                  response_format={"type": "json_object",
                                   "schema": convprompt.CONV_REPLY_SCHEMA})  # fmt: skip
    ps = ProviderSettings(timeout_s=5.0, max_tokens=200, temperature=0.0, attempts=1, **settings)
    r = ModelReader("local/fake", route, ResponseCache(tmp_path / "cache"), ps)
    r.litellm = fake
    return r


def _play(reader: ModelReader, world: Any, scenario: str = "conversation_clean") -> list[Any]:
    convs, _key, setting = world
    system = hc.System("local", "local/fake", reader.answer)
    return [r for c in convs[:3] for r in hc.play(system, c, conversation_scenarios()[scenario],
                                                   setting)]  # fmt: skip


def test_the_chain_asks_the_model_and_scores_its_replies(tmp_path: Any, world: Any) -> None:
    fake = FakeLitellm()
    reader = _reader(tmp_path, fake)
    records = _play(reader, world)
    assert len(records) == sum(len(c.turns) for c in world[0][:3])
    assert any(r.success for r in records) and any(r.category == "answered" for r in records)
    req = fake.requests[0]
    assert req["timeout"] == 5.0 and req["temperature"] == 0.0
    assert req["response_format"]["schema"]["properties"]["status"]["enum"] == [
        "answered", "abstained", "clarification"]
    # turn t's prompt begins with turn t-1's messages (a prompt cache reuses the prefix)
    second = next(r for r in fake.requests if len(r["messages"]) > 2)
    assert second["messages"][0]["content"] == convprompt.SYSTEM
    assert [m["role"] for m in second["messages"][1:-1]] == ["user", "assistant"]
    facts = reader.facts()
    assert facts["made"] == len(fake.requests) and facts["cache_hits"] == 0
    reader.close()


def test_a_rerun_replays_the_cache_byte_for_byte(tmp_path: Any, world: Any) -> None:
    first = _reader(tmp_path, FakeLitellm())
    before = _play(first, world)
    first.close()
    fake = FakeLitellm(fail=RuntimeError("must not be called"))
    again = _reader(tmp_path, fake)
    assert _play(again, world) == before
    assert fake.requests == [] and again.facts()["made"] == 0
    assert again.facts()["cache_hits"] == len(before)
    again.close()


def test_no_answer_key_reaches_the_model(tmp_path: Any, world: Any) -> None:
    """The prompts are the same whatever the key says: scoring reads it after the reply."""
    convs, key, setting = world
    fake_a, fake_b = FakeLitellm(), FakeLitellm()
    _play(_reader(tmp_path / "a", fake_a), world, "stale_memory")
    bent = {k: replace(v, expected_answers=("KEY-ONLY-VALUE",), required_doc_ids=("key-only",))
            for k, v in key.items()}  # fmt: skip
    _play(_reader(tmp_path / "b", fake_b), (convs, bent, hc.Setting(setting.corpus, bent)),
          "stale_memory")  # fmt: skip
    assert [r["messages"] for r in fake_a.requests] == [r["messages"] for r in fake_b.requests]
    assert "KEY-ONLY-VALUE" not in json.dumps([r["messages"] for r in fake_b.requests])


def test_a_failed_call_is_the_turns_failure_and_a_setup_error_stops_the_run(
    tmp_path: Any, world: Any
) -> None:
    class Overloaded(Exception):
        status_code = 503

    records = _play(_reader(tmp_path / "x", FakeLitellm(fail=Overloaded("busy"))), world)
    assert records and all(r.diagnostic == "provider_error" or not r.success for r in records)
    assert {r.category for r in records} == {"none"}

    class NotFound(Exception):
        status_code = 404

    with pytest.raises(LiveRunError, match="not found"):
        _play(_reader(tmp_path / "y", FakeLitellm(fail=NotFound("no such model"))), world)


def test_served_refuses_a_model_that_is_not_local() -> None:
    from layerlab.harness import convmodel

    with pytest.raises(LiveRunError, match="local/NAME"):
        with convmodel.served("openai/gpt-4o-mini"):
            pass

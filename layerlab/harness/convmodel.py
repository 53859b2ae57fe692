"""A model as a conversational reader: a chat chain over a real model, turn by turn.

``layerlab run conversations -m local/NAME`` plays the conversations against a local model
(``data/specs/models.yaml``, served by llama.cpp as ``run live`` serves it) through this chain:
at each turn it searches the conversation's tool once (:func:`~layerlab.system.convprompt.query`:
the question that named the policy, then the turn's text), renders the served history as chat
messages, then the search results, the served memory and the question
(:func:`~layerlab.system.convprompt.messages`), and asks the model for the conversational reply
contract (:data:`~layerlab.system.convprompt.CONV_REPLY_SCHEMA`, constrained decoding). The
model sees what the request serves and nothing else: the answer key is scored after the reply.

Replies are greedy (temperature 0) and kept in the reply cache
(:class:`~layerlab.models.cache.ResponseCache`, outside every run folder), keyed by the model,
the request's parameters, the prompt version and the prompt's hash: identical prompts share a
reply (a turn before a fault strikes is the clean turn), and a rerun after an interruption calls
the model only for the turns it had not reached. The run's manifest records the model's file
and hash, the runtime that answered and the calls made and replayed (:meth:`ModelReader.facts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from layerlab.harness.live import calls
from layerlab.harness.live.budget import Budget, Counters
from layerlab.harness.live.engine import local_route
from layerlab.harness.live.settings import LiveRunError
from layerlab.models import llamaserver
from layerlab.models.cache import ResponseCache, default_cache_dir
from layerlab.models.llm import ProviderSettings, import_litellm
from layerlab.models.routing import Route, record_seed
from layerlab.system import convprompt
from layerlab.system.prompt import prompt_hash

SEED = 20260701
"""The seed sent with every request (a greedy reply does not depend on it; a server that
samples anyway is reproducible with it)."""


class ModelFailed(RuntimeError):
    """The model gave no reply after its attempts (the turn's ``provider_error``)."""


class ModelReader:
    """The chat chain of one model (module docstring): :meth:`answer` is a
    :class:`~layerlab.harness.conversation.System`'s answer."""

    def __init__(self, model: str, route: Route, cache: ResponseCache,
                 settings: ProviderSettings) -> None:  # fmt: skip
        self.model, self.route, self.cache, self.settings = model, route, cache, settings
        self.counters = Counters()
        self.budget = Budget(None)
        self.litellm = import_litellm()
        self.rng = random.Random(SEED)
        self._runner = asyncio.Runner(loop_factory=calls._Loop)
        self.params: dict[str, Any] = {
            **settings.request_params(), "response_format": "json_schema",
            "prompt": convprompt.CONV_PROMPT_VERSION, "seed": SEED,
        }  # fmt: skip
        if (which := llamaserver.selected()) != llamaserver.DEFAULT:
            self.params["runtime"] = which  # another runtime's replies are its own

    def answer(self, request: Any) -> Any:
        """The model's reply to one turn (the reply contract's object, or its text when that
        is no JSON); :class:`ModelFailed` when the model did not answer."""
        q = convprompt.query(request.question, request.history)
        obs = request.search(q)
        msgs = convprompt.messages(request.question, request.history, request.memory, obs,
                                   request.session_id)  # fmt: skip
        phash = prompt_hash(msgs)
        key = ResponseCache.key(self.model, self.params, phash)
        reply = self.cache.get(key)
        if reply is not None:
            self.counters.count("cache_hits")
            return convprompt.read(reply)
        seed = record_seed(SEED, self.model, "conversation", phash, "", 0)
        last: list[str] = []
        reply, _failure = self._runner.run(calls.call(
            self.litellm, self.route, msgs, seed, self.settings, self.budget, self.counters,
            self.rng, last_error=last))  # fmt: skip
        self.counters.count("cache_misses")
        if reply is None:
            self.counters.count("failures")
            raise ModelFailed(last[0] if last else "no reply")
        self.cache.put(key, reply)
        return convprompt.read(reply)

    def facts(self) -> dict[str, Any]:
        """What the manifest says of the calls: made (sent, retries included), replayed from
        the cache, failed; tokens and seconds of the answered calls."""
        c = self.counters
        return {"made": c.calls, "cache_hits": c.cache_hits, "cache_misses": c.cache_misses,
                "failures": c.failures, "retries": c.retries, "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "latency_s": round(sum(c.latencies), 1)}  # fmt: skip

    def close(self) -> None:
        self.cache.close()
        self._runner.close()


@contextlib.contextmanager
def served(model: str, cache_dir: Path | None = None, timeout_s: float = 180.0,
           say: Any = print) -> Iterator[tuple[ModelReader, dict[str, Any]]]:  # fmt: skip
    """A :class:`ModelReader` on a ``local/NAME`` model, its server started (fetched first if
    need be) and stopped afterwards; with the model's provenance for the manifest
    (:func:`~layerlab.models.local.provenance`: file, hash, runtime)."""
    from layerlab.models import local as models_mod

    if not models_mod.is_local(model):
        raise LiveRunError(f"-m {model}: conversations run local/NAME models of "
                           "data/specs/models.yaml, or the reference readers layerlab/extractive "
                           "and layerlab/cautious")  # fmt: skip
    try:
        spec = models_mod.lookup(model)
        models_mod.runtime_version()
        models_mod.fetch(spec, say=say)
        say(f"starting a llama.cpp server for {spec.label}")
        with models_mod.serve(spec, n_servers=1) as servers:
            route = local_route(model, [s.api_base for s in servers], "json_schema", SEED,
                                schema=convprompt.CONV_REPLY_SCHEMA)  # fmt: skip
            settings = ProviderSettings(timeout_s=timeout_s, max_tokens=200, temperature=0.0)
            reader = ModelReader(model, route, ResponseCache(cache_dir or default_cache_dir()),
                                 settings)  # fmt: skip
            try:
                yield reader, models_mod.provenance(spec, servers)
            finally:
                reader.close()
    except models_mod.ModelError as exc:
        raise LiveRunError(str(exc)) from None


__all__ = ["SEED", "ModelFailed", "ModelReader", "served"]

"""Local reference agents: deterministic baselines served through litellm as custom providers.

They are **not models**. ``layerlab/extractive`` answers from the prompt's evidence exactly as
the deterministic harness's extractive reader does; ``layerlab/cautious`` abstains on evidence
flagged as partial, stale or from another session. They let the live harness run end to end
offline, through the same litellm call path a hosted model uses, and they give archives whose
numbers must be read as baseline behaviour, never as a provider's.

A latency suffix (``layerlab/extractive@50ms``) makes an agent sleep before replying, for the
harness-overhead benchmark.
"""

from __future__ import annotations

import re
import time
from typing import Any

from layerlab._io import canonical_json
from layerlab.models.llm import import_litellm
from layerlab.registry import did_you_mean
from layerlab.system.agentprompt import is_agent_conversation
from layerlab.system.prompt import parse_input, render_reply
from layerlab.system.reader import READERS

PROVIDER = "layerlab"
# Providers whose "models" are deterministic reference agents, not models: these agents and the
# deterministic harness.
REFERENCE_PROVIDERS = frozenset({PROVIDER, "deterministic"})
_NAME = re.compile(r"^(?P<reader>[a-z_]+)(?:@(?P<ms>\d+)ms)?$")
AGENTS = {
    "extractive": "deterministic baseline: extractive reader over the prompt's evidence",
    "cautious": "deterministic baseline: abstains on partial, stale or foreign-session evidence",
}


TARGET_PROVIDER = "target"
"""The provider of a target run's records: the user's own system, neither a model nor a
reference agent (``layerlab.harness.targets``)."""


def is_target(provider: str) -> bool:
    """Whether a provider's records come from a user's system under test (``run live --target``)."""
    return provider == TARGET_PROVIDER


AGENT_SUFFIX = "+agent"
"""Appended to an agent-mode record's model name: the model acting as an agent is another system
under test than the same model reading one search's results, so its records are another unit
and are never pooled with single-call records (``local/qwen2.5-coder-1.5b+agent``)."""


def is_reference(provider: str) -> bool:
    """Whether a provider's records come from a deterministic reference agent, not a model."""
    return provider in REFERENCE_PROVIDERS


def _split(model: str) -> tuple[str, float]:
    name = model.split("/", 1)[-1]
    m = _NAME.match(name)
    if not m or m.group("reader") not in AGENTS:
        raise ValueError(
            f"unknown reference agent {model!r}{did_you_mean(model, [f'{PROVIDER}/{a}' for a in AGENTS])}; "
            f"known: {sorted(AGENTS)} (optionally @<ms>ms)"
        )
    return m.group("reader"), int(m.group("ms") or 0) / 1000.0


def check_name(model: str) -> None:
    """Raise ``ValueError`` unless ``model`` names a reference agent (``layerlab/extractive``...)."""
    _split(model)


def reply_for(model: str, messages: list[dict[str, Any]]) -> str:
    """The agent's JSON reply to a prompt (pure function of model name and prompt)."""
    reader, _ = _split(model)
    return render_reply(READERS[reader]().read(parse_input(messages)))


def agent_action(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The reference agent's next action in agent mode (a pure function of the conversation):
    search the question; after a tool fault (an error, partial or empty result) search once
    more; then read everything delivered with its reader and answer (or abstain)."""
    from layerlab.system import agentprompt as ap
    from layerlab.system.reader import Evidence, ReaderInput

    reader, _ = _split(model)
    head = ap.opening(messages)
    seen = ap.observations(messages)
    last_turn = bool(messages) and messages[-1].get("content") == ap.LAST_TURN

    def faulted(o: dict[str, Any]) -> bool:
        res = o.get("results") or []
        return o.get("status") != "ok" or not res or any(r.get("truncated") for r in res)

    if not last_turn and (not seen or (len(seen) == 1 and faulted(seen[0]))):
        return {"action": "search", "query": head["question"], "top_k": 3}
    evidence: dict[str, Evidence] = {}
    status, error = "ok", None
    for o in seen:
        if o.get("status") in ("ok", "partial"):
            status = o["status"]
            for r in o.get("results") or []:
                evidence.pop(r["doc_id"], None)
                evidence[r["doc_id"]] = Evidence(rank=len(evidence) + 1, **r)
        elif isinstance(o.get("error"), dict):
            error = o["error"].get("message")
    inp = ReaderInput(head["question"], head["answer_kind"], head["session_id"], status,
                      error if not evidence else None, tuple(evidence.values()))  # fmt: skip
    out = READERS[reader]().read(inp)
    return {"action": "answer", "status": out.status, "answer": out.answer,
            "citations": list(out.citations), "reason": out.reason}  # fmt: skip


_registered = False


def register() -> None:
    """Register the ``layerlab/`` provider with litellm (idempotent)."""
    import asyncio  # here, not at import: the analysis imports this module for is_reference

    global _registered
    if _registered:
        return
    litellm = import_litellm()

    class ReferenceAgent(litellm.CustomLLM):  # type: ignore[name-defined]
        def _response(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
            message: dict[str, Any] = {"role": "assistant", "content": None}
            finish = "stop"
            if is_agent_conversation(messages):
                act = agent_action(model, messages)
                if not kw.get("tools"):  # json_action: the action is the reply
                    message["content"] = canonical_json(act)
                elif act.pop("action") == "answer":  # native: the final reply's text
                    message["content"] = canonical_json(act)
                else:  # native tool calling
                    n = sum(m.get("role") == "tool" for m in messages)
                    fn = {"name": "search", "arguments": canonical_json(act)}
                    message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                              "function": fn}]  # fmt: skip
                    finish = "tool_calls"
            else:
                message["content"] = reply_for(model, messages)
            return litellm.ModelResponse(
                model=f"{PROVIDER}/{model.split('/', 1)[-1]}",
                choices=[{"index": 0, "finish_reason": finish, "message": message}],
            )

        def completion(
            self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
        ) -> Any:
            _, delay = _split(model)
            if delay:
                time.sleep(delay)
            return self._response(model, messages, **kwargs.get("optional_params", {}))

        async def acompletion(
            self, model: str, messages: list[dict[str, Any]], *args: Any, **kwargs: Any
        ) -> Any:
            _, delay = _split(model)
            if delay:
                await asyncio.sleep(delay)
            return self._response(model, messages, **kwargs.get("optional_params", {}))

    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER],
        {"provider": PROVIDER, "custom_handler": ReferenceAgent()},
    ]
    _registered = True

"""A team's own agent built on an agent framework (OpenAI Agents SDK), reaching layerlab's faulted
tools over MCP: the worked example of ``layerlab run live --target python:my_mcp_agent:McpAgent``.

Nothing here is layerlab's but the request it is handed: an ``Agent`` with instructions, a chat
model behind an OpenAI-compatible endpoint (``OpenAIChatCompletionsModel``) and one MCP server
(``MCPServerStreamableHttp``) at the record's address, ``req.mcp_url`` — the record's faulted
``search`` and ``open_document``, valid while the record is answered. A tool fault reaches the
agent as an MCP tool error (``isError``) whose text is the observation, e.g.
``{"status": "error", "error": {"code": "denied", "message": "permission denied"}}``; what
the agent does with it is the agent's (here: whatever its model makes of it). The agent's
final output is its reply: the JSON reply contract when the model writes it, else free text.

Settings (``--target-setting k=v``): ``base_url`` of the OpenAI-compatible server (required),
``model`` (default ``qwen2.5-coder-1.5b``), ``api_key`` (default a placeholder: local servers
ignore it), ``max_turns`` (default 6). The model must return native ``tool_calls``.
"""

from __future__ import annotations

import json
from typing import Any

INSTRUCTIONS = (
    "You answer questions about company policy. Use the search tool (and open_document) to find "
    "the current policy document; never answer from memory. Tool results are JSON; a result "
    "with status error or refused is a failed call. Reply with JSON only: "
    '{"status": "answered", "answer": "<shortest exact phrase>", "citations": ["<doc_id>"]} '
    'or, when the tools give no current, trustworthy evidence, {"status": "abstained", '
    '"reason": "..."}.'
)


class McpAgent:
    """A Python target (an object: ``answer`` is awaited on layerlab's targets' event loop)."""

    def __init__(self, settings: dict[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        if not settings.get("base_url"):
            raise ValueError("set --target-setting base_url=http://HOST:PORT/v1")
        self.base_url = str(settings["base_url"])
        self.model = str(settings.get("model", "qwen2.5-coder-1.5b"))
        self.api_key = str(settings.get("api_key", "sk-no-key-needed"))
        self.max_turns = int(settings.get("max_turns", 6))

    def setup(self) -> None:
        from agents import set_tracing_disabled

        set_tracing_disabled(True)  # no trace export: the run is offline and private

    async def answer(self, req: Any) -> Any:
        from agents import Agent, OpenAIChatCompletionsModel, Runner
        from agents.mcp import MCPServerStreamableHttp
        from openai import AsyncOpenAI

        if req.mcp_url is None:
            raise RuntimeError("no MCP address: pip install 'layerlab[mcp]'")
        client = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, max_retries=0)
        model = OpenAIChatCompletionsModel(model=self.model, openai_client=client)
        question = json.dumps({"question": req.question, "answer_kind": req.answer_kind,
                               "session_id": req.session_id})  # fmt: skip
        async with MCPServerStreamableHttp(
            params={"url": req.mcp_url, "timeout": 30}, name="policy-tools", cache_tools_list=True
        ) as tools:
            agent = Agent(name="policy-agent", instructions=INSTRUCTIONS, model=model,
                          mcp_servers=[tools])  # fmt: skip
            result = await Runner.run(agent, question, max_turns=self.max_turns)
        return result.final_output

"""A team's own RAG chain, written the way LangChain users write one: the worked example of
``layerlab run live --target langchain:my_rag_chain:make_chain`` (notebook 13).

Nothing here is layerlab's: a prompt, a retriever, a chat model behind an OpenAI-compatible
endpoint (the local Qwen2.5-Coder-1.5B served by ``layerlab models serve``), and the usual
``{"answer", "source_documents"}`` output. layerlab hands ``make_chain`` a ``BaseRetriever``
whose results come through the scenario's faults (run with ``--retriever bm25``: BM25 over the
faulted index, the first stage many deployed pipelines use) and the ``search`` tool; it invokes
the chain with ``{"question", "session_id", "answer_kind"}`` and reads the output's answer and
sources. The chain answers from whatever the retriever returned; it checks no metadata, like
most chains. A failed search raises a ``ToolException`` (as a retriever over a failing backend
does); the chain takes it as no documents, through LangChain's ``with_fallbacks``.

Settings (``--target-setting k=v``): ``base_url`` of the OpenAI-compatible server (required),
``model`` (default ``qwen2.5-coder-1.5b``), ``timeout`` in seconds (default 180). Replies are
greedy (temperature 0, seed 0) and memoised per prompt within a run, as a team's LLM cache
would: a prompt the chain has already sent (an arm that changes nothing the chain sees) is not
sent again.
"""

from __future__ import annotations

import json
import threading
from operator import itemgetter
from typing import Any

from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnableParallel
from langchain_core.tools import ToolException

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "You answer questions about company policy from the context documents only. Reply "
            "with the shortest exact phrase from the context that answers the question (an "
            "amount with its currency sign, a duration with its unit, a percentage, a count with "
            "its noun, or a role or system name) and nothing else. If the context does not "
            "answer the question, reply exactly: I don't know",
        ),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ]
)
ROLES = {"system": "system", "human": "user", "ai": "assistant"}


def format_docs(docs: list[Any]) -> str:
    """The retrieved documents as the prompt's context (id, title, text)."""
    if not docs:
        return "(no documents)"
    return "\n\n".join(
        f"[{d.metadata.get('doc_id')}] {d.metadata.get('title', '')}\n{d.page_content}" for d in docs
    )


def make_chain(retriever: Any, tool: Any, settings: dict[str, str] | None = None) -> Any:
    """The chain: retrieve -> prompt -> chat model -> answer with its source documents."""
    import openai

    settings = dict(settings or {})
    if "base_url" not in settings:
        raise ValueError("my_rag_chain needs --target-setting base_url=http://host:port/v1")
    client = openai.OpenAI(
        base_url=settings["base_url"],
        api_key="sk-local",  # a local server takes any key
        timeout=float(settings.get("timeout", 180)),
        max_retries=2,
    )
    model = settings.get("model", "qwen2.5-coder-1.5b")
    memo: dict[str, str] = {}
    lock = threading.Lock()

    def chat(prompt_value: Any) -> str:
        msgs = [{"role": ROLES[m.type], "content": m.content} for m in prompt_value.to_messages()]
        key = json.dumps(msgs, sort_keys=True)
        with lock:
            if key in memo:
                return memo[key]
        r = client.chat.completions.create(
            model=model, messages=msgs, temperature=0, seed=0, max_tokens=60
        )
        text = (r.choices[0].message.content or "").strip()
        with lock:
            memo[key] = text
        return text

    def answer(inp: dict[str, Any]) -> dict[str, Any]:
        docs = inp["docs"]
        text = (PROMPT | RunnableLambda(chat)).invoke(
            {"context": format_docs(docs), "question": inp["question"]}
        )
        if not docs or text.lower().rstrip(".") in ("i don't know", "i do not know"):
            return {"answer": None, "source_documents": []}
        return {"answer": text, "source_documents": docs}

    search = retriever.with_fallbacks(
        [RunnableLambda(lambda _: [])], exceptions_to_handle=(ToolException,)
    )  # a failed search: no documents
    return RunnableParallel(docs=itemgetter("question") | search, question=itemgetter("question")) | RunnableLambda(answer)

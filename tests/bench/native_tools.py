"""Native tool calls on a local model (issue 32 item 4): does llama-cpp-python return valid
OpenAI ``tool_calls`` for the agent-mode tools, and can the model answer after a tool result?

One llama.cpp server per chat format (llama-cpp-python's server, as ``layerlab models serve``
starts it, with the registry's settings and only ``chat_format`` overridden), the same fixed
requests to each, temperature 0 and seed 0:

* ``first``  — the agent's opening (``SYSTEM["native"]``, a corpus question, the two tools'
  :data:`~layerlab.harness.tools.TOOL_DEFINITIONS`) under ``tool_choice`` ``auto``,
  ``required``, a named function (``search``) and not sent (``omitted``: what openai-agents
  0.24.0 sends unless its ``ModelSettings.tool_choice`` is set; the API then means ``auto``);
* ``result`` — the same opening, the assistant's ``search`` call (its ``content`` key left
  out, which the OpenAI API allows) and the tool's real observation (the clean scenario's, strict arm) as
  a ``tool`` message, under ``auto`` and ``none``: does the reply answer (the final-reply
  contract), is the answer the key's, and did the tool message reach the prompt at all (prompt
  tokens with and without it, under ``auto``);
* ``result_null`` — the same with ``"content": null`` on the assistant's call, as the OpenAI
  API documents it and openai-agents 0.24.0 and layerlab's own native loop send it;
* ``result_empty`` — the same with ``"content": ""`` (no framework sends it; the one shape the
  server accepts and its template renders), under ``auto`` and ``none``.

Per reply: a server error, syntactically valid ``tool_calls`` (a list of functions with a known
name and JSON-object arguments), arguments valid against the tool's schema (the tool box's own
check), the right tool first (``search``: no doc id is known yet), Qwen-style ``<tool_call>``
text in the content, a final reply that parses, the right answer; and calls per second.

    PYTHONPATH=. python -m tests.bench.native_tools --port 8160 --out /tmp/native_tools.json

Needs ``make local`` and the model fetched (``layerlab models fetch qwen2.5-coder-1.5b``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

from layerlab.harness.tools import SEARCH, TOOL_DEFINITIONS, TOOL_NAMES, _check_args

FORMATS = ("chatml-function-calling", None)
"""The routes measured: llama-cpp-python's documented function-calling chat format, and the
GGUF's own (Qwen's) template, the baseline that ``json_action`` exists for."""

DROPPED_BELOW = 20
"""A tool message that adds fewer prompt tokens than this was dropped by the chat template (its
role header only): the observation itself is hundreds of tokens."""

_QWEN_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def judge_calls(message: dict[str, Any] | None) -> dict[str, Any]:
    """What one reply message's tool calls are worth: ``calls`` (how many), ``syntax`` (every
    call a function with a known name and JSON-object arguments), ``args`` (every call's
    arguments valid against its tool's schema), ``first`` (the first call's tool), ``text_call``
    (a Qwen-style ``<tool_call>{...}</tool_call>`` in the content instead), the first call's
    ``arguments`` as sent and the first ``problem`` found."""
    message = message or {}
    calls = message.get("tool_calls") or []
    syntax = bool(calls) and isinstance(calls, list)
    args_ok = syntax
    first = None
    problem = ""
    arguments = None
    for i, c in enumerate(calls if syntax else []):
        fn = (c or {}).get("function") or {}
        name = fn.get("name")
        try:
            args = json.loads(fn.get("arguments") or "")
        except (json.JSONDecodeError, TypeError):
            args = None
        if i == 0:
            first, arguments = name, fn.get("arguments")
        if c.get("type") != "function" or name not in TOOL_NAMES or not isinstance(args, dict):
            syntax = args_ok = False
            problem = problem or f"not a known function with JSON-object arguments: {fn}"
            continue
        checked, why = _check_args(name, args)
        args_ok = args_ok and checked is not None
        problem = problem or why
    content = message.get("content") or ""
    return {
        "calls": len(calls) if isinstance(calls, list) else 0,
        "syntax": syntax,
        "args": args_ok,
        "first": first,
        "text_call": bool(_QWEN_CALL.search(content)),
        "arguments": arguments,
        "problem": problem,
    }


def judge_answer(message: dict[str, Any] | None, expected: str) -> dict[str, Any]:
    """Whether a reply after a tool result is a final reply (the reply contract parses, no tool
    call) and states the expected answer exactly (normalised)."""
    from layerlab.corpus.text import normalize_answer
    from layerlab.system.prompt import MalformedReply, parse_reply

    message = message or {}
    if message.get("tool_calls"):
        return {"final": False, "correct": False, "why": "tool call"}
    try:
        out = parse_reply(message.get("content"))
    except MalformedReply as exc:
        return {"final": False, "correct": False, "why": str(exc)}
    correct = out.answer is not None and normalize_answer(out.answer) == normalize_answer(expected)
    return {"final": True, "correct": correct, "why": out.status}


def _post(url: str, body: dict[str, Any], timeout: float) -> tuple[dict[str, Any] | None, str]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read()), ""
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[-200:]
        return None, f"HTTP {exc.code}: {detail}"
    except (urllib.error.URLError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def requests_for(n_tasks: int) -> list[dict[str, Any]]:
    """The fixed requests: ``n_tasks`` corpus questions (every k-th task, so several domains),
    each as the agent's opening under three tool choices and after its search's real
    observation under two. The answer key only labels the requests (``expected``); it never
    reaches a message."""
    from layerlab import paths
    from layerlab.corpus.build import load, load_answer_key
    from layerlab.faults.scenario import load_scenarios
    from layerlab.harness.prepare import prepare
    from layerlab.harness.tools import ToolBox
    from layerlab.system import agentprompt as ap

    corpus, key = load(paths.CORPUS_DIR), load_answer_key(paths.CORPUS_DIR)
    step = max(1, len(corpus.tasks) // n_tasks)
    tasks = corpus.tasks[::step][:n_tasks]
    clean = prepare(corpus, load_scenarios()["clean"])
    out: list[dict[str, Any]] = []
    for t in tasks:
        tools = ToolBox(t, clean, "strict")
        opening = ap.first_messages(t.question, t.answer_kind, tools.session_id, 4, "native")
        named = {"type": "function", "function": {"name": SEARCH}}
        for choice in ("auto", "required", named, None):  # None: not sent (the API's default)
            label = "omitted" if choice is None else choice if isinstance(choice, str) else "named"
            out.append({"kind": "first", "choice": label, "task": t.task_id,
                        "messages": opening, "tool_choice": choice})  # fmt: skip
        args = {"query": t.question, "top_k": 3}
        obs = tools.call(SEARCH, args, 1)
        call = ap.ToolRequest(SEARCH, args, "call_0")
        reply = json.dumps({"content": None, "tool_calls": [
            {"id": "call_0", "name": SEARCH, "arguments": json.dumps(args)}]})  # fmt: skip
        asked = ap.assistant_message("native", reply, ap.Turn(calls=(call,)))
        omitted = {k: v for k, v in asked.items() if k != "content"}  # no content key at all
        empty = {**asked, "content": ""}  # the one shape llama-cpp-python's server renders
        for kind, said, choice in (("result", omitted, "auto"), ("result", omitted, "none"),
                                   ("result_null", asked, "auto"),
                                   ("result_empty", empty, "auto"),
                                   ("result_empty", empty, "none")):  # fmt: skip
            convo = [*opening, said, ap.tool_message("native", call, obs)]
            out.append({"kind": kind, "choice": choice, "task": t.task_id,
                        "messages": convo, "tool_choice": choice,
                        "expected": key[t.task_id].expected_answer,
                        "without_tool": convo[:-1] if choice == "auto" else None})  # fmt: skip
    return out


def _prompt_tokens(url: str, model: str, messages: list[dict[str, Any]], choice: Any) -> int:
    """The prompt's size as the server rendered it (one generated token)."""
    body = {"model": model, "messages": messages, "tools": list(TOOL_DEFINITIONS),
            "tool_choice": choice, "max_tokens": 1, "temperature": 0.0, "seed": 0}  # fmt: skip
    resp, _err = _post(url, body, 600)
    return int((resp or {}).get("usage", {}).get("prompt_tokens") or -1)


def measure(
    api_base: str, model: str, chat_format: str | None, reqs: list[dict[str, Any]],
    say: Any = print,
) -> dict[str, Any]:  # fmt: skip
    """Every request against one server; per request its verdicts, and the totals."""
    url = api_base + "/chat/completions"
    rows = []
    t0 = time.perf_counter()
    for r in reqs:
        body = {"model": model, "messages": r["messages"], "tools": list(TOOL_DEFINITIONS),
                "temperature": 0.0, "seed": 0, "max_tokens": 256}  # fmt: skip
        if r["tool_choice"] is not None:
            body["tool_choice"] = r["tool_choice"]
        s = time.perf_counter()
        resp, err = _post(url, body, 900)
        secs = time.perf_counter() - s
        msg = None if resp is None else resp["choices"][0]["message"]
        row: dict[str, Any] = {"kind": r["kind"], "choice": r["choice"], "task": r["task"],
                               "error": err, "seconds": round(secs, 1),
                               **judge_calls(msg)}  # fmt: skip
        if r["kind"].startswith("result") and resp is not None:
            row.update(judge_answer(msg, r["expected"]))
            row["content"] = (msg or {}).get("content")
            if r["without_tool"] is not None:
                row["prompt_tokens"] = int(resp.get("usage", {}).get("prompt_tokens") or -1)
                row["prompt_tokens_without_tool"] = _prompt_tokens(
                    url, model, r["without_tool"], r["tool_choice"]
                )
        elif resp is not None:
            row["content"] = ((msg or {}).get("content") or "")[:160]
        rows.append(row)
        say(f"  {chat_format or 'gguf'} {r['kind']}/{r['choice']} {r['task']}: "
            f"{json.dumps({k: v for k, v in row.items() if k not in ('content',)})}")  # fmt: skip
    wall = time.perf_counter() - t0
    return {"chat_format": chat_format, "rows": rows, "seconds": round(wall, 1),
            "calls_per_s": round(len(rows) / wall, 3) if wall else None,
            "summary": summarise(rows)}  # fmt: skip


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Shares per (kind, tool choice): server errors, valid tool calls, valid arguments, the
    right tool first, text-only calls; after a result: final replies, right answers, replies
    whose prompt grew by fewer than :data:`DROPPED_BELOW` tokens with the tool message (the
    template dropped it) and the most it grew by."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{r['kind']}/{r['choice']}", []).append(r)
    out: dict[str, Any] = {}
    for g, rs in groups.items():
        n = len(rs)
        ok = [r for r in rs if not r["error"]]
        c: Counter[str] = Counter()
        for r in ok:
            c["syntax"] += r["syntax"]
            c["args"] += r["args"]
            c["right_first"] += r["first"] == SEARCH
            c["text_call"] += r["text_call"]
            if r["kind"].startswith("result"):
                c["final"] += bool(r.get("final"))
                c["correct"] += bool(r.get("correct"))
            if "prompt_tokens" in r:  # an observation of 3 results is hundreds of tokens
                grew = r["prompt_tokens"] - r["prompt_tokens_without_tool"]
                c["tool_dropped"] += grew < DROPPED_BELOW
                c["tool_message_tokens"] = max(c["tool_message_tokens"], grew)
        shares = {k: f"{v}/{n}" for k, v in sorted(c.items()) if k != "tool_message_tokens"}
        if "tool_message_tokens" in c:
            shares["tool_message_tokens_max"] = c["tool_message_tokens"]
        out[g] = {"n": n, "errors": n - len(ok), **shares,
                  "mean_s": round(sum(r["seconds"] for r in rs) / n, 1)}  # fmt: skip
    return out


COLUMNS = ("errors", "syntax", "args", "right_first", "text_call", "final", "correct",
           "tool_dropped")  # fmt: skip


def markdown(results: list[dict[str, Any]]) -> str:
    """The summaries as one Markdown table: a row per chat format and request group."""
    head = ["chat format", "requests", *COLUMNS, "mean s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        for group, row in res["summary"].items():
            cells = [f"`{res['chat_format'] or 'GGUF template'}`", f"{group} ({row['n']})"]
            cells += [f"{row['errors']}/{row['n']}" if c == "errors" else str(row.get(c, "–"))
                      for c in COLUMNS]  # fmt: skip
            lines.append("| " + " | ".join([*cells, f"{row['mean_s']}"]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--port", type=int, default=8160)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--format", action="append", dest="formats",
                    help="a chat format to measure (repeatable; 'gguf' = the model's own "
                    "template); default: chatml-function-calling and gguf")  # fmt: skip
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--table", nargs="+", default=None, metavar="JSON",
                    help="print the Markdown table of earlier --out files and exit")  # fmt: skip
    ap.add_argument("--kinds", default=None,
                    help="comma-separated request kinds (first) or kind/choice "
                    "(first/omitted) to send (default: all)")  # fmt: skip
    ns = ap.parse_args(argv)
    if ns.table:
        runs = [json.load(open(f)) for f in ns.table]  # noqa: SIM115 - read once
        for run in runs:
            for res in run["results"]:
                res["summary"] = summarise(res["rows"])  # this version's verdicts
        print(markdown([res for run in runs for res in run["results"]]))
        return 0
    from layerlab.models import local as models

    spec = models.lookup(ns.model)
    formats = [None if f == "gguf" else f for f in ns.formats] if ns.formats else list(FORMATS)
    reqs = requests_for(ns.tasks)
    if ns.kinds:
        wanted = ns.kinds.split(",")
        reqs = [r for r in reqs if r["kind"] in wanted or f"{r['kind']}/{r['choice']}" in wanted]
    results = []
    for fmt in formats:
        s = spec.model_copy(update={"chat_format": fmt})
        print(f"{spec.name} with chat format {fmt or '(the GGUF template)'}: {len(reqs)} requests")
        with models.serve(s, n_servers=1, port=ns.port) as (server,):
            print(f"  server pid {server.process.pid} on port {server.port}")
            results.append(measure(server.api_base, spec.name, fmt, reqs))
        print(json.dumps(results[-1]["summary"], indent=1))
    from layerlab.models import llamaserver

    which = llamaserver.selected()  # LAYERLAB_LOCAL_RUNTIME=llama-server: llama-server --jinja
    report = {"model": spec.name, "runtime": which if which != llamaserver.DEFAULT
              else models.runtime_version(), "results": results}  # fmt: skip
    if ns.out:
        with open(ns.out, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

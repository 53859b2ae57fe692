"""Agent mode: the model calls the faulted tools itself (harness/tools.py, harness/agent.py).

The deterministic reference agent's loop over the whole matrix; transient faults that a retry
recovers; the step limit, invalid and malformed replies; native tool calls through litellm
against a local OpenAI-compatible server (valid, invalid, endless); one reply-cache entry per
step; kill -9 mid-record and resume; and (``slow``) one real local-model agent record.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab._io import canonical_json
from layerlab.cli import app
from layerlab.corpus.build import load, load_answer_key
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.agent import AgentLoop
from layerlab.harness.deterministic import run_deterministic
from layerlab.harness.live.agentlog import AGENT_TABLE, read_table
from layerlab.harness.prepare import prepare
from layerlab.harness.step import RecordContext
from layerlab.models.agents import agent_action
from layerlab.system import agentprompt as ap

runner = CliRunner()
# the fetched models live in the real user cache; each test gets a private cache (conftest)
USER_CACHE = paths.user_cache()


@pytest.fixture(scope="module")
def world():
    corpus, key = load(), load_answer_key()
    return corpus, key, load_scenarios()


def _drive(loop: AgentLoop, policy) -> None:
    while not loop.done:
        loop.advance(policy(loop.request()))


def _reference(req) -> str:
    return canonical_json(agent_action("layerlab/extractive", req["messages"]))


def test_the_reference_agent_loop_over_the_whole_matrix(world) -> None:
    """Every task x scenario x strict/repair: where the agent's one search is the harness's own
    search its records equal single-call mode's; where the tool fails it retries once, sees the
    failure and abstains (a safe resolution the single call cannot reach)."""
    corpus, key, scenarios = world
    single = {
        (r.scenario, r.mitigation, r.task_id): r for r in run_deterministic(corpus, key, scenarios)
    }
    ctx = RecordContext(corpus, key, "layerlab", "extractive", "t")
    seen: Counter[tuple[str, str]] = Counter()
    for name, scen in scenarios.items():
        prep = prepare(corpus, scen)
        for arm in ("strict", "repair"):
            for t in corpus.tasks:
                loop = AgentLoop(t, prep, arm, protocol="json_action")
                _drive(loop, _reference)
                rec, s = loop.finish(ctx).record, loop.summary()
                one = single[(name, arm, t.task_id)]
                assert s.steps == s.tool_calls + 1 and s.invalid_calls == 0 and not s.step_limit
                if name in ("clean", "stale_index", "conflicting_evidence", "wrong_session") or (
                    name == "schema_drift" and arm == "repair"
                ):
                    assert s.tool_calls == 1
                    assert (rec.success, rec.diagnostic, rec.grounded_false_positive) == (
                        one.success,
                        one.diagnostic,
                        one.grounded_false_positive,
                    ), (name, arm, t.task_id)
                if name in ("missing_tool_output", "permission_denied"):
                    assert (s.tool_calls, s.retries_after_fault) == (2, 1)
                    assert rec.abstained and rec.safe_resolution and not one.safe_resolution
                if name == "schema_drift" and arm == "strict":
                    assert rec.diagnostic == "tool_contract" and not rec.success
                seen[(name, arm)] += 1
    assert len(seen) == 18 and set(seen.values()) == {len(corpus.tasks)}


def test_a_transient_fault_is_recovered_by_retrying_and_not_otherwise(world, tmp_path) -> None:
    """``lasts: 1``: the first tool call of the record is faulted, the next is not."""
    corpus, key, _ = world
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "seed: 1\nscenarios:\n  - name: blip\n    layer: availability\n    injected: one drop\n"
        "    expected_behaviour: retry\n    answerable: true\n    faults:\n"
        "      - op: drop_output\n        params: {form: 'null'}\n        lasts: 1\n"
    )
    prep = prepare(corpus, load_scenarios(spec)["blip"])
    ctx = RecordContext(corpus, key, "layerlab", "extractive", "t")

    def no_retry(req) -> str:  # answers after its first observation, whatever it was
        if len(ap.observations(req["messages"])) == 0:
            return canonical_json({"action": "search", "query": "x", "top_k": 3})
        return canonical_json({"action": "answer", "status": "abstained", "answer": None,
                               "citations": [], "reason": "tool failed"})  # fmt: skip

    tasks = corpus.tasks[:30]
    retried, gave_up = [], []
    for t in tasks:
        a, b = AgentLoop(t, prep, "strict"), AgentLoop(t, prep, "strict")
        _drive(a, _reference)
        _drive(b, no_retry)
        retried.append(a.finish(ctx).record)
        gave_up.append(b.finish(ctx).record)
        assert [c.outcome for c in a.calls][:1] == ["unavailable"]
        assert a.calls[1].after_fault and a.calls[1].outcome == "ok"
    assert sum(r.success for r in retried) >= 20  # the retry reached the evidence
    assert not any(r.success for r in gave_up)


def _scripted(*replies: str):
    it = iter(replies)
    return lambda _req: next(it)


def test_the_step_limit_invalid_calls_and_malformed_replies(world) -> None:
    corpus, key, scenarios = world
    prep = prepare(corpus, scenarios["clean"])
    ctx = RecordContext(corpus, key, "layerlab", "extractive", "t")
    task = corpus.tasks[0]
    search = canonical_json({"action": "search", "query": task.question, "top_k": 3})

    endless = AgentLoop(task, prep, "strict", max_steps=2)
    asked = []
    while not endless.done:
        req = endless.request()
        asked.append(req)
        endless.advance(search)
    assert len(asked) == 3 and asked[-1]["response_schema"] == ap.ANSWER_SCHEMA
    assert asked[-1]["messages"][-1]["content"] == ap.LAST_TURN
    assert asked[0]["response_schema"] == ap.ACTION_SCHEMA
    rec = endless.finish(ctx).record
    s = endless.summary()
    assert (s.steps, s.tool_calls, s.step_limit) == (3, 2, True)
    assert rec.diagnostic == "step_limit" and not rec.answered and not rec.safe_resolution

    right = key[task.task_id].expected_answer
    doc = key[task.task_id].required_doc_ids[0]
    answer = canonical_json({"action": "answer", "status": "answered", "answer": right,
                             "citations": [doc], "reason": None})  # fmt: skip
    bad = AgentLoop(task, prep, "strict")
    _drive(bad, _scripted(canonical_json({"action": "drop_table"}),
                          canonical_json({"action": "search", "query": "", "top_k": 9}),
                          search, answer))  # fmt: skip
    rec = bad.finish(ctx).record
    assert [c.outcome for c in bad.calls] == ["invalid", "invalid", "ok"]
    assert bad.summary().invalid_calls == 2
    # right answer, right evidence, but two calls broke the tool's schema: V fails, so S does
    assert rec.exact_match and rec.retrieval_ok and not rec.schema_ok and not rec.success
    assert rec.diagnostic == "tool_misuse"
    good = AgentLoop(task, prep, "strict")
    _drive(good, _scripted(search, answer))
    assert good.finish(ctx).record.success

    prose = AgentLoop(task, prep, "strict")
    _drive(prose, _scripted("I would search for it."))
    rec = prose.finish(ctx).record
    assert rec.diagnostic == "malformed_reply" and prose.summary().steps == 1
    # unknown documents are the tool's answer, not a fault of the agent
    opened = AgentLoop(task, prep, "strict")
    _drive(opened, _scripted(canonical_json({"action": "open_document", "doc_id": "nope"}),
                             canonical_json({"action": "open_document", "doc_id": doc}),
                             answer))  # fmt: skip
    assert [c.outcome for c in opened.calls] == ["not_found", "ok"]
    assert opened.finish(ctx).record.success


def test_an_observation_never_shows_the_retrievers_score_or_the_answer_key(world) -> None:
    corpus, key, scenarios = world
    prep = prepare(corpus, scenarios["clean"])
    task = corpus.tasks[3]
    loop = AgentLoop(task, prep, "strict")
    obs = loop.tools.call("search", {"query": task.question, "top_k": 5}, 1)
    assert obs["status"] == "ok" and len(obs["results"]) == 5
    assert all("score" not in r for r in obs["results"])
    text = json.dumps(loop.request())
    assert "required_doc_ids" not in text and "expected_answer" not in text


# --- through litellm: native tool calls, the cache, resume ---------------------------------------

TASKS = "hr-01-q1,it_ops-02-q1,finance-03-q2"


def _live(fake, model: str, out: Path, *extra: str):
    return runner.invoke(
        app,
        [
            "run",
            "live",
            "-m",
            f"openai/{model}",
            "--api-base",
            fake.base,
            "--agent",
            "--tool-protocol",
            "native",
            "--tasks",
            TASKS,
            "--out",
            str(out),
            "--no-progress",
            "--cache-dir",
            str(out.parent / "cache"),
            *extra,
        ],  # fmt: skip
        env={"OPENAI_API_KEY": "sk-test"},
    )


def test_native_tool_calls_through_litellm_valid_invalid_and_endless(tmp_path) -> None:
    from fake_openai import FakeOpenAI

    with FakeOpenAI() as fake:
        res = _live(fake, "tools", tmp_path / "t" / "run")
        assert res.exit_code == 0, res.output
        bodies = [b for b in fake.bodies if b.get("tools")]
        assert bodies and {t["function"]["name"] for t in bodies[0]["tools"]} == {
            "search",
            "open_document",
        }
        assert any(m["role"] == "tool" for b in bodies for m in b["messages"])
        out = tmp_path / "t" / "run"
        manifest = json.loads((out / archive.MANIFEST).read_text())
        assert manifest["agent"]["protocol"] == "native" and manifest["complete"]
        recs = archive.read_records(out / archive.ARCHIVE)
        rows = read_table(out)
        assert len(rows) == len(recs) == 3 * 9 * 2
        by = {(r.scenario, r.mitigation, r.task_id): r for r in recs}
        assert all(
            by[("clean", m, t)].success for m in ("strict", "repair") for t in TASKS.split(",")
        )
        assert all(
            r["retries_after_fault"] == 1 for r in rows if r["scenario"] == "missing_tool_output"
        )

        res = _live(fake, "badtools", tmp_path / "b" / "run", "--scenario", "clean")
        assert res.exit_code == 0, res.output
        rows = read_table(tmp_path / "b" / "run")
        assert {r["invalid_calls"] for r in rows} == {2}
        recs = archive.read_records(tmp_path / "b" / "run" / archive.ARCHIVE)
        assert {r.diagnostic for r in recs} == {"tool_misuse"} and not any(
            r.schema_ok for r in recs
        )

        res = _live(
            fake, "endless", tmp_path / "e" / "run", "--scenario", "clean", "--max-steps", "2"
        )
        assert res.exit_code == 0, res.output
        recs = archive.read_records(tmp_path / "e" / "run" / archive.ARCHIVE)
        assert {r.diagnostic for r in recs} == {"step_limit"}
        rows = read_table(tmp_path / "e" / "run")
        assert {(r["steps"], r["tool_calls"], r["step_limit"]) for r in rows} == {(3, 2, True)}
        last = fake.bodies[-1]
        assert last["tool_choice"] == "none" and last["messages"][-1]["content"] == ap.LAST_TURN


def test_a_correct_answer_after_an_invalid_tool_call_says_why_v_failed(tmp_path) -> None:
    """The sample log's V reason names what decided V, not "False: contract ok" alone: the
    model's tool calls whose arguments broke the schema (the contract accepted the payload)."""
    from fake_openai import FakeOpenAI

    from layerlab.archive import samplelog

    log = tmp_path / "private" / "s.jsonl"
    with FakeOpenAI() as fake:  # an unknown tool, a search with bad arguments, then the answer
        res = _live(fake, "badtools", tmp_path / "b" / "run", "--scenario", "clean",
                    "--sample-log", str(log))  # fmt: skip
    assert res.exit_code == 0, res.output
    entries = samplelog.read(log)
    assert entries and all(e["verdict"]["exact_match"] for e in entries)
    for e in entries:
        assert e["reasons"]["V"] == (
            f"False: contract {e['contract']['outcome']}; 2 tool call(s) with arguments that "
            "broke the tool's schema (V needs every call valid)"
        )


def test_every_step_is_one_cache_entry_and_a_rerun_asks_nothing(tmp_path) -> None:
    from fake_openai import FakeOpenAI

    with FakeOpenAI() as fake:
        first = _live(fake, "tools", tmp_path / "a" / "run", "--scenario", "missing_tool_output",
                      "--temperature", "0")  # fmt: skip
        assert first.exit_code == 0, first.output
        asked = fake.requests
        # 3 tasks: a search, a search after the failure, the final reply; strict and repair
        # share each step (same conversation, greedy decoding shares replies): 9 steps, asked
        # once each, besides the preflight call
        steps = [b for b in fake.bodies if b.get("tools")]
        assert len(steps) == 3 * 3 == len({canonical_json(b["messages"]) for b in steps})
        again = runner.invoke(
            app,
            [
                "run",
                "live",
                "-m",
                "openai/tools",
                "--api-base",
                fake.base,
                "--agent",
                "--tool-protocol",
                "native",
                "--tasks",
                TASKS,
                "--scenario",
                "missing_tool_output",
                "--temperature",
                "0",
                "--out",
                str(tmp_path / "b" / "run"),
                "--no-progress",
                "--cache-dir",
                str(tmp_path / "a" / "cache"),
            ],  # fmt: skip
            env={"OPENAI_API_KEY": "sk-test"},
        )
        assert again.exit_code == 0, again.output
        assert fake.requests == asked  # every step from the cache
        a, b = (pq.read_table(tmp_path / x / "run" / AGENT_TABLE) for x in ("a", "b"))
        assert a.equals(b)
        ra = archive.read_records(tmp_path / "a" / "run" / archive.ARCHIVE)
        rb = archive.read_records(tmp_path / "b" / "run" / archive.ARCHIVE)
        assert [r.diagnostic for r in ra] == [r.diagnostic for r in rb]


# --- kill -9 mid-record ------------------------------------------------------------------------

KILL_ARGS = ["run", "live", "-m", "layerlab/extractive@30ms", "--agent", "--scenario",
             "missing_tool_output", "--scenario", "clean", "--tasks",
             "hr-01-q1,hr-02-q1,hr-03-q1,it_ops-01-q1", "--no-progress", "--concurrency", "2"]  # fmt: skip


def _child(args: list[str]) -> None:
    os.setsid()
    from layerlab.cli import main

    try:
        main(args)
    except SystemExit:
        pass
    os._exit(0)


def test_a_run_killed_mid_record_resumes_without_a_lost_or_duplicated_record(tmp_path) -> None:
    ref = tmp_path / "ref" / "run"
    res = runner.invoke(app, [*KILL_ARGS, "--out", str(ref), "--cache-dir", str(tmp_path / "rc")])
    assert res.exit_code == 0, res.output
    rng = random.Random(5)
    out, cache = tmp_path / "k" / "run", tmp_path / "kc"
    args = [*KILL_ARGS, "--out", str(out), "--cache-dir", str(cache)]
    for attempt in range(2):
        p = multiprocessing.get_context("fork").Process(
            target=_child, args=([*args, *(["--resume"] if attempt else [])],)
        )
        p.start()
        time.sleep(rng.uniform(0.8, 1.6))  # records are made at ~30 ms a step
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.join(10)
    done = runner.invoke(app, [*args, "--resume"])
    assert done.exit_code == 0, done.output
    recs = archive.read_records(out / archive.ARCHIVE)
    assert len(recs) == 16 == len({archive.sort_key(r) for r in recs})
    assert (out / archive.ARCHIVE).read_bytes() == (ref / archive.ARCHIVE).read_bytes()
    assert (out / AGENT_TABLE).read_bytes() == (ref / AGENT_TABLE).read_bytes()
    assert runner.invoke(app, ["archive", "check", str(out)]).exit_code == 0


# --- a real model ------------------------------------------------------------------------------


@pytest.mark.slow
def test_qwen_acts_as_an_agent_on_one_record(tmp_path, monkeypatch) -> None:
    """The committed agent archive's model, one clean record (two or three calls)."""
    from layerlab.models import local as models

    cache = USER_CACHE
    monkeypatch.setenv("LAYERLAB_CACHE", str(cache))
    qwen = "qwen2.5-coder-1.5b"
    if not models.is_fetched(models.lookup(qwen)):
        pytest.fail(f"{qwen} is not fetched (make test-slow fetches it)")
    out = tmp_path / "run"
    res = runner.invoke(
        app,
        [
            "run",
            "live",
            "-m",
            f"local/{qwen}",
            "--agent",
            "--response-format",
            "json_schema",
            "--tasks",
            "hr-01-q1",
            "--scenario",
            "clean",
            "--mitigation",
            "strict",
            "--out",
            str(out),
            "--no-progress",
            "--cache-dir",
            str(tmp_path / "replies"),
            "--local-servers",
            "1",
        ],  # fmt: skip
        env={"LAYERLAB_CACHE": str(cache)},
    )
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / archive.MANIFEST).read_text())
    assert manifest["agent"]["protocol"] == "json_action"
    (row,) = read_table(out)
    assert row["tool_calls"] >= 1 and row["invalid_calls"] == 0 and not row["step_limit"]
    (rec,) = archive.read_records(out / archive.ARCHIVE)
    assert rec.diagnostic != "malformed_reply"


def test_a_budget_spent_mid_record_leaves_it_for_resume_and_the_steps_in_the_cache(
    tmp_path,
) -> None:
    """The call budget counts every step; a record whose steps outrun it is not written (its
    finished steps wait in the cache), and a resume with a new budget completes the run to
    the records of an unbudgeted one."""
    from fake_openai import FakeOpenAI

    from layerlab.cli.app import EXIT_INCOMPLETE

    with FakeOpenAI() as fake:
        full = _live(fake, "tools", tmp_path / "full" / "run", "--scenario", "missing_tool_output",
                     "--temperature", "0")  # fmt: skip
        assert full.exit_code == 0, full.output
        args = ["--scenario", "missing_tool_output", "--temperature", "0"]
        asked_full = len([b for b in fake.bodies if b.get("tools")])
        cut = _live(fake, "tools", tmp_path / "cut" / "run", *args, "--budget", "4")
        assert cut.exit_code == EXIT_INCOMPLETE, cut.output
        out = tmp_path / "cut" / "run"
        partial = archive.read_records(out / archive.ARCHIVE)
        assert len(partial) < 6  # 3 steps a record: 4 calls finish at most one record per task
        done = _live(fake, "tools", tmp_path / "cut" / "run", *args, "--budget", "100", "--resume")
        assert done.exit_code == 0, done.output
        # every step asked once over both invocations: those asked before the budget ran out
        # came from the cache (the cut run has its own cache folder)
        steps = [b for b in fake.bodies if b.get("tools")][asked_full:]
        assert len(steps) == 9 == len({canonical_json(b["messages"]) for b in steps})
        a = archive.read_records(tmp_path / "full" / "run" / archive.ARCHIVE)
        b = archive.read_records(out / archive.ARCHIVE)
        assert [(r.task_id, r.mitigation, r.diagnostic) for r in a] == [
            (r.task_id, r.mitigation, r.diagnostic) for r in b
        ]


def test_call_sequences_count_each_records_tools_in_order() -> None:
    from layerlab.analysis.agentmode import call_sequences

    rows = [
        {"calls": [{"tool": "search"}, {"tool": "open_document"}]},
        {"calls": [{"tool": "search"}, {"tool": "open_document"}]},
        {"calls": []},
    ]
    t = call_sequences(rows)
    assert t.to_dict("records") == [
        {"tool calls": "search > open_document", "records": 2},
        {"tool calls": "(no tool call)", "records": 1},
    ]

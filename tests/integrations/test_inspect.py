"""Inspect AI, both ways, against the real inspect-ai package and offline.

The fault matrix as an Inspect task (``layerlab/fault_matrix``) is run in process with Inspect's
``mockllm/model``, given its replies (``custom_outputs``) so that Inspect never asks for its
tokenizer (the default mock output counts tokens with tiktoken's ``o200k_base``, which it
downloads): a fixed reply that is no answer, and a scripted agent that calls the faulted tools
and answers from what they return. The scripted agent's records are scored twice — by the
Inspect scorer, and by layerlab's own agent mode (``AgentLoop``) driven by the same script — and
must agree label for label. The entry point pyproject.toml declares is installed into a scratch
folder (never the shared venv) and resolves ``layerlab/fault_matrix`` by name in a fresh
interpreter, with the arguments the README's ``inspect eval`` line gives. A finished run is
exported with ``layerlab export inspect`` and read back with Inspect's ``read_eval_log``. No answer-key
text reaches a log: each log file is unpacked and searched for the tasks' expected answers and
required documents. Every log goes to ``tmp_path``; the repository is left as it was.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import asdict
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.model import (  # noqa: E402
    ChatMessageTool,
    ChatMessageUser,
    ModelOutput,
    ModelUsage,
    get_model,
)

from layerlab._io import canonical_json  # noqa: E402
from layerlab.cli import main  # noqa: E402
from layerlab.corpus.extract import extract  # noqa: E402
from layerlab.integrations.inspect import export, scorer  # noqa: E402
from layerlab.integrations.inspect.task import fault_matrix  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = "clean,stale_index,wrong_session"
NORMAL, INVALID, ENDLESS = "hr-05-q1", "it_ops-09-q3", "finance-01-q1"
USAGE = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Inspect's logs go to tmp_path; the repository is unchanged afterwards."""
    monkeypatch.setenv("INSPECT_LOG_DIR", str(tmp_path / "logs"))
    before = _git_status()
    yield
    assert _git_status() == before, "the test changed the repository"


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                          capture_output=True, text=True, check=False).stdout  # fmt: skip


def _fixed(input, tools, tool_choice, config) -> ModelOutput:
    """mockllm's default reply (no answer contract), with its usage given."""
    out = ModelOutput.from_content("mockllm", "Default output from mockllm/model")
    out.usage = USAGE
    return out


def _log_text(path: str | Path) -> str:
    """Every member of an .eval log (a zip) as text: what a reader of the file can see."""
    with zipfile.ZipFile(path) as z:
        return "\n".join(z.read(n).decode("utf-8", "replace") for n in z.namelist())


def _gold(key, task_ids) -> list[str]:
    """The answer key's text for ``task_ids``: expected answers (raw and JSON-escaped) and
    required document ids."""
    out = []
    for t in sorted(task_ids):
        e = key[t]
        out += [e.expected_answer, json.dumps(e.expected_answer)[1:-1], *e.required_doc_ids]
    return out


def _leaks(text: str, gold: list[str]) -> list[str]:
    """The answer-key strings that occur in ``text`` as a whole value: not inside a longer
    number or word ("$250" is not in "above $250,000", a question's own words)."""
    return [g for g in gold
            if re.search(rf"(?<![\w$]){re.escape(g)}(?![\w]|[,.]\d)", text)]  # fmt: skip


def test_the_task_runs_offline_and_no_answer_key_text_reaches_the_log(tmp_path, key) -> None:
    task = fault_matrix(scenarios=SCENARIOS, tasks=f"{NORMAL},{INVALID}")
    (log,) = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=_fixed),
                          log_dir=str(tmp_path / "logs"), display="none")  # fmt: skip
    assert log.status == "success", log.error
    assert log.eval.task == "layerlab/fault_matrix"
    assert len(log.samples) == 6 and {s.id for s in log.samples} == {
        f"{s}:strict:{t}" for s in SCENARIOS.split(",") for t in (NORMAL, INVALID)
    }
    for s in log.samples:
        (sc,) = s.scores.values()
        assert set(sc.value) == set(scorer.VALUES)
        assert sc.metadata["diagnostic"] == "malformed_reply" and sc.value["S"] == 0
        assert s.target == ""  # the answer key is the scorer's alone
        assert set(s.metadata) == {"scenario", "mitigation", "task_id", "domain", "policy_id",
                                   "variant", "answer_kind", "answerable"}  # fmt: skip
    # results per measure, and S per scenario
    by_name = {sc.name: sc for sc in log.results.scores}
    assert set(by_name) == set(scorer.VALUES)
    assert {"grouped_clean", "grouped_stale_index", "grouped_wrong_session"} <= set(
        by_name["S"].metrics
    )
    # the header names the metrics the export writes for a run (one shape both ways)
    (header,) = log.eval.scorers
    assert header.name == scorer.SCORER
    assert {k: [m.model_dump() for m in v] for k, v in header.metrics.items()} == (
        scorer.metric_definitions()
    )
    text = _log_text(log.location)
    assert log.samples[0].input in text  # the scan reads the log's contents
    assert _leaks("... repay it within 12 months.", ["12 months"]) == ["12 months"]
    leaked = _leaks(text, _gold(key, (NORMAL, INVALID)))
    assert not leaked, f"answer-key text in the Inspect log: {leaked}"


def test_building_the_task_does_not_read_the_answer_key(monkeypatch) -> None:
    from layerlab.corpus import build

    def refuse(*a, **k):
        raise AssertionError("the task read the answer key")

    monkeypatch.setattr(build, "load_answer_key", refuse)
    task = fault_matrix(scenarios="clean", limit=3, seed=1)
    assert len(task.dataset) == 3
    with pytest.raises(ValueError, match="unknown scenario 'stale_indx'.*did you mean 'stale_index'"):
        fault_matrix(scenarios="stale_indx")
    with pytest.raises(ValueError, match="unknown mitigation 'stict'"):
        fault_matrix(mitigation="stict")


# --- the scripted agent: the faulted tools and the scorer against layerlab's agent mode -------


def _decide(task_id: str, question: str, kind: str, observations: list, final: bool):
    """One turn of the scripted agent: ("call", name, args) or ("reply", text). It searches with
    the question and answers from the first result; INVALID's first call breaks the schema
    (top_k 9), then it searches again; ENDLESS never stops searching (the step limit)."""
    if task_id == ENDLESS:
        return ("call", "search", {"query": question, "top_k": 3})
    if not final and (not observations or observations[-1].get("error", {}).get("code")
                      == "invalid_call"):  # fmt: skip
        top_k = 9 if task_id == INVALID and not observations else 3
        return ("call", "search", {"query": question, "top_k": top_k})
    obs = observations[-1] if observations else {}
    if obs.get("status") in ("ok", "partial") and obs.get("results"):
        top = obs["results"][0]
        value = extract(question, kind, top["text"])
        if value is not None:
            return ("reply", canonical_json({"status": "answered", "answer": value,
                                             "citations": [top["doc_id"]], "reason": None}))  # fmt: skip
    return ("reply", canonical_json({"status": "abstained", "answer": None, "citations": [],
                                     "reason": "not in the evidence"}))  # fmt: skip


def _opening(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.split("\n")[:3])


def _scripted(input, tools, tool_choice, config) -> ModelOutput:
    """The scripted agent as Inspect's mock model (a refused call's parse error: invalid_call)."""
    head = _opening(next(m for m in input if isinstance(m, ChatMessageUser)).text)
    seen = []
    for m in input:
        if isinstance(m, ChatMessageTool):
            try:
                seen.append(json.loads(m.text))
            except ValueError:  # Inspect's own schema check refused the call
                seen.append({"status": "error", "error": {"code": "invalid_call"}})
    task_id = next(t.task_id for t in _corpus().tasks if t.question == head["Question"])
    d = _decide(task_id, head["Question"], head["Answer kind"], seen, tool_choice == "none")
    out = (ModelOutput.for_tool_call("mockllm", d[1], d[2]) if d[0] == "call"
           else ModelOutput.from_content("mockllm", d[1]))  # fmt: skip
    out.usage = USAGE
    return out


def _corpus():
    from layerlab.integrations.inspect import matrix

    return matrix.corpus("")


def _agent_mode(scenario: str, arm: str, task_id: str, max_steps: int, key) -> tuple[dict, list]:
    """The same script through layerlab's own agent mode (native protocol): its labels, and the
    observations of the calls that reached the tools."""
    from layerlab.harness.agent import AgentLoop
    from layerlab.harness.step import RecordContext
    from layerlab.integrations.inspect import matrix

    task = next(t for t in _corpus().tasks if t.task_id == task_id)
    loop = AgentLoop(task, matrix.prepared("", scenario), arm, "native", max_steps)
    while not loop.done:
        req = loop.request()
        obs = [json.loads(m["content"]) for m in req["messages"] if m["role"] == "tool"]
        head = _opening(req["messages"][1]["content"])
        d = _decide(task_id, head["Question"], head["Answer kind"], obs,
                    req["tool_choice"] == "none")  # fmt: skip
        calls = ([{"id": f"c{loop.turns}", "name": d[1], "arguments": json.dumps(d[2])}]
                 if d[0] == "call" else [])  # fmt: skip
        loop.advance(canonical_json({"content": d[1] if d[0] == "reply" else None,
                                     "tool_calls": calls}))  # fmt: skip
    observed = [o for m in loop.messages if m["role"] == "tool"
                if (o := json.loads(m["content"])).get("error", {}).get("code") != "invalid_call"]
    done = loop.finish(RecordContext(_corpus(), key, "test", "scripted", "test"))
    return asdict(done.labels), observed


@pytest.mark.parametrize("arm", ["strict", "session_isolation"])
def test_the_faulted_tools_and_the_scorer_are_agent_modes(arm, tmp_path, key) -> None:
    """Every sample's labels equal those of layerlab's agent mode driven by the same script,
    and the tools returned the same observations: an answer, a grounded wrong answer on the
    stale index and the wrong session, an invalid call (V), the step limit, a refusal."""
    max_steps = 2
    task = fault_matrix(scenarios=SCENARIOS, tasks=[NORMAL, INVALID, ENDLESS], mitigation=arm,
                        max_steps=max_steps)  # fmt: skip
    (log,) = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=_scripted),
                          log_dir=str(tmp_path / "logs"), display="none")  # fmt: skip
    assert log.status == "success", log.error
    diagnostics = {}
    for s in log.samples:
        (sc,) = s.scores.values()
        want, observed = _agent_mode(s.metadata["scenario"], arm, s.metadata["task_id"],
                                     max_steps, key)  # fmt: skip
        got = {k: v for k, v in sc.metadata.items() if k in want}
        assert got == want, s.id
        assert sc.value == {k: int(want[f]) for k, f in scorer.VALUES.items()}, s.id
        tools = [json.loads(m.text) for m in s.messages
                 if isinstance(m, ChatMessageTool) and m.error is None]  # fmt: skip
        assert tools == observed, s.id
        diagnostics[s.id] = want["diagnostic"]
        gold = _gold(key, [s.metadata["task_id"]])
        shown = json.dumps([s.input, s.target, s.metadata, sc.explanation, sc.metadata])
        assert not _leaks(shown, gold), s.id  # only the model's own words carry it
    assert diagnostics[f"clean:{arm}:{ENDLESS}"] == "step_limit"
    assert diagnostics[f"clean:{arm}:{INVALID}"] == "tool_misuse"
    if arm == "strict":
        assert diagnostics[f"clean:strict:{NORMAL}"] == "ok"
        assert diagnostics[f"stale_index:strict:{NORMAL}"] == "freshness"
        assert diagnostics[f"wrong_session:strict:{NORMAL}"] == "session_state"
        # the scan would see the key's text: a correct answer is the model's own words
        assert _leaks(_log_text(log.location), _gold(key, [NORMAL]))
    else:
        assert diagnostics[f"wrong_session:{arm}:{NORMAL}"] == "abstained"  # a refusal


# --- the entry point ----------------------------------------------------------------------------


def _entry_point() -> tuple[str, str]:
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "entry-points"
    ]["inspect_ai"]
    ((name, value),) = eps.items()
    return name, value


_BY_NAME = """
import sys, json
from inspect_ai import eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model

def fixed(input, tools, tool_choice, config):
    out = ModelOutput.from_content("mockllm", "Default output from mockllm/model")
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out

before = "layerlab.integrations.inspect.task" in sys.modules
(log,) = eval(sys.argv[1], task_args=json.loads(sys.argv[2]),
              model=get_model("mockllm/model", custom_outputs=fixed), log_dir=sys.argv[3],
              display="none")
print("RESULT", json.dumps([before, log.status, log.eval.task, len(log.samples),
                            sorted({s.metadata["scenario"] for s in log.samples})]))
"""


def _readme_inspect_eval() -> tuple[str, dict[str, object]]:
    """The README's ``inspect eval`` line: the task and its ``-T`` arguments, parsed by the
    parser of Inspect's command line (YAML values; a comma-separated value is a list)."""
    from inspect_ai._util.config import parse_cli_args

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = re.findall(r"^inspect eval (\S+) --model mockllm/model((?: -T \S+)*)$", text, re.M)
    return line[0], parse_cli_args(line[1].split(" -T ")[1:])


def test_pyproject_declares_the_entry_point_and_the_readme_line_resolves_by_name(tmp_path) -> None:
    name, value = _entry_point()
    assert name == "layerlab"  # Inspect loads the entry point named as the task's package
    import importlib

    assert importlib.import_module(value).fault_matrix is fault_matrix
    # the declared entry point, installed in a scratch folder: a fresh interpreter finds the
    # task by name through it, with the README's arguments
    dist = tmp_path / "site" / "layerlab_inspect_probe-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: layerlab-inspect-probe\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[inspect_ai]\n{name} = {value}\n")
    task_name, args = _readme_inspect_eval()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path / "site")])}
    p = subprocess.run([sys.executable, "-c", _BY_NAME, task_name, json.dumps(args),
                        str(tmp_path / "logs")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300, check=False)  # fmt: skip
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, p.stderr[-3000:]
    before, status, task, n, scenarios = json.loads(line[-1][7:])
    assert not before and status == "success" and task == "layerlab/fault_matrix"
    assert args["scenarios"] == ["clean", "stale_index"] and isinstance(args["limit"], int)
    assert scenarios == ["clean", "stale_index"] and n == 2 * args["limit"]


# --- the export of a finished run ---------------------------------------------------------------


RUN = ROOT / "data" / "archives" / "user_pipelines" / "my-dense-chain"  # 144 records, committed


def _readme_export() -> list[str]:
    """The README's ``layerlab export inspect`` command, as arguments."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = re.findall(r"^layerlab (export inspect .*)$", text, re.M)
    return line.split()


def test_export_writes_a_log_inspect_reads_back(tmp_path, capsys, key) -> None:
    """The README's export of a committed run (a team's chain: 8 tasks x 9 scenarios x 2 arms),
    written under tmp_path, read back by Inspect: one sample per record, its labels as the
    Score, Inspect's metrics equal to the records' rates, no answer-key text."""
    from layerlab import archive

    args = _readme_export()
    assert args[2] == str(RUN.relative_to(ROOT)) and args[3] == "-o"
    out = tmp_path / "exported" / Path(args[4]).name
    assert main([*args[:2], str(RUN), "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 144 samples of target/my-dense-chain")
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left
    log = read_eval_log(str(out))
    records = archive.read_records(RUN / archive.ARCHIVE)
    n = len(records)
    assert log.status == "success" and log.eval.model == "target/my-dense-chain"
    assert log.eval.run_id == archive.read_manifest(RUN)["run_id"]
    assert len(log.samples) == n == 144 and log.eval.dataset.samples == n
    by_id = {s.id: s for s in log.samples}
    for r in records:
        s = by_id[f"{r.scenario}:{r.mitigation}:{r.task_id}"]
        (sc,) = s.scores.values()
        assert sc.value == {k: int(getattr(r, f)) for k, f in scorer.VALUES.items()}
        assert sc.metadata["diagnostic"] == r.diagnostic and sc.answer is None
        assert s.epoch == r.replicate + 1 and s.output.completion == ""  # no reply kept
        assert s.metadata["scenario"] == r.scenario and s.metadata["mitigation"] == r.mitigation
        assert s.input == next(t.question for t in _corpus().tasks if t.task_id == r.task_id)
    # Inspect's own metrics over the exported Scores: the records' rates
    metrics = {sc.name: sc.metrics for sc in log.results.scores}
    assert metrics["S"]["accuracy"].value == pytest.approx(sum(r.success for r in records) / n)
    stale = [r.safe_resolution for r in records if r.scenario == "stale_index"]
    assert metrics["safe"]["grouped_stale_index"].value == pytest.approx(sum(stale) / len(stale))
    text = _log_text(out)
    assert records[0].task_id in text
    assert not _leaks(text, _gold(key, {r.task_id for r in records}))


def _fails(capsys, args: list[str], *words: str, code: int = 1) -> str:
    rc = main(args)
    err = capsys.readouterr().err.strip()
    assert rc == code, err
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for w in words:
        assert w in err, err
    return err


def test_export_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "o" / "x.eval"
    expected = "expected a layerlab run folder"
    _fails(capsys, ["export", "inspect", str(tmp_path / "nope"), "-o", str(out)],
           f"{tmp_path / 'nope'}: does not exist", expected, "(nothing written)")  # fmt: skip
    (tmp_path / "empty").mkdir()
    _fails(capsys, ["export", "inspect", str(tmp_path / "empty"), "-o", str(out)],
           f"{tmp_path / 'empty'}: no manifest.json", expected)  # fmt: skip
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(RUN, broken)
    (broken / "records.parquet").unlink()
    _fails(capsys, ["export", "inspect", str(broken), "-o", str(out)],
           f"{broken / 'records.parquet'}: missing", expected)  # fmt: skip
    _fails(capsys, ["export", "inspect", str(ROOT / "data/archives/reference_agents"), "-o",
                    str(out)], "holds 2 models (layerlab/cautious, layerlab/extractive)",
           "pick one with --model")  # fmt: skip
    _fails(capsys, ["export", "inspect", str(RUN), "-o", str(tmp_path / "x.json")],
           "expected a file name ending in .eval", code=2)  # fmt: skip
    assert not out.parent.exists() and not (tmp_path / "x.json").exists()


def test_export_reads_no_answer_key(monkeypatch) -> None:
    from layerlab.corpus import build

    def refuse(*a, **k):
        raise AssertionError("the export read the answer key")

    monkeypatch.setattr(build, "load_answer_key", refuse)
    assert len(export.eval_log(RUN).samples) == 144

"""``layerlab archive check`` on agent runs: agent.parquet is there, matches the manifest's
agent.table_sha256, holds exactly one row per record and sane values; each mismatch is one line
naming the file and what differs, with the exit code of any other archive problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from layerlab import archive
from layerlab._io import sha256_file
from layerlab.archive import agenttable
from layerlab.archive.io import parquet_bytes
from layerlab.cli import app
from layerlab.harness import tools

runner = CliRunner()
TASKS = "hr-05-q1,it_ops-09-q3"


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    """A complete agent run of the reference agent (json_action) over two tasks."""
    root = tmp_path_factory.mktemp("agentrun")
    res = runner.invoke(
        app,
        ["run", "live", "-m", "layerlab/extractive", "--agent", "--tool-protocol", "json_action",
         "--tasks", TASKS, "--out", str(root / "run"), "--cache-dir", str(root / "cache"),
         "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return root / "run"


def _copy(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _check(folder: Path) -> tuple[int, str]:
    res = runner.invoke(app, ["archive", "check", str(folder)])
    return res.exit_code, res.output


def _rewrite(folder: Path, rows: list[dict]) -> None:
    """Rewrite agent.parquet with ``rows`` and name its new checksum in the manifest (so only
    the rows differ)."""
    data = parquet_bytes(pa.Table.from_pylist(rows, schema=agenttable.SCHEMA))
    (folder / agenttable.AGENT_TABLE).write_bytes(data)
    m = archive.read_manifest(folder)
    m["agent"]["table_sha256"] = sha256_file(folder / agenttable.AGENT_TABLE)
    archive.write_manifest(folder, m)


def _rows(folder: Path) -> list[dict]:
    return pq.read_table(folder / agenttable.AGENT_TABLE).to_pylist()


def test_a_complete_agent_run_checks_and_says_its_mode(agent_run) -> None:
    code, out = _check(agent_run)
    assert code == 0, out
    n = archive.check_path(agent_run)["records"]
    assert f"agent mode (json_action, up to 4 tool-calling turns), agent.parquet {n} rows" in out
    rep = archive.check_path(agent_run)
    assert rep["agent"] == {"protocol": "json_action", "max_steps": 4, "rows": n}


def test_single_call_runs_check_as_before() -> None:
    rep = archive.check_path(Path("data/archives/reference_agents"))
    assert "agent" not in rep


def test_missing_agent_table(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    (run / "agent.parquet").unlink()
    code, out = _check(run)
    assert code == 1
    assert (
        f"FAIL {run / 'agent.parquet'}: missing (the manifest's agent.table_sha256 names it)" in out
    )


def test_agent_table_checksum_mismatch(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    rows = _rows(run)
    rows[0]["steps"] += 1
    (run / "agent.parquet").write_bytes(
        parquet_bytes(pa.Table.from_pylist(rows, schema=agenttable.SCHEMA))
    )
    code, out = _check(run)
    assert code == 1
    assert "agent.parquet: checksum" in out and "agent.table_sha256" in out
    assert len(out.strip().splitlines()) == 1


def test_agent_table_missing_row(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    rows = _rows(run)
    gone = rows.pop(3)
    _rewrite(run, rows)
    code, out = _check(run)
    assert code == 1
    assert "agent.parquet: no row for 1 record(s) of records.parquet" in out
    assert gone["task_id"] in out and gone["scenario"] in out


def test_agent_table_extra_row(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    rows = _rows(run)
    rows.append({**rows[0], "task_id": "hr-99-q9"})
    _rewrite(run, rows)
    code, out = _check(run)
    assert code == 1
    assert "agent.parquet: 1 row(s) for no record of records.parquet" in out and "hr-99-q9" in out


def test_agent_table_duplicate_row(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    rows = _rows(run)
    _rewrite(run, [*rows, rows[0]])
    code, out = _check(run)
    assert code == 1 and "agent.parquet: two rows for the record" in out


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda r: r.update(protocol="smoke"), "protocol 'smoke'; expected one of"),
        (lambda r: r.update(protocol="native"), "the manifest's agent.protocol is 'json_action'"),
        (lambda r: r.update(invalid_calls=-1), "invalid_calls is -1; expected a count ≥ 0"),
        (lambda r: r.update(tool_calls=r["tool_calls"] + 1), "tool_calls is"),
        (lambda r: r.update(steps=0), "steps is 0"),
        (lambda r: r.update(step_limit=True), "step_limit is True"),
        (lambda r: r.update(calls="{"), "calls is not JSON"),
        (
            lambda r: r.update(calls=json.dumps([{**json.loads(r["calls"])[0], "outcome": "meh"}])),
            "outcome is 'meh'",
        ),
        (
            lambda r: r.update(calls=json.dumps([{**json.loads(r["calls"])[0], "text": "x"}])),
            "call 1 has fields",
        ),
    ],
)
def test_agent_table_values_are_sane(agent_run, tmp_path, edit, says) -> None:
    run = _copy(agent_run, tmp_path)
    rows = _rows(run)
    edit(rows[0])
    _rewrite(run, rows)
    code, out = _check(run)
    assert code == 1, out
    assert "agent.parquet: record " in out and says in out
    assert len(out.strip().splitlines()) == 1


def test_agent_table_columns(agent_run, tmp_path) -> None:
    run = _copy(agent_run, tmp_path)
    t = pq.read_table(run / "agent.parquet").append_column(
        "query", pa.array(["q"] * len(_rows(run)))
    )
    (run / "agent.parquet").write_bytes(parquet_bytes(t))
    m = archive.read_manifest(run)
    m["agent"]["table_sha256"] = sha256_file(run / "agent.parquet")
    archive.write_manifest(run, m)
    code, out = _check(run)
    assert code == 1 and "missing [], extra ['query']" in out


def test_call_outcomes_are_the_tools_outcomes() -> None:
    assert agenttable.CALL_OUTCOMES == tools.OUTCOMES


# --- the data dictionary documents the step table ----------------------------------------------


def test_the_dictionary_documents_the_agent_table_its_calls_and_manifest_key(agent_run) -> None:
    from layerlab import paths
    from layerlab.reporting.records import dictionary
    from layerlab.scoring.score import DIAGNOSTICS

    assert dictionary.missing_entries() == []
    committed = (paths.DATA / "DATA_DICTIONARY.md").read_text(encoding="utf-8")
    assert committed == dictionary.render(), "run `layerlab dictionary` and commit"
    section = committed.split("## Agent step table", 1)[1]
    for name in agenttable.SCHEMA.names:
        assert f"| `{name}` |" in section
    for field in agenttable.CALL_FIELDS:
        assert f"| `{field}` |" in section.split("### Per-call fields", 1)[1]
    for d in ("tool_misuse", "step_limit"):
        assert d in DIAGNOSTICS and f"`{d}` — agent mode" in committed
    # the manifest's agent key: every field a run writes is documented, and nothing else
    manifest = archive.read_manifest(agent_run)
    assert set(manifest["agent"]) == set(dictionary.AGENT_MANIFEST_FIELDS)
    s = dictionary.annotated_schema(agenttable.SCHEMA)
    assert s.field("steps").metadata[b"description"].startswith(b"model calls")


def test_a_call_field_without_a_meaning_fails(monkeypatch) -> None:
    from layerlab.reporting.records import dictionary

    meanings = dict(dictionary.CALL_FIELD_MEANINGS)
    del meanings["after_fault"]
    monkeypatch.setattr(dictionary, "CALL_FIELD_MEANINGS", meanings)
    assert dictionary.missing_entries() == ["agent call field 'after_fault' has no meaning"]


# --- merging agent runs keeps their step table ---------------------------------------------------


def _run(out: Path, *extra: str) -> Path:
    res = runner.invoke(
        app,
        ["run", "live", "-m", "layerlab/extractive", "--agent", "--tasks", TASKS, "--out",
         str(out), "--cache-dir", str(out.parent / "cache"), "--no-progress", *extra],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out


def test_merging_agent_runs_keeps_one_step_row_per_record(tmp_path) -> None:
    a = _run(tmp_path / "a", "--tool-protocol", "json_action", "--scenario", "clean")
    b = _run(tmp_path / "b", "--tool-protocol", "json_action", "--scenario", "wrong_session")
    res = runner.invoke(app, ["archive", "merge", str(a), str(b), "--out", str(tmp_path / "m")])
    assert res.exit_code == 0, res.output
    code, out = _check(tmp_path / "m")
    assert code == 0 and "agent mode (json_action, up to 4 tool-calling turns)" in out, out
    merged = _rows(tmp_path / "m")
    assert sorted(merged, key=str) == sorted(_rows(a) + _rows(b), key=str)
    # agent runs merge only with agent runs of the same settings; nothing is written otherwise
    n = _run(tmp_path / "n", "--tool-protocol", "native", "--scenario", "stale_index")
    s = tmp_path / "s"
    res = runner.invoke(
        app,
        ["run", "live", "-m", "layerlab/extractive", "--tasks", TASKS, "--scenario",
         "stale_index", "--out", str(s), "--cache-dir", str(tmp_path / "cache"), "--no-progress"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    for other, says in ((n, "agent settings differ"), (s, "a single-call run")):
        res = runner.invoke(
            app, ["archive", "merge", str(a), str(other), "--out", str(tmp_path / "x")]
        )
        assert res.exit_code != 0 and says in res.output, res.output
        assert not (tmp_path / "x").exists()


# --- unfinished agent and target runs: PARTIAL (exit 3) until their table is written -----------


class _Killed(BaseException):
    """Stands for a kill at the end of a run, before its per-record table is written."""


def _stopped(out: Path, *args: str) -> Path:
    """``run live ARGS --out OUT`` stopped just before it writes its agent or target table: the
    folder as it is during a run or after a kill (the manifest written at the start: no records,
    no table_sha256)."""
    from layerlab.harness.live import agentlog

    def kill(*_a: object, **_k: object) -> str:
        raise _Killed

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agentlog, "write_table", kill)
        mp.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # user_targets
        with pytest.raises(_Killed):
            runner.invoke(
                app,
                ["run", "live", *args, "--tasks", TASKS, "--scenario", "clean", "--out", str(out),
                 "--cache-dir", str(out.parent / "cache"), "--no-progress"],
            )  # fmt: skip
    m = archive.read_manifest(out)
    assert m["complete"] is False and m["records"] == 0
    assert (out / "records.jsonl").stat().st_size > 0  # records were made, none archived yet
    return out


AGENT = ("-m", "layerlab/extractive", "--agent", "--tool-protocol", "json_action")
TARGET = ("--target", "python:user_targets:extractive")


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory) -> dict[str, Path]:
    """An agent run and a target run as they are while running (or once killed), a
    budget-stopped agent run (some records, its table written; its own reply cache, so that the
    budget is spent) and a complete target run."""
    root = tmp_path_factory.mktemp("unfinished")
    runs = {"agent": _stopped(root / "agent", *AGENT), "target": _stopped(root / "target", *TARGET)}
    for name, args in (("budget", (*AGENT, "--budget", "7")), ("target_done", TARGET)):
        with pytest.MonkeyPatch.context() as mp:
            mp.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))
            res = runner.invoke(
                app,
                ["run", "live", *args, "--tasks", TASKS, "--scenario", "clean", "--out",
                 str(root / name), "--cache-dir", str(root / f"{name}-cache"), "--no-progress"],
            )  # fmt: skip
        assert res.exit_code == (3 if name == "budget" else 0), res.output
        runs[name] = root / name
    return runs


@pytest.mark.parametrize("kind", ["agent", "target"])
def test_a_running_or_killed_run_checks_partial(unfinished, kind) -> None:
    code, out = _check(unfinished[kind])
    assert code == 3, out
    assert out.startswith(f"PARTIAL {unfinished[kind]}: 0 of 4 records") and "--resume" in out
    assert len(out.strip().splitlines()) == 1
    rep = archive.check_path(unfinished[kind])
    assert rep["partial"] and rep[kind]["rows"] is None


def test_a_budget_stopped_agent_run_checks_partial_with_its_table(unfinished) -> None:
    code, out = _check(unfinished["budget"])
    n = archive.check_path(unfinished["budget"])["records"]
    assert code == 3 and f"PARTIAL {unfinished['budget']}: {n} of 4 records" in out, out
    assert 0 < n < 4 and archive.check_path(unfinished["budget"])["agent"]["rows"] == n


@pytest.mark.parametrize("kind", ["agent", "target"])
def test_report_and_view_read_unfinished_runs(unfinished, kind, tmp_path) -> None:
    from layerlab.reporting.records import viewer
    from layerlab.reporting.run import report

    with_records = unfinished["budget" if kind == "agent" else "target_done"]
    html = report.build([unfinished[kind], with_records])
    assert (
        str(unfinished[kind]) in html and archive.read_manifest(unfinished[kind])["run_id"] in html
    )
    assert "<th>complete</th><td>False</td>" in html.replace("\n", "")
    rows, _ = viewer.load([unfinished[kind], with_records])
    assert len(rows) == archive.check_path(with_records)["records"]
    for cmd in ("report", "view"):
        res = runner.invoke(
            app, [cmd, str(unfinished[kind]), str(with_records), "--out", str(tmp_path / cmd)]
        )
        assert res.exit_code == 0 and (tmp_path / cmd).exists(), res.output
        # the partial banner names the unfinished run (and not the finished one) first thing
        page = (tmp_path / cmd).read_text(encoding="utf-8")
        banner = page.split('<div class="partial" role="alert">', 1)[1].split("</div>", 1)[0]
        assert page.index('class="partial"') < page.index("<h1>") + 400
        assert f"<b>PARTIAL</b> {unfinished[kind]}: 0 of 4 records" in banner
        assert "--resume continues it" in banner
        assert (str(with_records) + ":" in banner) == archive.check_path(with_records)["partial"]


def test_a_finished_runs_report_and_view_carry_no_partial_banner(tmp_path) -> None:
    from layerlab import paths
    from layerlab.reporting.records import viewer
    from layerlab.reporting.run import report

    ref = paths.ARCHIVES / "reference_agents"
    assert 'class="partial"' not in report.build([ref])
    assert 'class="partial"' not in viewer.build([ref])


def test_a_budget_stopped_agent_runs_report_shows_its_steps_and_that_it_is_partial(
    unfinished,
) -> None:
    from layerlab.reporting.run import report

    html = report.build([unfinished["budget"]]).replace("\n", "")
    assert "<th>complete</th><td>False</td>" in html and "Agent mode" in html


@pytest.mark.parametrize("kind", ["agent", "target"])
def test_a_run_with_records_must_name_its_table(unfinished, kind, tmp_path) -> None:
    """Only a run with no records yet may lack the table's checksum; a complete run, or one
    with records, that names none fails (exit 1) as before."""
    src = unfinished["budget" if kind == "agent" else "target_done"]
    for complete in (True, False):
        run = tmp_path / f"{complete}"
        shutil.copytree(src, run)
        m = archive.read_manifest(run)
        del m[kind]["table_sha256"]
        m["complete"] = complete
        archive.write_manifest(run, m)
        code, out = _check(run)
        assert code == 1, out
        assert f"'{kind}' names no table_sha256 (the checksum of {kind}.parquet)" in out


def test_a_complete_target_run_checks_its_table(unfinished, tmp_path) -> None:
    done = unfinished["target_done"]
    code, out = _check(done)
    assert code == 0, out
    assert archive.check_path(done)["target"] == {"rows": 4}
    run = _copy(done, tmp_path)
    (run / "target.parquet").unlink()
    code, out = _check(run)
    assert code == 1 and out == (
        f"FAIL {run / 'target.parquet'}: missing (the manifest's target.table_sha256 names it)\n"
    )
    shutil.copy(done / "target.parquet", run / "target.parquet")
    t = pq.read_table(run / "target.parquet").to_pylist()
    t[0]["steps"] += 1
    schema = agenttable.table_schema("target")
    (run / "target.parquet").write_bytes(parquet_bytes(pa.Table.from_pylist(t, schema=schema)))
    code, out = _check(run)
    assert code == 1 and "target.parquet: checksum" in out and "target.table_sha256" in out
    t[0]["steps"] -= 1
    for edit, says in (
        (lambda rows: rows[0].update(reply="prose"), "reply 'prose'; expected one of"),
        (lambda rows: rows.pop(), "no row for 1 record(s) of records.parquet"),
    ):
        rows = [dict(r) for r in t]
        edit(rows)
        (run / "target.parquet").write_bytes(
            parquet_bytes(pa.Table.from_pylist(rows, schema=schema))
        )
        m = archive.read_manifest(run)
        m["target"]["table_sha256"] = sha256_file(run / "target.parquet")
        archive.write_manifest(run, m)
        code, out = _check(run)
        assert code == 1 and f"{run / 'target.parquet'}: " in out and says in out, out


def test_the_target_table_is_named_as_the_writer_names_it() -> None:
    from layerlab.harness.live import agentlog

    assert agentlog.TARGET_TABLE == "target.parquet" and agentlog.TARGET_EXTRA == ("reply",)

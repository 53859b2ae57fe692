"""``layerlab compare``: a run beside the committed archive of the same model, the reference agents
and the paper, aligned on common cells with what was dropped stated, never pooled; the mitigation
matrix of a user's own run in one command."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.analysis import compare
from layerlab.cli import app

runner = CliRunner()
QWEN = paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b"
AGENTS = paths.ARCHIVES / "reference_agents"


def _subset(
    src: Path, out: Path, n_tasks: int, run_id: str, arms: tuple[str, ...] | None = None
) -> Path:
    """A complete run folder holding the first ``n_tasks`` tasks (and ``arms``) of ``src``: what a
    user's ``run live --limit`` of the same model would look like, with its own run id."""
    recs = archive.read_records(src / archive.ARCHIVE)
    tasks = sorted({r.task_id for r in recs})[:n_tasks]
    keep = [
        dataclasses.replace(r, run_id=run_id)
        for r in recs
        if r.task_id in tasks and (arms is None or r.mitigation in arms)
    ]
    m = archive.read_manifest(src)
    for k in ("manifest_sha256", "files", "records"):
        m.pop(k, None)
    m.update(
        run_id=run_id, n_tasks=n_tasks, expected_records=len(keep), complete=True,
        mitigations=list(arms) if arms else m.get("mitigations"),
    )  # fmt: skip
    archive.write_run(out, keep, m)
    return out


@pytest.fixture(scope="module")
def user20(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _subset(QWEN, tmp_path_factory.mktemp("cmp") / "qwen20", 20, "live-user20")


def test_a_20_task_run_beside_the_80_task_archive_drops_the_other_60_and_says_so(user20) -> None:
    rep = compare.compare(user20, [QWEN], n_boot=200, paper=False)
    (c,) = rep.comparisons
    assert c.kind == compare.KIND_SAME and c.unit == c.other_unit == "local/qwen2.5-coder-1.5b"
    assert c.tasks == 20 and c.arms == ["strict", "repair"] and len(c.scenarios) == 9
    # only the archive's side lost records: its 60 other tasks x 9 scenarios x 2 arms, stated
    (line,) = c.dropped
    assert line.startswith(f"{QWEN} (local/qwen2.5-coder-1.5b): 1080 records of 60 task(s)")
    assert set(c.table["tasks"]) == {20} and set(c.table["pairs"]) == {20}
    # the same records on the common cells: every difference exactly zero, its interval the
    # score interval of 20 concordant pairs (never the bootstrap's zero width)
    assert set(c.table["difference"]) == {0.0}
    assert all(lo < 0.0 < hi for lo, hi in c.table["difference_ci"])
    assert list(c.table["this_run"]) == list(c.table["other"])


def test_identical_runs_compare_to_zero_difference(user20) -> None:
    (c,) = compare.compare(user20, [user20], n_boot=200, paper=False).comparisons
    assert c.dropped == [] and c.tasks == 20
    assert set(c.table["difference"]) == {0.0}
    assert all(lo < 0.0 < hi for lo, hi in c.table["difference_ci"])


def test_reference_agents_are_each_set_beside_the_model_never_pooled(user20) -> None:
    rep = compare.compare(user20, [AGENTS], n_boot=200, paper=False)
    assert [c.other_unit for c in rep.comparisons] == ["layerlab/cautious", "layerlab/extractive"]
    assert {c.kind for c in rep.comparisons} == {compare.KIND_REFERENCE}
    agents = compare.load(AGENTS).df
    for c in rep.comparisons:
        assert c.tasks == 20
        assert any(
            "3960 records of 220 task(s)" in d for d in c.dropped
        )  # (240 - 20) tasks x 9 x 2
        # the "other" rate is that one agent's own rate on the 20 common tasks
        model = c.other_unit.split("/")[1]
        own = agents[
            (agents["model"] == model)
            & agents["task_id"].isin(set(compare.load(user20).df["task_id"]))
        ]
        row = c.table[(c.table["scenario"] == "clean") & (c.table["arm"] == "strict")].iloc[0]
        cell = own[(own["scenario"] == "clean") & (own["mitigation"] == "strict")]
        assert row["other"] == pytest.approx(cell["success"].mean(), abs=1e-4)


def test_mixed_runs_of_a_model_and_agents_are_split_by_unit(tmp_path, user20) -> None:
    """A source holding a model and agents (a merged folder) gives one comparison per unit."""
    rep = compare.compare(user20, [QWEN, AGENTS], n_boot=200, paper=False)
    kinds = [(c.other_unit, c.kind) for c in rep.comparisons]
    assert kinds == [
        ("local/qwen2.5-coder-1.5b", compare.KIND_SAME),
        ("layerlab/cautious", compare.KIND_REFERENCE),
        ("layerlab/extractive", compare.KIND_REFERENCE),
    ]


def test_compare_command_defaults_to_the_same_model_the_agents_and_the_paper(
    tmp_path, user20
) -> None:
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["compare", str(user20), "--n-boot", "200", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "same model" in res.output and "reference agent" in res.output
    assert "dropped:" in res.output and "1080 records of 60 task(s)" in res.output
    assert "paper's stated figures" in res.output and "no difference or interval" in res.output
    doc = json.loads(out.read_text())
    assert [c["other_unit"] for c in doc["comparisons"]] == [
        "local/qwen2.5-coder-1.5b", "layerlab/cautious", "layerlab/extractive",
    ]  # fmt: skip
    paper = {(r["scenario"], r["arm"]): r["paper"] for r in doc["paper"]}
    assert paper[("schema_drift", "repair")] == 0.913
    # bad input: one line, nothing written
    bad = runner.invoke(app, ["compare", str(tmp_path / "nope"), "--json", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "does not exist" in bad.output
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def mitigation_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of the baseline and two mitigation arms (no contract treatment), as
    ``run live --mitigation strict --mitigation freshness_guard --mitigation always_abstain``."""
    return _subset(
        paths.ARCHIVES / "mitigations", tmp_path_factory.mktemp("mx") / "run", 24, "mitig-user",
        arms=("strict", "freshness_guard", "always_abstain"),
    )  # fmt: skip


def test_the_mitigation_matrix_of_a_users_own_run_in_one_command(tmp_path, mitigation_run) -> None:
    out = tmp_path / "tables"
    res = runner.invoke(
        app,
        ["recompute", str(mitigation_run), "--matrix", str(mitigation_run), "--out", str(out),
         "--n-boot", "200"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "only the specificity matrix" in res.output
    # 24 tasks cannot show the off-target changes within ±10 pp: inconclusive (the δ rule)
    assert "freshness_guard inconclusive" in res.output
    assert "always_abstain over-broad" in res.output
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{t}.{x}" for t in ("table10", "table10_cells") for x in ("csv", "md", "tex")
    )
    same = runner.invoke(app, ["compare", str(mitigation_run), "--matrix", "--n-boot", "200"])
    assert same.exit_code == 0, same.output
    assert "freshness_guard" in same.output and "inconclusive" in same.output
    assert "verdicts at δ = 10 pp" in same.output
    # --matrix defaults to the run itself when it holds mitigation arms
    again = runner.invoke(
        app, ["recompute", str(mitigation_run), "--out", str(tmp_path / "t2"), "--n-boot", "200"]
    )
    assert again.exit_code == 0, again.output
    assert (tmp_path / "t2" / "table10.csv").read_bytes() == (out / "table10.csv").read_bytes()
    # with no matrix asked, the run's missing contract pair is one line that names the fix
    no = runner.invoke(
        app, ["recompute", str(mitigation_run), "--no-matrix", "--out", str(tmp_path / "n")]
    )
    assert no.exit_code == 1 and "--matrix RUN" in no.output
    assert not (tmp_path / "n").exists()


def test_a_run_without_the_baseline_arm_is_told_how_to_get_one(tmp_path) -> None:
    run = _subset(
        paths.ARCHIVES / "mitigations", tmp_path / "run", 8, "mitig-nobase",
        arms=("freshness_guard",),
    )  # fmt: skip
    res = runner.invoke(app, ["compare", str(run), "--matrix", "--n-boot", "200"])
    assert res.exit_code == 1
    assert "no baseline arm 'strict'" in res.output and "--mitigation strict" in res.output


def test_compare_with_nothing_to_set_beside_says_so(tmp_path: Path, monkeypatch) -> None:
    """An installed layerlab ships no archives: `compare RUN` printed nothing and exited 0."""
    run = _subset(AGENTS, tmp_path / "run", 3, "live-00000000000000aa")
    monkeypatch.setattr(paths, "ARCHIVES", tmp_path / "no-archives")
    monkeypatch.setattr(paths, "LOCAL_MODEL_ARCHIVES", tmp_path / "no-archives" / "local_models")
    res = runner.invoke(app, ["compare", str(run), "--no-paper"])
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and f"{run}: nothing to set it beside" in lines[0], lines
    assert "layerlab compare RUN OTHER" in lines[0]

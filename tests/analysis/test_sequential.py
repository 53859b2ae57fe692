"""``run live --until-decided``: the looks' error-rate spending, the stopping rule, the README's
target run until its guard's verdict is decided, the error rate across looks on a null, and an
interrupted run resumed."""

from __future__ import annotations

import dataclasses
import json
import math
import shlex
import sys
from pathlib import Path

import pandas as pd
import pytest

from layerlab import archive, paths
from layerlab.analysis import compare, sequential
from layerlab.analysis.specificity import INCONCLUSIVE, SPECIFIC
from layerlab.cli import main
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.harness.live import looks
from layerlab.harness.live.settings import UntilDecided
from layerlab.harness.runconfig import stratified_order, stratified_tasks
from tests import docfiles

GUARD = ["--mitigation", "strict", "--mitigation", "freshness_guard"]


# --- (a) the schedule and its spending ----------------------------------------------------------


@pytest.mark.parametrize(("max_tasks", "batch"), [(120, 24), (96, 16), (100, 30), (16, 16), (50, 7)])
def test_the_looks_spend_alpha_exactly_and_more_at_each_later_look(max_tasks, batch) -> None:
    plan = sequential.Plan(max_tasks, batch)
    sizes, lv = plan.sizes, plan.levels
    assert sizes[0] == min(batch, max_tasks) and sizes[-1] == max_tasks
    assert all(b > a for a, b in zip(sizes, sizes[1:], strict=False))
    assert math.isclose(sum(lv), 0.05, rel_tol=0, abs_tol=1e-15)
    assert all(a > 0 for a in lv)
    cum = [sequential.spent(n / max_tasks) for n in sizes]  # A(t) rises to alpha at t = 1
    assert all(b > a for a, b in zip(cum, cum[1:], strict=False)) and cum[-1] == 0.05
    # equal increments: the Pocock type spends a little less at each later look, the first
    # look of 24 of 120 tasks about 1.5% (an unchanged cell's equivalence floor grows with z²)
    if (max_tasks, batch) == (120, 24):
        assert all(b < a for a, b in zip(lv, lv[1:], strict=False))
        assert lv[0] == pytest.approx(0.01477, rel=0.01) and lv[-1] == pytest.approx(0.00676, rel=0.01)


def test_spending_is_the_pocock_type_function() -> None:
    assert sequential.spent(0.0) == 0.0 and sequential.spent(1.0) == 0.05
    # A(1/4) = 0.05 ln(1 + (e - 1)/4) = 0.05 x 0.35737
    assert sequential.spent(0.25) == pytest.approx(0.05 * 0.35737, rel=1e-4)
    with pytest.raises(ValueError, match="--batch 0"):
        sequential.Plan(120, 0)


def test_the_task_order_is_nested_seeded_and_stratified(corpus) -> None:
    order = stratified_order(corpus.tasks, 0)
    assert sorted(order) == sorted(t.task_id for t in corpus.tasks)
    assert stratified_order(corpus.tasks, 0) == order  # the same seed, the same order
    assert stratified_order(corpus.tasks, 1) != order
    for n in (8, 24, 48, 120):  # look n's tasks are --limit n's, and hold look n - 1's
        assert set(stratified_tasks(corpus.tasks, n)) == set(order[:n])
    domain = {t.task_id: t.domain for t in corpus.tasks}
    first = pd.Series([domain[t] for t in order[:24]]).value_counts()
    assert first.min() == first.max() == 3  # 24 tasks: three per domain of eight


def test_a_decided_verdict_stays_decided_and_the_run_stops_when_all_are() -> None:
    plan = sequential.Plan(72, 24)

    def look(j: int, **v: str) -> sequential.Look:
        return sequential.Look(j, 24 * j, 432 * j, plan.levels[j - 1],
                               {k: {"verdict": x, "reason": "r"} for k, x in v.items()})  # fmt: skip

    one = [look(1, a=SPECIFIC, b=INCONCLUSIVE)]
    assert sequential.next_look(plan, one) == 1  # b undecided: look again
    two = [*one, look(2, a=INCONCLUSIVE, b="over-broad (harm)")]
    assert sequential.stopped(plan, two)  # a was decided at look 1 and stays so
    lines = sequential.summary(plan, two)
    assert lines[0].startswith("a: specific after 1 look, 24 tasks (432 records); error rate ≤ 5%")
    assert "it reads inconclusive" in lines[0]
    assert lines[1].startswith("b: over-broad (harm) after 2 looks, 48 tasks (864 records)")
    spent_all = [*one, look(2, a=SPECIFIC, b=INCONCLUSIVE), look(3, a=SPECIFIC, b=INCONCLUSIVE)]
    assert sequential.next_look(plan, spent_all) is None
    assert sequential.summary(plan, spent_all)[1] == "budget of 72 tasks spent: b still inconclusive (r)"


# --- (b) the README's target, until its guard is decided ----------------------------------------


@pytest.fixture(autouse=True)
def _own_my_rag(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test imports its own folder's ``my_rag`` and leaves none behind for the next test
    (another file's in this process, e.g. the pytest plugin's projects)."""
    monkeypatch.delitem(sys.modules, "my_rag", raising=False)


def _readme_target(folder: Path) -> None:
    """The README's ``my_rag.py``, saved where its reader would save it."""
    (block,) = [b for b in docfiles.blocks(docfiles.README) if b.body.startswith("# my_rag.py")]
    counting = "\nimport os\n_answer = answer\n\ndef counted(req):\n" \
        "    with open(os.environ['MY_RAG_CALLS'], 'a') as f:\n        f.write(req.question[:8] + '\\n')\n" \
        "    return _answer(req)\n"  # fmt: skip
    (folder / "my_rag.py").write_text(block.body + counting, encoding="utf-8")


def _docs_commands(out: Path) -> tuple[list[str], list[str]]:
    """The ``run live --until-decided`` and ``gate`` commands of docs/live-runs.md's block, into
    ``out`` and with the README target counting its calls."""
    (block,) = [b for b in docfiles.blocks(docfiles.DOCS / "live-runs.md")
                if b.lang == "bash" and "--until-decided" in b.body]  # fmt: skip
    run, gate = (shlex.split(c)[1:] for c in block.body.replace("\\\n", " ").splitlines())
    fix = {"python:my_rag:answer": "python:my_rag:counted", "runs/decided": str(out)}
    return [fix.get(w, w) for w in run] + ["--no-progress"], [fix.get(w, w) for w in gate]


def test_the_readme_target_runs_until_its_guard_is_decided(tmp_path, monkeypatch, capsys) -> None:
    """docs/live-runs.md's ``--until-decided --specific freshness_guard`` on the README's target
    stops at a conclusive verdict within its budget, every look recorded; no record is asked
    twice; compare and gate on the finished run judge at its last look's level and give the
    verdict it stopped on."""
    _readme_target(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MY_RAG_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("LAYERLAB_WORKERS", "1")  # the target's calls counted in one process
    out = tmp_path / "run"
    args, gate = _docs_commands(out)
    assert args[:2] == ["run", "live"] and "--until-decided" in args and gate[0] == "gate"
    assert main(args) in (0, None)
    printed = capsys.readouterr().out
    m = archive.read_manifest(out)
    ud = m["until_decided"]
    made = ud["looks"]
    last = made[-1]
    verdict = last["verdicts"]["freshness_guard"]["verdict"]
    assert ud["outcome"] == "decided" and verdict != INCONCLUSIVE
    assert [lk["tasks"] for lk in made] == ud["sizes"][: len(made)] and last["tasks"] <= 120
    assert all(lk["verdicts"]["freshness_guard"]["verdict"] == INCONCLUSIVE for lk in made[:-1])
    assert [lk["alpha"] for lk in made] == ud["levels"][: len(made)]
    recs = pd.read_parquet(out / "records.parquet")
    assert set(recs.task_id) == set(ud["order"][: last["tasks"]]) and len(recs) == last["records"]
    assert m["complete"] and m["n_tasks"] == last["tasks"]
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == len(recs)  # each look asked only its new tasks
    n = len(made)
    assert (f"freshness_guard: {verdict} after {n} look{'s' if n > 1 else ''}, {last['tasks']} "
            f"tasks ({last['records']} records); error rate ≤ 5% across looks "
            "(Pocock-type spending)") in printed  # fmt: skip
    level, note = compare.verdict_level(out)
    assert level == last["alpha"] and "until-decided" in note
    (mx,) = compare.matrix_summary(out, n_boot=10_000).values()
    assert mx.summary.set_index("mitigation").loc["freshness_guard", "verdict"] == verdict
    assert main(gate) in ((0, None) if verdict == SPECIFIC else (1,))
    # a resume of the stopped run asks nothing and says where it stopped
    assert main([*args, "--resume"]) in (0, None)
    assert "this run had already stopped" in capsys.readouterr().out
    assert len((tmp_path / "calls.txt").read_text().splitlines()) == len(recs)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--specific", "freshness_guard"], "--specific: an --until-decided setting"),
        (["--until-decided"], "name the verdicts to wait for"),
        (["--until-decided", "--specific", "freshness_guard", "--limit", "16"], "--limit: not with"),
        (["--until-decided", "--specific", "session_isolation"], "not a judged arm of this run"),
        (["--until-decided", "--specific", "freshness_guard", "--max-tasks", "241"], "only 240 tasks"),
    ],
)
def test_until_decided_flags_are_checked_before_anything_runs(
    tmp_path, monkeypatch, capsys, extra, says
) -> None:
    _readme_target(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    code = main(["run", "live", "--target", "python:my_rag:answer", "--out", str(out), *GUARD,
                 *extra, "--no-progress"])  # fmt: skip
    assert code == 2 and says in capsys.readouterr().err and not out.exists()


# --- (c) the error rate across looks where nothing has an effect --------------------------------


def _null_rate(sims: int) -> tuple[float, float]:
    plan = sequential.Plan()  # 24, 48, ..., 120 tasks: five looks
    false = sum(sequential.simulate_null(plan, seed).false_claim for seed in range(sims))
    return false / sims, math.sqrt(0.05 * 0.95 / sims)


def test_a_null_guard_is_rarely_called_specific_or_over_broad_at_any_look() -> None:
    """Synthetic one-unit target runs (Beta(2,2) task difficulty, 9 scenarios, no effect
    anywhere) through the stopping rule: the share ending with a false specific or over-broad
    verdict at any look is at most 5% + 2 Monte Carlo s.e. (under the intersection-union rule
    and Pocock-type spending, 17 of 1,000 runs: 1.7%)."""
    rate, se = _null_rate(100)
    assert rate <= 0.05 + 2 * se, f"{rate:.3f} of null runs falsely flagged (s.e. {se:.3f})"


@pytest.mark.slow
def test_the_null_error_rate_across_looks_at_size() -> None:
    rate, se = _null_rate(2_000)
    assert rate <= 0.05 + 2 * se, f"{rate:.4f} of null runs falsely flagged (s.e. {se:.4f})"


# --- (d) interrupted and resumed ----------------------------------------------------------------


class _Interrupt:
    """A progress hook that stops the run (as Ctrl-C does) after ``after`` records of a look."""

    def __init__(self, after: int) -> None:
        self.after = after

    def update(self, counters, total) -> None:
        if counters.records - counters.skipped_done >= self.after:
            raise KeyboardInterrupt

    def close(self) -> None:
        pass


def test_an_interrupted_until_decided_run_resumes_its_looks(corpus, key, tmp_path, monkeypatch) -> None:
    _readme_target(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("MY_RAG_CALLS", str(tmp_path / "calls.txt"))
    monkeypatch.setenv("LAYERLAB_WORKERS", "1")
    scen = {s: v for s, v in load_scenarios().items() if s in ("clean", "stale_index", "wrong_session")}
    order = stratified_order(corpus.tasks, 0)[:24]
    u = UntilDecided(24, 8, ("freshness_guard",), tasks=8)
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), mitigations=("strict", "freshness_guard"),
                          task_ids=order, target="python:my_rag:counted", until_decided=u)  # fmt: skip

    def go(out: Path, progress=None, resume=False) -> looks.Decided:
        run = live.RunSettings(cache_dir=tmp_path / "cache", resume=resume, concurrency=2)
        return looks.run_until_decided(corpus, key, scen, cfg, out, run, progress=progress,
                                       scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip

    whole = go(tmp_path / "whole")
    calls = len((tmp_path / "calls.txt").read_text().splitlines())
    seen = iter([_Interrupt(10**9), _Interrupt(5)])  # look 1 whole, look 2 stopped after 5
    with pytest.raises(live.RunInterrupted):
        go(tmp_path / "cut", progress=lambda: next(seen))
    ud = archive.read_manifest(tmp_path / "cut")["until_decided"]
    assert [lk["tasks"] for lk in ud["looks"]] == [8] and ud["tasks"] == 16
    resumed = go(tmp_path / "cut", resume=True)
    assert [lk.as_dict() for lk in resumed.looks] == [lk.as_dict() for lk in whole.looks]
    assert resumed.lines() == whole.lines()
    made = (tmp_path / "calls.txt").read_text().splitlines()
    # the saved records were not asked again (at most the 2 calls in flight at the stop were)
    assert 2 * calls <= len(made) <= 2 * calls + 2
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("whole", "cut"))
    assert a["records"] == b["records"] and a["complete"] and b["complete"]
    # the plan is the run's: a resume that would spend alpha otherwise is refused
    cfg = dataclasses.replace(cfg, until_decided=dataclasses.replace(u, batch=12, tasks=12))
    with pytest.raises(live.LiveRunError, match="an until-decided run: the same --until-decided"):
        go(tmp_path / "cut", resume=True)


def test_no_over_broad_waits_for_every_judged_arm(corpus, key, tmp_path, monkeypatch) -> None:
    _readme_target(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    scen = {s: v for s, v in load_scenarios().items() if s in ("clean", "stale_index", "wrong_session")}
    arms = ("strict", "freshness_guard", "session_isolation")
    u = UntilDecided(16, 16, no_over_broad=True, tasks=16)
    cfg = live.LiveConfig(models=(), scenarios=tuple(scen), mitigations=arms, until_decided=u,
                          task_ids=stratified_order(corpus.tasks, 0)[:16], target="python:my_rag:answer")  # fmt: skip
    run = live.RunSettings(cache_dir=tmp_path / "cache")
    d = looks.run_until_decided(corpus, key, scen, cfg, tmp_path / "run", run,
                                scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    (only,) = d.looks  # one look: its budget of 16 tasks, all of alpha
    assert set(only.verdicts) == {"freshness_guard", "session_isolation"} and only.alpha == 0.05
    assert d.over and len(d.lines()) == 2

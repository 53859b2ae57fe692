"""``run live --epochs K``: every cell asked K times, each epoch its own seeded draw, pass@k and
pass^k beside S; a system whose epochs would be identical (a greedy model, a reference agent)
asked once, said so; a target re-asked, and said so when its epochs never differed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from layerlab import archive, paths
from layerlab.cli import main
from layerlab.corpus.spec import spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import live
from layerlab.models.routing import record_seed
from layerlab.reporting.run.overview import same_records

sys.path.insert(0, str(Path(__file__).parents[2]))
from fake_openai import FakeOpenAI  # noqa: E402

TASKS = "finance-01-q1,it_ops-01-q2,pto-01-q1,hr-01-q1"


@pytest.fixture()
def server(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + "k3y" * 10)
    with FakeOpenAI() as srv:
        yield srv


def _live(tmp: Path, out: str, *flags: str) -> list[str]:
    return ["run", "live", "--tasks", TASKS, "--scenario", "clean", "--scenario", "stale_index",
            "--out", str(tmp / out), "--cache-dir", str(tmp / f"cache-{out}"), "--no-progress",
            *flags]  # fmt: skip


def _records(folder: Path) -> list[archive.Record]:
    return archive.read_records(folder / archive.ARCHIVE)


def test_a_sampled_model_runs_every_epoch_with_its_own_seed_and_pass_k(tmp_path, server, capsys) -> None:
    flags = ("-m", "openai/coin", "--api-base", server.base, "--temperature", "0.7", "--seed", "5",
             "--epochs", "3")  # fmt: skip
    assert main(_live(tmp_path, "a", *flags)) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    recs = _records(tmp_path / "a")
    assert len(recs) == 4 * 2 * 2 * 3  # tasks x scenarios x arms x epochs
    cells: dict[tuple, set[int]] = {}
    for r in recs:
        cells.setdefault((r.scenario, r.mitigation, r.task_id), set()).add(r.replicate)
    assert set(map(frozenset, cells.values())) == {frozenset({0, 1, 2})}
    # each epoch its own seed, derived from (seed, model, scenario, arm, task, epoch) as before
    seeds = [b["seed"] for b in server.bodies if b.get("model") == "coin"]
    assert len(seeds) == len(set(seeds)) == len(recs)  # one call a record (the preflight's reused)
    assert record_seed(5, "openai/coin", "clean", "strict", "finance-01-q1", 2) in seeds
    assert record_seed(5, "openai/x", "clean", "strict", "t", 1) == 1435723351  # as before --epochs
    # the epochs differ (a sampled model), so pass@3 and pass^3 say something S does not
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    (m,) = res["models"]
    assert m["epochs"] == 3 and res["pass_k"].startswith("per task with n epochs")
    pk = m["by_scenario"]["clean"]["strict"]["pass_k"]
    assert pk["epochs"] == 3 and set(pk["S"]["pass@k"]) == set(pk["safe"]["pass^k"]) == {"1", "2", "3"}
    assert pk["S"]["pass@k"]["1"] == m["by_scenario"]["clean"]["strict"]["S"]["rate"]
    assert pk["S"]["pass@k"]["3"] > pk["S"]["pass^k"]["3"]
    assert "pass@3 S" in said and "pass^3 safe" in said
    manifest = archive.read_manifest(tmp_path / "a")
    assert manifest["epochs"] == {"requested": 3, "run": {"openai/coin": 3}, "why": {}}
    assert manifest["replicates"] == 3 and manifest["expected_records"] == len(recs)
    # seeded: the same command into another folder, with its own cache, makes the same records
    assert main(_live(tmp_path, "b", *flags)) == 0
    assert same_records(tmp_path / "a", tmp_path / "b")


def test_a_greedy_model_or_reference_agent_is_asked_once_and_says_why(tmp_path, server, capsys) -> None:
    flags = ("-m", "openai/good", "--api-base", server.base, "--temperature", "0")
    assert main(_live(tmp_path, "g", *flags, "--epochs", "3")) == 0
    err = capsys.readouterr().err
    line = ("--epochs 3: openai/good is greedy (temperature 0), its epochs would be identical; "
            "running 1 epoch")  # fmt: skip
    assert err.splitlines().count(line) == 1, err
    assert {r.replicate for r in _records(tmp_path / "g")} == {0}
    manifest = archive.read_manifest(tmp_path / "g")
    assert manifest["epochs"] == {
        "requested": 3, "run": {"openai/good": 1},
        "why": {"openai/good": "is greedy (temperature 0): its epochs would be identical"},
    }  # fmt: skip
    assert "pass_k" not in json.loads((tmp_path / "g" / "results.json").read_text())
    # the run it makes is the run of one epoch: the same id, the same records
    assert main(_live(tmp_path, "g1", *flags)) == 0
    assert archive.read_manifest(tmp_path / "g1")["run_id"] == manifest["run_id"]
    assert same_records(tmp_path / "g", tmp_path / "g1")
    # asked to re-ask (--no-share-replies), a greedy server's own noise is what epochs measure
    assert main(_live(tmp_path, "n", *flags, "--no-share-replies", "--epochs", "2")) == 0
    assert "its epochs would be identical" not in capsys.readouterr().err
    assert {r.replicate for r in _records(tmp_path / "n")} == {0, 1}


def test_a_reference_agent_beside_a_sampled_model_runs_one_epoch(tmp_path, server, capsys) -> None:
    args = _live(tmp_path, "mix", "-m", "layerlab/extractive", "-m", "openai/coin", "--api-base",
                 server.base, "--temperature", "0.7", "--epochs", "2")  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert ("--epochs 2: layerlab/extractive is a deterministic reference agent, its epochs would "
            "be identical; running 1 epoch") in capsys.readouterr().err  # fmt: skip
    recs = _records(tmp_path / "mix")
    epochs = {m: {r.replicate for r in recs if r.model == m} for m in ("extractive", "coin")}
    assert epochs == {"extractive": {0}, "coin": {0, 1}}
    m = archive.read_manifest(tmp_path / "mix")
    assert m["complete"] and m["expected_records"] == len(recs) == 16 + 32
    # resuming asks nothing: the agent's one epoch counts as done
    assert main([*args, "--resume"]) == 0
    assert "resuming" in capsys.readouterr().err


def test_a_deterministic_target_is_re_asked_and_said_to_look_deterministic(
    tmp_path, monkeypatch, corpus, key
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "fixtures"))
    scen = load_scenarios()
    cfg = live.LiveConfig(models=(), scenarios=("clean", "stale_index"), task_ids=tuple(TASKS.split(",")),
                          target="python:user_targets:extractive", epochs=3)  # fmt: skip
    assert cfg.identical_epochs(cfg.models[0]) is None  # a team's system: cannot be known
    res = live.run_live(corpus, key, scen, cfg, tmp_path / "t", cache_dir=tmp_path / "c",
                        scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    assert res.complete and {r.replicate for r in _records(tmp_path / "t")} == {0, 1, 2}
    lines = [s for s in res.message.splitlines() if "looks deterministic" in s]
    assert lines == [
        "--epochs 3: every record of target/extractive had the same outcome in each epoch: the "
        "system looks deterministic, its epochs added no information (pass@k = pass^k = S)"
    ]


def test_a_sampled_model_whose_epochs_differ_gets_no_such_line(tmp_path, server, corpus, key) -> None:
    from layerlab.models.llm import ProviderSettings

    cfg = live.LiveConfig(models=("openai/coin",), scenarios=("clean",), task_ids=tuple(TASKS.split(",")),
                          settings=ProviderSettings(temperature=0.7, api_bases=(server.base,)),
                          epochs=3, seed=1)  # fmt: skip
    res = live.run_live(corpus, key, load_scenarios(), cfg, tmp_path / "s", cache_dir=tmp_path / "c",
                        scenario_hash=spec_hash(paths.SCENARIO_SPEC))  # fmt: skip
    assert res.complete and "looks deterministic" not in res.message


def test_replicates_is_the_earlier_name_of_epochs(tmp_path, capsys) -> None:
    ref = ("-m", "layerlab/cautious", "--tasks", "finance-01-q1")
    # a reference agent runs one epoch either way; the flag is still understood
    assert main(_live(tmp_path, "r", *ref, "--replicates", "2")) == 0
    assert "--epochs 2: layerlab/cautious is a deterministic" in capsys.readouterr().err
    assert archive.read_manifest(tmp_path / "r")["epochs"]["requested"] == 2
    assert main(_live(tmp_path, "x", *ref, "--replicates", "2", "--epochs", "3")) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith("--replicates 2 is the old name of --epochs 3: give one") and "\n" not in err
    assert not (tmp_path / "x").exists()
    cfg = live.LiveConfig(models=("openai/x",), scenarios=("clean",), replicates=2)
    assert cfg.epochs == 2 and cfg.epochs_for("openai/x") == 2
    assert "--epochs" in _help() and "--replicates" not in _help()  # hidden, still accepted


def _help() -> str:
    from typer.testing import CliRunner

    from layerlab.cli import app

    return CliRunner().invoke(app, ["run", "live", "--help"]).output


def test_run_configurations_take_epochs_and_the_earlier_replicates(tmp_path, capsys) -> None:
    base = "models:\n  - model: openai/coin\n    temperature: 0.7\nscenarios: [clean]\nlimit: 2\n"
    for key_, n in (("epochs", 3), ("replicates", 2)):
        (tmp_path / f"{key_}.yaml").write_text(base + f"{key_}: {n}\n")
        spec = _load(tmp_path / f"{key_}.yaml")
        assert spec.n_epochs == n
    (tmp_path / "both.yaml").write_text(base + "epochs: 3\nreplicates: 2\n")
    from layerlab.corpus.spec import SpecError

    with pytest.raises(SpecError, match=r"both\.yaml:7: replicates: the earlier name of epochs"):
        _load(tmp_path / "both.yaml")


def _load(path: Path):
    from layerlab.corpus import build
    from layerlab.harness import runconfig
    from layerlab.mitigations import load_mitigations

    c = build.load(paths.CORPUS_DIR)
    return runconfig.load_run_config(path, list(load_scenarios()), list(load_mitigations().arms),
                                     [t.task_id for t in c.tasks])  # fmt: skip


def test_shared_replies_of_a_sampled_model_are_shared_within_an_epoch_not_across(
    tmp_path, server, capsys
) -> None:
    """--share-replies at temperature > 0 (an intensity sweep's records repeat the clean prompt
    wherever the fault did not strike): identical prompts of one epoch share one call, seeded
    by the prompt and the epoch, so whichever record asks first the reply is the same; each
    epoch asks again."""
    flags = ("-m", "openai/coin", "--api-base", server.base, "--temperature", "0.7", "--seed", "5",
             "--epochs", "2", "--share-replies", "--mitigation", "strict",
             "--intensity", "0,1")  # fmt: skip
    assert main(_live(tmp_path, "a", *flags)) == 0, capsys.readouterr().err
    recs = _records(tmp_path / "a")
    assert {r.scenario for r in recs} == {"clean", "stale_index@0", "stale_index"}
    prompts = {(r.prompt_hash, r.replicate) for r in recs if r.prompt_hash}
    calls = [b for b in server.bodies if b.get("model") == "coin"]
    assert len(calls) == len(prompts)  # one call per distinct prompt and epoch
    assert len({b["seed"] for b in calls}) == len(calls)
    # stale_index@0 struck no task: its records are the clean records, reply for reply
    by = {(r.scenario, r.task_id, r.replicate): r for r in recs}
    for (scen, task, rep), r in by.items():
        if scen == "stale_index@0":
            c = by[("clean", task, rep)]
            assert (r.prompt_hash, r.success, r.answerable) == (c.prompt_hash, c.success, True)
    assert main(_live(tmp_path, "b", *flags)) == 0
    assert same_records(tmp_path / "a", tmp_path / "b")

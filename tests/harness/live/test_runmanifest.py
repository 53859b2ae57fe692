"""A live run's arms and identity (layerlab/harness/live/runmanifest.py): an arm a live run names
is resolved from the committed mitigations.yaml first, then from mitigations_transport.yaml
(layerlab.mitigations.load_run_mitigations), and the arm's spec is part of the run's id and
manifest, so a resume after the arm was edited is refused; and a resume of a local model's run
under another runtime than the one its manifest records is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from layerlab import paths
from layerlab.archive import read_records
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.harness.config import ConfigError, ConfigProblems, RunConfig
from layerlab.harness.live import LiveConfig, runmanifest
from layerlab.mitigations import arms as arms_mod
from layerlab.mitigations import load_mitigations, load_run_mitigations

runner = CliRunner()
TRANSPORT = str(paths.TRANSPORT_SCENARIO_SPEC)


def _live(out: Path, *args: str) -> object:
    return runner.invoke(app, ["run", "live", "-m", "layerlab/extractive", "--limit", "3",
                               "--scenarios", TRANSPORT, "--scenario", "rate_limited",
                               "--scenario", "service_outage", "--out", str(out),
                               "--cache-dir", str(out.parent / "cache"), *args])  # fmt: skip


def test_the_committed_spec_first_then_the_transport_arms() -> None:
    book, first = load_run_mitigations(), load_mitigations()
    assert book.baseline == first.baseline and book.matrix_arms == first.matrix_arms
    assert all(book.arm(n) is first.arm(n) for n in first.arms)  # a name in both: the committed
    assert set(book.later) == {"transport_retry", "circuit_breaker"}
    assert book.arm("transport_retry").kinds == ("transport_retry",)
    assert book.expand(["all"]) == first.expand(["all"])  # `all` is the committed matrix
    assert book.later_specs(["strict", "repair", "freshness_guard"]) == {}
    spec = book.later_specs(["transport_retry"])["transport_retry"]
    assert spec["spec"] == "mitigations_transport.yaml"
    assert spec["steps"] == [{"kind": "transport_retry", "params": {
        "max_retries": 3, "backoff_s": 0.5, "max_backoff_s": 30.0, "jitter": 0.5}}]  # fmt: skip


def test_a_live_run_with_a_transport_arm_recovers_what_strict_loses(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _live(out, "--mitigation", "strict", "--mitigation", "transport_retry",
                "--mitigation", "circuit_breaker")  # fmt: skip
    assert res.exit_code == 0, res.output
    recs = read_records(out / "records.parquet")
    assert {r.mitigation for r in recs} == {"strict", "transport_retry", "circuit_breaker"}
    by = {(r.scenario, r.mitigation, r.task_id): r for r in recs}
    tasks = sorted({r.task_id for r in recs})
    assert len(tasks) == 3
    for t in tasks:
        # 429 twice, then the service answers: strict loses the task, both arms recover it
        assert not by[("rate_limited", "strict", t)].success
        assert by[("rate_limited", "transport_retry", t)].success
        assert by[("rate_limited", "circuit_breaker", t)].success
        # an outage: strict is unsafe; the arms end in a structured non-answer
        assert not by[("service_outage", "strict", t)].safe_resolution
        assert by[("service_outage", "transport_retry", t)].safe_resolution
    m = json.loads((out / "manifest.json").read_text())
    assert set(m["mitigation_arms"]["arms"]) == {"strict", "transport_retry", "circuit_breaker"}
    assert m["mitigation_arms"]["arms"]["transport_retry"]["layers"] == ["transport"]
    assert m["provenance"]["mitigations:mitigations_transport.yaml"]
    assert m["provenance"]["mitigations"] == runmanifest.archive.provenance_for(
        corpus_mod.load(), "x", [])["mitigations"]  # fmt: skip


def test_an_arm_in_neither_spec_is_one_line_naming_both_files(tmp_path: Path) -> None:
    res = _live(tmp_path / "run", "--mitigation", "transport_retyr")
    assert res.exit_code != 0
    line = [x for x in res.output.splitlines() if "transport_retyr" in x]
    assert len(line) == 1, res.output
    assert "mitigations.yaml" in line[0] and "mitigations_transport.yaml" in line[0]
    assert "transport_retry" in line[0]  # did you mean
    assert not (tmp_path / "run").exists()


def test_a_run_configuration_names_a_transport_arm(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"models": [{"model": "layerlab/extractive"}],
                                    "mitigations": ["strict", "transport_retry"]}))  # fmt: skip
    cfg = RunConfig.from_yaml(path, out=tmp_path / "out")
    assert cfg.arms() == ("strict", "transport_retry")
    path.write_text(yaml.safe_dump({"models": [{"model": "layerlab/extractive"}],
                                    "mitigations": ["strict", "no_such_arm"]}))  # fmt: skip
    with pytest.raises(ConfigProblems) as exc:
        RunConfig.from_yaml(path, out=tmp_path / "out")
    text = str(exc.value)
    assert "run.yaml:" in text and "no_such_arm" in text
    assert "mitigations.yaml" in text and "mitigations_transport.yaml" in text
    with pytest.raises(ConfigError, match="mitigations_transport.yaml"):
        RunConfig.from_cli({"out": tmp_path / "o", "model": ["layerlab/extractive"],
                            "mode": ["nope"]}).arms()  # fmt: skip


def _edited(tmp_path: Path, max_retries: int) -> Path:
    p = tmp_path / "mitigations_transport.yaml"
    shutil.copy(paths.TRANSPORT_MITIGATION_SPEC, p)
    text = p.read_text().replace("max_retries: 3,", f"max_retries: {max_retries},")
    p.write_text(text)
    return p


def test_the_arms_spec_is_in_the_run_id_and_an_edited_arm_refuses_the_resume(
    tmp_path: Path, monkeypatch
) -> None:
    corpus = corpus_mod.load()
    cfg = LiveConfig(("layerlab/extractive",), ("rate_limited",), ("strict", "transport_retry"))
    plain = LiveConfig(("layerlab/extractive",), ("rate_limited",), ("strict", "repair"))
    before = runmanifest.run_id_for(cfg, corpus, "h"), runmanifest.run_id_for(plain, corpus, "h")
    out = tmp_path / "run"
    assert _live(out, "--mitigation", "strict", "--mitigation", "transport_retry").exit_code == 0
    monkeypatch.setattr(arms_mod, "RUN_SPECS", (paths.MITIGATION_SPEC, _edited(tmp_path, 2)))
    assert load_run_mitigations().arm("transport_retry").steps[0].params.max_retries == 2
    after = runmanifest.run_id_for(cfg, corpus, "h"), runmanifest.run_id_for(plain, corpus, "h")
    assert after[0] != before[0]  # the transport arm's parameters are in its run's id
    assert after[1] == before[1]  # a run of the committed arms keeps its id
    res = _live(out, "--mitigation", "strict", "--mitigation", "transport_retry", "--resume")
    assert res.exit_code != 0 and "other settings" in res.output


# --- a local model's runtime on resume --------------------------------------------------------

QWEN = "local/qwen2.5-coder-1.5b"
SURFACE = paths.LOCAL_MODEL_SURFACE / "qwen2.5-coder-1.5b"


def test_a_resume_under_another_local_runtime_is_refused_in_one_line(monkeypatch) -> None:
    from layerlab.harness.live import LiveRunError
    from layerlab.models import llamaserver

    old = json.loads((SURFACE / "manifest.json").read_text())  # served by llama-cpp-python
    assert runmanifest.recorded_runtime(old["local_models"][QWEN]) == llamaserver.DEFAULT
    assert runmanifest.runtime_refusal(SURFACE, old, [QWEN], llamaserver.DEFAULT) is None
    line = runmanifest.runtime_refusal(SURFACE, old, [QWEN], "llama-server")
    assert line is not None and "\n" not in line
    assert QWEN in line and "llama-cpp-python" in line and "llama-server" in line
    assert f"{llamaserver.ENV}=llama-cpp-python" in line  # how to resume it
    # a run served by llama-server, resumed under the default runtime
    server = {**old["local_models"][QWEN], "runtime": "llama-server b1 (llama.cpp vendored ...)",
              "server": {**old["local_models"][QWEN]["server"], "runtime": "llama-server"}}
    other = {**old, "local_models": {QWEN: server}}
    assert runmanifest.recorded_runtime(server) == "llama-server"
    assert "served by llama-server" in runmanifest.runtime_refusal(
        SURFACE, other, [QWEN], llamaserver.DEFAULT)  # fmt: skip
    # a manifest that records no runtime (a first invocation killed before it ended): no refusal
    assert runmanifest.runtime_refusal(SURFACE, {"run_id": "x"}, [QWEN], "llama-server") is None
    # the check a resume runs before any server starts: the runtime the environment selects
    monkeypatch.setenv(llamaserver.ENV, "llama-server")
    with pytest.raises(LiveRunError, match="mix two runtimes"):
        runmanifest.check_runtime(SURFACE, old, [QWEN])
    runmanifest.check_runtime(SURFACE, None, [QWEN])  # a new run: nothing to keep
    runmanifest.check_runtime(SURFACE, old, [])  # no local model
    monkeypatch.setenv(llamaserver.ENV, "llama-cpp-python")
    runmanifest.check_runtime(SURFACE, old, [QWEN])

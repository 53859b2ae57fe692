"""``layerlab gate``: CI gates on the committed archives. Exit 0 when every check passes, 1 with
one line per failed check, 2 on bad input (one line naming the flag); a threshold that matches
no cell is an error, never a pass; the rates are results.json's and the verdicts Table 10's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from layerlab import archive, paths
from layerlab.analysis import results
from layerlab.analysis.gate import GateSpec
from layerlab.analysis.records import records_frame
from layerlab.cli import main
from layerlab.corpus.spec import SpecError
from layerlab.harness.runconfig import load_run_config

QWEN = paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b"
AGENTS = paths.ARCHIVES / "reference_agents"
MITIGATIONS = paths.ARCHIVES / "mitigations"
UNIT = "local/qwen2.5-coder-1.5b"


def gate(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, list[str], list[str]]:
    """Exit code, stdout lines and stderr lines of ``layerlab gate ARGS``."""
    rc = main(["gate", *map(str, args)])
    cap = capsys.readouterr()
    return rc, cap.out.splitlines(), cap.err.splitlines()


@pytest.fixture(scope="module")
def qwen_results() -> dict:
    return results.summarize(records_frame(QWEN))["models"][0]


def test_thresholds_that_hold_exit_0_with_one_summary_line(capsys) -> None:
    rc, out, err = gate(
        capsys, QWEN, "--min", "S:clean=0.6", "--min", "SR:conflicting_evidence@strict=0.5",
        "--max", "GF:wrong_session=100%", "--max", "provider_error=0",
    )  # fmt: skip
    assert (rc, err) == (0, [])
    assert out == [
        f"gate passed on {QWEN}: all 7 checks passed (7 threshold)"
    ]  # clean x 2 arms, one arm, wrong_session x 2, the pooled share x 2


def test_each_failed_cell_is_one_line_and_the_summary_counts_them(capsys) -> None:
    rc, out, err = gate(capsys, QWEN, "--min", "S:clean=0.7", "--max", "GF:stale_index@repair=0.1")
    assert (rc, err) == (1, [])
    assert out == [
        f"FAIL S clean strict {UNIT}: 0.650 < 0.700 (52 of 80 records; --min S:clean=0.7)",
        f"FAIL S clean repair {UNIT}: 0.650 < 0.700 (52 of 80 records; --min S:clean=0.7)",
        f"FAIL GF stale_index repair {UNIT}: 0.975 > 0.100 "
        "(78 of 80 records; --max GF:stale_index@repair=0.1)",
        f"gate FAILED on {QWEN}: 3 of 3 checks failed (thresholds: 3 of 3 failed)",
    ]


def test_rates_are_results_json_rates_and_a_bound_equal_to_the_rate_holds(
    capsys, qwen_results
) -> None:
    cell = qwen_results["by_scenario"]["permission_denied"]["strict"]["safe"]["rate"]
    pooled = qwen_results["arms"]["repair"]["S"]["rate"]  # no :SCENARIO = over all scenarios
    for bound in ("--min", "--max"):
        rc, out, _ = gate(
            capsys, QWEN, bound, f"SR:permission_denied@strict={cell}", bound, f"S@repair={pooled}"
        )
        assert rc == 0, out
    rc, out, _ = gate(capsys, QWEN, "--min", f"S@repair={pooled + 0.001}", "--verbose")
    assert rc == 1 and out[0].startswith(f"FAIL S all repair {UNIT}: {pooled:.3f} < ")


def test_strict_ci_compares_the_worse_bound_of_the_interval(capsys, qwen_results) -> None:
    s = qwen_results["by_scenario"]["clean"]["strict"]["S"]
    assert s["ci_low"] < 0.6 < s["rate"]
    assert gate(capsys, QWEN, "--min", "S:clean@strict=0.6")[0] == 0
    rc, out, _ = gate(capsys, QWEN, "--min", "S:clean@strict=0.6", "--strict-ci")
    assert rc == 1
    assert out[0] == (
        f"FAIL S clean strict {UNIT}: 95% low {s['ci_low']:.3f} < 0.600 "
        f"(rate {s['rate']:.3f}, 52 of 80 records; --min S:clean@strict=0.6)"
    )


def test_each_scenario_arm_and_model_selectors(capsys) -> None:
    rc, out, _ = gate(capsys, QWEN, "--max", "GF:*=1", "--verbose")
    assert rc == 0 and len(out) == 9 * 2 + 1  # every scenario x arm, then the summary
    rc, out, _ = gate(capsys, AGENTS, "--min", "S:clean@strict/extractive=0.5", "--verbose")
    assert rc == 0 and len(out) == 2 and "layerlab/extractive" in out[0]
    rc, out, _ = gate(capsys, AGENTS, "--min", "S:clean/layerlab/cautious=0.5", "--verbose")
    assert rc == 0 and [x.split()[4] for x in out[:-1]] == ["layerlab/cautious:"] * 2


def _run_subset(src: Path, out: Path, scenarios: set[str], arms: set[str]) -> Path:
    """A complete run folder of ``src``'s records in ``scenarios`` and ``arms`` (what a user's
    ``run live --config`` with fewer scenarios or arms writes)."""
    recs = [
        dataclasses.replace(r, run_id="live-gatesubset")
        for r in archive.read_records(src / archive.ARCHIVE)
        if r.scenario in scenarios and r.mitigation in arms
    ]
    m = archive.read_manifest(src)
    for k in ("manifest_sha256", "files", "records"):
        m.pop(k, None)
    m.update(run_id="live-gatesubset", expected_records=len(recs), complete=True,
             scenarios=sorted(scenarios), mitigations=sorted(arms))  # fmt: skip
    archive.write_run(out, recs, m)
    return out


@pytest.fixture(scope="module")
def strict_two_scenarios(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gate") / "run"
    return _run_subset(QWEN, out, {"clean", "stale_index"}, {"strict"})


def test_a_threshold_that_matches_no_cell_is_an_error_not_a_pass(
    capsys, strict_two_scenarios
) -> None:
    # names the scenario spec and the mitigations spec know, which this run did not run
    for flag, text, missing in (
        ("--min", "S:wrong_session=0.1", "no scenario 'wrong_session' in the run"),
        ("--max", "GF@repair=0.5", "no mitigation arm 'repair' in the run"),
        ("--min", "S/openai/gpt-4o-mini=0.5", "no model 'openai/gpt-4o-mini' in the run"),
    ):
        rc, out, err = gate(capsys, strict_two_scenarios, flag, text)
        assert (rc, out, len(err)) == (2, [], 1)
        assert err[0].startswith(f"error: {flag} {text}: matches no cell: {missing}")
        assert "it holds:" in err[0]  # what the run does hold


BAD = [
    (["--min", "S="], "--min S=: expected MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE"),
    (["--min", "S:clean"], "--min S:clean: expected MEASURE[:SCENARIO][@ARM][/MODEL]=VALUE"),
    (["--min", "S=1.5"], "--min S=1.5: expected a share in [0, 1]"),
    (["--max", "GF=lots"], "--max GF=lots: expected a share in [0, 1] (e.g. 0.6)"),
    (["--min", "Sx:clean=0.5"], "--min Sx:clean=0.5: unknown measure 'Sx' (did you mean 'S'?)"),
    (["--min", "S:clen=0.5"], "--min S:clen=0.5: matches no cell: no scenario 'clen' in the run "
     "(did you mean 'clean'?)"),
    (["--min", "S@repiar=0.5"], "--min S@repiar=0.5: matches no cell: no mitigation arm 'repiar'"
     " in the run (did you mean 'repair'?)"),
    (["--min", "S/local/qwen2.5-coder-1.5=0.5"], "--min S/local/qwen2.5-coder-1.5=0.5: matches no"
     " cell: no model 'local/qwen2.5-coder-1.5' in the run (did you mean 'local/qwen2.5-coder-1.5b'?)"),
    (["--min", "S:clean@strict@repair=0.5"], "--min S:clean@strict@repair=0.5: expected MEASURE"),
    (["--specific", "freshnes_guard"], "--specific freshnes_guard: matches no mitigation of the run "
     "(did you mean 'freshness_guard'?); it holds: repair"),
    (["--specific", "strict"], "--specific strict: the baseline arm has no verdict"),
    ([], "nothing to check: give --min/--max thresholds"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "start"), BAD, ids=[" ".join(a) or "none" for a, _ in BAD])
def test_bad_input_is_one_line_naming_the_flag_and_exit_2(capsys, args, start) -> None:
    rc, out, err = gate(capsys, QWEN, *args)
    assert (rc, out, len(err)) == (2, [], 1), err
    assert err[0].startswith(f"error: {start}"), err[0]


def test_a_missing_or_partial_archive_is_bad_input(capsys, tmp_path) -> None:
    rc, out, err = gate(capsys, tmp_path / "nope", "--min", "S=0.5")
    assert (rc, out) == (2, []) and err == [f"error: RUN {tmp_path / 'nope'}: does not exist"]
    bare = tmp_path / "records.parquet"  # an archive file without its manifest
    bare.write_bytes((QWEN / archive.ARCHIVE).read_bytes())
    rc, out, err = gate(capsys, bare, "--min", "S=0.1")
    assert (
        rc == 2 and len(err) == 1 and "a partial archive" in err[0] and "--allow-partial" in err[0]
    )
    assert gate(capsys, bare, "--min", "S=0.1", "--allow-partial")[0] == 0


def test_verdict_gates_read_table_10(capsys) -> None:
    """``--no-over-broad`` on a run of every arm checks each mitigation but layerlab's own
    deliberately over-broad controls (which Table 10 flags, as it must), and says so."""
    rc, out, err = gate(capsys, MITIGATIONS, "--no-over-broad", "--verbose")
    assert rc == 0 and err == []
    block = "reference agents (deterministic baselines)"
    table = pd.read_csv(paths.ROOT / "paper" / "tables" / "table10.csv")
    expected = table[table["block"] == block].set_index("mitigation")["verdict"].to_dict()
    controls = ("always_abstain", "ignore_metadata")
    assert all(expected[c].startswith("over-broad") for c in controls)  # what they are for
    got = {}
    at = "δ = 10 pp (roles.yaml); P(conclusive) at this size "  # every verdict line states both
    for line in out[:-1]:
        body, _, tail = line.rpartition(" (--no-over-broad; ")
        assert tail.startswith(at), line
        head, verdict = body.split(": ", 1)
        verdict = verdict.split(" — ", 1)[0]  # the reason, when it is not specific
        status, _, name, where = head.split(" ", 3)
        assert where == f"[{block}]"
        got[name] = verdict
        assert status == ("FAIL" if verdict.startswith("over-broad") else "PASS")
    assert got == {k: v for k, v in expected.items() if k not in controls}  # Table 10's verdicts
    assert out[-1] == (
        f"gate passed on {MITIGATIONS}: all 9 checks passed (9 verdict); --no-over-broad left "
        "out always_abstain, ignore_metadata: layerlab's deliberately over-broad controls, in a "
        "run of every arm (roles.yaml over_broad_controls)"
    )
    rc, out, _ = gate(
        capsys, MITIGATIONS, "--specific", "freshness_guard", "--specific", "validity_resolution"
    )
    assert rc == 1
    assert len(out) == 2 and out[0].startswith(
        f"FAIL verdict validity_resolution [{block}]: ineffective — target gain's one-sided 95% "
        "upper bound +"
    )
    assert (
        "pp lies below δ 10 pp (--specific validity_resolution; δ = 10 pp (roles.yaml); "
        in (out[0])
    )
    assert "P(specific) at this size 0.00 if nothing changes off target (200 simulated" in out[0]
    assert out[1] == f"gate FAILED on {MITIGATIONS}: 1 of 2 checks failed (verdicts: 1 of 2 failed)"


def _arms_of(src: Path, out: Path, arms: tuple[str, ...]) -> Path:
    """A complete run folder of ``src``'s records of ``arms``: a run that named these arms."""
    keep = [r for r in archive.read_records(src / archive.ARCHIVE) if r.mitigation in arms]
    m = archive.read_manifest(src)
    for k in ("manifest_sha256", "files", "records"):
        m.pop(k, None)
    m.update(expected_records=len(keep), complete=True, mitigations=list(arms))
    archive.write_run(out, keep, m)
    return out


def test_no_over_broad_checks_a_control_the_run_names(capsys, tmp_path) -> None:
    """A run that names its arms (``--mitigation strict --mitigation freshness_guard
    --mitigation always_abstain``) has each one checked: the control it named fails."""
    run = _arms_of(MITIGATIONS, tmp_path / "run", ("strict", "freshness_guard", "always_abstain"))
    rc, out, err = gate(capsys, run, "--no-over-broad", "--n-boot", "200")
    assert (rc, err) == (1, [])
    assert [x.split(" [")[0] for x in out[:-1]] == ["FAIL verdict always_abstain"]
    assert out[-1] == f"gate FAILED on {run}: 1 of 2 checks failed (verdicts: 1 of 2 failed)"


USER_CHAIN = paths.ARCHIVES / "user_pipelines" / "my-rag-chain"


def test_inconclusive_is_not_a_pass_and_a_gate_can_require_power(capsys) -> None:
    """16 tasks at one unit: the guard's gain is shown but ±10 pp off target is not (below the
    floor of 25 tasks), so ``--specific`` fails, says why and how likely the verdict asked is at
    this size; ``--min-power`` fails on that probability; a --delta other than the specs' passes
    and is printed as a note."""
    rc, out, err = gate(capsys, USER_CHAIN, "--specific", "repair", "--n-boot", "500")
    assert rc == 1 and err == [] and len(out) == 2
    assert out[0].startswith("FAIL verdict repair [") and ": inconclusive — " in out[0]
    assert "not shown within ±10 pp" in out[0]
    assert (
        "specific needs at least 25 tasks with unchanged off-target outcomes (this run: 16)"
        in (out[0])
    )
    assert "inconclusive is not a pass (--specific repair; δ = 10 pp" in out[0]
    assert "P(specific) at this size 0.00" in out[0] and "`layerlab plan " in out[0]
    # δ is a setting: at ±50 pp the same guard is specific, and the log says δ was overridden
    rc, out, _ = gate(
        capsys, USER_CHAIN, "--specific", "repair", "--delta", "0.5", "--n-boot", "500", "--verbose"
    )
    assert rc == 0 and out[0].startswith("note: verdicts at δ = 50 pp set by --delta, not the ")
    assert out[1].startswith("PASS verdict repair [") and "specific (" in out[1]
    assert "δ = 50 pp" in out[1]
    rc, out, _ = gate(capsys, USER_CHAIN, "--min-power", "0.8", "--n-boot", "500")
    assert rc == 1 and all(x.startswith("FAIL power ") for x in out[:-1]), out
    assert "P(conclusive) at this size 0.00 < 0.80" in out[0] and "--min-power 0.8)" in out[0]
    assert out[-1].endswith("(powers: 11 of 11 failed)")


def test_specific_passes_at_40_tasks_for_a_guard_that_changes_nothing_else(
    capsys, tmp_path, monkeypatch
) -> None:
    """A deterministic target whose repair arm fixes schema drift and changes nothing else:
    at 40 tasks (above the floor of 25) ``gate --specific repair`` passes, and says the chance
    of that verdict at this size."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "fixtures"))  # user_targets
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:extractive", "--limit", "40",
            "--mitigation", "strict", "--mitigation", "repair", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    capsys.readouterr()
    rc, lines, err = gate(capsys, out, "--specific", "repair", "--n-boot", "500", "--verbose")
    assert (rc, err) == (0, []), lines
    assert lines[0].startswith("PASS verdict repair [targets (systems under test)]: specific (")
    assert "P(specific) at this size 1.00" in lines[0]


def test_a_verdict_gate_on_a_run_without_mitigation_arms_is_bad_input(
    capsys, strict_two_scenarios
) -> None:
    rc, out, err = gate(capsys, strict_two_scenarios, "--no-over-broad")
    assert (rc, out, len(err)) == (2, [], 1)
    assert err[0].startswith("error: --no-over-broad: ") and "only the baseline arm" in err[0]


def test_a_run_configuration_gate_section_gives_the_same_checks(capsys, tmp_path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "models:\n  - model: local/qwen2.5-coder-1.5b\n"
        "gate:\n  min: {S:clean: 0.7}\n  max:\n    GF:stale_index@repair: 0.1\n",
        encoding="utf-8",
    )
    rc, out, _ = gate(capsys, QWEN, "--config", cfg)
    assert rc == 1 and len(out) == 4
    assert out[0] == (
        f"FAIL S clean strict {UNIT}: 0.650 < 0.700 (52 of 80 records; {cfg}: gate.min: S:clean)"
    )
    # flags and the file's section add up
    rc, out, _ = gate(capsys, QWEN, "--config", cfg, "--min", "V=0")
    assert rc == 1 and out[-1].endswith("3 of 5 checks failed (thresholds: 3 of 5 failed)")
    # a run configuration with a gate section is still a valid run configuration
    spec = load_run_config(cfg, ["clean", "stale_index"], ["strict", "repair"], ["t1"])
    assert spec.gate == GateSpec(min={"S:clean": 0.7}, max={"GF:stale_index@repair": 0.1})


def test_a_bad_gate_section_is_one_line_with_its_file_and_line(capsys, tmp_path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "models:\n  - model: local/qwen2.5-coder-1.5b\ngate:\n  min: {Q:clean: 0.7}\n",
        encoding="utf-8",
    )
    rc, out, err = gate(capsys, QWEN, "--config", cfg)
    assert (rc, out) == (2, [])
    assert err == [f"error: --config {cfg}:4: gate.min.Q:clean: unknown measure 'Q'; known: "
                   "S, SR, GF, GF_cited, E, R, G, V, malformed, provider_error, pass^K, safe^K"]  # fmt: skip
    # run live --config refuses it before any run
    with pytest.raises(SpecError, match="unknown measure 'Q'"):
        load_run_config(cfg, ["clean"], ["strict"], ["t1"])
    cfg.write_text("gate:\n  max: {S: 2}\n", encoding="utf-8")
    rc, _, err = gate(capsys, QWEN, "--config", cfg)
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: --config {cfg}:2: gate.max.S")
    rc, _, err = gate(capsys, QWEN, "--config", tmp_path / "none.yaml")
    assert rc == 2 and err == [
        f"error: --config {tmp_path / 'none.yaml'}: expected a YAML file with a gate: section"
    ]


SURFACE = paths.ARCHIVES / "surface" / "reference"
REPLICATES = paths.LOCAL_MODEL_REPLICATES / "qwen2.5-coder-1.5b"


def test_a_scenario_at_an_intensity_is_its_variant_whichever_way_it_is_written(capsys) -> None:
    df = records_frame(SURFACE)
    cell = df[(df["scenario"] == "stale_index@0.25") & (df["model"] == "extractive")]
    want = results.rate(cell, "safe_resolution")
    for key in ("safe:stale_index@0.25", "SR:stale_index@λ=0.25", "safe:stale_index@0.250@strict"):
        rc, out, err = gate(capsys, SURFACE, "--min", f"{key}=0.9", "--verbose")
        lines = [x for x in out if "layerlab/extractive" in x]
        assert rc == 1 and err == [] and len(lines) == 1, (out, err)
        assert lines[0].startswith(f"FAIL SR stale_index@0.25 strict layerlab/extractive: "
                                   f"{want['rate']:.3f} < 0.900 ({want['k']} of 40 records")  # fmt: skip
    # @1 is the scenario itself; an intensity the run did not test matches no cell
    rc, out, _ = gate(capsys, SURFACE, "--max", "S:stale_index@1/extractive=0")
    assert rc == 0
    rc, _, err = gate(capsys, SURFACE, "--min", "safe:stale_index@0.3=0.9")
    assert rc == 2 and "no scenario 'stale_index@0.3' in the run" in err[0]
    rc, _, err = gate(capsys, SURFACE, "--min", "safe:stale_index@1.5=0.9")
    assert rc == 2 and err == ["error: --min safe:stale_index@1.5=0.9: scenario "
                               "'stale_index@1.5': expected <scenario>@<intensity in [0, 1]>"]  # fmt: skip


def test_a_pass_hat_k_threshold_reads_the_run_s_epochs(capsys) -> None:
    from layerlab.analysis import passk

    df = records_frame(REPLICATES)
    cell = df[(df["scenario"] == "clean") & (df["mitigation"] == "strict")]
    want = passk.cell(passk.task_counts(cell, "success"), 2)
    for key in ("pass^2:clean@strict", "S^2:clean@strict"):
        rc, out, err = gate(capsys, REPLICATES, "--min", f"{key}=0", "--verbose", "--strict-ci")
        assert rc == 0 and err == [] and len(out) == 2, (out, err)
        assert out[0] == (f"PASS pass^2 clean strict {UNIT}: {want['pass^k']:.3f} >= 0.000 "
                          f"({want['tasks']} tasks with >= 2 epochs, no interval; --min {key}=0)")  # fmt: skip
    rc, out, _ = gate(capsys, REPLICATES, "--min", "safe^3:clean@strict=1")
    assert rc == 1 and out[0].startswith(f"FAIL safe^3 clean strict {UNIT}: ")
    rc, _, err = gate(capsys, REPLICATES, "--min", "pass^4:clean=0.5")
    assert rc == 2 and err == ["error: --min pass^4:clean=0.5: pass^4 needs 4 epochs of a task; "
                               "the run has 3 (run live --epochs 4)"]  # fmt: skip
    rc, _, err = gate(capsys, REPLICATES, "--min", "GF^2:clean=0.5")
    assert rc == 2 and "unknown measure 'GF^2'; pass^k is pass^K (on S) or safe^K" in err[0]


def test_a_sweep_s_configuration_may_gate_a_variant_it_will_run(tmp_path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("models:\n  - model: local/qwen2.5-coder-1.5b\nscenarios: [clean, stale_index]\nintensity: [0, 0.25, 1]\n"
                   "gate:\n  min: {safe:stale_index@0.25: 0.9, pass^2:stale_index@0.25: 0.8}\n",
                   encoding="utf-8")  # fmt: skip
    spec = load_run_config(cfg, ["clean", "stale_index"], ["strict"], ["t1"])
    assert spec.gate is not None and set(spec.gate.min) == {
        "safe:stale_index@0.25",
        "pass^2:stale_index@0.25",
    }
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("0.25, 1", "1"), encoding="utf-8")
    with pytest.raises(SpecError, match="no scenario 'stale_index@0.25' in the run"):
        load_run_config(cfg, ["clean", "stale_index"], ["strict"], ["t1"])


def test_the_real_model_s_surface_gated_as_the_issue_writes_it(capsys) -> None:
    from layerlab.analysis import passk

    run = paths.LOCAL_MODEL_SURFACE / "qwen2.5-coder-1.5b"
    df = records_frame(run)
    cell = df[df["scenario"] == "stale_index@0.25"]
    hat = passk.cell(passk.task_counts(cell, "success"), 4)
    safe = results.rate(cell, "safe_resolution")
    rc, out, err = gate(capsys, run, "--min", "safe:stale_index@0.25=0.9",
                        "--min", "pass^4:stale_index@0.25=0.8")  # fmt: skip
    assert (rc, err) == (1, []) and len(out) == 3
    assert out[0].startswith(f"FAIL SR stale_index@0.25 strict {UNIT}: {safe['rate']:.3f} < 0.900 "
                             f"({safe['k']} of 64 records")  # fmt: skip
    assert out[1] == (f"FAIL pass^4 stale_index@0.25 strict {UNIT}: {hat['pass^k']:.3f} < 0.800 "
                      "(16 tasks with >= 4 epochs, no interval; --min pass^4:stale_index@0.25=0.8)")  # fmt: skip

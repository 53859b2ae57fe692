"""Findings a team can act on (issue 31, item 5): a target run leads with what *the system* did per
layer (the contract arms shown as the harness's), correct abstentions are safe resolutions in
every diagnostics table, each failing layer's line comes from the specs (change a spec text and
the line follows), ``--mitigation all`` runs every matrix arm, and ``compare --matrix`` shows
safe resolution on unsafe scenarios."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.analysis import compare, layers, results
from layerlab.analysis.records import records_frame
from layerlab.cli import app, main
from layerlab.faults.roles import load_roles
from layerlab.harness import deterministic
from layerlab.mitigations import load_mitigations
from layerlab.reporting.run import findings, overview, report

runner = CliRunner()
CHAIN = paths.USER_PIPELINES / "my-rag-chain"  # a committed target run with every matrix arm
TASKS = ("finance-01-q1", "it_ops-01-q2", "pto-01-q1")


@pytest.fixture(scope="module")
def chain() -> pd.DataFrame:
    return records_frame(CHAIN)


@pytest.fixture(scope="module")
def found(chain: pd.DataFrame) -> dict:
    return layers.unit_findings(chain, n_boot=200)


def _layer(found: dict, scenario: str) -> dict:
    return next(e for e in found["layers"] if e["scenario"] == scenario)


# --- per-layer findings of the committed chain --------------------------------------------------


def test_each_layer_says_what_the_system_did_and_what_its_guard_changes(found: dict) -> None:
    assert found["unit"] == "target/my-rag-chain" and found["baseline"] == "strict"
    stale = _layer(found, "stale_index")
    assert (stale["resolved"], stale["n"], stale["answered"]) == (0, 16, 16)
    assert stale["diagnostics"] == {"freshness": 15, "retrieval": 1}
    assert findings.layer_line(stale).startswith(  # the layer, its count and what to do first
        "freshness (stale_index): not resolved in 16 of 16 questions — drop results whose status "
        "is not current. How they failed: answered from a superseded version in 16 (diagnostics: "
        "freshness 15, retrieval 1); it does not check `status`/`effective_year`."
    )
    g = stale["guard"]
    assert g["arm"] == "freshness_guard" and g["measured"] and (g["resolved"], g["n"]) == (16, 16)
    assert "in this run 0 of 16 → 16 of 16 safely resolved" in findings.guard_line(g, stale)
    # the verdict is the specificity matrix's, not a copy of its rule
    from layerlab.analysis import specificity

    mx = specificity.matrix(records_frame(CHAIN), n_boot=200, seed=0)
    verdict = mx.summary.set_index("mitigation").loc["freshness_guard", "verdict"]
    assert g["verdict"] == verdict and f"verdict {verdict}" in findings.guard_line(g, stale)
    # failing layers first, worst first; the ones that hold after them
    holds = [e["scenario"] for e in found["layers"] if not e["failed"]]
    assert holds == ["missing_tool_output", "permission_denied"]
    assert [e["scenario"] for e in found["layers"][-2:]] == holds


def test_correct_abstentions_are_resolutions_not_failures(found: dict, chain: pd.DataFrame) -> None:
    # the chain abstains on every unavailable / denied tool: its layers hold
    for s, layer in (("missing_tool_output", "availability"), ("permission_denied", "authorisation")):
        e = _layer(found, s)
        assert (e["resolved"], e["failed"], e["diagnostics"]) == (16, 0, {})
        assert e["guard"] is None
        assert findings.layer_line(e) == (
            f"{layer} ({s}): holds — a structured non-answer in 16 of 16 questions "
            "(safe resolutions, not failures)."
        )
    # results.json's diagnostics and the report's table: no availability/authorisation failure
    res = results.summarize(chain)
    (m,) = res["models"]
    strict = m["diagnostics"]["strict"]
    assert "availability" not in strict and "authorisation" not in strict
    assert strict["safe_non_answer"] == 16 + 16 + 1  # and one abstention on partial_timeout
    assert sum(strict.values()) == m["arms"]["strict"]["records"]
    table = report._diagnostic_table(res).set_index("diagnostic")
    assert table.loc["safe_non_answer", "my-rag-chain strict"] == 33
    assert "availability" not in table.index or table.loc["availability"].sum() == 0
    # the archive itself is unchanged: its diagnostic keeps the layer the fault hit
    b = chain[(chain["mitigation"] == "strict") & (chain["scenario"] == "missing_tool_output")]
    assert set(b["diagnostic"]) == {"availability"}


def test_the_deterministic_summary_counts_correct_abstentions_as_resolved() -> None:
    recs = archive.read_records(paths.ARCHIVES / "reference_agents" / archive.ARCHIVE)
    cautious = [r for r in recs if r.model == "cautious" and r.mitigation == "strict"]
    d = deterministic.summarize(cautious)["diagnostics"]
    unsafe = {r.scenario for r in cautious if not r.answerable}
    for s, per in d.items():
        safe = sum(r.safe_resolution and not r.success for r in cautious if r.scenario == s)
        assert per["strict"].get("safe_non_answer", 0) == safe, s
        if s in unsafe:  # every abstention there is its safe resolution, none a failure
            assert "abstained" not in per["strict"], s
    assert d["stale_index"]["strict"]["safe_non_answer"] > 0


def test_the_contract_arms_are_the_harness_not_the_system(found: dict) -> None:
    assert all(e["layer"] != "tool_contract" for e in found["layers"])
    (h,) = found["harness"]
    assert h["scenario"] == "schema_drift"
    assert {a: (c["success"], c["n"]) for a, c in h["arms"].items()} == {
        "strict": (0, 16),
        "repair": (10, 16),
    }
    line = findings.harness_line(h)
    assert line.startswith("Harness, not the system — tool_contract (schema_drift): under strict")
    lines = findings.layer_lines(found)
    assert lines[-1] == line  # after the system's layers and its fault-free control
    # the chain fails without any fault (10 of 16): that finding leads, with its dominant failure
    assert lines[0] == findings.control_line(found["control"]) == (
        "Without faults (clean): correct in 10 of 16 questions; not resolved in 6 — the system "
        "fails without any fault: most of these answered wrongly; in 6 of 6 wrong answers it "
        "gave a wrong value that a document it was given states (another version, session or "
        "policy). How they failed: answered wrongly in 6 (diagnostics: freshness 3, reader 3)."
    )


def test_the_report_leads_with_the_systems_layers(chain: pd.DataFrame) -> None:
    res = results.summarize(chain)
    (f,) = findings.findings(res, chain)
    assert f.system[0].startswith("Without faults (clean): correct in 10 of 16 questions;")
    assert f.system[1].startswith("freshness (stale_index): not resolved in 16 of 16 questions — "
                                  "drop results whose status is not current. How they failed: "
                                  "answered from a superseded version in 16")  # fmt: skip
    assert any(x.startswith("Harness, not the system") for x in f.harness)
    assert any(x.startswith("Repair raises S on schema_drift") for x in f.harness)
    assert not any("schema_drift" in x and "fails" in x for x in f.system + f.sentences)
    page = report.build([CHAIN])
    lead = page.index("what the system did, layer by layer")
    assert lead < page.index("contract arms (layerlab") < page.index("Over every arm")
    assert lead < page.index("<h2>Results by model</h2>")


# --- lines from the specs -----------------------------------------------------------------------


def test_a_findings_line_follows_the_spec_texts(chain: pd.DataFrame, tmp_path: Path) -> None:
    roles = yaml.safe_load(paths.ROLE_SPEC.read_text(encoding="utf-8"))
    roles["findings"]["freshness"]["did"] = "quoted a retired policy"
    roles["findings"]["freshness"]["lacks"] = "it never reads the `status` field"
    roles["findings"]["session_state"]["guard"] = "always_abstain"
    rp = tmp_path / "roles.yaml"
    rp.write_text(yaml.safe_dump(roles), encoding="utf-8")
    spec = yaml.safe_load(paths.MITIGATION_SPEC.read_text(encoding="utf-8"))
    for e in spec["mitigations"]:
        if e["name"] == "freshness_guard":
            e["description"] = "keep only current results"
    mp = tmp_path / "mitigations.yaml"
    mp.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    got = layers.unit_findings(chain, spec=load_mitigations(mp), roles=load_roles(rp), n_boot=200)
    stale = _layer(got, "stale_index")
    line = findings.layer_line(stale)
    assert line.startswith(
        "freshness (stale_index): not resolved in 16 of 16 questions — it never reads the "
        "`status` field. How they failed: quoted a retired policy in 16 (diagnostics: "
    )
    assert findings.guard_line(stale["guard"], stale).startswith(
        "Its guard `freshness_guard` (keep only current results)"
    )
    assert _layer(got, "wrong_session")["guard"]["arm"] == "always_abstain"
    # a layer the roles say nothing of gets the scenario DSL's expected behaviour
    from layerlab.faults.scenario import load_scenarios

    del roles["findings"]["metadata"]
    (rp := tmp_path / "roles2.yaml").write_text(yaml.safe_dump(roles), encoding="utf-8")
    bare = _layer(layers.unit_findings(chain, roles=load_roles(rp), n_boot=200), "corrupted_metadata")
    expected = load_scenarios()["corrupted_metadata"].spec.expected_behaviour
    line = findings.layer_line(bare)
    assert bare["guard"] is None and f" — expected: {expected}. How they failed: " in line
    assert line.startswith("metadata (corrupted_metadata): not resolved in 16 of 16")


def test_a_guard_without_records_on_its_scenario_says_so(chain: pd.DataFrame) -> None:
    part = chain[~((chain["mitigation"] == "freshness_guard") & (chain["scenario"] == "stale_index"))]
    got = layers.unit_findings(part, n_boot=200)
    e = _layer(got, "stale_index")
    line = findings.guard_line(e["guard"], e)
    assert not e["guard"]["measured"] and "no record paired with the baseline on stale_index" in line


def test_a_guard_not_in_the_run_says_how_to_measure_it(chain: pd.DataFrame) -> None:
    got = layers.unit_findings(chain[chain["mitigation"].isin(["strict", "repair"])])
    assert got["guards_measured"] is False
    e = _layer(got, "wrong_session")
    line = findings.guard_line(e["guard"], e)
    assert "`session_isolation`" in line and "add `--mitigation session_isolation` (or " in line


def test_a_layers_guard_is_the_runs_own_plugin_guard(chain: pd.DataFrame, tmp_path: Path) -> None:
    """A plug-in's guard of a layer (``tenant_pin``, on session_state) is named as the layer's
    guard when the run holds it and not the roles' guard, whether the plug-in is importable (its
    arms file registered) or not (the run's own definitions, as the manifest keeps them)."""
    from layerlab import mitigations
    from layerlab.mitigations.book import ArmBook, ArmDefinition, shipped

    pinned = chain[chain["mitigation"] != "session_isolation"]
    pin = chain[chain["mitigation"] == "session_isolation"].assign(mitigation="tenant_pin")
    df = pd.concat([pinned, pin], ignore_index=True)
    d = ArmDefinition("tenant_pin", ("session_isolation",), ("session_state",), ("tool_output",),
                      False, True, (("tenant-pin", "0.1"),))  # fmt: skip
    book = ArmBook("strict", {**shipped().arms, "tenant_pin": d}, "the run's manifest")
    gone = _layer(layers.unit_findings(df, n_boot=200, arms=book), "wrong_session")
    arms = tmp_path / "arms.yaml"
    arms.write_text("mitigations:\n  - name: tenant_pin\n    kind: session_isolation\n"
                    "    description: Keep only the request's tenant's documents.\n")  # fmt: skip
    mitigations.ARM_FILES.register(arms, "zz_tenant_pin")
    try:
        here = _layer(layers.unit_findings(df, n_boot=200), "wrong_session")
    finally:
        mitigations.ARM_FILES._items.pop("zz_tenant_pin")
    want = _layer(layers.unit_findings(chain, n_boot=200), "wrong_session")["guard"]
    assert want["arm"] == "session_isolation" and want["measured"]
    for e, said in ((gone, "a plug-in arm of kind session_isolation on session_state (from "
                     "tenant-pin 0.1)"), (here, "Keep only the request's tenant's documents")):  # fmt: skip
        g = e["guard"]
        assert g["arm"] == "tenant_pin" and g["measured"], g
        assert (g["resolved"], g["n"], g["effect"]) == (want["resolved"], want["n"], want["effect"])
        line = findings.guard_line(g, e)
        assert line.startswith(f"Its guard `tenant_pin` ({said}") and "not in this run" not in line
    # a layer whose roles' guard the run holds keeps it; an over-broad built-in arm is never named
    assert _layer(layers.unit_findings(df, n_boot=200, arms=book), "stale_index")["guard"][
        "arm"
    ] == "freshness_guard"
    only = df[df["mitigation"].isin(["strict", "repair", "always_abstain"])]
    e = _layer(layers.unit_findings(only, n_boot=200, arms=book), "wrong_session")
    assert e["guard"]["arm"] == "session_isolation" and e["guard"]["state"] == "absent"


def test_roles_findings_are_checked(tmp_path: Path) -> None:
    from layerlab.corpus.spec import SpecError

    roles = yaml.safe_load(paths.ROLE_SPEC.read_text(encoding="utf-8"))
    roles["findings"]["freshnes"] = roles["findings"].pop("freshness")
    roles["findings"]["metadata"]["guard"] = "metadata_guard"
    roles["findings"]["session_state"]["diagnosed"] = ["sesion_state"]
    rp = tmp_path / "roles.yaml"
    rp.write_text(yaml.safe_dump(roles), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_roles(rp)
    text = str(exc.value)
    assert "unknown layer 'freshnes'" in text and "unknown mitigation 'metadata_guard'" in text
    assert "findings.session_state.diagnosed[0]: unknown layer 'sesion_state'" in text


def test_a_transport_finding_has_its_layer_and_guard_from_the_transport_specs(tmp_path: Path) -> None:
    from layerlab.corpus.spec import SpecError

    f = load_roles().findings["transport"]  # the layer of scenarios_transport.yaml
    assert f.guard == "transport_retry" and f.guard not in load_mitigations().arms
    roles = yaml.safe_load(paths.ROLE_SPEC.read_text(encoding="utf-8"))
    roles["findings"]["transport"]["guard"] = "transport_retyr"
    roles["findings"]["transprt"] = dict(roles["findings"]["transport"])
    rp = tmp_path / "roles.yaml"
    rp.write_text(yaml.safe_dump(roles), encoding="utf-8")
    with pytest.raises(SpecError) as exc:
        load_roles(rp)
    lines = str(exc.value).splitlines()
    guard = next(x for x in lines if "transport_retyr" in x)
    assert "mitigations.yaml" in guard and "mitigations_transport.yaml" in guard
    layer = next(x for x in lines if "'transprt'" in x)
    assert "'transport'" in layer and "scenarios_transport.yaml" in layer


def swallows(req) -> dict:
    """A team's target that answers from memory when its search call fails on the wire."""
    try:
        obs = req.search(req.question)
    except (ConnectionError, TimeoutError, PermissionError):
        return {"status": "answered", "answer": "30 days", "citations": []}
    from layerlab.corpus.extract import extract

    for res in obs.get("results") or ():
        span = extract(req.question, req.answer_kind, res["text"])
        if span is not None:
            return {"status": "answered", "answer": span, "citations": [res["doc_id"]]}
    return {"status": "abstained", "reason": "nothing found"}


def test_a_target_under_a_transport_fault_gets_the_transport_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:tests.reporting.run.test_findings:swallows",
            "--target-name", "sw", "--tasks", ",".join(TASKS),
            "--scenarios", str(paths.TRANSPORT_SCENARIO_SPEC), "--scenario", "rate_limited",
            "--scenario", "service_outage", "--mitigation", "strict",
            "--mitigation", "transport_retry", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    words = load_roles().findings["transport"]
    (f,) = json.loads((out / results.RESULTS).read_text())["findings"]
    df = records_frame(out)
    for scenario in ("rate_limited", "service_outage"):
        e = _layer(f, scenario)
        base = df[(df["mitigation"] == "strict") & (df["scenario"] == scenario)]
        guarded = df[(df["mitigation"] == "transport_retry") & (df["scenario"] == scenario)]
        # the words are the roles' transport finding; the counts are the records'
        assert e["layer"] == "transport" and e["did"] == [words.did]
        assert e["n"] == len(base) == 3 and e["failed"] == int((~base["safe_resolution"]).sum()) == 3
        assert e["kinds"]["answered"] == int(base["answered"].sum()) == 3
        line = findings.layer_line(e)
        assert f"transport ({scenario}): not resolved in 3 of 3 questions — retry a 429" in line
        assert f"{words.did} in 3 (diagnostics: availability 3)" in line
        assert f"  - {line}" in said
        g = e["guard"]  # the guard, measured: the arm resolves every question the system lost
        assert g["arm"] == "transport_retry" and g["state"] == "measured"
        assert g["resolved"] == int(guarded["safe_resolution"].sum()) == 3
        assert "bounded retry of a call that failed on the wire" in g["description"]


# --- a target run: results.json and the terminal ------------------------------------------------


def test_a_target_runs_summary_and_results_json_lead_with_its_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "fixtures"))  # user_targets
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:extractive", "--target-name", "mine",
            "--tasks", ",".join(TASKS), "--scenario", "clean", "--scenario", "stale_index",
            "--scenario", "missing_tool_output", "--scenario", "schema_drift",
            "--mitigation", "strict", "--mitigation", "repair", "--mitigation", "freshness_guard",
            "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    head = said.index("What target/mine did, layer by layer (baseline arm strict")
    assert head < said.index("Results by arm (strict/repair: the harness's contract")
    assert said.index("  - freshness (stale_index): ") < said.index("  - Harness, not the system")
    res = json.loads((out / results.RESULTS).read_text())
    (f,) = res["findings"]
    assert [e["scenario"] for e in f["layers"]] == ["stale_index", "missing_tool_output"]
    assert [e["scenario"] for e in f["harness"]] == ["schema_drift"]
    assert f["control"]["scenario"] == "clean" and f["guards_measured"]
    stale = f["layers"][0]
    assert stale["guard"]["arm"] == "freshness_guard" and stale["guard"]["measured"]
    # the extractive target abstains on a tool error: a resolution, not an availability failure
    assert f["layers"][1]["failed"] == 0 and "holds" in findings.layer_line(f["layers"][1])
    assert "availability" not in res["models"][0]["diagnostics"]["strict"]
    # the same bytes again from the folder (seeded)
    before = (out / results.RESULTS).read_bytes()
    results.write_results(out)
    assert (out / results.RESULTS).read_bytes() == before
    # the printing reads only results.json
    lines: list[str] = []
    overview.print_run_results(out, lines.append)
    assert lines[1].startswith("What target/mine did")


def test_a_model_run_has_no_findings_key(tmp_path: Path) -> None:
    shutil.copytree(paths.LOCAL_MODEL_ARCHIVES / "qwen2.5-coder-1.5b", tmp_path / "q")
    assert "findings" not in results.for_run(tmp_path / "q")


# --- --mitigation all ---------------------------------------------------------------------------


def test_mitigation_all_is_the_baseline_and_every_matrix_arm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = load_mitigations()
    every = (spec.baseline, *spec.matrix_arms)
    assert spec.expand(["all"]) == every
    assert spec.expand(["repair", "all"]) == ("repair", *[a for a in every if a != "repair"])
    assert spec.expand(None) == ()
    out = tmp_path / "run"
    args = ["run", "live", "-m", "layerlab/extractive", "--tasks", TASKS[0], "--scenario",
            "clean", "--mitigation", "all", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert tuple(archive.read_manifest(out)["mitigations"]) == every
    recs = archive.read_records(out / archive.ARCHIVE)
    assert sorted({r.mitigation for r in recs}) == sorted(every) and len(recs) == len(every)


def test_all_is_a_reserved_arm_name(tmp_path: Path) -> None:
    from layerlab.corpus.spec import SpecError

    spec = yaml.safe_load(paths.MITIGATION_SPEC.read_text(encoding="utf-8"))
    spec["mitigations"].append({"name": "all", "kind": "always_abstain"})
    mp = tmp_path / "mitigations.yaml"
    mp.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    with pytest.raises(SpecError, match="'all' is reserved"):
        load_mitigations(mp)


# --- compare --matrix ---------------------------------------------------------------------------


def test_compare_matrix_shows_safe_resolution_on_unsafe_scenarios(tmp_path: Path) -> None:
    js = tmp_path / "m.json"
    res = runner.invoke(app, ["compare", str(CHAIN), "--matrix", "--n-boot", "200", "--json", str(js)])
    assert res.exit_code == 0, res.output
    assert "stale_index safe 0/16 → 16/16" in res.output  # S there is 0 vs 0
    assert "schema_drift S 0/16 → 10/16" in res.output  # an answerable scenario: S
    assert "judged by its own outcome" in res.output
    (block,) = json.loads(js.read_text()).values()
    on = {(r["mitigation"], r["scenario"]): r for r in block["on_target"]}
    r = on[("freshness_guard", "stale_index")]
    assert (r["outcome"], r["baseline_k"], r["arm_k"], r["arm_n"]) == ("safe", 0, 16, 16)
    df = records_frame(CHAIN)
    s = df[(df["scenario"] == "stale_index") & df["mitigation"].isin(["strict", "freshness_guard"])]
    assert s["success"].sum() == 0  # what the default outcome S would have compared
    (mx,) = compare.matrix_summary(CHAIN, n_boot=200).values()
    assert len(compare.matrix_outcomes(mx, df)) == int(mx.cells["target"].sum())


def test_compare_matrix_refuses_an_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", str(CHAIN), "--matrix", "--outcome", "success"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--outcome success: not with --matrix" in err


def test_every_roles_lacks_gives_an_action_first() -> None:
    # the head of a failing layer's finding says what to do: a field value such as
    # `status: partial` inside backticks does not split the action
    for layer, f in load_roles().findings.items():
        act, check = findings._action(f.lacks)
        assert act and act.count("`") % 2 == 0 and check.count("`") % 2 == 0, (layer, act, check)
        assert " ".join(x for x in (check, act) if x) in f.lacks.replace(": ", " ") or act in f.lacks
    act, check = findings._action(load_roles().findings["completeness"].lacks)
    assert (act, check) == ("fetch again or abstain",
                            "it does not check `status: partial` or `truncated`")  # fmt: skip

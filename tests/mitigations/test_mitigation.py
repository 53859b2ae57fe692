"""Mitigations as registered parts: the spec, the harness steps, the specificity matrix."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.analysis import specificity
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.corpus.spec import SpecError, spec_hash
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.harness import live
from layerlab.harness.prepare import prepare
from layerlab.harness.step import admit, evaluate
from layerlab.mitigations import (
    KINDS,
    MAX_ATTEMPTS,
    Act,
    Call,
    Mitigation,
    load_mitigations,
    register,
)
from layerlab.reporting.run import overview
from layerlab.system.reader import ReaderInput

runner = CliRunner()
LAYER_MITIGATIONS = (
    "freshness_guard",
    "availability_retry",
    "completeness_guard",
    "access_abstention",
    "metadata_integrity",
    "session_isolation",
)


@pytest.fixture(scope="module")
def committed() -> specificity.Matrix:
    return specificity.matrix(specificity.matrix_frame(), n_boot=2000)


def test_mitigation_list_shows_the_registered_mitigations_with_their_layers() -> None:
    res = runner.invoke(app, ["mitigation", "list"])
    assert res.exit_code == 0, res.output
    spec = load_mitigations()
    shown = [n for n in spec.arms if n in res.output]
    assert len(shown) >= 9 and set(LAYER_MITIGATIONS) <= set(shown)
    for layer in ("freshness", "availability", "authorisation", "session_state", "metadata"):
        assert layer in res.output
    res = runner.invoke(app, ["mitigation", "list", "--kinds"])
    assert res.exit_code == 0 and "always_abstain" in res.output and "ignore_metadata" in res.output


def test_spec_problems_are_reported_with_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text(
        textwrap.dedent(
            """\
            baseline: freshness_guard
            mitigations:
              - name: strict
                kind: contract
              - name: freshness_guard
                kind: freshness_guard
                params: {requeries: 1, deadline: 3}
              - name: speedy
                kind: no_such_kind
            stacks:
              - name: both
                members: [strict, ghost]
            """
        )
    )
    with pytest.raises(SpecError) as exc:
        load_mitigations(bad)
    text = str(exc.value)
    assert "unknown mitigation kind 'no_such_kind'" in text
    assert "unknown parameter" in text and "deadline" in text
    assert "unknown mitigation 'ghost'" in text
    assert "must name a contract entry" in text
    assert str(bad) in text
    res = runner.invoke(app, ["mitigation", "list", str(bad)])
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_retries_are_bounded_and_transient_faults_recover(
    tmp_path: Path, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    scen = load_scenarios()
    task = corpus.tasks[0]
    # persistent outage: bounded retries, then a structured refusal (safe), never an answer
    prep = prepare(corpus, scen["missing_tool_output"])
    g = admit(task, prep, "availability_retry")
    assert g.inp is None and g.refusal and g.attempts == 3 and g.waited_s > 0
    rec, lab = evaluate(
        task, key, corpus, prep, "availability_retry", g, None,
        provider="p", model="m", run_id="r", prompt_hash="",
    )  # fmt: skip
    assert lab.abstained and lab.safe_resolution and rec.stage == "refused"
    # the baseline ends at the same outage with no refusal: a failure, not safe
    g0 = admit(task, prep, load_mitigations().baseline)
    _, lab0 = evaluate(
        task, key, corpus, prep, "strict", g0, None,
        provider="p", model="m", run_id="r", prompt_hash="",
    )  # fmt: skip
    assert not lab0.safe_resolution and lab0.diagnostic == "availability"
    # a transient outage (the DSL says it lasts one call, so the scenario is answerable)
    text = paths.SCENARIO_SPEC.read_text().replace(
        """    answerable: false
    faults:
      - op: drop_output
        params: {form: "null"}""",
        """    answerable: true
    faults:
      - op: drop_output
        params: {form: "null"}
        lasts: 1""",
    )
    p = tmp_path / "scenarios.yaml"
    p.write_text(text)
    transient = {"missing_tool_output": load_scenarios(p)["missing_tool_output"]}
    recs = harness.run_deterministic(
        corpus, key, transient, (load_mitigations().baseline, "availability_retry")
    )
    by = pd.DataFrame([r.__dict__ for r in recs]).groupby("mitigation")["success"].mean()
    assert by["strict"] == 0.0 and by["availability_retry"] > 0.9
    # a lasts: on an index-stage fault is refused by the DSL check
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        paths.SCENARIO_SPEC.read_text().replace(
            "      - op: serve_superseded\n", "      - op: serve_superseded\n        lasts: 1\n"
        )
    )
    with pytest.raises(SpecError, match="only tool- and transport-stage faults can be transient"):
        load_scenarios(bad)
    assert MAX_ATTEMPTS >= 3


def test_the_committed_matrix_credits_each_layer_mitigation_and_flags_the_over_broad(
    committed: specificity.Matrix,
) -> None:
    s = committed.summary.set_index("mitigation")
    c = committed.cells.set_index(["mitigation", "scenario"])
    for name in (*LAYER_MITIGATIONS, "repair", "controls"):
        assert s.loc[name, "verdict"] == "specific", name
        assert s.loc[name, "target gain low"] > 0, name
        off = c.loc[name][~c.loc[name]["target"]]
        assert (off["ci_high"] >= 0).all(), name  # no off-target cell moves the harmful way
        # nor does any off-target band exclude zero in either direction
        assert ((off["band_low"] <= 0) & (off["band_high"] >= 0)).all(), name
        # and every off-target band is shown within ±δ (240 tasks: the equivalence holds)
        assert (off["band_low"] >= -specificity.DELTA).all(), name
        assert (off["band_high"] <= specificity.DELTA).all(), name
    # no cell, constant ones included, has an interval of width zero
    assert (committed.cells["ci_high"] > committed.cells["ci_low"]).all()
    assert s.loc["always_abstain", "verdict"] == "over-broad (harm)"
    assert c.loc[("always_abstain", "clean"), "estimate"] < -0.5
    assert s.loc["ignore_metadata", "verdict"].startswith("over-broad")
    assert "clean" in s.loc["ignore_metadata", "off-target harm"]
    # the evidence layer has no headroom here: the reported retriever already prefers the valid
    # version, so validity-aware conflict resolution changes nothing and is called ineffective
    assert s.loc["validity_resolution", "verdict"] == "ineffective"
    assert bool(c.loc[("validity_resolution", "conflicting_evidence"), "exactly_zero"])


def test_contract_arms_are_unchanged_by_the_refactor() -> None:
    """The strict and repair cells of the mitigation archive equal the reference archive's
    extractive agent, label for label (Tables 2, 4, 5 rest on them)."""
    m = specificity.matrix_frame()
    ref = pd.DataFrame(
        [
            r.__dict__
            for r in archive.read_records(paths.ARCHIVES / "reference_agents" / archive.ARCHIVE)
        ]
    )
    ref = ref[ref["model"] == "extractive"]
    cols = ["scenario", "mitigation", "task_id", *archive.LABELS, "diagnostic"]
    keys = ["scenario", "mitigation", "task_id"]
    a = m[m["mitigation"].isin(harness.contract_arms())][cols].sort_values(keys).reset_index(drop=True)
    b = ref[cols].sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_committed_mitigation_archive_is_current(tmp_path: Path) -> None:
    m = archive.read_manifest(specificity.ARCHIVE_DIR)
    harness.run_mitigation_archive(tmp_path / "run")
    assert overview.same_records(tmp_path / "run", specificity.ARCHIVE_DIR), "run `make archives`"
    assert m["spec_hashes"]["mitigations"] == spec_hash(paths.MITIGATION_SPEC)


def test_a_new_mitigation_is_a_class_and_a_yaml_entry(tmp_path: Path) -> None:
    """Extension cost: a registered class plus a YAML entry, under 50 lines, no edit elsewhere,
    and it gets its own row in the matrix."""

    class ToyGuard(Mitigation):
        """Toy: refuse when the tool reports partial output, never retry."""

        kind = "toy_partial_refusal"
        layers = ("completeness",)
        stage = "reader_input"
        actions = ("pass", "refuse")

        def on_input(self, inp: ReaderInput, call: Call) -> Act:
            return Act("refuse", "partial") if inp.tool_status != "ok" else Act("pass")

    entry = textwrap.dedent(
        """\
        baseline: strict
        mitigations:
          - name: strict
            kind: contract
          - name: toy
            kind: toy_partial_refusal
        """
    )
    assert len(inspect.getsource(ToyGuard).splitlines()) + len(entry.splitlines()) < 50
    register(ToyGuard)
    try:
        spec_path = tmp_path / "mitigations.yaml"
        spec_path.write_text(entry)
        man = harness.run_mitigation_archive(tmp_path / "run", mitigations_path=spec_path)
        assert man["mitigations"] == ["strict", "toy"]
        df = specificity.matrix_frame([tmp_path / "run"])
        mx = specificity.matrix(df, load_mitigations(spec_path), n_boot=500)
        row = mx.summary.set_index("mitigation").loc["toy"]
        assert row["targets"] == "partial_timeout" and row["verdict"] == "specific"
    finally:
        KINDS._items.pop("toy_partial_refusal", None)


def test_recompute_writes_table10(tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "recompute",
            str(paths.ARCHIVES / "reference_agents"),
            "--out",
            str(tmp_path),
            "--n-boot",
            "500",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "table10.csv").exists() and (tmp_path / "table10_cells.tex").exists()
    t10 = pd.read_csv(tmp_path / "table10.csv").set_index("mitigation")
    assert t10.loc["always_abstain", "verdict"] == "over-broad (harm)"
    assert specificity.VERDICT_RULE in (tmp_path / "table10.md").read_text()


def test_a_garbage_replying_model_never_resolves_an_unsafe_scenario_safely(
    tmp_path: Path, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    """A failure is not a refusal: a model whose every reply is unparseable scores 0% safe
    resolution on every unsafe scenario (and its records are labelled malformed_reply)."""
    from layerlab.models import agents
    from layerlab.models.llm import import_litellm

    litellm = import_litellm()
    agents.register()

    class Garbage(litellm.CustomLLM):  # type: ignore[name-defined]
        def _reply(self, model: str) -> object:
            return litellm.ModelResponse(
                model=model,
                choices=[{"index": 0, "message": {"role": "assistant", "content": "lorem {ipsum"}}],
            )

        def completion(self, model: str, *a: object, **k: object) -> object:
            return self._reply(model)

        async def acompletion(self, model: str, *a: object, **k: object) -> object:
            return self._reply(model)

    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != "garbage"],
        {"provider": "garbage", "custom_handler": Garbage()},
    ]
    scen = load_scenarios()
    cfg = live.LiveConfig(
        models=("garbage/noise",),
        scenarios=tuple(scen),
        task_ids=tuple(t.task_id for t in corpus.tasks[:6]),
    )
    res = live.run_live(
        corpus, key, scen, cfg, tmp_path / "run", scenario_hash=spec_hash(paths.SCENARIO_SPEC)
    )
    assert res.complete
    recs = archive.read_records(tmp_path / "run" / archive.ARCHIVE)
    unsafe = [n for n, s in scen.items() if not s.spec.answerable]
    for name in unsafe:
        cell = [r for r in recs if r.scenario == name]
        assert cell and not any(r.safe_resolution for r in cell), name
    reached = [r for r in recs if r.reached_reader]
    assert reached and all(r.diagnostic == "malformed_reply" for r in reached)
    # Tables 4 and 9 report the failure shares as columns; the table's notes count them per unit
    from layerlab.reporting.paper import tables

    df = pd.DataFrame([r.__dict__ for r in recs])
    t4, t9 = tables.table4(df), tables.table9(df)
    assert t4.set_index("scenario").loc["clean", "malformed"] == 1.0
    assert t9["malformed"].iloc[0] > 0 and (t9["provider error"] == 0).all()
    n_bad = sum(r.diagnostic == "malformed_reply" for r in recs)
    assert f"garbage/noise {n_bad}/0" in str(t4.attrs["notes"])


# --- the verdict: off-target changes in either direction, judged by the simultaneous band --------


def _synthetic_arm(effects: dict[str, float], seed: int, n_units: int = 2) -> pd.DataFrame:
    """A synthetic archive of the strict baseline and ``freshness_guard`` (target: stale_index)
    over every DSL scenario: ``effects`` on the judged outcome, the rest noisy zeros."""
    from layerlab.analysis import stats, synthetic

    setting = synthetic.Setting(
        n_units=n_units,
        n_policies=80,
        variants=1,
        effects={s: effects.get(s, 0.0) for s in load_scenarios()},
        unit_effect_sd=0.0,
        task_effect_sd=0.0,
    )
    df = synthetic.simulate(setting, seed, truth_draws=1_000).frame()
    df["mitigation"] = df["mitigation"].replace({stats.TREATMENT: "freshness_guard"})
    return df.assign(safe_resolution=df["success"])


def test_a_large_off_target_gain_is_flagged_not_called_specific() -> None:
    """The demo Table 10 used to call specific: +60 pp on its target and +33 pp on clean."""
    df = _synthetic_arm({"stale_index": 0.6, "clean": 0.33}, seed=4)
    m = specificity.matrix(df, n_boot=1000)
    row = m.summary.set_index("mitigation").loc["freshness_guard"]
    assert row["verdict"] == "over-broad (gain)"
    assert row["off-target gain"] == "clean" and row["off-target harm"] == "-"
    cell = m.cells.set_index(["mitigation", "scenario"]).loc[("freshness_guard", "clean")]
    assert cell["band_low"] > 0 and cell["ci_low"] >= cell["band_low"]  # marginal inside band
    # the same archive with the gain on the target only: 2 units x 80 tasks of noisy zeros
    # cannot show every off-target change within ±10 pp, so it is inconclusive, saying why;
    # with a margin of 30 pp it is specific
    only_df = _synthetic_arm({"stale_index": 0.6}, seed=4)
    only = specificity.matrix(only_df, n_boot=1000).summary.set_index("mitigation")
    assert only.loc["freshness_guard", "verdict"] == "inconclusive"
    assert "not shown within ±10 pp" in only.loc["freshness_guard", "reason"]
    wide = specificity.matrix(only_df, n_boot=1000, delta=0.3).summary.set_index("mitigation")
    assert wide.loc["freshness_guard", "verdict"] == "specific"
    # a harm and a gain at once are both named
    both = specificity.matrix(
        _synthetic_arm({"stale_index": 0.6, "clean": 0.33, "wrong_session": -0.33}, seed=4),
        n_boot=1000,
    ).summary.set_index("mitigation").loc["freshness_guard"]
    assert both["verdict"] == "over-broad (harm, gain)"
    assert both["off-target harm"] == "wrong_session" and both["off-target gain"] == "clean"


def test_verdict_labels_name_the_direction() -> None:
    # the full rule (δ, inconclusive) is tested in test_exact.py
    assert specificity.verdict_label(0.1, [], [], 0.5) == "specific"
    assert specificity.verdict_label(0.0, [], [], 0.05) == "ineffective"
    assert specificity.verdict_label(0.0, [], [], 0.3) == "inconclusive"
    assert specificity.verdict_label(float("nan"), [], []) == "ineffective"
    assert specificity.verdict_label(0.5, ["clean"], []) == "over-broad (harm)"
    assert specificity.verdict_label(0.5, [], ["clean"]) == "over-broad (gain)"
    assert specificity.verdict_label(-0.5, ["a"], ["b"]) == "over-broad (harm, gain)"


def _null_flag_rates(sims: int, n_boot: int) -> tuple[float, float]:
    """Over ``sims`` seeded identical-prompt archives (2 units x 80 tasks x 9 scenarios, truth 0
    everywhere), the share the verdict calls specific or over-broad, and the old rule's share of
    anything but ineffective."""
    from layerlab.analysis import coverage, stats, synthetic

    setting = next(s for s in coverage.all_settings() if s.name.startswith("identical prompts, 2 units"))
    assert coverage.is_null(setting) and len(setting.effects) == len(load_scenarios())
    new = old = 0
    for i in range(sims):
        p = synthetic.simulate(setting, 10_000 + i, truth_draws=1_000).paired()
        eff = stats.effects_from_paired(p, n_boot, seed=i)
        assert eff.design == "tasks"
        off = [s for s in p.scenarios if s != setting.target]
        rows = {r["interval"]: r["covered"] for r in coverage._verdict_rows(eff, setting.target, off)}
        new += not rows["reported (simultaneous band, δ equivalence)"]
        old += not rows["one-sided marginal, harm only (replaced)"]
    return new / sims, old / sims


def test_null_mitigations_are_rarely_flagged() -> None:
    """Both arms independent draws of the same prompts: the verdict calls at most about 5% of
    them specific or over-broad; the one-sided per-cell rule it replaced called far more."""
    new, old = _null_flag_rates(sims=120, n_boot=300)
    assert new <= 0.07, new  # 120 archives: 5% plus about one Monte Carlo s.e.
    assert old > new


@pytest.mark.slow
def test_null_false_flag_rate_at_full_size() -> None:
    new, _ = _null_flag_rates(sims=1000, n_boot=1000)
    assert new <= 0.05 + 0.01, new  # the goal, within 1.5 Monte Carlo s.e.

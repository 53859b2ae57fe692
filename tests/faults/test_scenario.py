"""The scenario DSL and its fault operators."""

from __future__ import annotations

from pathlib import Path

import pytest

from layerlab import paths
from layerlab.corpus import build as corpus_mod
from layerlab.corpus.spec import SpecError
from layerlab.faults.operators import OPERATORS, ToolContext
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.harness.prepare import prepare

NINE = [
    "clean",
    "stale_index",
    "schema_drift",
    "missing_tool_output",
    "partial_timeout",
    "conflicting_evidence",
    "permission_denied",
    "corrupted_metadata",
    "wrong_session",
]


def test_committed_scenarios_load_in_order() -> None:
    scen = load_scenarios()
    assert list(scen) == NINE
    assert {s.spec.layer for s in scen.values()} >= {
        "freshness",
        "tool_contract",
        "availability",
        "completeness",
        "evidence",
        "authorisation",
        "metadata",
        "session_state",
    }
    assert [n for n, s in scen.items() if s.spec.answerable] == [
        "clean",
        "schema_drift",
        "conflicting_evidence",
    ]


def _problems(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "scenarios.yaml"
    p.write_text(text)
    with pytest.raises(SpecError) as info:
        load_scenarios(p)
    return [str(x) for x in info.value.problems]


BASE = """seed: 1
scenarios:
  - name: a
    layer: freshness
    injected: x
    expected_behaviour: y
    answerable: false
    faults:
      - op: {op}
        params: {params}
"""


@pytest.mark.parametrize(
    ("op", "params", "expected"),
    [
        (
            "serve_stale",
            "{}",
            ":9: scenarios[0].faults[0].op: unknown fault operator 'serve_stale'",
        ),
        (
            "corrupt_metadata",
            "{fraction: 2.0}",
            ":10: scenarios[0].faults[0].params.fraction: Input should be less than or equal to 1",
        ),
        (
            "corrupt_metadata",
            "{fration: 0.5}",
            "params.fration: unknown parameter (operator 'corrupt_metadata')",
        ),
        ("drop_output", "{form: lost}", "params.form: Input should be 'null', 'empty' or 'error'"),
    ],
)
def test_bad_scenarios_are_named_precisely(
    tmp_path: Path, op: str, params: str, expected: str
) -> None:
    problems = _problems(tmp_path, BASE.format(op=op, params=params))
    assert any(expected in p for p in problems), problems


def test_duplicate_names_and_missing_fields(tmp_path: Path) -> None:
    text = (
        BASE.format(op="drop_output", params="{}")
        + "  - name: a\n    layer: l\n    injected: x\n    answerable: true\n"
    )
    problems = "\n".join(_problems(tmp_path, text))
    assert "scenarios[1].expected_behaviour: required field is missing" in problems


def test_compound_scenario_needs_no_code(
    tmp_path: Path, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    text = (
        paths.SCENARIO_SPEC.read_text()
        + """
  - name: stale_plus_drift
    layer: freshness+tool_contract
    injected: stale index and a reshaped payload
    expected_behaviour: strict rejects; repair must still not answer from stale evidence
    answerable: false
    faults:
      - op: serve_superseded
      - op: reshape_payload
"""
    )
    p = tmp_path / "scenarios.yaml"
    p.write_text(text)
    scen = load_scenarios(p)
    recs = harness.run_deterministic(corpus, key, {"stale_plus_drift": scen["stale_plus_drift"]})
    strict = [r for r in recs if r.mitigation == "strict"]
    repair = [r for r in recs if r.mitigation == "repair"]
    assert all(r.diagnostic == "tool_contract" and not r.reached_reader for r in strict)
    # repair fixes the representation but not the freshness: it reaches the reader and still fails
    assert all(r.reached_reader and not r.success for r in repair)
    assert sum(r.diagnostic == "freshness" for r in repair) > 0.9 * len(repair)


def test_faults_are_seeded_and_deterministic(corpus: corpus_mod.Corpus, tmp_path: Path) -> None:
    a = load_scenarios()["corrupted_metadata"].index(corpus.documents)
    b = load_scenarios()["corrupted_metadata"].index(corpus.documents)
    assert a == b
    p = tmp_path / "scenarios.yaml"
    p.write_text(paths.SCENARIO_SPEC.read_text().replace("seed: 20260701", "seed: 7"))
    c = load_scenarios(p)["corrupted_metadata"].index(corpus.documents)
    assert c != a
    swapped = sum(x.status != y.status for x, y in zip(corpus.documents, a, strict=True))
    assert swapped == 80  # half of the 80 policies, two documents each
    assert all(x.domain != y.domain for x, y in zip(corpus.documents, a, strict=True))


def test_index_operators(corpus: corpus_mod.Corpus) -> None:
    scen = load_scenarios()
    stale = scen["stale_index"].index(corpus.documents)
    assert len(stale) == 80 and {d.status for d in stale} == {"superseded"}
    conflict = scen["conflicting_evidence"].index(corpus.documents)
    notes = [d for d in conflict if d.status == "unverified"]
    assert len(conflict) == 240 and len(notes) == 80
    assert scen["clean"].index(corpus.documents) == list(corpus.documents)


def test_tool_operators_change_only_their_layer(corpus: corpus_mod.Corpus) -> None:
    scen = load_scenarios()
    clean = prepare(corpus, scen["clean"])
    t = corpus.tasks[0]
    sent = clean.sent[t.task_id]
    ctx = ToolContext(
        t.task_id, t.policy_id, sent["session_id"], foreign=corpus.foreign_by_policy()
    )
    foreign = scen["wrong_session"].transport(sent, ctx)
    assert foreign is not None and sent["results"][0]["session_id"] is None
    assert all(r["session_id"] not in (None, sent["session_id"]) for r in foreign["results"])
    assert {r["tenant"] for r in foreign["results"]} == {corpus_mod.FOREIGN_TENANT}
    # another tenant's version of each retrieved policy: one per policy, ranks renumbered
    policies = list(dict.fromkeys(corpus_mod.policy_of(r["doc_id"]) for r in sent["results"]))
    assert [corpus_mod.policy_of(r["doc_id"]) for r in foreign["results"]] == policies
    assert [r["rank"] for r in foreign["results"]] == list(range(1, len(policies) + 1))
    theirs = corpus.foreign_by_policy()
    assert [r["text"] for r in foreign["results"]] == [theirs[p].text for p in policies]
    partial = scen["partial_timeout"].transport(sent, ctx)
    assert partial is not None and partial["status"] == "partial" and len(partial["results"]) == 1
    assert len(partial["results"][0]["text"]) < len(sent["results"][0]["text"])
    assert scen["missing_tool_output"].transport(sent, ctx) is None
    assert set(OPERATORS) >= {
        "serve_superseded",
        "reshape_payload",
        "drop_output",
        "partial_timeout",
        "inject_conflict",
        "deny_access",
        "corrupt_metadata",
        "foreign_session",
    }


def test_wrong_session_without_foreign_versions_is_a_clear_error(corpus: corpus_mod.Corpus) -> None:
    scen = load_scenarios()
    t = corpus.tasks[0]
    sent = prepare(corpus, scen["clean"]).sent[t.task_id]
    with pytest.raises(ValueError, match="no other-tenant version"):
        scen["wrong_session"].transport(sent, ToolContext(t.task_id, t.policy_id, "s-1"))


# --- scenario roles (data/specs/roles.yaml) ---------------------------------------------------


def test_committed_roles_name_the_paper_scenarios() -> None:
    from layerlab.analysis import stats
    from layerlab.faults.roles import load_roles
    from layerlab.scoring import audit

    roles = load_roles()
    assert roles.contract_target == stats.TARGET == "schema_drift"
    assert roles.negative_control == "clean"
    assert roles.audit == ["clean", "conflicting_evidence", "corrupted_metadata"]
    assert {c.scenario for c in roles.explorer} <= set(NINE)
    assert list(audit.conditions_from(corpus_mod.load(), load_scenarios())) == roles.audit


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("contract_target: schema_drift", "contract_target: schema_drfit", "contract_target"),
        ("audit: [clean,", "audit: [clen,", "audit[0]"),
        ("scenario: stale_index,", "scenario: stale,", "explorer[2].scenario"),
    ],
)
def test_unknown_scenario_in_a_role_is_named(tmp_path: Path, old: str, new: str, field: str) -> None:
    from layerlab.faults.roles import load_roles

    text = paths.ROLE_SPEC.read_text(encoding="utf-8")
    assert old in text
    bad = tmp_path / "roles.yaml"
    bad.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(SpecError) as e:
        load_roles(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}:") and f": {field}: unknown scenario" in msg, msg
    assert "expected one of ['clean'" in msg


def test_the_over_broad_controls_are_entries_of_the_mitigations_spec(tmp_path: Path) -> None:
    """``gate --no-over-broad`` reads layerlab's deliberate controls from roles.yaml; a name
    that is no mitigation entry is one line naming the field."""
    from layerlab.faults.roles import load_roles
    from layerlab.mitigations import load_mitigations

    controls = load_roles().over_broad_controls
    assert controls == ["always_abstain", "ignore_metadata"]
    assert set(controls) <= set(load_mitigations().arms)
    text = paths.ROLE_SPEC.read_text(encoding="utf-8")
    bad = tmp_path / "roles.yaml"
    bad.write_text(text.replace("[always_abstain, ignore_metadata]", "[always_abstian]"), encoding="utf-8")
    with pytest.raises(SpecError) as e:
        load_roles(bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}:") and ": over_broad_controls[0]: unknown mitigation 'always_abstian'" in msg


def test_several_files_load_together_and_their_hash_names_the_shipped_files(tmp_path: Path) -> None:
    from layerlab.corpus.spec import spec_hash
    from layerlab.faults.scenario import files_hash, load_files, shipped_files

    one, two = paths.SCENARIO_SPEC, paths.TRANSPORT_SCENARIO_SPEC
    both = load_files([one, two])
    assert list(both) == [*load_scenarios(one), *load_scenarios(two)]
    assert both["rate_limited@0.5"].spec.layer == "transport"
    assert files_hash([one]) == spec_hash(one) and shipped_files(spec_hash(one)) == (one,)
    assert files_hash([one, two]) == f"{spec_hash(one)}+{spec_hash(two)}"
    assert shipped_files(files_hash([one, two])) == (one, two)
    edited = tmp_path / "scenarios.yaml"
    text = one.read_text(encoding="utf-8")
    edited.write_text(text.replace("\nseed: ", "\nseed: 1", 1), encoding="utf-8")
    assert shipped_files(files_hash([edited, two])) is None  # not the shipped file: not recomputed
    with pytest.raises(ValueError, match=r"scenarios_transport.yaml: scenario\(s\) auth_expired, "):
        load_files([two, two])

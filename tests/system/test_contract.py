"""Tool contracts: strict rejects drift; repair recovers it and nothing else."""

from __future__ import annotations

import copy

import pytest

from layerlab.corpus import build as corpus_mod
from layerlab.faults.scenario import load_scenarios
from layerlab.harness.prepare import PreparedScenario, prepare
from layerlab.mitigations import contract_mode as get_mode
from layerlab.system.contract import SearchPayload, repair_payload


@pytest.fixture(scope="module")
def prepared(corpus: corpus_mod.Corpus) -> dict[str, PreparedScenario]:
    scen = load_scenarios()
    return {
        n: prepare(corpus, scen[n]) for n in ("clean", "schema_drift", "permission_denied")
    }


def test_clean_payloads_pass_strict(prepared, corpus) -> None:
    for t in corpus.tasks:
        res = get_mode("strict").check(prepared["clean"].received[t.task_id])
        assert res.outcome == "accepted" and res.valid and res.edits == ()


def test_drift_is_rejected_by_strict_and_repaired_exactly(prepared, corpus) -> None:
    for t in corpus.tasks:
        drifted = prepared["schema_drift"].received[t.task_id]
        strict = get_mode("strict").check(drifted)
        assert strict.outcome == "rejected" and not strict.valid and strict.problems
        repaired = get_mode("repair").check(drifted)
        assert repaired.outcome == "accepted" and repaired.valid and repaired.edits
        # repair restores exactly what the tool sent: the same evidence, the same metadata
        assert repaired.payload == SearchPayload.model_validate(prepared["clean"].sent[t.task_id])


def test_repair_never_invents_missing_evidence(prepared, corpus) -> None:
    t = corpus.tasks[0]
    drifted = copy.deepcopy(prepared["schema_drift"].received[t.task_id])
    del drifted["hits"][0]["content"]  # the text is gone, not renamed
    res = get_mode("repair").check(drifted)
    assert res.outcome == "rejected" and any("text" in p for p in res.problems)


def test_repair_never_bypasses_a_denial(prepared, corpus) -> None:
    for t in corpus.tasks[:20]:
        denied = prepared["permission_denied"].received[t.task_id]
        for mode in ("strict", "repair"):
            res = get_mode(mode).check(denied)
            assert res.outcome == "denied" and res.payload is None


def test_missing_output_is_unavailable_in_both_modes() -> None:
    for payload in (None, {}, {"error": {"code": "x", "message": "y"}}):
        for mode in ("strict", "repair"):
            assert get_mode(mode).check(payload).outcome == "unavailable"


def test_repair_stops_at_the_edit_cap(prepared, corpus) -> None:
    drifted = prepared["schema_drift"].received[corpus.tasks[0].task_id]
    fixed, rep = repair_payload(drifted, max_edits=3)
    assert rep.capped and fixed is drifted
    _, rep_full = repair_payload(drifted)
    assert not rep_full.capped and len(rep_full.edits) > 3


def test_repair_keeps_foreign_session_ids(corpus) -> None:
    scen = load_scenarios()
    prep = prepare(corpus, scen["wrong_session"])
    t = corpus.tasks[0]
    res = get_mode("repair").check(prep.received[t.task_id])
    assert res.payload is not None
    assert all(r.session_id not in (None, res.payload.session_id) for r in res.payload.results)


def test_unknown_mode() -> None:
    with pytest.raises(KeyError, match="unknown mitigation 'lenient'"):
        get_mode("lenient")
    with pytest.raises(KeyError, match="not a contract entry"):
        get_mode("freshness_guard")

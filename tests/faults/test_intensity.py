"""Fault intensity: every scenario at a dose λ in [0, 1], seeded and nested, λ = 1 as written."""

from __future__ import annotations

import pytest

from layerlab.corpus import build as corpus_mod
from layerlab.faults.scenario import (
    expand,
    load_scenarios,
    parse_intensities,
    split_variant,
    variant_name,
)
from layerlab.harness.prepare import prepare

DOSES = (0.0, 0.1, 0.25, 0.5, 1.0)


def test_variant_names_round_trip_and_bad_ones_are_refused() -> None:
    assert variant_name("stale_index", 1.0) == "stale_index"
    assert variant_name("stale_index", 0.25) == "stale_index@0.25"
    assert variant_name("stale_index", 0) == "stale_index@0"
    assert split_variant("stale_index@0.1") == ("stale_index", 0.1)
    assert split_variant("stale_index") == ("stale_index", 1.0)
    for bad in ("stale_index@x", "stale_index@1.5", "stale_index@1", "stale_index@0.12345"):
        with pytest.raises(ValueError, match="stale_index"):
            split_variant(bad)
    assert parse_intensities("1, 0.25,0,0.25") == (0.0, 0.25, 1.0)
    with pytest.raises(ValueError, match=r"--intensity 'x'"):
        parse_intensities("0,x")
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        parse_intensities("0,2")


def test_a_variant_is_looked_up_by_name_and_keeps_the_seed() -> None:
    scen = load_scenarios()
    v = scen["stale_index@0.25"]
    assert (v.name, v.base_name, v.intensity, v.seed) == (
        "stale_index@0.25", "stale_index", 0.25, scen["stale_index"].seed,
    )  # fmt: skip
    assert "stale_index@0.25" in scen and "nope@0.25" not in scen
    assert list(scen) == list(load_scenarios())  # iteration: the DSL's scenarios only
    assert scen["stale_index"].at(1.0) is scen["stale_index"]
    names = expand(["clean", "stale_index"], scen, DOSES)
    assert names == ["clean", "stale_index@0", "stale_index@0.1", "stale_index@0.25",
                     "stale_index@0.5", "stale_index"]  # fmt: skip


@pytest.mark.parametrize("name", ["stale_index", "conflicting_evidence", "corrupted_metadata"])
def test_index_faults_strike_a_nested_share_of_policies(corpus: corpus_mod.Corpus, name: str) -> None:
    scen = load_scenarios()
    policies = sorted({d.policy_id for d in corpus.documents})
    struck = []
    for dose in DOSES:
        s = scen[name].at(dose)
        struck.append({p for p in policies if s.strikes(0, p)})
    assert struck[0] == set() and struck[-1] == set(policies)
    assert all(a <= b for a, b in zip(struck, struck[1:], strict=False))  # nested
    assert 0 < len(struck[2]) < len(policies)
    # a policy the fault does not strike keeps its documents as built; a struck one is faulted
    full = {d.doc_id: d for d in scen[name].index(corpus.documents, corpus.foreign)}
    quarter = scen[name].at(0.25)
    built = {d.doc_id: d for d in corpus.documents}
    for d in quarter.index(corpus.documents, corpus.foreign):
        assert d == (full[d.doc_id] if d.policy_id in struck[2] else built[d.doc_id])
    assert quarter.index(corpus.documents) == quarter.index(corpus.documents)  # seeded


def test_intensity_one_is_the_scenario_as_written(corpus: corpus_mod.Corpus) -> None:
    scen = load_scenarios()
    for s in scen.values():
        one = s.at(1.0)
        assert one.index(corpus.documents, corpus.foreign) == s.index(
            corpus.documents, corpus.foreign
        )
        a, b = prepare(corpus, one), prepare(corpus, s)
        assert all(a.received[t.task_id] == b.received[t.task_id] for t in corpus.tasks[:40])


def test_tool_and_access_faults_strike_a_share_of_tasks(corpus: corpus_mod.Corpus) -> None:
    scen = load_scenarios()
    clean = prepare(corpus, scen["clean"])
    for name in ("missing_tool_output", "wrong_session", "permission_denied"):
        full, half = prepare(corpus, scen[name]), prepare(corpus, scen[name].at(0.5))
        hit = 0
        for t in corpus.tasks:
            struck = half.scenario.struck(t.task_id, t.policy_id)
            hit += struck
            got = half.received[t.task_id]
            assert got == (full.received[t.task_id] if struck else clean.received[t.task_id])
            # answerable where the fault did not strike; as the DSL says where it did
            assert half.scenario.answerable_for(t.task_id, t.policy_id) == (
                scen[name].spec.answerable or not struck
            )
        assert 0.35 < hit / len(corpus.tasks) < 0.65, (name, hit)


def test_access_scopes_below_one_need_the_task() -> None:
    s = load_scenarios()["permission_denied"].at(0.5)
    with pytest.raises(ValueError, match="per task"):
        s.principal_scopes()


def test_every_committed_prompt_is_recomputed_byte_for_byte() -> None:
    """λ = 1 is the scenario as written: every single-call record of the committed real-model
    archives (made before intensity existed) recomputes to its archived prompt hash, and so do
    the surface archive's records at every dose (``stale_index@0.25`` ...)."""
    from layerlab import archive, paths
    from layerlab.reporting.records import evidence

    folders = [
        *paths.archives_in(paths.LOCAL_MODEL_ARCHIVES),
        *paths.archives_in(paths.LOCAL_MODEL_MITIGATIONS),
        *paths.archives_in(paths.LOCAL_MODEL_REPLICATES),
        *paths.archives_in(paths.LOCAL_MODEL_SURFACE),
    ]
    assert paths.LOCAL_MODEL_SURFACE / "qwen2.5-coder-1.5b" in folders
    doses = set()
    for folder in folders:
        again = evidence.Recomputer(archive.read_manifest(folder))
        for r in archive.read_records(folder / archive.ARCHIVE):
            assert again.record(r.__dict__)["status"] == "match", (folder.name, r.scenario, r.task_id)
            doses.add(split_variant(r.scenario)[1])
    assert doses == {0.0, 0.1, 0.25, 0.5, 1.0}

"""The committed archives are intact and current: the code still produces every label in them."""

from __future__ import annotations

import hashlib

from layerlab import archive, paths
from layerlab.corpus import build as corpus_mod
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.system import prompt
from layerlab.system.reader import READERS

REF = paths.ARCHIVES / "reference_agents"
LABELS = (*archive.LABELS, "diagnostic", "stage")


def test_checksums_and_manifest() -> None:
    for line in (paths.ARCHIVES / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((paths.ARCHIVES / name).read_bytes()).hexdigest() == digest, name
    rep = archive.check_path(REF)
    assert rep["records"] == 2 * 240 * 9 * 2 and rep["complete"] is True
    m = archive.read_manifest(REF)
    assert m["kind"] == "live" and m["models"] == ["layerlab/extractive", "layerlab/cautious"]


def test_reference_archive_is_current(corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey) -> None:
    committed = archive.read_records(REF / "records.parquet")
    by_key = {(r.model, r.scenario, r.mitigation, r.task_id): r for r in committed}
    scen = load_scenarios()
    for name in ("extractive", "cautious"):
        for r in harness.run_deterministic(corpus, key, scen, reader=READERS[name]()):
            c = by_key[(name, r.scenario, r.mitigation, r.task_id)]
            assert tuple(getattr(c, k) for k in LABELS) == tuple(getattr(r, k) for k in LABELS), (
                f"{name} {r.scenario} {r.mitigation} {r.task_id}: committed archive is stale; run `make archives`"
            )


def test_local_model_archives_are_complete_real_model_runs() -> None:
    """Every committed real-model archive: a complete run of a registered model, hash recorded."""
    from layerlab.models import local as models

    folders = [
        *paths.archives_in(paths.LOCAL_MODEL_ARCHIVES),
        *paths.archives_in(paths.LOCAL_MODEL_MITIGATIONS),
        *paths.archives_in(paths.LOCAL_MODEL_REPLICATES),
    ]
    assert folders, "no committed real-model archive"
    listed = (paths.ARCHIVES / "SHA256SUMS").read_text()
    registry = models.load_registry()
    for folder in folders:
        rep = archive.check_path(folder)
        assert rep["complete"] is True, folder
        m = archive.read_manifest(folder)
        (model,) = m["models"]
        spec = registry[model.removeprefix(models.PREFIX)]
        prov = m["local_models"][model]
        assert prov["file_sha256"] == spec.file.sha256 and prov["runtime"].startswith("llama-cpp")
        # decoding is recorded; greedy runs share a reply between identical prompts, sampled
        # runs make one call per record
        sampling = m["sampling"]
        assert sampling["temperature"] == m["settings"]["temperature"] is not None
        assert m["share_replies"] is (sampling["temperature"] == 0), folder
        assert m["reply_schema"] == prompt.REPLY_SCHEMA_VERSION
        recs = archive.read_records(folder / archive.ARCHIVE)
        assert {(r.provider, r.model) for r in recs} == {("local", spec.name)}
        assert len(recs) == m["expected_records"]
        assert all(r.prompt_hash for r in recs if r.reached_reader)
        assert f"{folder.relative_to(paths.ARCHIVES)}/records.parquet" in listed


def test_committed_archives_hold_nulls_not_placeholders_and_the_shared_vocabulary() -> None:
    """Every committed archive: no ``""`` or ``"-"`` in any string column; ``domain`` and
    ``answerable`` present; the study names its scenario and arm as the record archives do."""
    import pyarrow.parquet as pq

    files = sorted(paths.ARCHIVES.rglob("*.parquet"))
    assert len(files) >= 4
    for f in files:
        t = pq.read_table(f)
        if f.name in ("agent.parquet", "target.parquet"):  # a run's step table, not records
            assert {"scenario", "mitigation", "task_id", "calls"} <= set(t.column_names), f
            continue
        if f.name == "turns.parquet":  # a conversational archive's turns: no arm, not records
            assert {"scenario", "conversation_id", "domain", "answerable"} <= set(t.column_names), f
            assert not {"condition", "arm", "contract_mode"} & set(t.column_names), f
            continue
        assert {"scenario", "mitigation", "domain", "answerable"} <= set(t.column_names), f
        assert not {"condition", "arm", "contract_mode"} & set(t.column_names), f
        for name in t.column_names:
            if str(t.schema.field(name).type) == "string":
                vals = set(t.column(name).to_pylist())
                assert not vals & {"", "-", "none"}, (f, name)


def test_the_retired_real_model_archive_was_migrated_not_rerun() -> None:
    folder = paths.RETIRED_ARCHIVES / "smollm2-135m"
    m = archive.read_manifest(folder)
    steps = m["migrations"]
    assert steps[0]["from_schema_version"] == 2 and steps[-1]["to_schema_version"] == archive.SCHEMA_VERSION
    assert all(a["to_schema_version"] == b["from_schema_version"] for a, b in zip(steps, steps[1:], strict=False))
    assert m["archive_schema_version"] == archive.SCHEMA_VERSION
    assert m["run_id"] == "live-9452b9dafbe0a962" and "local/smollm2-135m" in m["local_models"]


# Each outcome's definition (data/DATA_DICTIONARY.md's "Outcomes"), written from the labels
# independently of :func:`samplelog.outcome`: the one that holds must be the one it gives.
FAILED = ("malformed_reply", "provider_error", "step_limit")
DEFINITIONS = {
    "success": lambda r: r["success"],
    "failed": lambda r: not r["success"] and r["diagnostic"] in FAILED,
    "grounded_wrong": lambda r: r["answered"] and r["exact_match"] is False
    and r["grounded"] is True and r["citation_ok"],
    "unsupported": lambda r: r["answered"] and r["exact_match"] is True and not r["success"],
    "wrong": lambda r: r["answered"] and not r["exact_match"]
    and not (r["grounded"] is True and r["citation_ok"]),
    "safe_non_answer": lambda r: not r["answered"] and r["safe_resolution"] and not r["success"],
    "ended_early": lambda r: not r["answered"] and not r["reached_reader"]
    and not r["safe_resolution"],
    "abstained": lambda r: not r["answered"] and r["reached_reader"] and not r["safe_resolution"],
}


def test_every_outcome_label_holds_where_applied_over_every_committed_archive() -> None:
    from layerlab.archive import samplelog

    assert set(DEFINITIONS) == set(samplelog.OUTCOMES)
    files = sorted(paths.DATA.glob("**/records.parquet"))
    assert len(files) >= 10
    seen: set[str] = set()
    for f in files:
        for rec in archive.read_records(f):
            r = rec.__dict__
            got = samplelog.outcome(rec)
            if got != "failed":  # a failure's labels say nothing of its answer
                holds = [o for o, d in DEFINITIONS.items() if o != "failed" and d(r)]
                assert holds == [got], f"{f} {archive.sort_key(rec)}: {got}, definitions {holds}"
            assert DEFINITIONS[got](r), f"{f} {archive.sort_key(rec)}: {got} does not hold"
            seen.add(got)
    assert {"grounded_wrong", "unsupported", "wrong", "success"} <= seen


def test_the_reference_conversational_archive_is_packed_whole_and_current() -> None:
    """The reference readers' conversational archive: every conversation under every
    conversational scenario, its rows the run's (manifest checksum), its summary what the rows
    give, and the code still giving every row (replayed on the first conversation per domain)."""
    import json

    from layerlab.analysis.conversations import summarise
    from layerlab.archive import turnrecords
    from layerlab.corpus import conversations as cv
    from layerlab.corpus.build import load
    from layerlab.faults.scenario import conversation_scenarios
    from layerlab.harness import conversation as hc
    from layerlab.mitigations.session import load_session_mitigations, session_arms

    folder = paths.REFERENCE_CONVERSATIONS
    assert paths.conversation_archives()[0] == folder
    recs = turnrecords.check_packed(folder)
    m = json.loads((folder / "manifest.json").read_text())
    convs, key = cv.build_from_specs()
    scen = conversation_scenarios()
    assert m["systems"] == ["layerlab/extractive", "layerlab/cautious"] and m["epochs"] == 1
    assert m["scenarios"] == list(scen) and m["per_domain"] is None
    arms = session_arms(m["mitigations"])  # the baseline and every session mitigation
    assert [a.name for a in arms] == ["none", *load_session_mitigations().matrix_arms]
    assert len(recs) == 2 * len(arms) * len(scen) * len(key) == m["counts"]["turns"]
    assert json.loads((folder / "summary.json").read_text()) == json.loads(json.dumps(summarise(recs)))
    listed = (paths.ARCHIVES / "SHA256SUMS").read_text()
    assert "conversations/reference/turns.parquet" in listed
    first: dict[str, cv.Conversation] = {}
    for c in convs:
        first.setdefault(c.domain, c)
    systems = [hc.reference(s) for s in m["systems"]]
    again = hc.run(systems, list(first.values()), list(scen.values()), hc.Setting(load(), key),
                   arms=arms)  # fmt: skip
    ids = {c.conversation_id for c in first.values()}
    kept = sorted((r for r in recs if r.conversation_id in ids), key=turnrecords.sort_key)
    assert sorted(again, key=turnrecords.sort_key) == kept, "stale: run `make reference-conversations`"


def test_every_committed_model_conversation_archive_is_a_whole_run_of_a_registered_model() -> None:
    """A real model's chat chain over the conversations (data/archives/local_model_conversations/
    <model>/, a run folder or packed): its rows are the run's (manifest checksum), one registered
    local model with its file's hash and runtime recorded, its manifest listed in SHA256SUMS."""
    import json

    from layerlab._io import sha256_file
    from layerlab.archive import turnrecords
    from layerlab.models import local as models

    registry = models.load_registry()
    listed = (paths.ARCHIVES / "SHA256SUMS").read_text()
    for folder in paths.conversation_archives()[1:]:
        assert folder.parent == paths.LOCAL_MODEL_CONVERSATIONS, folder
        m = json.loads((folder / "manifest.json").read_text())
        if (folder / turnrecords.PARQUET).is_file():
            recs = turnrecords.check_packed(folder)
        else:
            recs = turnrecords.read(folder)
            assert sha256_file(folder / turnrecords.FILE) == m["files"][turnrecords.FILE], folder
        (model,) = m["systems"]
        spec = registry[model.removeprefix(models.PREFIX)]
        prov = m["local_models"][model]
        assert prov["file_sha256"] == spec.file.sha256 and prov["runtime"].startswith("llama-cpp")
        assert {(r.provider, r.model) for r in recs} == {("local", model)}
        assert len(recs) == m["counts"]["turns"] and m["scenarios"], folder
        assert f"{folder.relative_to(paths.ARCHIVES)}/manifest.json" in listed

"""The committed archives are intact and current: the code still produces every label in them."""

from __future__ import annotations

import hashlib

from layerlab import archive, harness, paths
from layerlab import corpus as corpus_mod
from layerlab.reader import READERS
from layerlab.scenario import load_scenarios

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

"""The dominant failure of a failing fault-free layer, from the run's private sample log: said
with its count after ``run live --sample-log``, never in results.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from layerlab.analysis import results
from layerlab.archive import samplelog
from layerlab.cli.app import main
from layerlab.corpus import build as corpus_mod
from layerlab.integrations.checks import CheckError, MatrixRun
from layerlab.reporting.run import dominant, overview

# 16 support questions where the newest delivered result is often another policy's document
TASKS = [f"support-{p:02d}-q{q}" for p in range(5, 11) for q in (1, 2, 3)][:16]


def test_a_newest_by_year_target_is_told_its_dominant_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "fixtures"))  # user_targets
    out, log = tmp_path / "run", tmp_path / "private" / "samples.jsonl"
    args = ["run", "live", "--target", "python:user_targets:newest", "--target-name", "newest",
            "--tasks", ",".join(TASKS), "--scenario", "clean", "--out", str(out),
            "--sample-log", str(log), "--no-progress", "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) in (0, 4), capsys.readouterr().err
    said = capsys.readouterr().out
    res = json.loads((out / results.RESULTS).read_text())
    (f,) = res["findings"]
    assert f["control"]["failed"] > 0, f["control"]
    # the expected counts, straight from the sample log's entries
    policies = corpus_mod.load().policy_by_doc()
    base = [e for e in samplelog.read(log) if e["mitigation"] == f["baseline"]]
    assert len(base) == len(TASKS)
    wrong = [e for e in base if e["verdict"]["answered"] and not e["verdict"]["exact_match"]]
    other = [e for e in wrong
             if any(policies[d] != e["policy_id"] for d in e["parsed"]["citations"])]  # fmt: skip
    assert wrong and len(other) > len(wrong) / 2  # the case: another policy's document
    line = next(x for x in said.splitlines() if "From the private sample log" in x)
    assert (f"in {len(other)} of {len(wrong)} wrong answers it cited a document of another "
            "policy") in line  # fmt: skip
    # results.json never depends on the private log
    assert "sample log" not in json.dumps(res["findings"])
    # without the log (e.g. another machine): the archive's words only
    lines: list[str] = []
    overview.print_run_results(out, lines.append)
    assert not any("private sample log" in x for x in lines)
    # nor counts another run's entries
    assert dominant.for_run(res["findings"], log, "another run") == {}
    expected = f"in {len(other)} of {len(wrong)} wrong answers it cited a document of another"
    # layerlab report --sample-log: the same sentence on the page; without it, none
    page, bare = tmp_path / "r.html", tmp_path / "bare.html"
    assert main(["report", str(out), "--out", str(page), "--sample-log", str(log)]) == 0
    assert main(["report", str(out), "--out", str(bare)]) == 0
    assert expected in page.read_text() and "private sample log" not in bare.read_text()
    # the pytest plugin's checks: the finding that explains a rate
    run = MatrixRun(out, sample_log=log)
    assert expected in run.findings
    assert any(expected in x for x in run.correct("clean").finding)
    assert expected not in MatrixRun(out).findings
    # an unreadable log is one line naming it
    (tmp_path / "bad.jsonl").write_text("not json\n")
    with pytest.raises(CheckError, match="bad.jsonl:1: not a JSON line"):
        MatrixRun(out, sample_log=tmp_path / "bad.jsonl")


def test_each_wrong_answer_falls_in_one_category() -> None:
    base = {"provider": "target", "model": "t", "scenario": "clean", "mitigation": "strict",
            "policy_id": "hr-01", "outcome": "wrong"}  # fmt: skip

    def e(cited: list[str], status: str = "current", **v: bool) -> dict:
        verdict = {"answered": True, "exact_match": False, "citation_ok": True, "grounded": True,
                   "retrieval_ok": True, "safe_resolution": False, **v}  # fmt: skip
        ev = [{"doc_id": d, "status": status} for d in cited]
        return {**base, "verdict": verdict, "parsed": {"citations": cited}, "evidence": ev}

    got = [
        dominant.wrong_category(x, {})
        for x in (
            e(["finance-02-a"]),
            e(["hr-01-b"], status="superseded"),
            e(["hr-01-a"], grounded=False),
            e([], citation_ok=False),
            e(["hr-01-a"]),
        )
    ]
    assert got == list(dominant.WRONG)
    abst = {**e([]), "outcome": "abstained"}
    abst["verdict"] = {**abst["verdict"], "answered": False}
    c = dominant.counts([e(["finance-02-a"]), e(["finance-03-a"]), e(["hr-01-a"]), abst],
                        "target/t", "clean", "strict")  # fmt: skip
    assert c["wrong"]["other_policy"] == 2 and sum(c["wrong"].values()) == 3
    assert dominant.sentence(c) == (
        "From the private sample log: in 2 of 3 wrong answers it cited a document of another "
        "policy; in 1 of 1 abstentions the required document was delivered."
    )

"""`layerlab corpus import`: a user's own documents and questions become a corpus folder that every
scenario runs on; bad files get one line naming file, line, field and what was expected, and
nothing is written (issue 21, item 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from layerlab import paths
from layerlab.cli import main
from layerlab.corpus import build as corpus_mod
from layerlab.corpus import userdocs
from layerlab.faults.scenario import load_scenarios
from layerlab.harness import deterministic as harness
from layerlab.harness.prepare import prepare

FIXTURE = Path(__file__).parents[1] / "fixtures" / "user_corpus.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
FILES = ("documents.jsonl", "tasks.jsonl", "answer_key.jsonl", "foreign.jsonl", "domains.json")


def _line(**match: object) -> int:
    """The (0-based) row of the fixture whose fields include ``match``."""
    return next(i for i, r in enumerate(ROWS) if all(r.get(k) == v for k, v in match.items()))


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    src = tmp_path / "mine.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return src


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("user") / "corpus"
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    return out


def test_import_writes_the_corpus_build_format(imported: Path) -> None:
    assert sorted(p.name for p in imported.iterdir()) == sorted([*FILES, "manifest.json"])
    c, key = corpus_mod.load(imported), corpus_mod.load_answer_key(imported)
    assert c.name == "bayside_water" and len(c.domains) == 2
    assert len(c.documents) == 12 and len(c.foreign) == 6 and len(c.tasks) == 8
    assert {d.tenant for d in c.documents} == {"bayside"}
    assert {d.tenant for d in c.foreign} == {"lakeshore"}
    assert {d.owner for d in c.documents if d.domain == "lab"} == {"Laboratory Safety Office"}
    # the public tasks carry no answer; the answer key is its own file
    assert "expected_answer" not in (imported / "tasks.jsonl").read_text()
    assert key["fleet-03-q2"].expected_answer == "Fleet Safety Officer"
    assert key["fleet-03-q2"].required_doc_ids == ("FLT-330",)
    assert [t.variant for t in c.tasks if t.policy_id == "fleet-03"] == [1, 2]


def test_every_fault_takes_effect_on_the_imported_corpus(imported: Path) -> None:
    c = corpus_mod.load(imported)
    scen = load_scenarios()
    t = next(t for t in c.tasks if t.task_id == "lab-01-q1")
    ids = {
        name: [r["doc_id"] for r in (prepare(c, s).sent[t.task_id]["results"])]
        for name, s in scen.items()
        if name in {"clean", "stale_index"}
    }
    assert "LAB-015" in ids["clean"] and "LAB-011" in ids["stale_index"]
    assert "LAB-015" not in ids["stale_index"]  # the index serves the superseded version
    denied = prepare(c, scen["permission_denied"]).received[t.task_id]
    assert denied["results"] == [] and denied["status"] == "denied"
    wrong = prepare(c, scen["wrong_session"]).received[t.task_id]["results"]
    assert wrong and all(r["tenant"] == "lakeshore" for r in wrong)
    assert "60 days" in wrong[0]["text"] and "90 days" not in wrong[0]["text"]
    conflict = prepare(c, scen["conflicting_evidence"]).index
    assert conflict["lab-01-n"].owner == "Team wiki"  # the injected note
    drift = prepare(c, scen["schema_drift"]).received[t.task_id]
    assert "hits" in drift and "results" not in drift


def test_the_full_matrix_runs_on_the_imported_corpus(imported: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert main(["run", "deterministic", "--corpus", str(imported), "--out", str(run)]) == 0
    df = pd.read_parquet(run / "records.parquet")
    scen = load_scenarios()
    assert set(df["scenario"]) == set(scen) and len(scen) == 9
    assert len(df) == 9 * 8 * 2  # scenarios x questions x contract arms
    by = df.groupby("scenario")
    assert by["success"].mean()["clean"] == 1.0  # every expected answer is extractable
    assert by["success"].mean()["conflicting_evidence"] == 1.0
    assert by["grounded_false_positive"].mean()["stale_index"] == 1.0  # the superseded value
    assert by["grounded_false_positive"].mean()["wrong_session"] == 1.0  # the other tenant's
    denied = df[df["scenario"] == "permission_denied"]
    assert not denied["answered"].any() and (denied["diagnostic"] == "authorisation").all()
    assert not df[df["scenario"] == "missing_tool_output"]["answered"].any()


def test_mitigation_run_takes_the_imported_corpus(imported: Path, tmp_path: Path) -> None:
    run = tmp_path / "m"
    args = ["mitigation", "run", "--corpus", str(imported), "--out", str(run)]
    args += ["--mitigation", "freshness_guard", "--mitigation", "session_isolation"]
    assert main(args) == 0
    df = pd.read_parquet(run / "records.parquet")
    man = json.loads((run / "manifest.json").read_text())
    assert man["corpus"] == "bayside_water" and man["n_tasks"] == 8
    assert set(df["mitigation"]) == {"strict", "freshness_guard", "session_isolation"}
    cell = df.groupby(["scenario", "mitigation"])["safe_resolution"].mean()
    assert (
        cell[("stale_index", "strict")] == 0.0 and cell[("stale_index", "freshness_guard")] == 1.0
    )
    assert cell[("wrong_session", "session_isolation")] == 1.0


def test_yaml_gives_the_same_corpus_as_jsonl(imported: Path, tmp_path: Path) -> None:
    doc: dict = {"corpus": {}, "domains": [], "documents": [], "questions": []}
    for r in ROWS:
        r = dict(r)
        kind = r.pop("kind")
        if kind == "corpus":
            doc["corpus"] = r
        else:
            doc[kind + "s"].append(r)
    src = tmp_path / "mine.yaml"
    src.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "c"
    assert main(["corpus", "import", str(src), "--out", str(out)]) == 0
    for name in FILES:
        assert (out / name).read_bytes() == (imported / name).read_bytes(), name


def test_enterprise_v2_exported_and_reimported_is_the_same_corpus(tmp_path: Path) -> None:
    """The format is complete: the paper's corpus goes through it unchanged, file for file, and
    the deterministic matrix gives identical records on both."""
    c, key = corpus_mod.load(), corpus_mod.load_answer_key()
    src = _write(tmp_path, list(userdocs.export_records(c, key)))
    out = tmp_path / "ev2"
    assert main(["corpus", "import", str(src), "--out", str(out)]) == 0
    for name in FILES:
        assert (out / name).read_bytes() == (paths.CORPUS_DIR / name).read_bytes(), name
    c2, key2 = corpus_mod.load(out), corpus_mod.load_answer_key(out)
    scen = {n: s for n, s in load_scenarios().items() if n in {"stale_index", "wrong_session"}}
    assert harness.run_deterministic(c2, key2, scen) == harness.run_deterministic(c, key, scen)


def _mutate(rows: list[dict], i: int, **change: object) -> list[dict]:
    rows = [dict(r) for r in rows]
    for k, v in change.items():
        if v is None:
            rows[i].pop(k)
        else:
            rows[i][k] = v
    return rows


DOC = _line(doc_id="FLT-104")  # fleet-01's current version
SUP2 = _line(doc_id="FLT-209")  # fleet-02's superseded version (one question asks about it)
Q2 = _line(id="fleet-02-q1")
FOREIGN = _line(doc_id="LKS-LAB-060")
Q_LAB = _line(id="lab-01-q1")
BAD: dict[str, tuple[list[dict] | str, str]] = {
    "unknown field": (
        _mutate(ROWS, DOC, colour="red"),
        rf":{DOC + 1}: colour: unknown field",
    ),
    "missing field": (
        _mutate(ROWS, DOC, status=None),
        rf":{DOC + 1}: status: required field is missing",
    ),
    "wrong type": (
        _mutate(ROWS, DOC, effective_year="2025"),
        rf":{DOC + 1}: effective_year: expected int, got str",
    ),
    "bad status": (
        _mutate(ROWS, DOC, status="draft"),
        rf":{DOC + 1}: status: expected 'current' or 'superseded', got 'draft'",
    ),
    "unknown answer kind": (
        _mutate(ROWS, Q2, answer_kind="date"),
        rf":{Q2 + 1}: answer_kind: unknown answer kind 'date'; expected one of \[",
    ),
    "duplicate doc_id": (
        [*ROWS[: SUP2 + 1], {**ROWS[SUP2], "version": 0}, *ROWS[SUP2 + 1 :]],
        rf":{SUP2 + 2}: doc_id: duplicate doc_id 'FLT-209' \(first at line {SUP2 + 1}\)",
    ),
    "required doc id that does not exist": (
        _mutate(ROWS, Q2, required_doc_ids=["FLT-211"]),
        rf":{Q2 + 1}: required_doc_ids\[0\]: unknown document 'FLT-211'",
    ),
    "required doc is the superseded version": (
        _mutate(ROWS, Q2, required_doc_ids=["FLT-209"]),
        rf":{Q2 + 1}: required_doc_ids\[0\]: 'FLT-209' is a superseded version",
    ),
    "expected answer not stated in its required document": (
        _mutate(ROWS, Q2, expected_answer="4 months"),
        rf":{Q2 + 1}: expected_answer: '4 months' is not stated in the required document 'FLT-210'",
    ),
    "expected answer also stated in the superseded version": (
        _mutate(ROWS, SUP2, text=ROWS[SUP2]["text"] + " Vans were checked every 6 months."),
        rf":{Q2 + 1}: expected_answer: '6 months' is also stated in the superseded version 'FLT-209'",
    ),
    "no other tenant's version": (
        [r for i, r in enumerate(ROWS) if i != FOREIGN],
        rf":{_line(doc_id='LAB-060') + 1}: policy_id: policy 'lab-03' has no other tenant's version",
    ),
    "owner differs from the domain's": (
        _mutate(ROWS, DOC, owner="Finance"),
        rf":{DOC + 1}: owner: 'Finance' is not the owner of domain 'fleet'",
    ),
    "policy id not in the archive's shape": (
        [
            {**r, "policy_id": "lab-waste"}
            if r.get("policy_id") == "lab-01" and r.get("tenant")
            else r
            for r in ROWS
        ],
        rf":{_line(doc_id='LKS-LAB-015') + 1}: policy_id: expected <domain>-NN, e.g. 'fleet-01'",
    ),
    "question id of another policy": (
        _mutate(ROWS, Q_LAB, id="lab-02-q7"),
        rf":{Q_LAB + 1}: id: 'lab-02-q7' must start with 'lab-01-q'",
    ),
    "unknown kind": (
        _mutate(ROWS, DOC, kind="chunk"),
        rf":{DOC + 1}: kind: unknown kind 'chunk'; expected one of \['corpus'",
    ),
    "key given twice": (
        "".join(json.dumps(r) + "\n" for r in ROWS[:3])
        + json.dumps(ROWS[3])[:-1]
        + ', "status": "superseded"}\n',
        r":4: status: duplicate key",
    ),
    "not JSON": (
        "".join(json.dumps(r) + "\n" for r in ROWS[:3]) + '{"kind": "document",\n',
        r":4: not valid JSON: ",
    ),
    "YAML: unknown field, with its line and path": (
        "corpus: {name: acme}\ndomains:\n  - domain: fleet\n    title: Fleet\n"
        "    owner: Fleet Office\n    cue_words: [fleet]\n    colour: red\n",
        r"mine\.yaml:7: domains\[0\]\.colour: unknown field",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_gets_one_line_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, want = BAD[case]
    if isinstance(rows, str):
        src = tmp_path / ("mine.yaml" if case.startswith("YAML") else "mine.jsonl")
        src.write_text(rows)
    else:
        src = _write(tmp_path, rows)
    out = tmp_path / "corpus"
    rc = main(["corpus", "import", str(src), "--out", str(out)])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {src}:"), lines[0]
    assert re.search(want, lines[0]), (want, lines[0])
    assert "Traceback" not in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]  # no temporary left


def test_an_existing_corpus_folder_is_replaced_and_another_folder_refused(
    imported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c"
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    bad = _write(tmp_path, _mutate(ROWS, DOC, status="draft"))
    assert main(["corpus", "import", str(bad), "--out", str(out)]) == 1
    for name in FILES:  # a failed import leaves the previous corpus as it was
        assert (out / name).read_bytes() == (imported / name).read_bytes()
    assert main(["corpus", "import", str(FIXTURE), "--out", str(out)]) == 0
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine\n")
    capsys.readouterr()
    assert main(["corpus", "import", str(FIXTURE), "--out", str(other)]) == 1
    assert "not empty and not a corpus folder" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["todo.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "mine.jsonl", "notes"]


def test_run_live_takes_the_imported_corpus(imported: Path, tmp_path: Path) -> None:
    """The live harness on the imported corpus, through the offline reference agent (no model)."""
    run = tmp_path / "live"
    args = ["run", "live", "-m", "layerlab/extractive", "--corpus", str(imported)]
    args += ["--out", str(run), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main([*args, "--scenario", "clean", "--scenario", "wrong_session"]) == 0
    df = pd.read_parquet(run / "records.parquet")
    man = json.loads((run / "manifest.json").read_text())
    assert man["corpus"] == "bayside_water" and len(df) == 2 * 8 * 2
    by = df.groupby("scenario")
    assert by["success"].mean()["clean"] == 1.0 and by["success"].mean()["wrong_session"] == 0.0


def test_explore_takes_the_imported_corpus(
    imported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["explore", "--corpus", str(imported), "--task", "lab-01-q1", "--scenario"]
    assert main([*args, "stale_index"]) == 0
    out = capsys.readouterr().out
    assert "index: LAB-015 (current) is absent from the index" in out
    assert "1. LAB-011" in out and "status=superseded" in out

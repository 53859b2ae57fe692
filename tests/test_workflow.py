"""A researcher's workflow: run results, --limit, the private sample log, the HTML report and
viewer, and the data dictionary (issue 14)."""

from __future__ import annotations

import json
import re
import stat
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from layerlab import archive, paths
from layerlab.analysis import results, stats
from layerlab.analysis.records import INPUT, records_frame
from layerlab.archive import samplelog
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.harness.runconfig import stratified_tasks
from layerlab.reporting.format import cells
from layerlab.reporting.records import dictionary, viewer
from layerlab.reporting.run import report

runner = CliRunner()
REF = paths.ARCHIVES / "reference_agents"
STUDY = paths.ARCHIVES / "langchain_study"


@pytest.fixture(scope="module")
def ref_frame() -> pd.DataFrame:
    return records_frame(REF)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A --limit run of both reference agents with a sample log outside the run folder."""
    base = tmp_path_factory.mktemp("wf")
    out, log = base / "run", base / "private" / "samples.jsonl"
    res = runner.invoke(
        app,
        [
            "run", "live", "-m", "layerlab/extractive", "-m", "layerlab/cautious",
            "--out", str(out), "--limit", "9", "--scenario", "clean", "--scenario",
            "wrong_session", "--sample-log", str(log), "--no-progress",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return out, log


# --- --limit -----------------------------------------------------------------------------------


def test_limit_is_stratified_by_domain_and_policy_and_seeded(corpus: corpus_mod.Corpus) -> None:
    n_domains = len({t.domain for t in corpus.tasks})
    ids = stratified_tasks(corpus.tasks, n_domains)
    assert len(ids) == n_domains
    assert len({i.rsplit("-", 2)[0] for i in ids}) == n_domains  # one task per domain
    assert stratified_tasks(corpus.tasks, n_domains) == ids  # same seed, same tasks
    assert stratified_tasks(corpus.tasks, n_domains, seed=1) != ids
    policies = {t.policy_id for t in corpus.tasks}
    many = stratified_tasks(corpus.tasks, len(policies))
    by_task = {t.task_id: t for t in corpus.tasks}
    # every policy unit once before any gives a second variant
    assert {by_task[i].policy_id for i in many} == policies
    counts = Counter(by_task[i].domain for i in stratified_tasks(corpus.tasks, 20))
    assert max(counts.values()) - min(counts.values()) <= 1
    assert stratified_tasks(corpus.tasks, 10_000) == tuple(t.task_id for t in corpus.tasks)
    with pytest.raises(ValueError, match="--limit"):
        stratified_tasks(corpus.tasks, 0)


# --- results.json ------------------------------------------------------------------------------


def test_results_match_the_records_and_keep_baselines_apart(ref_frame: pd.DataFrame) -> None:
    res = results.summarize(ref_frame)
    assert {(m["provider"], m["model"]) for m in res["models"]} == {
        ("layerlab", "cautious"),
        ("layerlab", "extractive"),
    }
    assert all(m["reference_agent"] for m in res["models"])
    ext = next(m for m in res["models"] if m["model"] == "extractive")
    sub = ref_frame[(ref_frame["model"] == "extractive") & (ref_frame["mitigation"] == "repair")]
    cell = ext["arms"]["repair"]
    assert cell["S"]["k"] == int(sub["success"].sum()) and cell["S"]["n"] == len(sub)
    assert cell["S"]["ci_low"] <= cell["S"]["rate"] <= cell["S"]["ci_high"]
    assert cell["safe"]["k"] == int(sub["safe_resolution"].sum())
    assert cell["GF"]["k"] == int(sub["grounded_false_positive"].sum())
    drift = ext["by_scenario"]["schema_drift"]
    assert drift["strict"]["S"]["rate"] < drift["repair"]["S"]["rate"]
    # an arm's records pool nine scenarios of the same tasks: its interval is clustered by task,
    # never narrower than the one that takes every record as independent...
    lo, hi = stats.wilson(cell["S"]["k"], cell["S"]["n"])
    assert cell["S"]["ci_high"] - cell["S"]["ci_low"] >= round(hi - lo, 4) - 1e-4
    # ...and as wide as the tasks' when a task's scenarios all agree
    tasks = sub["task_id"].unique()
    agree = sub.assign(success=sub["task_id"].isin(tasks[::2]))
    r = results.rate(agree, "success")
    n_t = len(tasks)
    expected = stats.clopper_pearson(r["rate"] * n_t, n_t)  # (up to the factor G/(G-1))
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(expected, abs=1e-3)
    assert r["ci_high"] - r["ci_low"] > 2.5 * (stats.wilson(r["k"], r["n"])[1] - stats.wilson(r["k"], r["n"])[0])
    zero = results.rate(sub.assign(success=False), "success")  # no success: the bound is the
    assert zero["ci_high"] == round(stats.clopper_pearson(0, n_t)[1], 4)  # tasks', not records'
    # the table shows the baseline arm first, and models apart from reference agents
    assert list(cells.results_table(res, reference=True)["arm"][:2]) == ["strict", "repair"]
    assert cells.results_table(res, reference=False).empty


def test_failure_shares_and_error_summary(ref_frame: pd.DataFrame) -> None:
    df = ref_frame[ref_frame["model"] == "extractive"].copy()
    df["provider"], df["model"] = "openai", "m"
    hit = df.index[df["reached_reader"]][:3]
    df.loc[hit, "diagnostic"] = "provider_error"
    res = results.summarize(df)
    m = res["models"][0]
    assert not m["reference_agent"]
    assert sum(c["provider_error"]["k"] for c in m["arms"].values()) == 3
    (line,) = results.error_summary(res)
    assert line.startswith("openai/m: 3 provider error of")


def test_run_live_prints_results_and_writes_results_json(small_run: tuple[Path, Path]) -> None:
    out, _ = small_run
    res = json.loads((out / results.RESULTS).read_text())
    assert res["complete"] and res["records"] == 2 * 2 * 2 * 9
    recs = archive.read_records(out / archive.ARCHIVE)
    assert len({r.task_id for r in recs}) == 9
    assert len({r.task_id.rsplit("-", 2)[0] for r in recs}) == 8  # every domain
    assert res == results.for_run(out)  # deterministic: same records, same results
    text = (out / results.RESULTS).read_text()
    for k in ('"question"', '"expected"', '"reply"', '"answer"', '"reasons"'):
        assert k not in text  # aggregates only


# --- the private sample log --------------------------------------------------------------------


def test_sample_log_holds_the_path_and_verdict_and_stays_private(
    small_run: tuple[Path, Path],
) -> None:
    out, log = small_run
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    entries = samplelog.read(log)
    recs = {archive.sort_key(r): r for r in archive.read_records(out / archive.ARCHIVE)}
    assert {tuple(e[k] for k in archive.KEYS) for e in entries} == set(recs)
    for e in entries:
        r = recs[tuple(e[k] for k in archive.KEYS)]
        assert e["verdict"]["success"] == r.success and e["diagnostic"] == r.diagnostic
        assert e["outcome"] == samplelog.outcome(r)
        assert set(e["reasons"]) == {"E", "R", "G", "V", "S", "grounded", "answer"}
        assert e["question"]
        if r.reached_reader:
            assert e["reply"] and e["evidence"]
    ws = [e for e in entries if e["scenario"] == "wrong_session" and e["model"] == "extractive"]
    assert any(e["outcome"] == "grounded_wrong" for e in ws)
    # nothing of the log is in the run folder
    for f in out.rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl") and ".cache" not in f.parts:
            assert '"reasons"' not in f.read_text()


def test_sample_log_refused_inside_the_run_folder(tmp_path: Path) -> None:
    res = runner.invoke(
        app,
        [
            "run", "live", "-m", "layerlab/extractive", "--out", str(tmp_path / "run"),
            "--limit", "1", "--sample-log", str(tmp_path / "run" / "s.jsonl"), "--no-progress",
        ],
    )  # fmt: skip
    assert res.exit_code == 1
    assert "inside the run folder" in res.output
    assert not (tmp_path / "run" / "s.jsonl").exists()


def test_sample_log_of_another_run_is_not_appended_to(tmp_path: Path) -> None:
    """Issue 46: a second run's entries were appended silently to a log of another run; they go
    to a log of their own named by the run id, and the run says so. A resume appends."""
    log = tmp_path / "logs" / "s.jsonl"

    def run(out: str, *more: str) -> str:
        res = runner.invoke(app, ["run", "live", "-m", "layerlab/extractive", "--tasks",
                                  "hr-01-q1", "--scenario", "clean", *more, "--no-progress",
                                  "--out", str(tmp_path / out), "--sample-log", str(log)])  # fmt: skip
        assert res.exit_code == 0, res.output
        return res.output

    run("a")
    first = log.read_bytes()
    run("a", "--resume")
    assert log.read_bytes().startswith(first)  # the same run: appended (a resume)
    said = run("b", "--scenario", "stale_index")
    theirs = archive.read_manifest(tmp_path / "a")["run_id"]
    ours = archive.read_manifest(tmp_path / "b")["run_id"]
    assert log.read_bytes().startswith(first) and {e["run_id"] for e in samplelog.read(log)} == {theirs}
    own = log.with_name(f"s.{ours}.jsonl")
    assert {e["run_id"] for e in samplelog.read(own)} == {ours}
    assert stat.S_IMODE(own.stat().st_mode) == 0o600
    assert f"note: --sample-log {log} holds run {theirs}'s entries, not this run's ({ours})" in said
    assert f"sample log: {own} (" in said


def test_sample_log_reader_names_a_bad_line(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text('{"a": 1}\n')
    with pytest.raises(samplelog.SampleLogError, match=r"s.jsonl:1: not a sample-log entry"):
        samplelog.read(p)


# --- the HTML report ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def report_html() -> str:
    return report.build([REF, STUDY])


def test_report_from_the_committed_archives_has_its_sections(report_html: str) -> None:
    for sid, _ in report.SECTIONS:  # no model records: no "Results by model" section
        assert (f'<section id="{sid}">' in report_html) == (sid != "models"), sid
    # reference agents are a labelled baseline block, not model results
    assert "No model records in these archives" in report_html
    baseline = report_html.split('<section id="baselines">')[1].split("</section>")[0]
    assert "not models" in baseline and "layerlab/extractive" in baseline
    # per-model x scenario breakdown and the study
    scen = report_html.split('<section id="scenarios">')[1].split("</section>")[0]
    assert scen.count("<table") == 2 and "wrong_session" in scen
    assert "uncontrolled" in report_html.split('<section id="study">')[1]
    # provenance names the runs, their checksums and spec hashes
    prov = report_html.split('<section id="provenance">')[1]
    for p in (REF, STUDY):
        m = archive.read_manifest(p)
        assert m["run_id"] in prov
        assert archive.provenance_of(m)["corpus_spec"] in prov
    assert archive.read_manifest(REF)["files"]["records.parquet"] in prov
    # figures embedded, nothing fetched from anywhere
    assert report_html.count('src="data:image/png;base64,') >= 1
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", report_html)
    assert "<script src" not in report_html


def test_report_is_deterministic_and_shows_models_apart(
    tmp_path: Path, ref_frame: pd.DataFrame, report_html: str
) -> None:
    assert report.build([REF, STUDY]) == report_html
    # a "model" archive next to the baselines: its own table, never pooled with the agents
    df = ref_frame[ref_frame["model"] == "extractive"].drop(columns=INPUT)
    df["provider"], df["model"], df["run_id"] = "local", "tiny-model", "live-0000000000000000"
    recs = [archive.Record(**row) for row in df.to_dict("records")]
    archive.write_records(tmp_path / "m.parquet", recs)
    html = report.build([REF, tmp_path / "m.parquet"])
    models = html.split('<section id="models">')[1].split("</section>")[0]
    assert "local/tiny-model" in models and "layerlab/" not in models
    baseline = html.split('<section id="baselines">')[1].split("</section>")[0]
    assert "local/tiny-model" not in baseline


def test_report_cli_writes_one_file_and_fails_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(REF), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = runner.invoke(app, ["report", str(tmp_path / "nope"), "--out", str(tmp_path / "x.html")])
    assert bad.exit_code == 1 and "does not exist" in bad.output
    assert not (tmp_path / "x.html").exists()


# --- the viewer --------------------------------------------------------------------------------


def test_viewer_from_a_sample_log_is_private_and_self_contained(
    small_run: tuple[Path, Path], tmp_path: Path
) -> None:
    _, log = small_run
    out = viewer.write([log], tmp_path / "v.html")
    html = out.read_text()
    assert 'class="private"' in html and stat.S_IMODE(out.stat().st_mode) == 0o600
    for f in ("run_id", "model", "scenario", "mitigation", "outcome", "diagnostic"):
        assert f'id="f-{f}"' in html
    data = json.loads(html.split('id="records">')[1].split("</script>")[0].replace("<\\/", "</"))
    assert len(data) == len(samplelog.read(log))
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)


def test_viewer_from_an_archive_has_labels_and_public_questions_only(tmp_path: Path) -> None:
    rows, private = viewer.load([REF])
    assert not private and len(rows) == 8640
    assert all("reply" not in r and "expected" not in r for r in rows)
    assert rows[0]["question"]
    assert Counter(r["outcome"] for r in rows)["success"] == int(
        records_frame(REF)["success"].sum()
    )


# --- the data dictionary -----------------------------------------------------------------------


def test_every_column_diagnostic_and_stage_has_an_entry() -> None:
    assert dictionary.missing_entries() == []


def test_a_column_without_an_entry_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    cols = dict(dictionary.RECORD_COLUMNS)
    del cols["diagnostic"]
    monkeypatch.setattr(
        dictionary,
        "ARCHIVES",
        ((*dictionary.ARCHIVES[0][:3], cols, dictionary.ARCHIVES[0][4]), *dictionary.ARCHIVES[1:]),
    )
    assert dictionary.missing_entries() == ["Record archive: column 'diagnostic' has no entry"]


def test_committed_data_dictionary_is_current() -> None:
    committed = (paths.DATA / "DATA_DICTIONARY.md").read_text(encoding="utf-8")
    assert committed == dictionary.render(), "run `layerlab dictionary` and commit"
    for name in archive.SCHEMA.names:
        assert f"| `{name}` |" in committed


def test_annotated_schema_carries_descriptions() -> None:
    s = dictionary.annotated_schema()
    assert s.field("success").metadata[b"description"].startswith(b"strict success")
    assert s.names == archive.SCHEMA.names


# --- the YAML run configuration ----------------------------------------------------------------

CONFIG = """\
models:
  - model: layerlab/extractive
  - model: layerlab/cautious
    max_tokens: 300
defaults: {timeout: 60}
scenarios: [clean, wrong_session]
limit: 3
budget: 1000
"""


def test_run_config_runs_each_model_with_its_settings_and_is_stored(tmp_path: Path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert (out / "run.yaml").read_text() == CONFIG
    assert archive.check_path(out)["records"] == 2 * 2 * 2 * 3
    subs = sorted((out / "runs").iterdir())
    assert [s.name for s in subs] == ["01-layerlab-extractive", "02-layerlab-cautious"]
    settings = [archive.read_manifest(s)["settings"] for s in subs]
    assert [s["max_tokens"] for s in settings] == [600, 300]
    assert all(s["timeout_s"] == 60.0 for s in settings)
    res_json = json.loads((out / results.RESULTS).read_text())
    assert {m["model"] for m in res_json["models"]} == {"extractive", "cautious"}


def test_run_config_with_shared_settings_is_one_run(tmp_path: Path, corpus: corpus_mod.Corpus) -> None:
    from layerlab.harness.runconfig import RunConfigSpec, plan

    spec = RunConfigSpec.model_validate(
        {"models": [{"model": "openai/a", "api_base": ["http://h:1/v1"]}, {"model": "openai/b"}]}
    )
    groups = plan(spec, ["clean"], corpus.tasks)
    assert [g.models for g in groups] == [("openai/a",), ("openai/b",)]  # own endpoints
    assert groups[0].config.settings.api_bases == ("http://h:1/v1",)
    spec = RunConfigSpec.model_validate({"models": [{"model": "openai/a"}, {"model": "openai/b"}]})
    (g,) = plan(spec, ["clean"], corpus.tasks)
    assert g.models == ("openai/a", "openai/b") and g.folder == ""


def test_bad_run_config_names_file_line_and_field_and_writes_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("models:\n  - model: layerlab/extractive\n    api_key: sk-x\nlimit: 0\n")
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out)])
    assert res.exit_code == 1
    assert f"{cfg}:3: models[0].api_key: unknown key" in res.output
    assert f"{cfg}:4: limit:" in res.output
    assert not out.exists()
    cfg.write_text("models:\n  - model: layerlab/extractive\nscenarios: [clean, nope]\n")
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out)])
    assert f"{cfg}:3: scenarios[1]: unknown scenario 'nope'" in res.output
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out), "--budget", "3"])
    assert res.exit_code == 1 and "--budget: set it in the run configuration" in res.output
    assert not out.exists()


# --- reproduce: quick and progress -------------------------------------------------------------


def test_quick_leaves_out_only_notebooks_that_exist() -> None:
    from layerlab.reporting.paper import reproduce

    names = {nb.name for nb in reproduce.notebooks()}
    assert reproduce.QUICK_SKIP <= names
    # every setting --quick lowers reaches each notebook that declares it, and no other
    quick = {nb.name: reproduce.quick_parameters(nb) for nb in reproduce.notebooks()}
    assert {n for n, p in quick.items() if "n_boot" in p} >= {
        "06_bootstrap_intervals.ipynb", "09_specificity_matrix.ipynb", "12_agent_mode.ipynb",
        "13_user_pipeline.ipynb",
    }
    assert "n_boot" not in quick["11_real_models.ipynb"]  # it declares none


def test_eta_uses_last_timings_then_the_mean_so_far() -> None:
    from layerlab.reporting.paper.reproduce import eta

    assert eta({}, ["a", "b"], {"a": 3.0, "b": 4.0}) == 7.0
    assert eta({"x": 2.0, "y": 4.0}, ["a", "new"], {"a": 10.0}) == 13.0
    assert eta({}, ["new"], {}) is None
    assert eta({"x": 1.0}, [], {}) == 0.0


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium here")
def test_viewer_filters_and_verdict_first_in_headless_chromium(
    small_run: tuple[Path, Path], tmp_path: Path
) -> None:
    import subprocess

    _, log = small_run
    page_ = viewer.write([log], tmp_path / "v.html")
    url = f"file://{page_}#model=layerlab/extractive&scenario=wrong_session&outcome=grounded_wrong"
    dom = subprocess.run(
        [
            str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--dump-dom", url,
        ],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    want = [
        e
        for e in samplelog.read(log)
        if e["model"] == "extractive"
        and e["scenario"] == "wrong_session"
        and e["outcome"] == "grounded_wrong"
    ]
    assert want
    assert f"{len(want)} of {len(samplelog.read(log))} records" in dom
    listing = dom.split('<div id="list">')[1].split("<script")[0]
    cards = listing.split('<details class="rec"')[1:]
    assert len(cards) == len(want)
    first = cards[0]
    # the verdict comes before the path, and the path is collapsed
    assert first.index("Verdict") < first.index('class="path"')
    assert '<details class="path">' in first


def test_reproduce_refuses_zero_jobs() -> None:
    from layerlab.reporting.paper import reproduce

    with pytest.raises(ValueError, match="--jobs"):
        reproduce.run(quick=True, jobs=0)


# --- the notebook explorer (layerlab.reporting.records.explore.browser / records_html) ---------------------------


def _blocks(html: str) -> list[str]:
    return html.split('<details class="rec"')[1:]


def test_notebook_explorer_reads_a_sample_log_verdict_first_path_below(
    small_run: tuple[Path, Path],
) -> None:
    from layerlab.reporting.records import explore

    _, log = small_run
    rows = explore.load_rows(log)
    hits = explore.select(rows, model="layerlab/extractive", scenario="wrong_session", outcome="grounded_wrong")
    assert hits and all(r["outcome"] == "grounded_wrong" for r in hits)
    html = explore.records_html(hits, shown=len(hits))
    assert f"{len(hits)} record(s)" in html and "Private" in html
    blocks = _blocks(html)
    assert len(blocks) == len(hits)
    for b, r in zip(blocks, hits, strict=True):
        summary = b.split("</summary>", 1)[0]
        assert "grounded_wrong" in summary and "S ✗" in summary and "session_state" in summary
        # verdict (reasons, reply, expected) first; the path (question, evidence, raw reply) below, collapsed
        assert b.index("Verdict") < b.index("<b>expected</b>") < b.index('<details class="path">')
        path = b.split('<details class="path">', 1)[1]
        assert r["question"] in path.replace("&#x27;", "'") and "raw reply" in path and "<table>" in path
    assert blocks[0].startswith(" open>") and not blocks[1:2] or not blocks[1].startswith(" open>")


def test_notebook_explorer_reads_an_archive_and_filters_with_widgets(
    small_run: tuple[Path, Path],
) -> None:
    from layerlab.reporting.records import explore

    out, log = small_run
    ui = explore.browser([out, log])
    source, grid, _pager, view = ui.children
    boxes = grid.children
    by = {b.description: b for b in boxes}
    assert set(by) == {"run", "model", "scenario", "mitigation", "outcome", "diagnostic"}
    assert "archive record: no reply" in view.value and "Private" not in view.value
    rows = explore.load_rows(out)
    assert len(rows) == len(archive.read_records(out / archive.ARCHIVE))
    start = explore.first_failure(rows)  # it opens on a failure, when the source has one
    assert by["outcome"].value == start.get("outcome", "")
    assert f"{len(explore.select(rows, **start))} record(s)" in view.value
    assert "recomputed from the corpus" in view.value  # an archived record's evidence
    by["scenario"].value = "wrong_session"
    by["outcome"].value = "grounded_wrong"
    want = explore.select(explore.load_rows(out), scenario="wrong_session", outcome="grounded_wrong")
    assert f"{len(want)} record(s)" in view.value
    source.value = log  # the sample log keeps the chosen filters where they apply
    assert "Private" in view.value and f"{len(want)} record(s)" in view.value
    assert by["model"].options[0] == ("all", "")
    with pytest.raises(KeyError, match="unknown filter"):
        explore.select([], colour="red")


# --- run configuration: every run-live setting a paper needs ------------------------------------


def test_run_config_takes_error_rate_retry_seed_seed_and_sample_log(tmp_path: Path) -> None:
    cfg = tmp_path / "conf" / "run.yaml"
    cfg.parent.mkdir()
    cfg.write_text(
        "models:\n  - model: layerlab/extractive\nscenarios: [clean]\nlimit: 2\nepochs: 2\n"
        "defaults: {seed: 5, response_format: none}\nmax_error_rate: 0.05\nretry_seed: 3\n"
        "sample_log: private/samples.jsonl\n"
    )
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    m = archive.read_manifest(out)
    # a reference agent's epochs would be identical: asked once, the manifest says why
    assert m["epochs"]["requested"] == 2 and m["epochs"]["run"] == {"layerlab/extractive": 1}
    assert m["replicates"] == 1 and m["seed"] == 5 and m["records"] == 2 * 2
    log = cfg.parent / "private" / "samples.jsonl"  # relative to the configuration's folder
    assert len(samplelog.read(log)) == m["records"]
    assert (out / "run.yaml").read_text() == cfg.read_text()


def test_run_config_rejects_a_bad_error_rate_and_owns_its_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("models:\n  - model: layerlab/extractive\nmax_error_rate: 1.5\nretry_seed: x\n")
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out)])
    assert res.exit_code == 1
    assert f"{cfg}:3: max_error_rate:" in res.output and f"{cfg}:4: retry_seed:" in res.output
    cfg.write_text("models:\n  - model: layerlab/extractive\n")
    for flag, value in (("--max-error-rate", "0.5"), ("--retry-seed", "2"), ("--sample-log", str(tmp_path / "s.jsonl"))):
        res = runner.invoke(app, ["run", "live", "--config", str(cfg), "--out", str(out), flag, value])
        assert res.exit_code == 1 and f"{flag}: set it in the run configuration" in res.output
    assert not out.exists()


def test_make_help_fits_80_columns_and_lists_every_documented_target() -> None:
    """``make help`` is what a newcomer reads first: every target with a ``##`` line, wrapped
    to 80 columns, in the project's words (no tracker references)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-s", "help"], cwd=paths.ROOT, capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    documented = re.findall(r"^([a-z-]+):.*## ", (paths.ROOT / "Makefile").read_text(), re.M)
    listed = re.findall(r"^  make (\S+)", out, re.M)
    assert listed == documented and len(documented) > 10
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert not re.search(r"\bissue\b", out, re.I)

"""Bad inputs and broken setups fail loudly and cleanly (issue 13: no silent failures).

Every case asserts what a user relies on: a non-zero exit, exactly one line on stderr naming
the file or flag and what was expected, no traceback, and nothing written (no run folder, no
output tables). Commands run in-process through :func:`layerlab.cli.main` (the console entry
point); a few run as real subprocesses to prove the module entry points.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from layerlab import archive, paths
from layerlab.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai import FakeOpenAI  # noqa: E402

REF = paths.ARCHIVES / "reference_agents"
ONE = ["--tasks", "hr-01-q1,hr-01-q2", "--scenario", "clean", "--no-progress"]


def _fails(
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    names: str,
    *,
    untouched: tuple[Path, ...] = (),
    code: int | None = None,
) -> str:
    """Run the CLI; assert a non-zero exit, one stderr line naming ``names``, no traceback and
    that every path in ``untouched`` still does not exist. Return the line."""
    rc = main(args)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc != 0, (out, err)
    if code is not None:
        assert rc == code, (rc, err)
    assert len(lines) == 1, err
    assert names in lines[0], lines[0]
    assert "Traceback" not in out + err
    for p in untouched:
        assert not p.exists(), f"{p} was written"
    return lines[0]


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-placeholder")
    with FakeOpenAI() as srv:
        yield srv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- setup errors stop a live run before any record ------------------------------------------


@pytest.mark.parametrize(
    ("model", "names"),
    [
        ("foo/bar", "unknown provider"),
        ("layerlab/nope", "--model: unknown reference agent 'layerlab/nope'"),
    ],
)
def test_misspelt_model_is_a_setup_error(capsys, tmp_path, model, names) -> None:
    out = tmp_path / "run"
    _fails(capsys, ["run", "live", "-m", model, "--out", str(out), *ONE], names, untouched=(out,))


def test_model_unknown_to_the_server_is_a_setup_error(capsys, tmp_path, server) -> None:
    out = tmp_path / "run"
    line = _fails(
        capsys,
        ["run", "live", "-m", "openai/nosuch", "--api-base", server.base, "--out", str(out), *ONE],
        "openai/nosuch: not found (404)",
        untouched=(out,),
    )
    assert "--api-base" in line
    assert server.requests == 1  # a 404 is not retried


def test_dead_endpoint_is_a_setup_error(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-placeholder")
    out = tmp_path / "run"
    base = f"http://127.0.0.1:{_free_port()}/v1"
    _fails(
        capsys,
        ["run", "live", "-m", "openai/good", "--api-base", base, "--backoff", "0.01"]
        + ["--out", str(out), *ONE],
        "preflight call failed after 3 attempt(s) at the local --api-base",
        untouched=(out,),
    )


def test_missing_key_for_a_local_server_is_a_setup_error(capsys, tmp_path, monkeypatch) -> None:
    with FakeOpenAI() as srv:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        out = tmp_path / "run"
        _fails(
            capsys,
            ["run", "live", "-m", "openai/good", "--api-base", srv.base, "--out", str(out), *ONE],
            "no API key",
            untouched=(out,),
        )
        assert srv.requests == 0


def test_a_model_withdrawn_mid_run_keeps_a_partial_archive_and_says_resume(
    capsys, tmp_path, server
) -> None:
    out = tmp_path / "run"
    line = _fails(
        capsys,
        ["run", "live", "-m", "openai/gone", "--api-base", server.base, "--out", str(out)]
        + ["--tasks", "hr-01-q1,hr-01-q2,hr-01-q3", "--scenario", "clean", "--no-progress"]
        + ["--concurrency", "1"],
        "not found (404)",
    )
    assert "--resume" in line
    assert archive.check_path(out)["partial"] is True


# --- bad flags and files -----------------------------------------------------------------------


def test_bad_live_flags(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"hr-01-q1\n\xff\xfe\n")
    live = ["run", "live", "-m", "layerlab/extractive", "--out", str(out), "--no-progress"]
    cases = [
        (["--budget", "-1"], "--budget: expected a number of calls >= 0, got -1", 1),
        (["--budget", "lots"], "'--budget'", 2),
        (["--tasks", str(empty)], f"--tasks {empty}: no task ids given", 1),
        (["--tasks", str(tmp_path / "nope.txt")], "no such file", 1),
        (["--tasks", str(latin)], "cannot read the file as UTF-8", 1),
        (["--tasks", ","], "--tasks: no task ids given", 1),
        (["--tasks", "hr-99-q1"], "--tasks: unknown task id(s) ['hr-99-q1']", 1),
        (["--tasks", "90 days"], "is not a task id", 1),
        (["--scenario", "sunny"], "--scenario: unknown scenario(s) ['sunny']", 1),
        (["--mode", "lenient"], "--mitigation: unknown mitigation 'lenient'", 1),
        (["--api-base", "localhost:8080"], "--api-base: expected an http(s) URL", 1),
        (["--retry-errors"], "--retry-errors: only with --resume", 1),
        (["--max-error-rate", "2"], "--max-error-rate: expected a share between 0 and 1", 1),
        (["--attempts", "0"], "attempts must be >= 1", 1),
        (["--cache-dir", str(out / "cache")], "inside the run folder", 1),
        (["--concurrency", "0"], "'--concurrency'", 2),
    ]
    for extra, names, code in cases:
        _fails(capsys, live + extra, names, untouched=(out,), code=code)


def test_out_that_is_a_file_or_under_a_file(capsys, tmp_path) -> None:
    f = tmp_path / "taken"
    f.write_text("mine\n")
    for out, names in (
        (f, f"--out {f}: is an existing file, expected a folder"),
        (f / "sub", "is a file, expected a folder"),
    ):
        for args in (
            ["run", "live", "-m", "layerlab/extractive", *ONE, "--out", str(out)],
            ["run", "deterministic", "--out", str(out)],
            ["recompute", str(REF), "--n-boot", "100", "--out", str(out)],
            ["archive", "merge", str(REF), "--out", str(out)],
        ):
            _fails(capsys, args, names)
    assert f.read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_in_a_read_only_folder(capsys, tmp_path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for args in (
            ["run", "live", "-m", "layerlab/extractive", *ONE, "--out", str(ro / "x")],
            ["run", "deterministic", "--out", str(ro / "x")],
            ["recompute", str(REF), "--n-boot", "100", "--out", str(ro / "x")],
        ):
            _fails(capsys, args, "cannot write in", untouched=(ro / "x",))
    finally:
        ro.chmod(0o755)


def test_bad_retriever_and_corpus(capsys, tmp_path) -> None:
    out = tmp_path / "det"
    _fails(
        capsys,
        ["run", "deterministic", "--out", str(out), "--retriever", "bm42"],
        "--retriever: unknown retriever 'bm42'",
        untouched=(out,),
    )
    _fails(
        capsys,
        ["run", "deterministic", "--out", str(out), "--corpus", str(tmp_path / "none")],
        str(tmp_path / "none"),
        untouched=(out,),
    )


def test_spec_files(capsys, tmp_path, good_spec_text) -> None:
    dup = tmp_path / "returns.yaml"
    dup.write_text(good_spec_text.replace("title:", "owner: Twice\ntitle:", 1))
    _fails(capsys, ["spec", "check", str(dup)], f"{dup}:4: owner: duplicate key 'owner'")
    out = tmp_path / "corpus"
    _fails(
        capsys,
        ["corpus", "build", "--spec", str(dup), "--out", str(out)],
        "duplicate key",
        untouched=(out,),
    )
    _fails(capsys, ["spec", "check", str(tmp_path / "missing.yaml")], "cannot read file")
    scen = tmp_path / "scenarios.yaml"
    scen.write_text("scenarios:\n  clean: {}\n  clean: {}\n")
    _fails(capsys, ["scenario", "check", str(scen)], f"{scen}:3:")


# --- archives: partial, mixed, tampered, prose in a column ------------------------------------


def _copy_run(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(REF, dst)
    return dst


def _rewrite_manifest(folder: Path, **changes: object) -> None:
    m = archive.read_manifest(folder)
    m.update(changes)
    m.pop("manifest_sha256", None)
    archive.write_manifest(folder, m)


def test_edited_manifest_fails_check(capsys, tmp_path) -> None:
    run = _copy_run(tmp_path, "run")
    m = json.loads((run / "manifest.json").read_text())
    m["complete"] = False
    (run / "manifest.json").write_text(json.dumps(m))
    _fails(capsys, ["archive", "check", str(run)], "manifest checksum does not match", code=1)
    out = tmp_path / "tables"
    _fails(capsys, ["recompute", str(run), "--out", str(out)], "checksum", untouched=(out,))


def test_partial_archives_are_reported_and_refused_unless_allowed(capsys, tmp_path) -> None:
    run = _copy_run(tmp_path, "run")
    _rewrite_manifest(run, complete=False)
    rc = main(["archive", "check", str(run)])
    out, _ = capsys.readouterr()
    assert rc == 3 and out.startswith(f"PARTIAL {run}: 8640 of 8640 records")
    tables = tmp_path / "tables"
    _fails(
        capsys,
        ["recompute", str(run), "--n-boot", "100", "--out", str(tables)],
        "a partial run (8640 of 8640 records); finish it with --resume or pass --allow-partial",
        untouched=(tables,),
    )
    bare = tmp_path / "bare.parquet"
    shutil.copy(REF / "records.parquet", bare)
    _fails(
        capsys,
        ["recompute", str(bare), "--n-boot", "100", "--out", str(tables)],
        "a bare archive file",
        untouched=(tables,),
    )
    rc = main(["recompute", str(run), "--n-boot", "100", "--allow-partial", "--out", str(tables)])
    capsys.readouterr()
    assert rc == 0
    md = (tables / "table4.md").read_text()
    assert md.startswith("**[PARTIAL: run 8640 records]")
    assert "PARTIAL" in (tables / "table4.csv").read_text().splitlines()[1]


def _subset_run(tmp_path: Path, name: str, model: str, run_id: str, **changes: object) -> Path:
    """A run folder holding one reference agent's records of the committed archive."""
    recs = [
        dataclasses.replace(r, run_id=run_id)
        for r in archive.read_records(REF / "records.parquet")
        if r.model == model
    ]
    m = {
        k: v
        for k, v in archive.read_manifest(REF).items()
        if k not in ("manifest_sha256", "files", "records")
    }
    m.update(run_id=run_id, models=[f"layerlab/{model}"], expected_records=len(recs), **changes)
    archive.write_run(tmp_path / name, recs, m)
    return tmp_path / name


def test_mixed_provenance_is_refused_unless_allowed_then_labelled(capsys, tmp_path) -> None:
    prov = archive.read_manifest(REF)["provenance"]
    a = _subset_run(tmp_path, "a", "extractive", "live-00000000000000aa")
    b = _subset_run(
        tmp_path, "b", "cautious", "live-00000000000000bb", provenance={**prov, "tasks": "f" * 64}
    )
    assert main(["archive", "check", str(a), str(b)]) == 0
    capsys.readouterr()
    merged = tmp_path / "merged"
    line = _fails(
        capsys,
        ["archive", "merge", str(a), str(b), "--out", str(merged)],
        "mixed provenance",
        untouched=(merged,),
    )
    assert prov["tasks"][:12] in line and "f" * 12 in line
    tables = tmp_path / "tables"
    _fails(
        capsys,
        ["recompute", str(a), str(b), "--n-boot", "100", "--out", str(tables)],
        "--allow-mixed",
        untouched=(tables,),
    )
    assert main(["archive", "merge", str(a), str(b), "--allow-mixed", "--out", str(merged)]) == 0
    capsys.readouterr()
    mm = archive.read_manifest(merged)
    assert mm["provenance"]["tasks"] == archive.MIXED and "mixed provenance" in mm["note"]
    assert mm["provenance"]["corpus"] == prov["corpus"]
    assert [s["provenance"]["tasks"] for s in mm["sources"]] == [prov["tasks"], "f" * 64]
    # the merged archive carries its mixture: recompute still wants the flag, then stamps
    _fails(
        capsys,
        ["recompute", str(merged), "--n-boot", "100", "--out", str(tables)],
        "merged from runs with different tasks hashes",
        untouched=(tables,),
    )
    rc = main(["recompute", str(merged), "--n-boot", "100", "--allow-mixed", "--out", str(tables)])
    capsys.readouterr()
    assert rc == 0
    assert "MIXED PROVENANCE: tasks differ" in (tables / "table4.md").read_text()


def test_same_provenance_merges_silently(capsys, tmp_path) -> None:
    a = _subset_run(tmp_path, "a", "extractive", "live-00000000000000aa")
    b = _subset_run(tmp_path, "b", "cautious", "live-00000000000000bb")
    assert main(["archive", "merge", str(a), str(b), "--out", str(tmp_path / "m")]) == 0
    assert "note" not in archive.read_manifest(tmp_path / "m")
    assert (
        archive.read_manifest(tmp_path / "m")["provenance"]
        == archive.read_manifest(REF)["provenance"]
    )


def test_prose_in_an_allowed_string_column_is_refused(capsys, tmp_path) -> None:
    run = _copy_run(tmp_path, "run")
    t = archive.read_table(run / "records.parquet")  # in the current schema
    diag = t.column("diagnostic").to_pylist()
    diag[0] = "The refund window is 90 days"
    t = t.set_column(
        t.schema.get_field_index("diagnostic"), t.schema.field("diagnostic"), pa.array(diag)
    )
    pq.write_table(t, tmp_path / "leak.parquet")
    _fails(
        capsys,
        ["archive", "check", str(tmp_path / "leak.parquet")],
        "column 'diagnostic' holds 1 value(s) outside its allowlist",
    )
    with pytest.raises(archive.ArchiveError, match="outside its allowlist"):
        archive.write_records(
            tmp_path / "w.parquet", [archive.Record(**{**t.slice(0, 1).to_pylist()[0]})]
        )
    assert not (tmp_path / "w.parquet").exists()
    model = t.column("model").to_pylist()
    model[0] = "90 days"
    t2 = archive.read_table(run / "records.parquet")
    t2 = t2.set_column(
        t2.schema.get_field_index("model"), t2.schema.field("model"), pa.array(model)
    )
    pq.write_table(t2, tmp_path / "leak2.parquet")
    _fails(capsys, ["archive", "check", str(tmp_path / "leak2.parquet")], "column 'model'")


# --- entry points ------------------------------------------------------------------------------


def _py(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_module_entry_points_and_version(tmp_path) -> None:
    from layerlab import __version__

    v = _py("-m", "layerlab", "--version")
    assert v.returncode == 0 and v.stdout.strip() == f"layerlab {__version__}"
    r = _py("-m", "layerlab.cli", "archive", "check", str(REF))
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr
    bad = _py("-m", "layerlab", "run", "live", "-m", "layerlab/extractive", "--budget", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "--out" in bad.stderr


def test_a_mostly_failed_run_exits_non_zero_and_recompute_says_so(capsys, tmp_path, server) -> None:
    out = tmp_path / "run"
    args = ["run", "live", "-m", "openai/fading", "--api-base", server.base, "--out", str(out)]
    args += ["--tasks", "hr-01-q1,hr-01-q2", "--scenario", "clean", "--scenario", "schema_drift"]
    args += ["--backoff", "0.01", "--no-progress", "--concurrency", "1"]
    line = _fails(capsys, args, "above --max-error-rate 0.2 for openai/fading", code=4)
    assert "--resume --retry-errors" in line
    m = archive.read_manifest(out)
    errors = m["errors"]["openai/fading"]
    assert m["complete"] is True and errors["provider_error"] == errors["called"] - 1 > 0
    # the errors stay visible downstream
    tables = tmp_path / "tables"
    assert main(["recompute", str(out), "--n-boot", "100", "--out", str(tables)]) == 0
    _, err = capsys.readouterr()
    assert f"{errors['provider_error']} of {m['records']} records are provider_error" in err


# --- issue 25: run-setting values that used to be taken silently -------------------------------


@pytest.mark.parametrize("value", ["-1", "abc", "0", "99999", "1.5"])
def test_a_bad_layerlab_workers_is_one_line_and_writes_nothing(
    capsys, tmp_path, monkeypatch, value
) -> None:
    monkeypatch.setenv("LAYERLAB_WORKERS", value)
    out = tmp_path / "w"
    line = _fails(
        capsys, ["run", "live", "-m", "layerlab/extractive", *ONE, "--out", str(out)],
        "LAYERLAB_WORKERS", untouched=(out,), code=1,
    )  # fmt: skip
    assert "expected a whole number" in line and repr(value) in line


@pytest.mark.parametrize("limit", ["3", "100000"])
def test_a_limit_above_the_tasks_there_are_is_refused(capsys, tmp_path, limit) -> None:
    out = tmp_path / "l"
    line = _fails(
        capsys,
        ["run", "live", "-m", "layerlab/extractive", *ONE, "--limit", limit, "--out", str(out)],
        f"--limit {limit}", untouched=(out,), code=1,
    )  # fmt: skip
    assert "only 2 tasks to choose from" in line


def test_a_limit_above_the_tasks_in_a_run_config_is_refused(capsys, tmp_path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("models:\n  - model: layerlab/extractive\nlimit: 100000\n")
    out = tmp_path / "c"
    line = _fails(capsys, ["run", "live", "--config", str(cfg), "--out", str(out)], "limit: 100000",
                  untouched=(out,), code=1)  # fmt: skip
    assert "to choose from" in line

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
import time
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


@pytest.mark.parametrize("key", ["sk-local-placeholder", None])
def test_dead_endpoint_is_reported_unreachable_in_seconds(capsys, tmp_path, monkeypatch, key):
    # with a key or without, nothing listening is said as such (not "status 500" after the
    # retries, not a missing key), before any call: the default backoff alone would take 6 s
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    for proxy in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    out = tmp_path / "run"
    base = f"http://127.0.0.1:{_free_port()}/v1"
    t0 = time.monotonic()
    _fails(
        capsys,
        ["run", "live", "-m", "openai/good", "--api-base", base, "--out", str(out), *ONE],
        "openai/good: nothing answers at the local --api-base (connection refused)",
        untouched=(out,),
    )
    assert time.monotonic() - t0 < 6.0


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


def test_dense_retriever_without_its_extra_names_the_install_line(
    capsys, tmp_path, monkeypatch
) -> None:
    """Issue 46: ``--retriever dense`` without wordllama read as a bug; it names the extra."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.split(".")[0] == "wordllama" else real(name, *a))  # fmt: skip
    monkeypatch.setitem(sys.modules, "wordllama", None)
    out = tmp_path / "run"
    for args in (["run", "live", "-m", "layerlab/extractive", *ONE],
                 ["run", "deterministic"]):  # fmt: skip
        line = _fails(capsys, [*args, "--retriever", "dense", "--out", str(out)],
                      "needs wordllama (pip install 'layerlab[dense]')", untouched=(out,), code=2)  # fmt: skip
        assert "a bug" not in line


def test_a_retriever_modules_import_error_is_one_redacted_line(
    capsys, tmp_path, monkeypatch
) -> None:
    """Issue 46: a retriever module's import error reached stderr unredacted (a URL's password,
    an ``sk-`` key), though the same text from ``--target`` was hidden."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # nothing written, not even a .pyc
    monkeypatch.chdir(tmp_path)
    pw, key = "hunter2-" + "x7" * 6, "sk-proj-" + "Q7v9XkT2mN4pL8rS1wY6zA3b"
    (tmp_path / "leaky_store_mod.py").write_text(
        f"raise RuntimeError('cannot reach postgres://admin:{pw}@db:5432/vec with {key}')\n"
    )
    out = tmp_path / "run"
    for args in (["run", "live", "-m", "layerlab/extractive", *ONE], ["run", "deterministic"]):
        line = _fails(capsys, [*args, "--retriever", "python:leaky_store_mod:Store", "--out",
                               str(out)], "importing 'leaky_store_mod' failed (RuntimeError: "
                      "cannot reach postgres://(secret: not stored)@db:5432/vec with (secret: not "
                      "stored))", untouched=(out, tmp_path / "__pycache__"), code=2)  # fmt: skip
        assert pw not in line and key not in line
    sys.modules.pop("leaky_store_mod", None)


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
    line = _fails(capsys, args, "above --max-error-rate 0.2: openai/fading: provider_error 5 of 6 records", code=4)
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


# --- issue 25: the bad-input table -------------------------------------------------------------
#
# Each case: the files it needs (name -> text, bytes or a builder taking the test folder), the
# command ({t} is the test folder, {ref} the committed reference archive), the exit code and a
# regex the one stderr line must match: the file or flag and what was expected. Nothing may be
# written: every file under the test folder (the working directory too) is the same after.

Files = dict[str, object]


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    args: str
    pattern: str
    code: int = 1
    files: Files = dataclasses.field(default_factory=dict)
    cache_made: bool = False  # the default reply cache may be created (and nothing else)


def _spec(old: str = "", new: str = "") -> object:
    """The test spec (``tests/fixtures/mini_returns.yaml``) with its first ``old`` made ``new``."""

    def text(_: Path) -> str:
        good = (Path(__file__).parent / "fixtures" / "mini_returns.yaml").read_text()
        assert old in good, old
        return good.replace(old, new, 1)

    return text


def _scen(old: str = "", new: str = "") -> object:
    def text(_: Path) -> str:
        good = paths.SCENARIO_SPEC.read_text()
        assert old in good, old
        return good.replace(old, new, 1)

    return text


def _mitig(old: str = "", new: str = "") -> object:
    def text(_: Path) -> str:
        good = paths.MITIGATION_SPEC.read_text()
        assert old in good, old
        return good.replace(old, new, 1)

    return text


def _roles(old: str = "", new: str = "") -> object:
    def text(_: Path) -> str:
        good = paths.ROLE_SPEC.read_text()
        assert old in good, old
        return good.replace(old, new, 1)

    return text


def _user_corpus(_: Path) -> str:
    return (Path(__file__).parent / "fixtures" / "user_corpus.jsonl").read_text()


def _run_copy(change: object = None) -> object:
    """A copy of the reference archive's run folder, then ``change(folder)``."""

    def build(dst: Path) -> None:
        shutil.copytree(REF, dst)
        if change is not None:
            change(dst)  # type: ignore[operator]

    return build


def _manifest_edit(**changes: object) -> object:
    """Change manifest keys and re-seal it by hand (its checksum matches: only the content is
    wrong, which :func:`archive.write_manifest` would refuse to write)."""
    from layerlab.archive.manifest import manifest_checksum

    def change(run: Path) -> None:
        m = json.loads((run / "manifest.json").read_text())
        m.update(changes)
        m["manifest_sha256"] = manifest_checksum(m)
        (run / "manifest.json").write_text(json.dumps(m))

    return _run_copy(change)


def _truncate_records(run: Path) -> None:
    data = (run / "records.parquet").read_bytes()
    (run / "records.parquet").write_bytes(data[: len(data) // 2])


def _append_records(run: Path) -> None:
    with open(run / "records.parquet", "ab") as fh:
        fh.write(b"\0")


def _write_manifest_text(text: str) -> object:
    return _run_copy(lambda run: (run / "manifest.json").write_text(text))


LIVE = (
    "run live -m layerlab/extractive --tasks hr-01-q1 --scenario clean --no-progress --out {t}/run"
)
CFG = "run live --config {t}/run.yaml --out {t}/run --no-progress"
TGT = "run live --target python:fixtures.user_targets:{} " + ONE[0] + " " + ONE[1] + " --out {{t}}/run --no-progress"
_M = "models:\n  - model: layerlab/extractive\n"

CASES = [
    # spec check / lint / corpus build: one problem per file, named file:line: field
    Case("spec-malformed-yaml", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: not valid YAML",
         files={"returns.yaml": "domain: returns\npolicies: [\n  - {id: x\n"}),
    Case("spec-top-level-list", "spec check {t}/returns.yaml",
         r"returns\.yaml:1: expected a mapping at the top level, got list",
         files={"returns.yaml": "- returns\n"}),
    Case("spec-empty-file", "spec check {t}/returns.yaml",
         r"returns\.yaml:1: expected a mapping at the top level, got NoneType",
         files={"returns.yaml": ""}),
    Case("spec-unknown-key", "spec check {t}/returns.yaml", r"returns\.yaml:2: colour: unknown key",
         files={"returns.yaml": _spec("title:", "colour: blue\ntitle:")}),
    Case("spec-unknown-policy-key", "spec check {t}/returns.yaml",
         r"returns\.yaml:\d+: policies\[0\]\.colour: ",
         files={"returns.yaml": _spec("    topic: Standard", "    colour: blue\n    topic: Standard")}),
    Case("spec-missing-title", "spec check {t}/returns.yaml", r"returns\.yaml:1: title: required field is missing",
         files={"returns.yaml": _spec("title: Returns and refunds\n")}),
    Case("spec-cue-words-a-string", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: cue_words: ",
         files={"returns.yaml": _spec("cue_words: [return, returns, returned, refund, refunds, exchange, rma, restocking]", "cue_words: refund")}),
    Case("spec-duplicate-policy-id", "spec check {t}/returns.yaml",
         r"returns\.yaml:\d+: policies\[1\]\.id: duplicate policy id 'returns-01'",
         files={"returns.yaml": _spec("id: returns-02", "id: returns-01")}),
    Case("spec-bad-answer-kind", "spec check {t}/returns.yaml",
         r"returns\.yaml:\d+: policies\[0\]\.answer_kind: .*duration",
         files={"returns.yaml": _spec("answer_kind: duration", "answer_kind: weeks")}),
    Case("spec-year-a-word", "spec check {t}/returns.yaml",
         r"returns\.yaml:\d+: policies\[0\]\.current\.effective_year: ",
         files={"returns.yaml": _spec("effective_year: 2024", "effective_year: recent")}),
    Case("spec-current-not-later", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: policies\[0\]",
         files={"returns.yaml": _spec("effective_year: 2024", "effective_year: 2019")}),
    Case("spec-question-without-mark", "spec check {t}/returns.yaml",
         r"returns\.yaml:\d+: policies\[0\]: question 'How long .*' must end with '\?'",
         files={"returns.yaml": _spec("send unopened merchandise back?", "send unopened merchandise back")}),
    Case("spec-prose-without-value", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: policies\[0\]",
         files={"returns.yaml": _spec("value: 45 days", "value: 47 days")}),
    Case("spec-bad-id-form", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: policies\[0\]\.id: ",
         files={"returns.yaml": _spec("id: returns-01", "id: Returns 01")}),
    Case("spec-duplicate-key", "spec check {t}/returns.yaml", r"returns\.yaml:\d+: owner: duplicate key 'owner'",
         files={"returns.yaml": _spec("title:", "owner: Twice\ntitle:")}),
    Case("spec-domain-not-file-name", "spec check {t}/refunds.yaml",
         r"^error: \S+refunds\.yaml:1: domain: domain 'returns' must match the file name 'refunds'",
         files={"refunds.yaml": _spec()}),
    Case("spec-missing-file", "spec check {t}/nope.yaml", r"nope\.yaml: cannot read file \(.*No such file"),
    Case("spec-folder-without-yaml", "spec check {t}/empty", r"empty: no \*\.yaml spec files found",
         files={"empty/notes.txt": "x\n"}),
    Case("spec-not-utf8", "spec check {t}/returns.yaml", r"returns\.yaml:1: not UTF-8 text \(byte 0xe9\)",
         files={"returns.yaml": b"domain: r\xe9turns\n"}),
    Case("lint-malformed-yaml", "spec lint {t}/returns.yaml", r"returns\.yaml:\d+: not valid YAML",
         files={"returns.yaml": "domain: [\n"}),
    Case("lint-missing-file", "spec lint {t}/nope.yaml", r"nope\.yaml: cannot read file \(.*No such file"),
    Case("lint-unknown-key", "spec lint {t}/returns.yaml", r"returns\.yaml:2: colour: unknown key",
         files={"returns.yaml": _spec("title:", "colour: blue\ntitle:")}),
    Case("lint-domain-not-file-name", "spec lint {t}/refunds.yaml", r"refunds\.yaml:1: domain: ",
         files={"refunds.yaml": _spec()}),
    Case("build-malformed-spec", "corpus build --spec {t}/returns.yaml --out {t}/corpus",
         r"returns\.yaml:\d+: not valid YAML", files={"returns.yaml": "domain: [\n"}),
    Case("build-duplicate-id", "corpus build --spec {t}/returns.yaml --out {t}/corpus",
         r"duplicate policy id 'returns-01'",
         files={"returns.yaml": _spec("id: returns-02", "id: returns-01")}),
    Case("build-missing-spec", "corpus build --spec {t}/nope --out {t}/corpus", r"nope: cannot read file \(.*No such file"),
    Case("build-out-a-file", "corpus build --out {t}/taken", r"--out \S+taken: is an existing file, expected a folder",
         files={"taken": "mine\n"}),
    Case("build-domain-not-file-name", "corpus build --spec {t}/refunds.yaml --out {t}/corpus",
         r"refunds\.yaml:1: domain: domain 'returns' must match", files={"refunds.yaml": _spec()}),
    # issue 34, item 1: a corpus command replaces only a corpus folder; anything else is refused
    Case("build-over-a-run-folder", "corpus build --out {t}/run",
         r"^error: \S+run: not empty and not a corpus folder \(its manifest\.json is an archive's, kind 'live'\); .*; nothing changed$",
         files={"run": _run_copy()}),
    Case("import-over-a-run-folder", "corpus import {t}/mine.jsonl --out {t}/run",
         r"^error: \S+run: not empty and not a corpus folder \(its manifest\.json is an archive's, kind 'live'\); .*; nothing changed$",
         files={"mine.jsonl": _user_corpus, "run": _run_copy()}),
    Case("import-over-a-folder-with-a-manifest", "corpus import {t}/mine.jsonl --out {t}/webapp",
         r"^error: \S+webapp: not empty and not a corpus folder \(its manifest\.json is not a corpus manifest\); .*; nothing changed$",
         files={"mine.jsonl": _user_corpus, "webapp/manifest.json": "{}\n", "webapp/src/app.js": "x\n"}),
    Case("import-over-a-folder-without-a-manifest", "corpus import {t}/mine.jsonl --out {t}/notes",
         r"^error: \S+notes: not empty and not a corpus folder \(no manifest\.json; holds 'todo\.txt'\); .*; nothing changed$",
         files={"mine.jsonl": _user_corpus, "notes/todo.txt": "mine\n"}),
    Case("import-over-a-broken-manifest", "corpus import {t}/mine.jsonl --out {t}/half",
         r"^error: \S+half: not empty and not a corpus folder \(its manifest\.json is not valid JSON\); .*; nothing changed$",
         files={"mine.jsonl": _user_corpus, "half/manifest.json": '{"corpus": '}),
    Case("build-over-a-corpus-folder-with-other-files", "corpus build --out {t}/corpus",
         r"^error: \S+corpus: a corpus folder that also holds 'notes\.txt', which replacing it would delete; .*; nothing changed$",
         files={"corpus": lambda p: shutil.copytree(paths.CORPUS_DIR, p) and None, "corpus/notes.txt": "mine\n"}),
    Case("import-out-a-file", "corpus import {t}/mine.jsonl --out {t}/taken",
         r"--out \S+taken: is an existing file, expected a folder", files={"mine.jsonl": _user_corpus, "taken": "mine\n"}),
    # scenario check / list, and the roles file
    Case("scen-unknown-operator", "scenario check {t}/s.yaml", r"s\.yaml:26: scenarios\[1\]\.faults\[0\]\.op: unknown fault operator 'nosuch'; expected one of",
         files={"s.yaml": _scen("op: serve_superseded", "op: nosuch")}),
    Case("scen-bad-param-type", "scenario check {t}/s.yaml", r"s\.yaml:\d+: .*stringify_numbers",
         files={"s.yaml": _scen("stringify_numbers: true", "stringify_numbers: sometimes")}),
    Case("scen-unknown-param", "scenario check {t}/s.yaml", r"s\.yaml:40: scenarios\[2\]\.faults\[0\]\.params\.colour: unknown parameter \(operator 'reshape_payload'\)",
         files={"s.yaml": _scen("stringify_numbers: true", "stringify_numbers: true\n          colour: blue")}),
    Case("scen-answerable-a-word", "scenario check {t}/s.yaml", r"s\.yaml:17: scenarios\[0\]\.answerable: expected bool, got str",
         files={"s.yaml": _scen("answerable: true", "answerable: perhaps")}),
    Case("scen-duplicate-name", "scenario check {t}/s.yaml", r"s\.yaml:\d+: .*duplicate.*clean",
         files={"s.yaml": _scen("name: stale_index", "name: clean")}),
    Case("scen-missing-name", "scenario check {t}/s.yaml", r"s\.yaml:20: scenarios\[1\]\.name: required field is missing",
         files={"s.yaml": _scen("  - name: stale_index\n    layer", "  - layer")}),
    Case("scen-lasts-zero", "scenario check {t}/s.yaml", r"s\.yaml:35: scenarios\[2\]\.faults\[0\]\.lasts: .*greater than or equal to 1",
         files={"s.yaml": _scen("      - op: reshape_payload\n", "      - op: reshape_payload\n        lasts: 0\n")}),
    Case("scen-malformed-yaml", "scenario check {t}/s.yaml", r"s\.yaml:\d+: not valid YAML",
         files={"s.yaml": "scenarios: [\n"}),
    Case("scen-missing-file", "scenario check {t}/nope.yaml", r"nope\.yaml: cannot read file"),
    Case("scen-list-unknown-operator", "scenario list {t}/s.yaml", r"s\.yaml:26: scenarios\[1\]\.faults\[0\]\.op: unknown fault operator 'nosuch'",
         files={"s.yaml": _scen("op: serve_superseded", "op: nosuch")}),
    Case("roles-unknown-scenario", "scenario check --roles {t}/roles.yaml",
         r"roles\.yaml:\d+: contract_target: unknown scenario 'schema_drfit'",
         files={"roles.yaml": _roles("contract_target: schema_drift", "contract_target: schema_drfit")}),
    Case("roles-unknown-scenario-in-a-list", "scenario check --roles {t}/roles.yaml",
         r"roles\.yaml:\d+: audit\[1\]: unknown scenario 'sunny'",
         files={"roles.yaml": _roles("audit: [clean, conflicting_evidence", "audit: [clean, sunny")}),
    Case("roles-unknown-key", "scenario check --roles {t}/roles.yaml", r"roles\.yaml:13: colour: unknown key",
         files={"roles.yaml": _roles("negative_control: clean", "negative_control: clean\ncolour: blue")}),
    Case("roles-missing-file", "scenario check --roles {t}/nope.yaml", r"nope\.yaml: cannot read file"),
    # mitigation list / run
    Case("mitig-unknown-kind", "mitigation list {t}/m.yaml", r"m\.yaml:27: mitigations\[5\]\.kind: unknown mitigation kind 'nosuch'; expected one of",
         files={"m.yaml": _mitig("kind: access_abstention", "kind: nosuch")}),
    Case("mitig-bad-param", "mitigation list {t}/m.yaml", r"m\.yaml:19: mitigations\[2\]\.params\.requeries: .*valid integer",
         files={"m.yaml": _mitig("params: {requeries: 1}", "params: {requeries: many}")}),
    Case("mitig-unknown-param", "mitigation list {t}/m.yaml", r"m\.yaml:19: mitigations\[2\]\.params\.colour: unknown parameter \(kind 'freshness_guard'\)",
         files={"m.yaml": _mitig("params: {requeries: 1}", "params: {requeries: 1, colour: blue}")}),
    Case("mitig-unknown-baseline", "mitigation list {t}/m.yaml", r"m\.yaml:\d+: baseline: .*nosuch",
         files={"m.yaml": _mitig("baseline: strict", "baseline: nosuch")}),
    Case("mitig-duplicate-name", "mitigation list {t}/m.yaml", r"m\.yaml:\d+: .*duplicate.*repair",
         files={"m.yaml": _mitig("  - name: freshness_guard", "  - name: repair")}),
    Case("mitig-malformed-yaml", "mitigation list {t}/m.yaml", r"m\.yaml:\d+: not valid YAML",
         files={"m.yaml": "mitigations: [\n"}),
    Case("mitig-missing-file", "mitigation list {t}/nope.yaml", r"nope\.yaml: cannot read file"),
    Case("mitig-run-unknown-arm", "mitigation run --mitigation nosuch --out {t}/mx", r"--mitigation: unknown mitigation 'nosuch'.*; known: "),
    Case("mitig-run-unknown-reader", "mitigation run --reader nosuch --out {t}/mx",
         r"--reader: unknown reader 'nosuch'; known: \['cautious', 'extractive'\]"),
    Case("mitig-run-bad-spec", "mitigation run --spec {t}/m.yaml --out {t}/mx", r"m\.yaml:27: mitigations\[5\]\.kind: unknown mitigation kind 'nosuch'",
         files={"m.yaml": _mitig("kind: access_abstention", "kind: nosuch")}),
    Case("mitig-run-out-a-file", "mitigation run --out {t}/taken", r"--out \S+taken: is an existing file",
         files={"taken": "mine\n"}),
    # run deterministic
    Case("det-unknown-mitigation", "run deterministic --mitigation nosuch --out {t}/d", r"--mitigation: unknown mitigation 'nosuch'.*; known: "),
    Case("det-unknown-retriever", "run deterministic --retriever bm42 --out {t}/d",
         r"--retriever: unknown retriever 'bm42'", code=2),
    Case("det-unknown-retriever-module", "run deterministic --retriever python:no_such_rag:Store --out {t}/d",
         r"--retriever python:no_such_rag:Store: no module named 'no_such_rag'", code=2),
    Case("det-bad-scenarios-file", "run deterministic --scenarios {t}/s.yaml --out {t}/d",
         r"s\.yaml:26: scenarios\[1\]\.faults\[0\]\.op: unknown fault operator 'nosuch'", files={"s.yaml": _scen("op: serve_superseded", "op: nosuch")}),
    Case("det-missing-scenarios-file", "run deterministic --scenarios {t}/nope.yaml --out {t}/d",
         r"nope\.yaml: cannot read file"),
    Case("det-bad-mitigations-file", "run deterministic --mitigations {t}/m.yaml --out {t}/d",
         r"m\.yaml:27: mitigations\[5\]\.kind: unknown mitigation kind 'nosuch'", files={"m.yaml": _mitig("kind: access_abstention", "kind: nosuch")}),
    Case("det-missing-corpus", "run deterministic --corpus {t}/none --out {t}/d", r"none/manifest\.json: missing \(build the corpus with `layerlab corpus build`\)"),
    Case("det-corpus-a-file", "run deterministic --corpus {t}/taken --out {t}/d", r"taken/manifest\.json: missing \(build the corpus",
         files={"taken": "mine\n"}),
    Case("det-no-out", "run deterministic", r"run deterministic: Missing option '--out'", code=2),
]  # fmt: skip

CASES += [
    # run live: models and endpoints
    # a name litellm cannot route is found by the preflight call, after the (private, default)
    # reply cache is opened: the run folder is never made, the empty cache stays (cache_made)
    Case("live-model-without-provider", "run live -m gpt-nothing --tasks hr-01-q1 --out {t}/run",
         r"^error: --model: 'gpt-nothing' names no provider \(write provider/name, e\.g\. openai/gpt-4o-mini\)"),
    Case("live-max-steps-without-agent", LIVE + " --max-steps 2",
         r"--max-steps: an agent-mode setting; give --agent too", code=2),
    Case("live-tool-protocol-without-agent", LIVE + " --tool-protocol native",
         r"--tool-protocol: an agent-mode setting; give --agent too", code=2),
    Case("live-model-empty", "run live -m '' --tasks hr-01-q1 --out {t}/run",
         r"--model '': expected provider/name, e.g. openai/gpt-4o-mini"),
    Case("live-model-unknown-local", "run live -m local/nosuch --tasks hr-01-q1 --out {t}/run",
         r"unknown local model 'nosuch'; registered in models\.yaml: "),
    Case("live-model-unknown-agent", "run live -m layerlab/nope --tasks hr-01-q1 --out {t}/run",
         r"--model: unknown reference agent 'layerlab/nope'"),
    Case("live-model-provider-only", "run live -m openai/ --tasks hr-01-q1 --out {t}/run",
         r"--model 'openai/': expected provider/name"),
    Case("live-model-name-only", "run live -m /gpt-4o --tasks hr-01-q1 --out {t}/run",
         r"--model '/gpt-4o': expected provider/name"),
    Case("live-no-model", "run live --tasks hr-01-q1 --out {t}/run", r"-m/--model: give at least one model"),
    Case("live-api-base-no-scheme", LIVE + " --api-base localhost:8080", r"--api-base: expected an http\(s\) URL"),
    Case("live-api-base-ftp", LIVE + " --api-base ftp://example.org/v1", r"--api-base: expected an http\(s\) URL"),
    Case("live-api-base-no-host", LIVE + " --api-base http:///v1", r"--api-base: expected an http\(s\) URL such as http://127\.0\.0\.1:8080/v1"),
    Case("live-api-base-password", LIVE + " --api-base http://u:secret@127.0.0.1:9/v1", r"--api-base: the URL carries credentials: user or password"),
    Case("live-api-base-token", LIVE + " --api-base http://127.0.0.1:9/v1?key=secret", r"--api-base: the URL carries credentials: a secret query parameter \(key=\)"),
    Case("live-no-out", "run live -m layerlab/extractive", r"run live: Missing option '--out'", code=2),
    Case("live-out-a-file", LIVE.replace("{t}/run", "{t}/taken"), r"--out \S+taken: is an existing file",
         files={"taken": "mine\n"}),
    Case("live-out-under-a-file", LIVE.replace("{t}/run", "{t}/taken/run"), r"taken is a file, expected a folder",
         files={"taken": "mine\n"}),
    Case("live-budget-negative", LIVE + " --budget -5", r"--budget: expected a number of calls >= 0, got -5"),
    Case("live-budget-a-word", LIVE + " --budget lots", r"Invalid value for '--budget': .*valid integer", code=2),
    Case("live-budget-a-fraction", LIVE + " --budget 1.5", r"Invalid value for '--budget': .*valid integer", code=2),
    Case("live-concurrency-zero", LIVE + " --concurrency 0", r"Invalid value for '--concurrency': .*greater than or equal to 1", code=2),
    Case("live-concurrency-negative", LIVE + " --concurrency -3", r"Invalid value for '--concurrency': .*greater than or equal to 1", code=2),
    Case("live-max-error-rate-above-one", LIVE + " --max-error-rate 1.5", r"--max-error-rate: expected a share between 0 and 1"),
    Case("live-max-error-rate-negative", LIVE + " --max-error-rate -0.1", r"--max-error-rate: expected a share between 0 and 1"),
    Case("live-max-error-rate-nan", LIVE + " --max-error-rate nan", r"--max-error-rate: expected a share between 0 and 1"),
    Case("live-limit-zero", LIVE + " --limit 0", r"Invalid value for '--limit': .*greater than or equal to 1", code=2),
    Case("live-limit-negative", LIVE + " --limit -2", r"Invalid value for '--limit': .*greater than or equal to 1", code=2),
    Case("live-limit-too-many", LIVE + " --limit 5", r"--limit 5: only 1 tasks to choose from"),
    Case("live-replicates-zero", LIVE + " --replicates 0", r"Invalid value for '--replicates': .*greater than or equal to 1", code=2),
    Case("live-epochs-zero", LIVE + " --epochs 0", r"Invalid value for '--epochs': .*greater than or equal to 1", code=2),
    Case("live-temperature-negative", LIVE + " --temperature -1", r"--temperature: expected 0 to 2, got -1\.0"),
    Case("live-temperature-too-high", LIVE + " --temperature 3", r"--temperature: expected 0 to 2, got 3\.0"),
    Case("live-temperature-nan", LIVE + " --temperature nan", r"--temperature: expected 0 to 2, got nan"),
    Case("live-top-p-zero", LIVE + " --top-p 0", r"--top-p \(top_p\): expected a share in \(0, 1\], got 0\.0"),
    Case("live-top-p-above-one", LIVE + " --top-p 1.5", r"--top-p \(top_p\): expected a share in \(0, 1\], got 1\.5"),
    Case("live-response-format", LIVE + " --response-format xml", r"--response-format 'xml': expected 'none' or 'json_schema'"),
    Case("live-timeout-zero", LIVE + " --timeout 0", r"--timeout: expected seconds > 0, got 0\.0"),
    Case("live-max-tokens-zero", LIVE + " --max-tokens 0", r"--max-tokens \(max_tokens\): expected a token cap > 0, got 0"),
    Case("live-attempts-zero", LIVE + " --attempts 0", r"--attempts: attempts must be >= 1, got 0"),
    Case("live-backoff-negative", LIVE + " --backoff -1", r"--backoff: expected seconds >= 0, got -1\.0"),
    Case("live-local-servers-zero", LIVE + " --local-servers 0", r"Invalid value for '--local-servers': .*greater than or equal to 1", code=2),
    Case("live-seed-a-word", LIVE + " --seed abc", r"Invalid value for '--seed': .*valid integer", code=2),
    Case("live-retry-errors-alone", LIVE + " --retry-errors", r"--retry-errors: only with --resume"),
    # run live: tasks, scenarios, mitigations, files
    Case("live-tasks-unknown", LIVE.replace("hr-01-q1", "hr-99-q1"), r"--tasks: unknown task id\(s\) \['hr-99-q1'\]"),
    Case("live-tasks-not-ids", LIVE.replace("hr-01-q1", "'90 days'"), r"--tasks: '90 days' is not a task id \(expected ids like hr-01-q1\)"),
    Case("live-tasks-commas-only", LIVE.replace("hr-01-q1", ",,"), r"--tasks: no task ids given"),
    Case("live-tasks-missing-file", LIVE.replace("hr-01-q1", "{t}/ids.txt"), r"--tasks \S+ids\.txt: no such file"),
    Case("live-tasks-empty-file", LIVE.replace("hr-01-q1", "{t}/ids.txt"), r"--tasks \S+ids\.txt: no task ids given",
         files={"ids.txt": "\n\n"}),
    Case("live-tasks-latin1-file", LIVE.replace("hr-01-q1", "{t}/ids.txt"), r"--tasks \S+ids\.txt: cannot read the file as UTF-8",
         files={"ids.txt": b"hr-01-q1\n\xff\n"}),
    Case("live-scenario-unknown", LIVE.replace("clean", "sunny"), r"--scenario: unknown scenario\(s\) \['sunny'\]"),
    Case("live-mitigation-unknown", LIVE + " --mitigation lenient", r"--mitigation: unknown mitigation 'lenient'"),
    Case("live-corpus-missing", LIVE + " --corpus {t}/none", r"none/manifest\.json: missing \(build the corpus"),
    Case("live-scenarios-bad", LIVE + " --scenarios {t}/s.yaml", r"s\.yaml:26: scenarios\[1\]\.faults\[0\]\.op: unknown fault operator 'nosuch'",
         files={"s.yaml": _scen("op: serve_superseded", "op: nosuch")}),
    Case("live-cache-dir-in-run", LIVE + " --cache-dir {t}/run/cache", r"--cache-dir \S+run/cache: inside the run folder"),
    Case("live-sample-log-in-run", LIVE + " --sample-log {t}/run/s.jsonl", r"--sample-log \S+: inside the run folder"),
    Case("live-sample-log-a-folder", LIVE + " --sample-log {t}/logs", r"--sample-log \S+logs: is a folder",
         files={"logs/keep": "x\n"}),
    Case("live-sample-log-foreign-file", LIVE + " --sample-log {t}/notes.txt",
         r"--sample-log \S+notes\.txt: an existing file that is not a layerlab sample log",
         files={"notes.txt": "my notes\n"}),
    # a run that fails after its sample log was opened leaves neither the log nor its folders
    Case("live-sample-log-then-unknown-scenario",
         LIVE.replace("clean", "sunny") + " --sample-log {t}/private/logs/s.jsonl",
         r"--scenario: unknown scenario\(s\) \['sunny'\]"),
    Case("cfg-sample-log-then-unknown-agent", CFG, r"--model: unknown reference agent 'layerlab/nope' \(did you mean 'layerlab/cautious'\?\); known: \['cautious', 'extractive'\]",
         files={"run.yaml": "models:\n  - model: layerlab/nope\nsample_log: private/logs/s.jsonl\n"}),
    # run live --config: each field wrong (one problem each: one line naming file:line: field)
    Case("cfg-missing-file", CFG.replace("run.yaml", "nope.yaml"), r"nope\.yaml: cannot read file \(.*No such file"),
    Case("cfg-malformed-yaml", CFG, r"run\.yaml:\d+: not valid YAML", files={"run.yaml": "models: [\n"}),
    Case("cfg-not-a-mapping", CFG, r"run\.yaml:1: expected a mapping", files={"run.yaml": "- layerlab/extractive\n"}),
    # issue 34, item 2: a secret in a bad input is never echoed
    Case("target-setting-not-key-value-hides-a-secret",
         "run live --target python:x:y --target-setting sk-proj-Q7v9XkT2mN4pL8rS1wY6zA3b --out {t}/run",
         r"^error: --target-setting '\(secret: not stored\)': expected key=value$", code=2),
    # a target is loaded, instantiated and its settings checked before the run folder exists
    Case("target-init-raises", TGT.format("InitFails"),
         r"^error: --target python:fixtures\.user_targets:InitFails: creating InitFails\(\) failed \(RuntimeError: cannot open the index\)$", code=2),
    Case("target-answer-not-callable", TGT.format("AnswerNotCallable"),
         r"AnswerNotCallable: answer is not callable \(a str; expected a method answer\(self, request\)\)$", code=2),
    Case("target-langchain-factory-fails", TGT.format("failing_factory").replace("python:", "langchain:"),
         r"failing_factory: the factory failed \(ValueError: no such model\)$", code=2),
    Case("target-setting-timeout-a-word", TGT.format("extractive") + " --target-setting timeout=abc",
         r"^error: --target-setting timeout='abc': expected seconds, a number greater than 0$", code=2),
    Case("target-setting-timeout-negative", TGT.format("extractive") + " --target-setting timeout=-1",
         r"^error: --target-setting timeout='-1': expected seconds, a number greater than 0$", code=2),
    Case("target-setting-concurrent-a-word", TGT.format("extractive") + " --target-setting concurrent=maybe",
         r"^error: --target-setting concurrent='maybe': expected true or false$", code=2),
    Case("target-setup-fails", TGT.format("SetupFails"),
         r"SetupFails: setup\(\) failed \(ConnectionError: the vector store is down\) \(nothing written\)$", cache_made=True),
    Case("cfg-target-timeout-negative", CFG,
         r"--target-setting timeout=-1: expected seconds, a number greater than 0",
         files={"run.yaml": "target: {spec: 'python:fixtures.user_targets:extractive', settings: {timeout: -1}}\nlimit: 1\n"}),
    # issue 46: a setting no --target-setting could give is one line naming its key and line
    *(Case(f"cfg-target-setting-{kind}", CFG,
           rf"run\.yaml:4: target\.settings\.deep: expected a string, a number or true/false .*, got {got}$",
           files={"run.yaml": "target:\n  spec: 'python:fixtures.user_targets:extractive'\n  settings:\n"
                              f"    deep: {value}\nlimit: 1\n"})
      for kind, value, got in (("nested", "{a: 1}", "a mapping"), ("list", "[1, 2]", "a list"),
                               ("null", "null", "null"))),  # fmt: skip
    Case("cfg-target-settings-a-list", CFG,
         r"run\.yaml:2: target\.settings: expected a mapping of setting names to values, got a list$",
         files={"run.yaml": "target:\n  settings: [a, b]\n  spec: 'python:fixtures.user_targets:extractive'\nlimit: 1\n"}),
    Case("cfg-no-models", CFG, r"run\.yaml:1: models: expected at least one model \(or a target\)", files={"run.yaml": "limit: 2\n"}),
    Case("cfg-empty-models", CFG, r"run\.yaml:1: models: expected at least one model \(or a target\)", files={"run.yaml": "models: []\n"}),
    Case("cfg-unknown-key", CFG, r"run\.yaml:3: colour: unknown key", files={"run.yaml": _M + "colour: blue\n"}),
    Case("cfg-model-unknown-key", CFG, r"run\.yaml:\d+: models\[0\]\.colour: ",
         files={"run.yaml": _M + "    colour: blue\n"}),
    Case("cfg-model-empty", CFG, r"run\.yaml:\d+: models\[0\]\.model: ", files={"run.yaml": "models:\n  - model: ''\n"}),
    Case("cfg-model-unknown-agent", CFG, r"--model: unknown reference agent 'layerlab/nope'.*; known: ", files={"run.yaml": "models:\n  - model: layerlab/nope\n"}),
    Case("cfg-api-base-not-url", CFG, r"run\.yaml:\d+: models\[0\]\.api_base.*expected an http\(s\) URL",
         files={"run.yaml": _M + "    api_base: [localhost:8080]\n"}),
    Case("cfg-timeout-zero", CFG, r"run\.yaml:\d+: models\[0\]\.timeout: ", files={"run.yaml": _M + "    timeout: 0\n"}),
    Case("cfg-max-tokens-zero", CFG, r"run\.yaml:\d+: models\[0\]\.max_tokens: ", files={"run.yaml": _M + "    max_tokens: 0\n"}),
    Case("cfg-attempts-zero", CFG, r"run\.yaml:\d+: models\[0\]\.attempts: ", files={"run.yaml": _M + "    attempts: 0\n"}),
    Case("cfg-backoff-negative", CFG, r"run\.yaml:\d+: models\[0\]\.backoff: ", files={"run.yaml": _M + "    backoff: -1\n"}),
    Case("cfg-temperature-high", CFG, r"run\.yaml:\d+: models\[0\]\.temperature: ", files={"run.yaml": _M + "    temperature: 3\n"}),
    Case("cfg-top-p-zero", CFG, r"run\.yaml:\d+: models\[0\]\.top_p: ", files={"run.yaml": _M + "    top_p: 0\n"}),
    Case("cfg-response-format", CFG, r"run\.yaml:\d+: models\[0\]\.response_format: ", files={"run.yaml": _M + "    response_format: xml\n"}),
    Case("cfg-local-servers-zero", CFG, r"run\.yaml:\d+: models\[0\]\.local_servers: ", files={"run.yaml": _M + "    local_servers: 0\n"}),
    Case("cfg-seed-a-word", CFG, r"run\.yaml:\d+: models\[0\]\.seed: ", files={"run.yaml": _M + "    seed: abc\n"}),
    Case("cfg-defaults-unknown-key", CFG, r"run\.yaml:\d+: defaults\.colour: ", files={"run.yaml": _M + "defaults: {colour: blue}\n"}),
    Case("cfg-defaults-temperature", CFG, r"run\.yaml:\d+: defaults\.temperature: ", files={"run.yaml": _M + "defaults: {temperature: -1}\n"}),
    Case("cfg-scenario-unknown", CFG, r"run\.yaml:\d+: scenarios\[0\]: .*sunny", files={"run.yaml": _M + "scenarios: [sunny]\n"}),
    Case("cfg-scenarios-a-string", CFG, r"run\.yaml:3: scenarios: expected list, got str", files={"run.yaml": _M + "scenarios: clean\n"}),
    Case("cfg-mitigation-unknown", CFG, r"run\.yaml:\d+: mitigations\[0\]: .*lenient", files={"run.yaml": _M + "mitigations: [lenient]\n"}),
    Case("cfg-task-unknown", CFG, r"run\.yaml:\d+: tasks\[0\]: .*hr-99-q1", files={"run.yaml": _M + "tasks: [hr-99-q1]\n"}),
    Case("cfg-limit-zero", CFG, r"run\.yaml:3: limit: .*greater than or equal to 1", files={"run.yaml": _M + "limit: 0\n"}),
    Case("cfg-limit-too-many", CFG, r"limit: 100000 tasks asked, only 240 to choose from", files={"run.yaml": _M + "limit: 100000\n"}),
    Case("cfg-replicates-zero", CFG, r"run\.yaml:3: replicates: .*greater than or equal to 1", files={"run.yaml": _M + "replicates: 0\n"}),
    Case("cfg-epochs-zero", CFG, r"run\.yaml:3: epochs: .*greater than or equal to 1", files={"run.yaml": _M + "epochs: 0\n"}),
    Case("cfg-budget-negative", CFG, r"run\.yaml:3: budget: .*greater than or equal to 0", files={"run.yaml": _M + "budget: -1\n"}),
    Case("cfg-concurrency-zero", CFG, r"run\.yaml:3: concurrency: .*greater than or equal to 1", files={"run.yaml": _M + "concurrency: 0\n"}),
    Case("cfg-share-replies-a-word", CFG, r"run\.yaml:\d+: share_replies: ", files={"run.yaml": _M + "share_replies: sometimes\n"}),
    Case("cfg-max-error-rate", CFG, r"run\.yaml:\d+: max_error_rate: ", files={"run.yaml": _M + "max_error_rate: 2\n"}),
    Case("cfg-sample-log-empty", CFG, r"run\.yaml:3: sample_log: .*at least 1 character", files={"run.yaml": _M + "sample_log: ''\n"}),
    Case("cfg-duplicate-key", CFG, r"run\.yaml:\d+: limit: duplicate key 'limit'", files={"run.yaml": _M + "limit: 1\nlimit: 2\n"}),
    Case("cfg-flag-beside-config", CFG + " --budget 3", r"--budget: set it in the run configuration"),
    # the gate: section is bad input (exit 2, as `layerlab gate` would say) found before the run
    Case("cfg-gate-unknown-measure", CFG, r"run\.yaml:3: gate\.min\.Q:clean: unknown measure 'Q'",
         code=2, files={"run.yaml": _M + "gate: {min: {Q:clean: 0.5}}\n"}),
    Case("cfg-gate-unknown-scenario", CFG,
         r"run\.yaml:3: gate\.min\.S:sunny: no scenario 'sunny' in the run; it runs: clean, ",
         code=2, files={"run.yaml": _M + "gate: {min: {S:sunny: 0.5}}\n"}),
    Case("cfg-gate-scenario-not-run", CFG,
         r"run\.yaml:4: gate\.min\.S:stale_index: no scenario 'stale_index' in the run; it runs: clean$",
         code=2, files={"run.yaml": _M + "scenarios: [clean]\ngate: {min: {S:stale_index: 0.5}}\n"}),
    Case("cfg-gate-arm-not-run", CFG,
         r"run\.yaml:3: gate\.max\.GF@freshness_guard: no mitigation arm 'freshness_guard' in the run; it runs: strict, repair",
         code=2, files={"run.yaml": _M + "gate: {max: {GF@freshness_guard: 0.1}}\n"}),
    Case("cfg-gate-model-not-run", CFG,
         r"run\.yaml:3: gate\.min\.S/gpt-4o: no model 'gpt-4o' in the run; it runs: layerlab/extractive",
         code=2, files={"run.yaml": _M + "gate: {min: {S/gpt-4o: 0.5}}\n"}),
    Case("cfg-gate-specific-unknown", CFG,
         r"run\.yaml:\d+: gate\.specific\[0\]: no mitigation arm 'nosuch' in the run",
         code=2, files={"run.yaml": _M + "mitigations: [strict, repair, freshness_guard]\ngate: {specific: [nosuch]}\n"}),
    Case("cfg-gate-specific-baseline", CFG, r"gate\.specific\[0\]: 'strict' is the baseline: it has no verdict",
         code=2, files={"run.yaml": _M + "mitigations: [strict, freshness_guard]\ngate: {specific: [strict]}\n"}),
    Case("cfg-gate-verdicts-without-arms", CFG,
         r"run\.yaml:4: gate\.no_over_broad: a verdict gate needs the baseline 'strict' and a mitigation arm beside it; the run's arms: freshness_guard$",
         code=2, files={"run.yaml": _M + "mitigations: [freshness_guard]\ngate: {no_over_broad: true}\n"}),
]  # fmt: skip

CASES += [
    # archive check / migrate / merge
    Case("check-missing", "archive check {t}/nope", r"^FAIL \S+nope: does not exist"),
    Case("check-a-text-file", "archive check {t}/notes.txt", r"^FAIL \S+notes\.txt: not a readable Parquet archive", files={"notes.txt": "hello\n"}),
    Case("check-folder-without-manifest", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: missing \(not a layerlab run folder\)",
         files={"run/records.parquet": lambda p: shutil.copy(REF / "records.parquet", p) and None}),
    Case("check-empty-folder", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: missing \(not a layerlab run folder\)", files={"run/.keep": ""}),
    Case("check-manifest-not-json", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: not valid JSON",
         files={"run": _write_manifest_text("{not json")}),
    Case("check-manifest-a-list", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: not a layerlab manifest \(no run_id\)", files={"run": _write_manifest_text("[]")}),
    Case("check-manifest-key-outside-allowlist", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: keys outside the manifest allowlist: \['answers'\]",
         files={"run": _manifest_edit(answers=["45 days"])}),
    Case("check-truncated-parquet", "archive check {t}/run", r"^FAIL \S+run/records\.parquet: checksum \w+… differs from manifest \w+… \(modified or truncated\)", files={"run": _run_copy(_truncate_records)}),
    Case("check-checksum-mismatch", "archive check {t}/run", r"^FAIL \S+run/records\.parquet: checksum \w+… differs from manifest", files={"run": _run_copy(_append_records)}),
    Case("check-manifest-edited", "archive check {t}/run", r"manifest checksum does not match",
         files={"run": _run_copy(lambda r: (r / "manifest.json").write_text((r / "manifest.json").read_text().replace('"complete": true', '"complete": false')))}),
    Case("check-bare-truncated-parquet", "archive check {t}/a.parquet", r"^FAIL \S+a\.parquet: not a readable Parquet archive",
         files={"a.parquet": lambda p: (REF / "records.parquet").read_bytes()[:999]}),
    Case("migrate-missing", "archive migrate {t}/nope", r"^FAIL \S+nope: does not exist \(expected an archive file or run folder\) \(not migrated\)"),
    Case("migrate-a-text-file", "archive migrate {t}/notes.txt", r"^FAIL \S+notes\.txt: not a readable Parquet archive.*\(not migrated\)", files={"notes.txt": "hello\n"}),
    Case("migrate-manifest-not-json", "archive migrate {t}/run", r"^FAIL \S+run/manifest\.json: not valid JSON.*\(not migrated\)", files={"run": _write_manifest_text("{not json")}),
    Case("migrate-truncated-parquet", "archive migrate {t}/run", r"^FAIL \S+run/records\.parquet: checksum differs from its manifest .*\(not migrated\)", files={"run": _run_copy(_truncate_records)}),
    Case("migrate-checksum-mismatch", "archive migrate {t}/run", r"^FAIL \S+run/records\.parquet: checksum differs from its manifest .*\(not migrated\)", files={"run": _run_copy(_append_records)}),
    Case("merge-missing", "archive merge {t}/nope --out {t}/m", r"nope\S*: .*\(nothing written\)"),
    Case("merge-a-text-file", "archive merge {t}/notes.txt --out {t}/m", r"notes\.txt\S*: .*\(nothing written\)", files={"notes.txt": "hello\n"}),
    Case("merge-manifest-not-json", "archive merge {t}/run {ref} --out {t}/m", r"run/manifest\.json: not valid JSON.*\(nothing written\)", files={"run": _write_manifest_text("{not json")}),
    Case("merge-truncated-parquet", "archive merge {t}/run --out {t}/m", r"run/records\.parquet: checksum \w+… differs from manifest.*\(nothing written\)", files={"run": _run_copy(_truncate_records)}),
    Case("merge-checksum-mismatch", "archive merge {t}/run --out {t}/m", r"run/records\.parquet: checksum \w+… differs from manifest.*\(nothing written\)", files={"run": _run_copy(_append_records)}),
    Case("merge-key-outside-allowlist", "archive merge {t}/run --out {t}/m", r"run/manifest\.json: keys outside the manifest allowlist: \['answers'\] \(nothing written\)", files={"run": _manifest_edit(answers=["45 days"])}),
    Case("merge-no-out", "archive merge {ref}", r"archive merge: Missing option '--out'", code=2),
    # recompute
    Case("recompute-no-archives", "recompute --out {t}/tables", r"recompute: Missing argument 'ARCHIVE\.\.\.'", code=2),
    Case("recompute-empty-folder", "recompute {t}/empty --out {t}/tables", r"empty/manifest\.json: missing \(not a layerlab run folder\) \(nothing written\)", files={"empty/.keep": ""}),
    Case("recompute-missing", "recompute {t}/nope --out {t}/tables", r"nope: does not exist \(nothing written\)"),
    Case("recompute-bad-design", "recompute {ref} --design diagonal --out {t}/tables", r"--design: expected one of auto, crossed, nested, tasks; got 'diagonal'"),
    Case("recompute-n-boot-zero", "recompute {ref} --n-boot 0 --out {t}/tables", r"Invalid value for '--n-boot': .*greater than or equal to 100", code=2),
    Case("recompute-truncated", "recompute {t}/run --out {t}/tables", r"run/records\.parquet: checksum \w+… differs from manifest.*\(nothing written\)", files={"run": _run_copy(_truncate_records)}),
    Case("recompute-bad-matrix", "recompute {ref} --matrix {t}/nope --out {t}/tables", r"nope: does not exist \(nothing written\)"),
    # report / view / compare
    Case("report-missing", "report {t}/nope --out {t}/r.html", r"nope: does not exist \(expected a run folder or an archive file\) \(nothing written\)"),
    Case("report-out-a-folder", "report {ref} --out {t}/d", r"--out \S+d: is a folder, expected a file path",
         files={"d/keep": "x\n"}),
    Case("report-out-under-a-file", "report {ref} --out {t}/taken/r.html", r"taken is a file, expected a folder",
         files={"taken": "mine\n"}),
    Case("report-empty-folder", "report {t}/empty --out {t}/r.html", r"empty/manifest\.json: missing \(not a layerlab run folder\) \(nothing written\)", files={"empty/.keep": ""}),
    Case("report-truncated", "report {t}/run --out {t}/r.html", r"run/records\.parquet: checksum \w+… differs from manifest.*\(nothing written\)", files={"run": _run_copy(_truncate_records)}),
    Case("view-missing", "view {t}/nope.jsonl --out {t}/v.html", r"nope\.jsonl: does not exist \(expected a sample log, run folder or archive\) \(nothing written\)"),
    Case("view-non-utf8-line", "view {t}/s.jsonl --out {t}/v.html", r"s\.jsonl:1: not UTF-8 \(byte 0xe9 at column 15; expected a sample log",
         files={"s.jsonl": b'{"model": "caf\xe9"}\n'}),
    Case("view-not-json", "view {t}/s.jsonl --out {t}/v.html", r"s\.jsonl:1: not a JSON line", files={"s.jsonl": "hello\n"}),
    Case("view-not-an-entry", "view {t}/s.jsonl --out {t}/v.html", r"s\.jsonl:1: not a sample-log entry", files={"s.jsonl": "{}\n"}),
    Case("view-out-a-folder", "view {ref} --out {t}/d", r"--out \S+d: is a folder, expected a file path", files={"d/keep": "x\n"}),
    Case("view-empty-log", "view {t}/s.jsonl --out {t}/v.html", r"no records in the given inputs \(nothing written\)", files={"s.jsonl": ""}),
    Case("compare-missing", "compare {t}/nope", r"nope: does not exist \(nothing written\)"),
    Case("compare-bad-outcome", "compare {ref} {ref} --outcome sucess", r"--outcome: 'sucess' is not an archive label"),
    Case("compare-json-a-folder", "compare {ref} {ref} --json {t}/d", r"--json \S+d: is a folder", files={"d/keep": "x\n"}),
    Case("compare-truncated", "compare {t}/run {ref}", r"run/records\.parquet: checksum \w+… differs from manifest.*\(nothing written\)", files={"run": _run_copy(_truncate_records)}),
    # explore
    Case("explore-unknown-task", "explore --task hr-99-q1 --scenario clean", r"--task: unknown task 'hr-99-q1' \(e\.g\. "),
    Case("explore-unknown-scenario", "explore --task hr-01-q1 --scenario sunny", r"--scenario: unknown scenario 'sunny'; known: "),
    Case("explore-unknown-mitigation", "explore --task hr-01-q1 --scenario clean --mitigation lenient", r"--mitigation: unknown mitigation 'lenient'; known: "),
    Case("explore-unknown-reader", "explore --task hr-01-q1 --scenario clean --reader oracle", r"--reader: unknown reader 'oracle'; known: \['cautious', 'extractive'\]"),
    # models and the dictionary
    Case("models-fetch-unknown", "models fetch no-such-model", r"unknown local model 'no-such-model'"),
    Case("models-serve-unknown", "models serve no-such-model", r"unknown local model 'no-such-model'"),
    Case("models-fetch-missing-wheelhouse", "models fetch smollm2-135m --wheelhouse {t}/missing",
         r"^error: --wheelhouse \S+missing: no such folder \(expected a folder holding smollm2-135m's"),
    Case("models-fetch-wheelhouse-a-file", "models fetch smollm2-135m --wheelhouse {t}/taken",
         r"^error: --wheelhouse \S+taken: is not a folder", files={"taken": "mine\n"}),
    Case("dictionary-out-a-folder", "dictionary --out {t}/d", r"--out \S+d: is a folder, expected a file path",
         files={"d/keep": "x\n"}),
    Case("dictionary-out-under-a-file", "dictionary --out {t}/taken/D.md", r"taken is a file, expected a folder",
         files={"taken": "mine\n"}),
]  # fmt: skip


# --- issue 34, item 7: every YAML/JSON reader is bounded (one line, in seconds) ---------------

# 9 levels of 9 aliases: 460 bytes, 9**10 nodes once expanded (the old walk took minutes)
_BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)
_DEEP_YAML = "gate:\n  min: " + "[" * 200 + "]" * 200 + "\n"
_DEEP_JSON = '{"kind": "document", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"
_SELF_ALIAS = "gate: &g\n  min: *g\n"


def _to_dev_zero(p: Path) -> None:
    p.symlink_to("/dev/zero")


def _huge(p: Path) -> None:  # one byte over the cap of a run configuration
    from layerlab._io import MAX_FILE_BYTES

    p.write_text("# " + "x" * (MAX_FILE_BYTES - 1) + "\n")


CASES += [
    Case("import-alias-bomb", "corpus import {t}/bomb.yaml --out {t}/c",
         r"bomb\.yaml:1: holds over 2,000,000 nodes once its aliases are expanded", files={"bomb.yaml": _BOMB}),
    Case("import-symlink-to-dev-zero", "corpus import {t}/zero.jsonl --out {t}/c",
         r"zero\.jsonl: is a device, pipe or socket, expected a regular file", files={"zero.jsonl": _to_dev_zero}),
    Case("import-a-folder", "corpus import {t}/d.jsonl --out {t}/c",
         r"d\.jsonl: is a folder, expected a regular file", files={"d.jsonl/keep": "x\n"}),
    Case("import-deep-json-line", "corpus import {t}/deep.jsonl --out {t}/c",
         r"deep\.jsonl:1: nested deeper than 100 levels", files={"deep.jsonl": _DEEP_JSON}),
    Case("import-deep-yaml", "corpus import {t}/deep.yaml --out {t}/c",
         r"deep\.yaml:2: nested deeper than 100 levels", files={"deep.yaml": _DEEP_YAML}),
    Case("import-not-utf8-line", "corpus import {t}/c.jsonl --out {t}/c",
         r"c\.jsonl:2: not UTF-8 text \(byte 0xe9\)", files={"c.jsonl": b'{"kind": "corpus"}\n{"x": "caf\xe9"}\n'}),
    Case("spec-alias-bomb", "spec check {t}/returns.yaml",
         r"returns\.yaml:1: holds over 2,000,000 nodes", files={"returns.yaml": _BOMB}),
    Case("config-alias-bomb", CFG, r"run\.yaml:1: holds over 2,000,000 nodes", files={"run.yaml": _BOMB}),
    Case("config-over-the-size-cap", CFG, r"run\.yaml: is 16\.0 MiB, over the 16\.0 MiB a file may hold",
         files={"run.yaml": _huge}),
    Case("config-deep-yaml", CFG, r"run\.yaml:2: nested deeper than 100 levels", files={"run.yaml": _DEEP_YAML}),
    Case("config-self-alias", CFG, r"run\.yaml:1: an alias refers to the collection that holds it",
         files={"run.yaml": _SELF_ALIAS}),
    Case("config-dev-zero", "run live --config {t}/run.yaml --out {t}/run",
         r"run\.yaml: is a device, pipe or socket", files={"run.yaml": _to_dev_zero}),
    Case("check-manifest-nested-deep", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: nested deeper than 100 levels",
         files={"run": _write_manifest_text('{"run_id": ' + "[" * 50_000 + "]" * 50_000 + "}")}),
    Case("check-manifest-dev-zero", "archive check {t}/run", r"^FAIL \S+run/manifest\.json: is a device, pipe or socket",
         files={"run": _run_copy(lambda r: ((r / "manifest.json").unlink(), (r / "manifest.json").symlink_to("/dev/zero")))}),
    Case("gate-config-alias-bomb", "gate {ref} --config {t}/g.yaml",
         r"--config \S+g\.yaml:1: holds over 2,000,000 nodes", code=2, files={"g.yaml": _BOMB}),
    # issue 46: the port was ignored silently
    Case("serve-mcp-stdio-with-a-port", "serve mcp --scenario clean --task hr-01-q1 --stdio --port 8123",
         r"^error: --port 8123: not with --stdio \(it serves over stdin/stdout, no port\)", code=2),
    # issue 46: a misspelt top-level key dropped its thresholds and the gate passed
    Case("gate-config-unknown-top-key", "gate {ref} --config {t}/g.yaml",
         r"^error: --config \S+g\.yaml:3: gates: unknown top-level key \(expected one of: .*gate",
         code=2, files={"g.yaml": "gate:\n  min: {S: 0.0}\ngates:\n  min: {S: 0.99}\n"}),
]  # fmt: skip


def test_a_bom_is_accepted_by_corpus_import_and_run_configs(capsys, tmp_path) -> None:
    src = (Path(__file__).parent / "fixtures" / "user_corpus.jsonl").read_bytes()
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + src)
    assert main(["corpus", "import", str(tmp_path / "bom.jsonl"), "--out", str(tmp_path / "c")]) == 0
    (tmp_path / "g.yaml").write_bytes(b"\xef\xbb\xbfgate:\n  min: {nosuch: 0.5}\n")
    capsys.readouterr()
    assert main(["gate", str(REF), "--config", str(tmp_path / "g.yaml")]) == 2
    # read past the BOM: the problem is the measure on line 2, not the file
    assert "g.yaml:2: gate.min.nosuch: unknown measure" in capsys.readouterr().err


def test_sixty_thousand_bad_records_print_a_stated_number_of_lines(capsys, tmp_path) -> None:
    from layerlab._io import MAX_PROBLEM_LINES

    (tmp_path / "many.jsonl").write_text('{"kind": "nope"}\n' * 60_000)
    began = time.monotonic()
    rc = main(["corpus", "import", str(tmp_path / "many.jsonl"), "--out", str(tmp_path / "c")])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 1 and time.monotonic() - began < 60
    assert len(lines) == MAX_PROBLEM_LINES + 2, lines[-3:]
    assert lines[0].startswith(f"{tmp_path / 'many.jsonl'}:1: kind: unknown kind 'nope'")
    assert lines[-2] == f"... and {60_000 - MAX_PROBLEM_LINES:,} more problem(s) (first 20 shown)"
    assert lines[-1] == "error: 60,000 problem(s); nothing written"
    assert not (tmp_path / "c").exists()


def test_the_duplicate_key_walk_visits_each_node_once() -> None:
    import yaml

    from layerlab.corpus.spec import _duplicate_keys

    # 8 levels of 9: 9**8 = 43 million paths, 80 nodes; a dup key at the bottom is found once
    text = "a0: &a0 {k: 1, k: 2}\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 8)
    )
    began = time.monotonic()
    node = yaml.compose(text, Loader=yaml.SafeLoader)  # unbounded: the walk alone is timed
    dups = _duplicate_keys(node)
    assert time.monotonic() - began < 5
    assert [(line, msg.split(" (")[0]) for line, _f, msg in dups] == [(1, "duplicate key 'k'")]


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder under ``root`` with its size, mtime and mode."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (
            st.st_size if p.is_file() else 0,
            st.st_mtime_ns,
            st.st_mode,
        )
    return out


def _setup(t: Path, files: Files) -> None:
    """Make each named file: text, bytes, or a builder given its path (returning text or None)."""
    for name, content in files.items():
        p = t / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content = content(p)
        if isinstance(content, bytes):
            p.write_bytes(content)
        elif content is not None:
            p.write_text(str(content))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, capsys, tmp_path, monkeypatch) -> None:
    """A bad input: its exit code, one line naming the file or flag and what was expected, no
    traceback, and nothing written anywhere under the test folder (the working directory)."""
    import re
    import shlex

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERLAB_CACHE", str(tmp_path / "user-cache"))
    _setup(tmp_path, case.files)
    before = _tree(tmp_path)
    args = shlex.split(case.args.format(t=tmp_path, ref=REF))
    rc = main(args)
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == case.code, (rc, out, err)
    assert len(lines) == 1, err
    assert re.search(case.pattern, lines[0]), lines[0]
    assert "Traceback" not in out + err and "a bug: please report it" not in err
    after = _tree(tmp_path)
    if case.cache_made:
        after = {
            k: v
            for k, v in after.items()
            if k != "user-cache" and not k.startswith("user-cache/replies")
        }
    assert after == before, "something was written"


def test_an_atomic_write_over_a_folder_names_the_folder_and_leaves_no_temporary(tmp_path) -> None:
    from layerlab._io import atomic_write_text

    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError) as err:
        atomic_write_text(tmp_path / "d", "x")
    assert err.value.filename == str(tmp_path / "d") and "expected a file path" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"] and not any(
        (tmp_path / "d").iterdir()
    )

"""Private stays private: credentials never persist, private files are the owner's, shareable
outputs honour the umask, and a privacy scan of every file a run writes finds no planted secret.

Planted: an API key in the environment, a password and a host in endpoints (``--api-base``, a run
configuration, an endpoint environment variable), which must be refused before anything is
written; then allowed runs (the reference agent ``layerlab/extractive`` behind a planted remote
host, and ``openai/good`` on the fake OpenAI-compatible server with the planted key) whose run
folders, report and viewer pages are scanned for the key, the password, the host, expected
answers and evidence text, and whose private files (reply cache, sample log, a viewer page built
from it) must be readable by their owner only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layerlab import _io, _secrets, archive
from layerlab.archive import samplelog
from layerlab.cli import app
from layerlab.corpus import build as corpus_mod
from layerlab.harness import runconfig
from layerlab.models import routing
from layerlab.models.cache import CACHE_DB, ResponseCache

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai import FakeOpenAI  # noqa: E402

runner = CliRunner()
KEY = "sk-planted-" + "Zq7" * 8  # an API key in the environment
PASSWORD = "Pl4ntedPassw0rd"
HOST = "planted-gpu-host.example"
PORT = "18123"


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """The usual umask, whatever the test runner's: shareable files are then 0644."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture()
def env(monkeypatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("LAYERLAB_CACHE_DIR", str(tmp_path / "default-cache"))
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _live(*args: str) -> list[str]:
    return ["run", "live", *args, "--no-progress"]


TASKS = "hr-01-q1,hr-01-q2"


# --- 1. credentials never persist ----------------------------------------------------------------


@pytest.mark.parametrize(
    "base",
    [
        f"http://user:{PASSWORD}@{HOST}:{PORT}/v1",
        f"http://{PASSWORD}@{HOST}/v1",
        f"https://{HOST}/v1?api_key={PASSWORD}",
        f"https://{HOST}/v1?foo=1&token={PASSWORD}",
        f"https://{HOST}/v1?key={PASSWORD}",
    ],
)
def test_an_endpoint_with_credentials_is_refused_before_anything_is_written(
    env: Path, base: str
) -> None:
    """Even with the replies cached (the preflight then makes no call) and for a reference agent
    that ignores the endpoint: a setup error naming the flag, no folder, no sample log."""
    cache, out, log = env / "cache", env / "run", env / "private" / "s.jsonl"
    warm = runner.invoke(
        app, _live("-m", "layerlab/extractive", "--tasks", TASKS, "--out", str(env / "warm"),
                   "--cache-dir", str(cache))
    )  # fmt: skip
    assert warm.exit_code == 0, warm.output
    for model in ("layerlab/extractive", "openai/good"):
        res = runner.invoke(
            app,
            _live("-m", model, "--api-base", base, "--tasks", TASKS, "--out", str(out),
                  "--cache-dir", str(cache), "--sample-log", str(log)),
        )  # fmt: skip
        assert res.exit_code == 1, res.output
        assert "--api-base: the URL carries credentials" in res.output
        assert len(res.output.strip().splitlines()) == 1
        assert PASSWORD not in res.output and HOST not in res.output
        assert not out.exists() and not log.parent.exists()


def test_a_run_configuration_endpoint_with_credentials_is_refused(env: Path) -> None:
    cfg = env / "run.yaml"
    cfg.write_text(
        "models:\n  - model: layerlab/extractive\n  - model: layerlab/cautious\n"
        f"    api_base: [http://{HOST}:{PORT}/v1, http://user:{PASSWORD}@{HOST}:{PORT}/v1]\n"
        "scenarios: [clean]\nlimit: 2\nsample_log: private/s.jsonl\n"
    )
    out = env / "run"
    res = runner.invoke(app, _live("--config", str(cfg), "--out", str(out)))
    assert res.exit_code == 1, res.output
    assert f"{cfg}:4: models[1].api_base[1]: the URL carries credentials" in res.output
    assert PASSWORD not in res.output
    assert not out.exists() and not (env / "private").exists()


def test_an_endpoint_variable_with_credentials_is_refused_for_its_provider(
    env: Path, monkeypatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://user:{PASSWORD}@{HOST}/v1")
    out = env / "run"
    res = runner.invoke(app, _live("-m", "openai/good", "--tasks", TASKS, "--out", str(out)))
    assert res.exit_code == 1, res.output
    assert (
        "environment variable OPENAI_BASE_URL: the endpoint URL carries credentials" in res.output
    )
    assert PASSWORD not in res.output and not out.exists()
    # a run configuration is checked the same way, before its sample log is opened
    cfg = env / "run.yaml"
    cfg.write_text("models:\n  - model: openai/good\nsample_log: private/s.jsonl\n")
    res = runner.invoke(app, _live("--config", str(cfg), "--out", str(out)))
    assert res.exit_code == 1 and "OPENAI_BASE_URL" in res.output, res.output
    assert not out.exists() and not (env / "private").exists()
    # another provider's run does not read that variable
    assert routing.environment_endpoint_problem(["layerlab/extractive"]) is None
    assert (
        routing.environment_endpoint_problem(["openai/x"], {"OPENAI_API_BASE": "http://h/v1"})
        is None
    )


def test_credentials_are_named_never_echoed() -> None:
    assert _secrets.credentials_in("http://127.0.0.1:8080/v1") is None
    assert _secrets.credentials_in("https://h.example/v1?api-version=2024-06-01") is None
    for base in (f"http://u:{PASSWORD}@h/v1", f"https://h/v1?access_token={PASSWORD}"):
        problem = routing.api_base_problem(base)
        assert problem and "credentials" in problem and PASSWORD not in problem


def test_the_stored_run_configuration_records_endpoints_as_local_or_remote(env: Path) -> None:
    cfg = env / "run.yaml"
    text = (
        "models:\n  - model: layerlab/extractive\n"
        f"    api_base: [http://{HOST}:{PORT}/v1, 'http://127.0.0.1:8080/v1']  # http://{HOST}/docs\n"
        "scenarios: [clean]\nlimit: 2\n"
    )
    cfg.write_text(text)
    out = env / "run"
    res = runner.invoke(
        app, _live("--config", str(cfg), "--out", str(out), "--cache-dir", str(env / "c"))
    )
    assert res.exit_code == 0, res.output
    stored = (out / runconfig.CONFIG_COPY).read_text()
    assert HOST not in stored and PORT not in stored and "127.0.0.1" not in stored
    assert "api_base: [remote, 'local']  # remote\n" in stored
    assert archive.read_manifest(out)["settings"]["endpoints"] == ["remote", "local"]
    assert runconfig.stored_config("models: [{model: a}]\n") == "models: [{model: a}]\n"


# --- 2. private files are private; shareable ones honour the umask -------------------------------


def test_reply_cache_is_created_owner_only(tmp_path: Path) -> None:
    folder = tmp_path / "cache" / "replies"
    c = ResponseCache(folder)
    c.put("k" * 64, "reply")
    c.flush()
    c.close()
    assert c.get("k" * 64) == "reply"
    assert _mode(folder) == 0o700
    files = [p for p in folder.iterdir() if p.name.startswith(CACHE_DB)]
    assert files and all(_mode(p) == 0o600 for p in files), [(p, oct(_mode(p))) for p in files]
    # the per-file fallback (where SQLite cannot open the folder): 0600 entries in 0700 shards
    c.write("ab" + "c" * 62, "reply")
    assert _mode(folder / "ab") == 0o700 and _mode(folder / "ab" / f"ab{'c' * 62}.json") == 0o600


def test_a_loose_reply_cache_is_tightened_with_a_message(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "replies"
    c = ResponseCache(folder)
    c.put("k" * 64, "reply")
    c.close()
    os.chmod(folder, 0o755)
    os.chmod(folder / CACHE_DB, 0o644)
    capsys.readouterr()
    again = ResponseCache(folder)
    assert again.get("k" * 64) == "reply"
    err = capsys.readouterr().err.splitlines()
    assert f"{folder}: was readable by others (mode 0755); now 0700 (it holds model replies)" in err
    assert any(
        line.startswith(f"{folder / CACHE_DB}: was readable by others (mode 0644)") for line in err
    )
    assert _mode(folder) == 0o700 and _mode(folder / CACHE_DB) == 0o600


def test_tightening_keeps_the_owners_permissions(tmp_path: Path) -> None:
    said: list[str] = []
    ro = tmp_path / "read-only"
    ro.mkdir(mode=0o755)
    os.chmod(ro, 0o555)
    _io.private_dir(ro, say=said.append)
    assert _mode(ro) == 0o500  # still read-only: only group and other lose their access
    assert said == [f"{ro}: was readable by others (mode 0555); now 0500 (it holds model replies)"]
    os.chmod(ro, 0o700)
    _io.private_dir(ro / "a" / "b", say=said.append)  # made: 0700 at every level, no message
    assert _mode(ro / "a") == _mode(ro / "a" / "b") == 0o700 and len(said) == 1


def test_sample_log_is_owner_only_in_folders_it_makes_owner_only(env: Path) -> None:
    log = env / "new" / "deeper" / "s.jsonl"
    before = _mode(env)
    res = runner.invoke(
        app, _live("-m", "layerlab/extractive", "--tasks", TASKS, "--scenario", "clean",
                   "--out", str(env / "run"), "--sample-log", str(log))
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700 and _mode(env / "new") == 0o700
    assert _mode(env) == before  # an existing parent is left as it was
    n = len(samplelog.read(log))
    # a loose one is tightened with a message; a second run's entries go to a log of their
    # own beside it (issue 46: they were appended to the first run's), owner-only too
    os.chmod(log, 0o644)
    res = runner.invoke(
        app, _live("-m", "layerlab/cautious", "--tasks", TASKS, "--scenario", "clean",
                   "--out", str(env / "run2"), "--sample-log", str(log))
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert f"{log}: was readable by others (mode 0644); now 0600" in res.output
    assert _mode(log) == 0o600 and len(samplelog.read(log)) == n
    (own,) = log.parent.glob("s.live-*.jsonl")
    assert _mode(own) == 0o600 and len(samplelog.read(own)) == n and str(own) in res.output


@pytest.mark.parametrize(
    "content",
    [
        "my notes\nbuy milk\n",
        '{"a": 1}\n',
        json.dumps({"v": 1, "verdict": {}, **dict.fromkeys(archive.KEYS, "x")}) + "\n",
        "\x00\x01binary",
    ],
    ids=["notes", "other-json", "older-version", "binary"],
)
def test_sample_log_never_changes_another_file(env: Path, content: str) -> None:
    notes = env / "notes.txt"
    notes.write_text(content)
    os.chmod(notes, 0o644)
    before = notes.read_bytes()
    out = env / "run"
    res = runner.invoke(
        app, _live("-m", "layerlab/extractive", "--tasks", TASKS, "--out", str(out),
                   "--sample-log", str(notes))
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert f"--sample-log {notes}: an existing file that is not a layerlab sample log" in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert notes.read_bytes() == before and _mode(notes) == 0o644 and not out.exists()


def test_an_empty_file_becomes_the_sample_log_and_is_kept(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.touch()
    log = samplelog.SampleLog(samplelog.check_path(p, tmp_path / "run"))
    log.close()  # nothing written: a file the user made is not removed
    assert p.exists() and _mode(p) == 0o600
    assert samplelog.not_a_sample_log(tmp_path) == "not a regular file"


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077, 0o027], ids=oct)
def test_shareable_outputs_honour_the_umask(tmp_path: Path, mask: int) -> None:
    os.umask(mask)
    assert _io.current_umask() == mask
    p = tmp_path / "out" / "table.csv"
    _io.atomic_write_text(p, "a,b\n1,2\n")
    assert _mode(p) == 0o666 & ~mask and p.read_text() == "a,b\n1,2\n"
    _io.atomic_write_bytes(p, b"x", mode=0o600)
    assert _mode(p) == 0o600 and p.read_bytes() == b"x"
    assert not [q for q in p.parent.iterdir() if q.name.endswith(".tmp")]


def test_a_run_folder_report_and_viewers_get_their_modes(env: Path) -> None:
    out, log = env / "run", env / "private" / "s.jsonl"
    res = runner.invoke(
        app, _live("-m", "layerlab/extractive", "--tasks", TASKS, "--scenario", "clean",
                   "--out", str(out), "--sample-log", str(log))
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    for name in ("records.parquet", "manifest.json", "results.json", "records.jsonl"):
        assert _mode(out / name) == 0o644, name
    rep = runner.invoke(app, ["report", str(out), "--out", str(env / "report.html")])
    assert rep.exit_code == 0, rep.output
    pub = runner.invoke(app, ["view", str(out), "--out", str(env / "view.html")])
    priv = runner.invoke(app, ["view", str(log), "--out", str(env / "private-view.html")])
    assert pub.exit_code == 0 and priv.exit_code == 0, pub.output + priv.output
    assert _mode(env / "report.html") == 0o644 and _mode(env / "view.html") == 0o644
    assert _mode(env / "private-view.html") == 0o600


# --- 6. the privacy scan: plant secrets, run end to end, scan every file written ---------------


def _files(*roots: Path) -> list[Path]:
    out: list[Path] = []
    for r in roots:
        out += [r] if r.is_file() else [p for p in r.rglob("*") if p.is_file()]
    return out


def _without_recomputed(page: str) -> tuple[str, str]:
    """A public viewer page without, and its element of, evidence recomputed from the corpus
    (layerlab.reporting.records.evidence: the public corpus's documents as the record's reader got
    them, never a reply or the answer key)."""
    head, sep, rest = page.partition('<script type="application/json" id="evidence">')
    assert sep, "the page has no recomputed evidence"
    body, _, tail = rest.partition("</script>")
    return head + tail, body


def _scan(
    tmp: Path, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey, tasks: list[str],
    models: list[str], scenarios: str, server: FakeOpenAI,
) -> None:  # fmt: skip
    """Refused attempts, then allowed runs, report and viewers; scan every file written."""
    cache, private = tmp / "cache", tmp / "private"
    log = private / "samples.jsonl"
    ids = ",".join(tasks)
    outputs: list[str] = []

    def cli(args: list[str], code: int = 0) -> None:
        res = runner.invoke(app, args)
        assert res.exit_code == code, res.output
        outputs.append(res.output)

    # refused: a password and host on the command line, in a run configuration, in the environment
    for m in ("layerlab/extractive", "openai/good"):
        cli(_live("-m", m, "--api-base", f"http://user:{PASSWORD}@{HOST}:{PORT}/v1",
                  "--tasks", ids, "--out", str(tmp / "refused"), "--sample-log", str(log),
                  "--cache-dir", str(cache)), 1)  # fmt: skip
    bad = tmp / "conf" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text(
        f"models:\n  - model: layerlab/extractive\n    api_base: [https://{HOST}/v1?key={PASSWORD}]\n"
        f"sample_log: {log}\n"
    )
    cli(_live("--config", str(bad), "--out", str(tmp / "refused"), "--cache-dir", str(cache)), 1)
    assert not (tmp / "refused").exists() and not private.exists()
    # allowed: the reference agents behind a planted remote host (a run configuration) and
    # openai/good on the fake server with the planted key; both log samples privately
    good = tmp / "conf" / "run.yaml"
    entries = (
        "".join(f"  - model: {m}\n    api_base: [http://{HOST}:{PORT}/v1]\n" for m in models)
        + f"  - model: openai/good\n    api_base: [{server.base}]\n    timeout: 5\n"
    )
    good.write_text(
        f"models:\n{entries}scenarios: [{scenarios}]\ntasks: [{ids}]\nsample_log: {log}\n"
    )
    cli(_live("--config", str(good), "--out", str(tmp / "run"), "--cache-dir", str(cache)))
    assert server.auth_headers == {f"Bearer {KEY}"}  # the key was used
    cli(["report", str(tmp / "run"), "--out", str(tmp / "share" / "report.html")])
    cli(["view", str(tmp / "run"), "--out", str(tmp / "share" / "view.html")])
    cli(["view", str(log), "--out", str(private / "view.html")])
    cli(["archive", "check", str(tmp / "run")])

    shareable = _files(tmp / "run", tmp / "share")
    private_files = _files(cache, private)
    assert {p.name for p in private_files} >= {CACHE_DB, "samples.jsonl", "view.html"}
    assert len(shareable) >= 8, shareable
    answers = {key[t].expected_answer for t in tasks} - {""}
    answers = {a for a in answers if len(a) >= 6}
    evidence = {d.text[:40] for d in corpus.documents if len(d.text) >= 40}
    assert answers and evidence
    sample_text = log.read_text()
    assert any(a in sample_text for a in answers)  # the scan looks for what is really there
    for p in shareable:
        text = p.read_bytes().decode("utf-8", errors="replace")
        for secret in (KEY, PASSWORD, HOST, PORT + "/"):
            assert secret not in text, (p, secret)
        leaked = [a for a in answers if f'"{a}"' in text or f">{a}<" in text]
        assert not leaked, (p, leaked)
        if p.name == "view.html":  # the public corpus's evidence, recomputed: in its own element
            text, recomputed = _without_recomputed(text)
            assert any(e in recomputed for e in evidence), p  # the scan sees what is there
            assert '"expected"' not in recomputed and '"required' not in recomputed, p
        assert not [e for e in evidence if e in text], p
        assert _mode(p) == 0o644, (p, oct(_mode(p)))
    for p in private_files:
        text = p.read_bytes().decode("utf-8", errors="replace")
        assert KEY not in text and PASSWORD not in text and HOST not in text, p
        assert _mode(p) & 0o077 == 0, (p, oct(_mode(p)))
    for d in (cache, private):
        assert _mode(d) == 0o700, d
    blob = "\n".join(outputs)
    assert KEY not in blob and PASSWORD not in blob and HOST not in blob


@pytest.fixture()
def fake(env: Path) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def test_privacy_scan_of_every_file_written(
    env: Path, fake: FakeOpenAI, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    tasks = ["hr-01-q1", "finance-01-q1", "it_ops-01-q2"]
    _scan(env, corpus, key, tasks, ["layerlab/extractive"], "clean, stale_index", fake)


@pytest.mark.slow
def test_privacy_scan_of_every_file_written_full(
    env: Path, fake: FakeOpenAI, corpus: corpus_mod.Corpus, key: corpus_mod.AnswerKey
) -> None:
    from layerlab.faults.scenario import load_scenarios

    tasks = [t.task_id for t in corpus.tasks[::6]]
    _scan(env, corpus, key, tasks, ["layerlab/extractive", "layerlab/cautious"],
          ", ".join(load_scenarios()), fake)  # fmt: skip

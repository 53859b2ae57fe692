"""No secret reaches a shareable file or a message (issue 34, item 2).

A target's settings are judged by name and by value shape (one judge:
:mod:`layerlab.harness.targets.spec`); a run with a secret of every kind planted in its
configuration, and a target that raises with a credentialed URL, leaves none of them in any file
under the run folder, in its report or sample log, or on stdout/stderr. The settings' hash (the
run id) still covers the real values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from layerlab import archive
from layerlab.cli import main
from layerlab.harness.runconfig import stored_config
from layerlab.harness.targets import parse_target
from layerlab.harness.targets.spec import SECRET_MARK, is_secret, redact_secrets, secret_shape

FIXTURES = Path(__file__).parent / "fixtures"

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJyYWctYm90In0.c2lnbmF0dXJlLWJ5dGVz"
BY_NAME = {  # harmless-looking values under names that say "secret"
    "api_key": "plain-apikey-value-01",
    "db_password": "plain-dbpassword-02",
    "pwd": "plain-pwd-03",
    "db_pass": "plain-dbpass-04",
    "session": "plain-session-05",
    "private_note": "plain-private-06",
    "header.X-Session": "plain-xsession-07",
    "jwt": "plain-jwt-08",
}
BY_SHAPE = {  # secrets under harmless names: (setting value, the part that must never appear)
    "conn": ("Server=db.internal;User Id=rag;Password=connpw-0931;", "connpw-0931"),
    "note_openai": ("sk-proj-Q7v9XkT2mN4pL8rS1wY6zA3b", "sk-proj-Q7v9XkT2mN4pL8rS1wY6zA3b"),
    "note_sk": ("sk-4f8a2c9e1b7d3f6a0e5c8b2d", "sk-4f8a2c9e1b7d3f6a0e5c8b2d"),
    "note_hf": ("hf_aBcDeFgHiJkLmNoPqRsTuVwX", "hf_aBcDeFgHiJkLmNoPqRsTuVwX"),
    "note_gh": (
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
    ),
    "note_ghpat": ("github_pat_11ABCDEFG0123456789_abcdefXYZ", "github_pat_11ABCDEFG0123456789"),
    "note_slack": ("xoxb-2048-9999-ZzYyXxWwVv", "xoxb-2048-9999-ZzYyXxWwVv"),
    "note_slackp": ("xoxp-1111-2222-AbCdEfGhIj", "xoxp-1111-2222-AbCdEfGhIj"),
    "note_aws": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "note_jwt": (JWT, "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"),
    "endpoint": ("https://svc:urlpw-5520@api.internal/v1", "urlpw-5520"),
}
HARMLESS = {"top_k": 3, "mode": "fast", "passages": 5, "index": "docs-v2"}
RAISED = "raised-pw-4471"  # the password in the URL the target's exception holds
PLANTED = [*BY_NAME.values(), *(part for _v, part in BY_SHAPE.values()), RAISED]


@pytest.fixture(autouse=True)
def _fixtures_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _settings() -> dict[str, object]:
    return {**BY_NAME, **{k: v for k, (v, _p) in BY_SHAPE.items()}, **HARMLESS}


@pytest.mark.parametrize("name", list(BY_NAME))
def test_a_secret_name_is_a_secret_whatever_its_value(name: str) -> None:
    assert is_secret(name, "harmless") and is_secret(name.upper(), 3)


@pytest.mark.parametrize("name", list(BY_SHAPE))
def test_a_secret_shape_is_a_secret_under_any_name(name: str) -> None:
    value, part = BY_SHAPE[name]
    assert secret_shape(value) and is_secret("note", value)
    out = redact_secrets(f"failed: {value} (retrying)")
    assert part not in out and SECRET_MARK in out and out.startswith("failed: ")
    assert redact_secrets(out) == out  # stable: a marker is never redacted again


def test_harmless_settings_and_text_are_kept() -> None:
    for k, v in HARMLESS.items():
        assert not is_secret(k, v), k
    for text in ["12 months (hr-05-b)", "task-sk-01", "https://docs.example/a?page=2", "eyJ"]:
        assert redact_secrets(text) == text


def test_the_settings_hash_covers_the_real_values() -> None:
    spec = parse_target("python:user_targets:leaky", settings=_settings())
    other = parse_target("python:user_targets:leaky", settings={**_settings(), "pwd": "changed"})
    assert spec.manifest()["settings_sha256"] == spec.settings_sha256()
    assert spec.identity() != other.identity()  # another secret: another run id
    assert spec.manifest()["settings"] == other.manifest()["settings"]
    # what identity() hashed before redaction was extended (run ids of existing configs hold)
    old = parse_target("python:user_targets:leaky", settings={"api_key": "k", "top_k": "3"})
    assert old.settings_sha256() == (
        "0d297c516a7ffc6ae7926a2eab20455b03b3a8b68f74b6bcfe1e06dddaf473a1"
    )


def _config(tmp_path: Path, log: Path) -> Path:
    cfg = tmp_path / "secret-run.yaml"
    doc = {
        "target": {"spec": "python:user_targets:leaky", "name": "leaky", "settings": _settings()},
        "tasks": ["finance-01-q1"],
        "scenarios": ["clean", "stale_index"],
        "max_error_rate": 1.0,
        "sample_log": str(log),
    }
    comment = f"# the key is {BY_SHAPE['note_openai'][0]} and the password {BY_NAME['pwd']}\n"
    cfg.write_text(comment + yaml.safe_dump(doc, sort_keys=False))
    return cfg


def _leaks(text: str) -> list[str]:
    return [s for s in PLANTED if s in text]


def test_a_run_with_planted_secrets_writes_none_of_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import user_targets

    user_targets.LEAKY_CALLS.clear()
    out, log, html = tmp_path / "run", tmp_path / "private" / "samples.jsonl", tmp_path / "r.html"
    cfg = _config(tmp_path, log)
    assert all(s in cfg.read_text() or s == RAISED for s in PLANTED)  # each one is planted
    args = ["run", "live", "--config", str(cfg), "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    assert main(args) == 0, capsys.readouterr().err
    assert main(["report", str(out), "--out", str(html)]) == 0
    said = capsys.readouterr()
    assert _leaks(said.out + said.err) == []
    files = [p for p in [*out.rglob("*"), log, html] if p.is_file()]
    assert {p.name for p in files} >= {"run.yaml", "manifest.json", "results.json",
                                       "records.parquet", "target.parquet"}  # fmt: skip
    for p in files:
        assert _leaks(p.read_bytes().decode("utf-8", "replace")) == [], p
    # what the target failed with is still said, its secrets replaced
    errors = [json.loads(ln).get("target_error") for ln in log.read_text().splitlines()]
    assert f"postgresql://{SECRET_MARK}@db.internal:5432/docs" in next(e for e in errors if e)
    man = archive.read_manifest(out)
    shown = man["target"]["settings"]
    assert {k for k, v in shown.items() if v == SECRET_MARK} == {*BY_NAME, *BY_SHAPE}
    assert {k: shown[k] for k in HARMLESS} == HARMLESS  # the rest is kept as given
    spec = parse_target("python:user_targets:leaky", "leaky", settings=_settings())
    assert man["target"]["settings_sha256"] == spec.settings_sha256()
    stored = yaml.safe_load((out / "run.yaml").read_text())  # still a valid configuration
    assert stored["target"]["settings"] == {**dict.fromkeys([*BY_NAME, *BY_SHAPE], SECRET_MARK),
                                            **HARMLESS}  # fmt: skip


def test_a_target_failing_at_start_says_why_without_its_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", "live", "--target", "python:user_targets:LeakyAtStart", "--tasks",
            "finance-01-q1", "--scenario", "clean", "--out", str(out), "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]  # fmt: skip
    for k, v in _settings().items():
        args += ["--target-setting", f"{k}={v}"]
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "ConnectionError: login failed for https://" in err and SECRET_MARK in err, err
    assert _leaks(err) == []
    for p in (p for p in tmp_path.rglob("*") if p.is_file()):
        assert _leaks(p.read_bytes().decode("utf-8", "replace")) == [], p


def test_a_stored_configuration_keeps_its_shape() -> None:
    text = (
        "target:\n  spec: python:m:f\n  settings:\n    api_key: |\n      two\n      lines\n"
        "    top_k: 3\n    note: 'hf_aBcDeFgHiJkLmNoPqRsTuVwX'\nlimit: 2  # see http://me:pw@h/x\n"
    )
    stored = stored_config(text)
    assert yaml.safe_load(stored) == {
        "target": {"spec": "python:m:f",
                   "settings": {"api_key": SECRET_MARK, "top_k": 3, "note": SECRET_MARK}},
        "limit": 2,
    }  # fmt: skip
    assert "lines" not in stored and "hf_" not in stored and "pw" not in stored

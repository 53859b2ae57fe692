"""No secret reaches a shareable file or a message (issue 34, item 2; issue 45, item 3).

One judge and one redactor (:mod:`layerlab._secrets`, one list of secret words): a target's
settings are judged by name and by value shape; a run with a secret of every kind planted in its
configuration, and a target that raises with a credentialed URL, leaves none of them in any file
under the run folder, in its report or sample log, or on stdout/stderr; every shape is caught on
every path that says what a setting, a target, a provider or a retriever said; and a provider
whose error holds the API key leaves it in no file and on no terminal. The settings' hash (the
run id) still covers the real values."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from layerlab import archive
from layerlab._secrets import SECRET_MARK, is_secret, redact, secret_shape
from layerlab.cli import main
from layerlab.harness.runconfig import stored_config
from layerlab.harness.targets import parse_target

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
    out = redact(f"failed: {value} (retrying)")
    assert part not in out and SECRET_MARK in out and out.startswith("failed: ")
    assert redact(out) == out  # stable: a marker is never redacted again


def test_harmless_settings_and_text_are_kept() -> None:
    for k, v in HARMLESS.items():
        assert not is_secret(k, v), k
    for text in ["12 months (hr-05-b)", "task-sk-01", "https://docs.example/a?page=2", "eyJ"]:
        assert redact(text) == text


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


# --- one rule on every path (issue 45) -----------------------------------------------------------

# every shape the stronger of the two old rules caught, and those the union adds: (text, the part
# that must never appear)
SHAPES = {
    **{name: (f"failed: {value} (retrying)", part) for name, (value, part) in BY_SHAPE.items()},
    "bearer": ("Authorization: Bearer tok.8f2k9x7q1m", "tok.8f2k9x7q1m"),
    "basic": ("Authorization: Basic dXNlcjpiYXNpYy03NzE=", "dXNlcjpiYXNpYy03NzE="),
    "query": ("GET https://h.example/v1?x=1&access_token=qtok-8812#top", "qtok-8812"),
    "pair": ("connect(db_password=pairpw-3310, host=db)", "pairpw-3310"),
    "env_pair": ("export OPENAI_API_KEY=envpair-7781", "envpair-7781"),
    "json": ('body {"api_key": "jsonkey 6612", "model": "m"}', "jsonkey 6612"),
    "at_in_password": ("https://u:at@pw-9931@h.example/v1", "pw-9931"),
    "google": ("key AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
}
BASE = "http://127.0.0.1:8080/v1"


def _provider_error(text: str) -> str:
    from layerlab.harness.live.calls import _describe_error

    return _describe_error(RuntimeError(text), BASE)


def _endpoint_message(text: str) -> str:
    from layerlab.models.routing import redact_endpoint

    return redact_endpoint(f"{text} at {BASE}", BASE)


def _target_message(text: str) -> str:
    return parse_target("python:user_targets:leaky", settings={"top_k": 3}).redact(text)


def _target_manifest(text: str) -> str:
    shown = parse_target("python:user_targets:leaky", settings={"note": text}).manifest()
    return json.dumps(shown)


def _stored_config(text: str) -> str:
    from layerlab.harness.runconfig import stored_config

    value = json.dumps(text)  # a YAML double-quoted scalar
    return stored_config(f"# {text}\ntarget:\n  spec: python:m:f\n  settings:\n    note: {value}\n"
                         f"limit: 2\nmodels: [{{model: a, note: {value}}}]\n")  # fmt: skip


def _retriever_failure(text: str) -> str:
    from layerlab.system.retrieval import RetrieverError
    from layerlab.system.retrieval.python import _build

    def store() -> None:
        raise ConnectionError(text)

    with pytest.raises(RetrieverError) as err:
        _build(store, (), "--retriever python:m:store")
    return str(err.value)


def _import_failure(text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    from layerlab._code import import_attr

    name = f"secret_boom_{abs(hash(text))}"
    (tmp_path / f"{name}.py").write_text(f"raise RuntimeError({text!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError) as err:
        import_attr(f"{name}:f", "--retriever python:x", ValueError)
    return str(err.value)


PATHS = {
    "redact": redact,
    "provider error": _provider_error,
    "endpoint message": _endpoint_message,
    "target message": _target_message,
    "target manifest": _target_manifest,
    "stored run.yaml": _stored_config,
    "retriever failure": _retriever_failure,
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_shape_is_caught_on_every_path(shape: str, path: str) -> None:
    text, part = SHAPES[shape]
    out = PATHS[path](text)
    assert part not in out, out
    assert SECRET_MARK in out, out  # said, redacted: not dropped


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_user_module_failing_at_import_is_redacted(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, part = SHAPES[shape]
    out = _import_failure(text, tmp_path, monkeypatch)
    assert part not in out and SECRET_MARK in out and "RuntimeError" in out, out


def test_a_secret_environment_variable_is_caught_whatever_its_format(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACME_API_KEY", "acme 4f1c")  # whitespace: not taken as a secret value
    monkeypatch.setenv("MY_SERVICE_TOKEN", "plain-service-7q3w")
    monkeypatch.setenv("PWD", "/home/someone/project")  # a path, not a secret
    text = "refused plain-service-7q3w in /home/someone/project/x.py"
    for path in ("redact", "provider error", "target message", "retriever failure"):
        out = PATHS[path](text)
        assert "plain-service-7q3w" not in out and "/home/someone/project/x.py" in out, out
    assert is_secret("note", "plain-service-7q3w") and not is_secret("note", "acme 4f1c")


def test_names_and_urls_are_judged_by_the_one_word_list() -> None:
    from layerlab._secrets import credentials_in

    for name in ("x-sig", "Signature", "client_cert", "sentry_dsn", "ssl_private_key", "cookie"):
        assert is_secret(name, "v"), name
        assert credentials_in(f"https://h.example/v1?{name}=v"), name
    for name in ("design", "signal", "passages", "top_k", "api-version"):
        assert not is_secret(name, "v"), name
        assert credentials_in(f"https://h.example/v1?{name}=v") is None, name


def test_one_definition_of_the_secret_words_and_the_redactor() -> None:
    """The word list, the mark and the judges are defined once, in ``layerlab/_secrets.py``;
    what else is named like a redactor only adds to it (a target's own values, an endpoint)."""
    import ast

    package = Path(__file__).resolve().parent.parent / "layerlab"
    words = ("key", "token", "secret", "pwd", "auth", "credential", "session")
    lists, defs, marks = [], [], []
    for f in sorted(package.rglob("*.py")):
        rel = f.relative_to(package).as_posix()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                v = node.value.lower()
                if sum(t.strip() in words for t in re.split(r"[|()?:]", v)) >= 2:
                    lists.append(rel)  # an alternation of two secret words or more
                if v == SECRET_MARK:
                    marks.append(rel)
            if isinstance(node, ast.FunctionDef) and (
                "redact" in node.name or "secret" in node.name or "credential" in node.name
            ):
                defs.append((rel, node.name))
    assert lists == ["_secrets.py"]
    assert marks == ["_secrets.py"]
    assert sorted(defs) == [
        ("_secrets.py", "credentials_in"),
        ("_secrets.py", "environment_secrets"),
        ("_secrets.py", "is_secret"),
        ("_secrets.py", "is_secret_name"),
        ("_secrets.py", "redact"),
        ("_secrets.py", "secret_shape"),
        ("harness/runconfig.py", "_secret_spans"),  # where in a YAML text the values are
        ("harness/targets/spec.py", "redact"),  # the target's secret values, then _secrets.redact
        ("harness/targets/spec.py", "secret_values"),
        ("models/routing.py", "redact_endpoint"),  # the endpoint hidden, then _secrets.redact
        ("models/routing.py", "redact_urls"),  # URLs as local/remote (no secret judged)
    ]


# --- a provider whose error holds the API key (offline: tests/fake_openai.py) --------------------

sys.path.insert(0, str(Path(__file__).parent))
from fake_openai import UPSTREAM_PASSWORD, FakeOpenAI  # noqa: E402

KEYS = {
    "sk-key": "sk-test-" + "pr0v" * 6,  # a known format
    "plain-key": "acme-provider-key-8c41d",  # no known format: caught as the environment's key
}


@pytest.fixture()
def provider() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


def _everything_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.parametrize("model", ["leaky", "leaky-late"])
@pytest.mark.parametrize("kind", list(KEYS))
def test_a_provider_error_holding_the_key_leaves_it_nowhere(
    kind: str,
    model: str,
    provider: FakeOpenAI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    key = KEYS[kind]
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out, log = tmp_path / "run", tmp_path / "private" / "samples.jsonl"
    args = ["run", "live", "-m", f"openai/{model}", "--api-base", provider.base,
            "--tasks", "finance-01-q1,finance-02-q1,hr-01-q1", "--scenario", "clean",
            "--out", str(out), "--no-progress", "--cache-dir", str(tmp_path / "cache"),
            "--sample-log", str(log), "--attempts", "2", "--backoff", "0"]  # fmt: skip
    assert main(args) != 0
    said = capsys.readouterr()
    terminal = said.out + said.err
    # the provider's error was said (its words, the secrets replaced) ...
    assert "Incorrect API key provided" in terminal and SECRET_MARK in terminal, terminal
    expected = "preflight call failed" if model == "leaky" else "authentication failed"
    assert expected in terminal, terminal
    assert provider.statuses[500 if model == "leaky" else 401] >= 1
    # ... and the key is in no output and no file
    assert key not in terminal and UPSTREAM_PASSWORD not in terminal, terminal
    files = _everything_under(tmp_path)
    if model == "leaky-late":  # records were being written when the key was refused
        assert any(p.parent == out for p in files), files
    for p in files:
        data = p.read_bytes()
        assert key.encode() not in data and UPSTREAM_PASSWORD.encode() not in data, p

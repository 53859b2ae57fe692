"""Shared fixtures: the committed enterprise_v2 corpus and small spec files."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_MODE", "PRODUCTION")
os.environ.setdefault("MPLBACKEND", "Agg")

from layerlab import paths  # noqa: E402
from layerlab.corpus import build as corpus_mod  # noqa: E402
from layerlab.harness.prepare import prepare
from layerlab.harness.step import admit

FIXTURES = Path(__file__).parent / "fixtures"

# The Ctrl-C tests need SIGINT handled: a background job of a non-interactive shell (`make test &`,
# `nohup ... &`) starts with SIGINT ignored, and an ignored signal stays ignored in every process
# the tests start, so a run under test could not be interrupted. Python's own handler restores it
# here and, reset to the default at exec, in every subprocess.
signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """``slow`` tests (full-size runs of behaviour the default suite covers on smaller inputs)
    are opt-in: ``-m slow`` (``make test-slow``) or any other ``-m`` expression selects them.
    ``wheel`` tests (build and install the wheel, about 100 s) run in ``make test-wheel``, which
    CI runs after ``make test``; a bare ``pytest`` runs them too."""
    config.addinivalue_line("markers", "wheel: builds and installs the wheel (make test-wheel)")
    if not config.option.markexpr:
        config.option.markexpr = "not slow"


@pytest.fixture(scope="session")
def corpus() -> corpus_mod.Corpus:
    return corpus_mod.load(paths.CORPUS_DIR)


@pytest.fixture(scope="session")
def key() -> corpus_mod.AnswerKey:
    return corpus_mod.load_answer_key(paths.CORPUS_DIR)


@pytest.fixture()
def good_spec_text() -> str:
    return (FIXTURES / "mini_returns.yaml").read_text()


@pytest.fixture(scope="session")
def every_gate(corpus: corpus_mod.Corpus) -> list[tuple[str, str, corpus_mod.Task, object]]:
    """Every cell of the matrix before the reader, under every arm of the committed mitigations
    spec (contract arms, mitigations and stacks): (scenario, arm, task, Admission)."""
    from layerlab.faults.scenario import load_scenarios
    from layerlab.mitigations import load_mitigations

    arms = list(load_mitigations().arms)
    out = []
    for s in load_scenarios().values():
        prep = prepare(corpus, s)
        for t in corpus.tasks:
            for arm in arms:
                out.append((s.name, arm, t, admit(t, prep, arm)))
    return out


@pytest.fixture(autouse=True)
def _private_reply_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> None:
    """Give each test its own default reply cache (a user cache directory), so no test sees
    another's replies and nothing is written to the real user cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("LAYERLAB_CACHE_DIR", raising=False)

"""Where the repository's folders are. The only module that knows the layout.

In a repository checkout the data is the repository's ``data/``. Installed from a wheel, the data
the library reads (``PACKAGE_DATA``: the specs, roles, mitigations, model registry and the
enterprise_v2 corpus) is package data, ``layerlab/_data/``, read through ``importlib.resources``;
the build copies it there (``setup.py``), so the repository keeps one copy. Installed, ``ROOT``
(where ``out/`` and generated artifacts go) is the current folder and ``IN_REPO`` is False:
commands that need the repository (notebooks, the paper, committed archives) say so.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

# what the build copies from data/ into the wheel (relative to data/; setup.py reads this tuple)
PACKAGE_DATA = ("specs", "corpus/enterprise_v2")
PACKAGE_DATA_DIR = "_data"  # inside the layerlab package, in a wheel only

_CHECKOUT = Path(__file__).resolve().parent.parent


def _in_repo(root: Path) -> bool:
    """A repository checkout: layerlab's pyproject.toml beside the data/specs the library reads."""
    specs = root / "data" / "specs" / "scenarios.yaml"
    return (root / "pyproject.toml").is_file() and specs.is_file()


def _packaged() -> Path:
    """The installed package's data folder, as a real folder (a wheel installs unzipped)."""
    where = resources.files(__name__.rpartition(".")[0]).joinpath(PACKAGE_DATA_DIR)
    if not isinstance(where, Path):  # pragma: no cover - a zipped install
        raise RuntimeError(f"layerlab's package data ({where}) is not a folder: install unzipped")
    return where


IN_REPO = _in_repo(_CHECKOUT)
ROOT = _CHECKOUT if IN_REPO else Path.cwd()
DATA = _CHECKOUT / "data" if IN_REPO else _packaged()
SPECS = DATA / "specs"
CORPUS_SPEC_DIR = SPECS / "enterprise_v2"
SCENARIO_SPEC = SPECS / "scenarios.yaml"
# the store variant of wrong_session (a team's store's own tenant filter), apart from the paper's nine
STORE_SCENARIO_SPEC = SPECS / "scenarios_store.yaml"
# conversations over the corpus (their DSL) and the session faults across their turns, apart
# from the paper's nine
CONVERSATION_SPEC = SPECS / "conversations.yaml"
CONVERSATION_SCENARIO_SPEC = SPECS / "scenarios_conversation.yaml"
# transport faults (latency, 429, 5xx, reset, stall, truncated body, expired credential), apart
# from the paper's nine; their mitigations (bounded retry, circuit breaker) in their own spec
TRANSPORT_SCENARIO_SPEC = SPECS / "scenarios_transport.yaml"
TRANSPORT_MITIGATION_SPEC = SPECS / "mitigations_transport.yaml"
# the session mitigations of conversations (what the session store serves), in their own spec
CONVERSATION_MITIGATION_SPEC = SPECS / "mitigations_conversation.yaml"
MITIGATION_SPEC = SPECS / "mitigations.yaml"
ROLE_SPEC = SPECS / "roles.yaml"  # which scenarios each analysis compares
MODEL_SPEC = SPECS / "models.yaml"
CORPUS_DIR = DATA / "corpus" / "enterprise_v2"
ARCHIVES = DATA / "archives"
# real language models run offline (one folder per model; `make local-archives` produces them)
LOCAL_MODEL_ARCHIVES = ARCHIVES / "local_models"
# a real model over every arm of the mitigation matrix (`make local-mitigations`; Table 10's
# real-model block) and sampled replicates (`make local-replicates`): one folder per model
LOCAL_MODEL_MITIGATIONS = ARCHIVES / "local_model_mitigations"
LOCAL_MODEL_REPLICATES = ARCHIVES / "local_model_replicates"
LOCAL_MODEL_AGENT = ARCHIVES / "local_model_agent"  # agent mode (layerlab run live --agent)
# a team's own pipeline as a target (the worked example, notebook 13): one folder per target
USER_PIPELINES = ARCHIVES / "user_pipelines"
# reliability surfaces (runs swept over a fault's intensity, notebook 15): the reference agents'
# (`make reference-surface`) and each real model's (`make local-surface`, one folder per model)
REFERENCE_SURFACE = ARCHIVES / "surface" / "reference"
LOCAL_MODEL_SURFACE = ARCHIVES / "local_model_surface"
# conversational runs (notebook 16): the reference readers' (`make reference-conversations`, the
# rows as turns.parquet) and each real model's chat chain (one run folder per model)
REFERENCE_CONVERSATIONS = ARCHIVES / "conversations" / "reference"
LOCAL_MODEL_CONVERSATIONS = ARCHIVES / "local_model_conversations"
# archives kept for the record but out of every table (data/archives/retired/README.md says why)
RETIRED_ARCHIVES = ARCHIVES / "retired"
PAPER = _CHECKOUT / "paper"


def live_archives() -> list[Path]:
    """The committed archives of the live matrix: every real local model, then the reference
    agents (tables compute each kind on its own, never pooled)."""
    ref = ARCHIVES / "reference_agents"  # absent when installed from a wheel
    return [*archives_in(LOCAL_MODEL_ARCHIVES), *([ref] if (ref / "records.parquet").exists() else [])]


def surface_archives() -> list[Path]:
    """The committed surfaces notebook 15 draws: the reference agents', then each real model's
    that has landed (none yet is fine)."""
    ref = [REFERENCE_SURFACE] if (REFERENCE_SURFACE / "records.parquet").exists() else []
    return [*ref, *archives_in(LOCAL_MODEL_SURFACE)]


def conversation_archives() -> list[Path]:
    """The committed conversational archives notebook 16 draws: the reference readers', then
    each real model's that has landed (a folder holding turns.parquet or a run's turns.jsonl)."""

    def held(p: Path) -> bool:
        return (p / "turns.parquet").is_file() or (p / "turns.jsonl").is_file()

    models = sorted(p for p in LOCAL_MODEL_CONVERSATIONS.glob("*") if held(p))
    return [*([REFERENCE_CONVERSATIONS] if held(REFERENCE_CONVERSATIONS) else []), *models]


def archives_in(folder: Path) -> list[Path]:
    """The run folders directly inside ``folder`` that hold an archive (sorted; none if absent)."""
    return sorted(p for p in folder.glob("*") if (p / "records.parquet").exists())


NOTEBOOKS = _CHECKOUT / "notebooks"
REFERENCE = DATA / "reference"

# Generated artifacts (tables, figures, the reproduction report) go under ARTIFACTS, the repo
# itself by default. Tests and `layerlab reproduce --check` point LAYERLAB_ARTIFACTS at a scratch
# folder to regenerate everything there and compare it with what is committed.
COMMITTED_ARTIFACTS = ROOT
ARTIFACTS = Path(os.environ.get("LAYERLAB_ARTIFACTS") or ROOT)
TABLES = ARTIFACTS / "paper" / "tables"
FIGURES = ARTIFACTS / "figures"
REPRODUCTION = ARTIFACTS / "paper" / "REPRODUCTION.md"
ARTIFACT_DIRS = ("paper/tables", "figures")
ARTIFACT_FILES = ("paper/REPRODUCTION.md", "paper/generated/values.tex")  # the prose's macros


class NotInRepo(RuntimeError):
    """A command that needs the repository (its notebooks, paper or archives) run from a wheel."""


def require_repo(what: str) -> None:
    """Refuse ``what`` outside a repository checkout, in one line."""
    if not IN_REPO:
        raise NotInRepo(
            f"{what} needs a checkout of the layerlab repository (installed from a wheel, "
            "layerlab ships the specs and the corpus, not the notebooks, paper or archives)"
        )


def user_cache() -> Path:
    """The per-user cache outside the repository: fetched models, server logs, reply caches.

    ``$LAYERLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/layerlab``, else ``~/.cache/layerlab``.
    """
    env = os.environ.get("LAYERLAB_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "layerlab"

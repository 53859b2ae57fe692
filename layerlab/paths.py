"""Where the repository's folders are. The only module that knows the layout."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
SPECS = DATA / "specs"
CORPUS_SPEC_DIR = SPECS / "enterprise_v2"
SCENARIO_SPEC = SPECS / "scenarios.yaml"
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
# archives kept for the record but out of every table (data/archives/retired/README.md says why)
RETIRED_ARCHIVES = ARCHIVES / "retired"
PAPER = ROOT / "paper"


def live_archives() -> list[Path]:
    """The committed archives of the live matrix: every real local model, then the reference
    agents (tables compute each kind on its own, never pooled)."""
    return [*archives_in(LOCAL_MODEL_ARCHIVES), ARCHIVES / "reference_agents"]


def archives_in(folder: Path) -> list[Path]:
    """The run folders directly inside ``folder`` that hold an archive (sorted; none if absent)."""
    return sorted(p for p in folder.glob("*") if (p / "records.parquet").exists())


NOTEBOOKS = ROOT / "notebooks"
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


def user_cache() -> Path:
    """The per-user cache outside the repository: fetched models, server logs, reply caches.

    ``$LAYERLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/layerlab``, else ``~/.cache/layerlab``.
    """
    env = os.environ.get("LAYERLAB_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "layerlab"

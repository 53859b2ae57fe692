"""Where the repository's folders are. The only module that knows the layout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
SPECS = DATA / "specs"
CORPUS_SPEC_DIR = SPECS / "enterprise_v2"
SCENARIO_SPEC = SPECS / "scenarios.yaml"
CORPUS_DIR = DATA / "corpus" / "enterprise_v2"
ARCHIVES = DATA / "archives"
FIGURES = ROOT / "figures"
PAPER = ROOT / "paper"
TABLES = PAPER / "tables"
NOTEBOOKS = ROOT / "notebooks"

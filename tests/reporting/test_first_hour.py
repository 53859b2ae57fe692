"""The first hour's leftovers (issue 42, item 5): what `view` prints to open, what the README's
commands write is ignored by git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from layerlab import paths
from layerlab.cli import main
from layerlab.reporting.records import viewer

ROOT = Path(__file__).resolve().parents[2]
DENSE = paths.USER_PIPELINES / "my-dense-chain"


def test_view_prints_the_address_to_open_at_its_first_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "view.html"
    assert main(["view", str(DENSE), "--out", str(out), "--no-evidence"]) == 0
    said = capsys.readouterr().out
    (address,) = re.findall(r"^open: (\S+)$", said, re.M)
    rows, _ = viewer.load([DENSE], recompute=False)
    want = viewer.first_failure(rows)
    assert want and address == f"{out.resolve().as_uri()}#outcome={want['outcome']}"


def test_what_the_readmes_commands_write_is_ignored_by_git() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    written = re.findall(r"--out (\S+)", readme) + re.findall(r"-w (dist)\b", readme)
    assert "view.html" in written and "dist" in written
    for name in written:
        probe = f"{name.rstrip('/')}/x" if "." not in Path(name).name else name
        got = subprocess.run(["git", "check-ignore", "-q", probe], cwd=ROOT, check=False)
        assert got.returncode == 0, f"{name}: written by a README command, not in .gitignore"


def test_explore_follows_the_records_model_or_says_why_it_cannot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["explore", "--task", "hr-05-q1", "--scenario", "stale_index"]
    assert main([*args, "--model", "layerlab/cautious"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "reader: cautious" in lines[1] and not lines[0].startswith("note:")
    assert main([*args, "--model", "local/qwen2.5-coder-1.5b"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("note: the record's model local/qwen2.5-coder-1.5b cannot be re-run here")
    assert "not in the archive" in said and "are the extractive reader's" in said
    # at 80 columns what the fault did and the outcome come first, before payloads scroll by
    top = said.split("\n\n", 1)[1].splitlines()[:8]
    assert "what the fault did:" in top and any(x.startswith("outcome: S ") for x in top)


def test_the_static_explorers_verdict_badges_are_separated() -> None:
    from layerlab.reporting.records import browse

    row = {"outcome": "wrong", "diagnostic": "reader", "task_id": "hr-05-q1", "provider": "p",
           "model": "m", "scenario": "clean", "mitigation": "strict",
           "verdict": {"success": False, "exact_match": False, "retrieval_ok": True,
                       "citation_ok": True, "schema_ok": True}}  # fmt: skip
    html = browse.record_html(row)
    text = re.sub(r"<[^>]+>", "", html.split("</summary>")[0])
    assert "S ✗ E ✗ R ✓ G ✓ V ✓" in text

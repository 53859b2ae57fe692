"""``layerlab report`` on conversational runs: a page of their own with S by turn index, the
cross-session leak with exact intervals and where each system breaks, its rows checked against
the manifest."""

from __future__ import annotations

import shutil

import pytest

from layerlab import paths
from layerlab.analysis.conversations import summarise
from layerlab.archive import turnrecords
from layerlab.harness import conversation as hc
from layerlab.reporting.format import convtext
from layerlab.reporting.run import convreport, report

REF = paths.REFERENCE_CONVERSATIONS


@pytest.fixture(scope="module")
def ref_html() -> str:
    return report.build([REF], "conv")


def test_the_page_shows_s_by_turn_the_leak_and_the_breaks(ref_html: str) -> None:
    summary = summarise(turnrecords.read(REF))
    for sid, title in convreport.SECTIONS:
        assert f'id="{sid}"' in ref_html and title in ref_html
    assert ref_html.count("<img") == 1  # the S-by-turn figure
    cell = summary["layerlab/extractive"]["swapped_session"]
    leak = cell["leak_turns"]
    assert f"({leak['k']}/{leak['n']})" in ref_html and leak["k"] > 0
    finding = convtext.finding("layerlab/extractive", "swapped_session", cell)
    assert finding.replace("'", "&#x27;") in ref_html
    assert "t5 (n=15)" in ref_html  # the turns counted at each index
    assert "deterministic baselines" in ref_html and "Records" not in ref_html


def test_the_page_judges_the_session_mitigations_the_run_played(tmp_path, ref_html: str) -> None:
    """The committed archive plays the three session mitigations beside the baseline: the page
    holds their matrix (a row per system and arm, the verdicts); a baseline-only run says it
    played none."""
    mitigations = ref_html.split('id="mitigations"', 1)[1].split('id="provenance"', 1)[0]
    for arm in ("session_scoped_memory", "update_invalidation", "history_summarisation"):
        assert mitigations.count(f">{arm}<") == 2  # one row per reader
    assert "specific" in mitigations and "ineffective" in mitigations
    base = [r for r in turnrecords.read(REF) if r.mitigation == "none"][:60]
    hc.write_run(tmp_path / "base", base, {"systems": ["layerlab/cautious"]})
    html = report.build([tmp_path / "base"], "conv")
    assert "played no session mitigation" in html


def test_the_page_is_byte_identical_on_rerun(ref_html: str) -> None:
    assert report.build([REF], "conv") == ref_html


def test_a_run_folder_is_reported_and_its_rows_are_checked(tmp_path, ref_html: str) -> None:
    recs = turnrecords.read(REF)[:40]
    hc.write_run(tmp_path / "run", recs, {"systems": ["layerlab/cautious"]})
    html = report.build([tmp_path / "run"], "conv")
    assert "S by turn index" in html and "run</h3>" in html
    (tmp_path / "run" / turnrecords.FILE).write_text(
        (tmp_path / "run" / turnrecords.FILE).read_text().replace('"leak":false', '"leak":true', 1))
    with pytest.raises(ValueError, match="checksum differs"):
        report.build([tmp_path / "run"], "conv")


def test_mixed_kinds_and_a_moved_archive_are_one_line(tmp_path) -> None:
    with pytest.raises(ValueError, match="report each kind on its own page"):
        report.build([REF, paths.ARCHIVES / "reference_agents"], "x")
    moved = shutil.copytree(REF, tmp_path / "ref")
    (moved / "summary.json").write_text("{}\n")
    with pytest.raises(ValueError, match="summary.json: not the run's"):
        report.build([moved], "x")


def test_the_command_writes_the_page_and_refuses_mixed_kinds_in_one_line(tmp_path, capsys) -> None:
    from layerlab.cli.app import main

    out = tmp_path / "conv.html"
    assert main(["report", str(REF), "--out", str(out)]) == 0
    assert "S by turn index" in out.read_text() and "wrote" in capsys.readouterr().out
    assert main(["report", str(REF), str(paths.ARCHIVES / "reference_agents"),
                 "--out", str(tmp_path / "x.html")]) == 1  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report each kind on its own page" in err[0]
    assert not (tmp_path / "x.html").exists()

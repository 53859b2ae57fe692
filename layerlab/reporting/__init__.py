"""What a reader sees, in four rooms by audience, each importing only from the rooms below it
(``format`` <- ``records`` <- ``paper`` <- ``run``; ``tests/test_layout.py`` enforces it):

* `format`: the only place a number becomes text — the one rate and one percentage-point
  formatter (`display`), the analysis's results as rows of text (`cells`), notebook display,
  terminal tables, and self-contained HTML pages;
* `records`: one record at a time — its traced path, its recomputed evidence, the failure-case
  explorer and the sample viewer, agent transcripts, and the data dictionary of the archives;
* `paper`: the paper — the table registry and builders (`paper.tables`), figures, the exporter,
  the prose's values, recompute, reproduce and the PDF build (it shows traced cases: Table 6);
* `run`: what a team reads about its run — the HTML report (which draws the paper's figures),
  its findings, the live-run overview and agent-step summaries.
"""

__all__ = [
    "format",
    "paper",
    "records",
    "run",
]

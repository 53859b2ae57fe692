"""The paper: the table registry and builders (`tables`), their one exporter (`export`),
figures (`figures`), the prose's numbers as macros (`papervalues`; the conversations section's:
`convvalues`, the surface section's: `surfacevalues`; their text: `texvalues`), the
archive-based tables recomputed (`recompute`), every notebook executed (`reproduce`) and the PDF
build (`build`).
Imports `layerlab.reporting.format` and `layerlab.reporting.records` (Table 6 traces its
representative cases)."""

__all__ = [
    "build",
    "convvalues",
    "export",
    "figures",
    "papervalues",
    "recompute",
    "reproduce",
    "surfacevalues",
    "tables",
    "texvalues",
]

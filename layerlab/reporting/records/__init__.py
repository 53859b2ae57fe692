"""One record at a time: a deterministic cell with every step kept (`tracing`), an archived
record's evidence recomputed from the corpus (`evidence`), the failure-case explorer (`explore`)
and the notebook browser (`browse`), the HTML sample viewer (`viewer`, with a record's own spans:
`spanview`) and agent transcripts (`transcript`), and the data dictionary of the archives' columns (`dictionary`). Imports only
`layerlab.reporting.format` among the rooms."""

__all__ = [
    "browse",
    "dictionary",
    "evidence",
    "explore",
    "spanview",
    "tracing",
    "transcript",
    "viewer",
]

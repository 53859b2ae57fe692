"""What a reader sees: paper tables and their registry (`tables`) and their exporter (`export`),
figures (`figures`), notebook display (`display`) and live-run overviews (`runs`), the HTML report
(`htmlreport`) and the sample viewer (`viewer`) on self-contained pages (`page`), the failure-case
explorer (`explore`), the data dictionary (`dictionary`), `recompute`, `reproduce`, the paper
build (`paper`) and terminal tables (`terminal`)."""

__all__ = [
    "dictionary",
    "display",
    "explore",
    "export",
    "figures",
    "htmlreport",
    "page",
    "paper",
    "recompute",
    "reproduce",
    "runs",
    "tables",
    "terminal",
    "viewer",
]

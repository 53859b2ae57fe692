"""Formatting: the only place a number becomes text. The one rate formatter and the one
percentage-point formatter, and notebook tables (`display`: percentages, intervals, signed
points); the analysis's results as rows of text (`cells`: a run's rates, ``layerlab compare``,
the mitigation matrix, pass@k, the reliability surface's table and tolerance lines; `gatetext`:
the gate's checks as its lines; `convtext`: a conversational run's lines); terminal tables and
the progress bar (`terminal`), and self-contained HTML pages (`page`). The bottom room of
`layerlab.reporting`: it imports no other room; the analysis below it returns numbers, never
their text."""

__all__ = [
    "cells",
    "convtext",
    "display",
    "gatetext",
    "page",
    "terminal",
]

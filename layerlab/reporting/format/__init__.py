"""Formatting: the only place a number becomes text. Notebook tables (`display`: percentages,
intervals, signed points), terminal tables and the progress bar (`terminal`), and self-contained
HTML pages (`page`). The bottom room of `layerlab.reporting`: it imports no other room."""

__all__ = [
    "display",
    "page",
    "terminal",
]

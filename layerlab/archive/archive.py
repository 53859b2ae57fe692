"""Transitional, for ``harness/live.py`` only (its owner is splitting it, issue 23): the old
module path of the archive's public face. Delete it when merging, once live imports
``from layerlab import archive``."""

from layerlab.archive import *  # noqa: F403

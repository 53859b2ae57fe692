"""layerlab: the reference implementation of LayerRAG-Bench."""

__version__ = "0.1.0"

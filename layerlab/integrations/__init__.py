"""Doors from neighbouring tools into layerlab: each subpackage lets another tool's users reach
the fault matrix, the faulted tools and the scorer from that tool's own side (``inspect``:
Inspect AI's task, scorer and log export). Imported on their own: each needs its tool installed."""

__all__ = ["inspect"]

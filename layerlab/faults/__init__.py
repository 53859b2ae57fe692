"""The fault layer: named, seeded fault operators and the scenarios composed from them (`scenario`)."""

__all__ = ["scenario"]

"""Models: offline-safe litellm access and provider settings (`llm`), the deterministic reference
agents served as litellm providers (`agents`) and local open-weight models (`local`)."""

__all__ = ["agents", "llm", "local"]

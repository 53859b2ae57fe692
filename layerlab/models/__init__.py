"""Models: offline-safe litellm access and provider settings (`llm`), the deterministic reference
agents served as litellm providers (`agents`), local open-weight models (`local`), the reply
cache (`cache`) and the routing of calls to a model's servers (`routing`)."""

__all__ = ["agents", "cache", "llm", "local", "routing"]

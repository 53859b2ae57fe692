"""Harnesses: a scenario prepared once per run (`prepare`), the one record step (`step`) and the
runs built from it — deterministic (`deterministic`, no model), live (`live`, a model through
litellm), the focused LangChain study (`study`) — and run configurations (`runconfig`)."""

__all__ = ["conversation", "convtools", "deterministic", "live", "prepare", "runconfig", "step",
           "study"]

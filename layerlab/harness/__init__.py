"""Harnesses: a scenario prepared once per run (`prepare`), the one record step (`step`) and the
runs built from it — deterministic (`deterministic`, no model), live (`live`, a model through
litellm), the focused LangChain study (`study`), the conversations played turn by turn
(`conversation`, its tools `convtools`, LangChain chat chains `convlangchain`, LlamaIndex chat
engines `convllamaindex`, HTTP services `convhttp`) — and run configurations (`runconfig`)."""

__all__ = ["conversation", "convhttp", "convlangchain", "convllamaindex", "convtools",
           "deterministic", "live", "prepare", "runconfig", "step", "study"]

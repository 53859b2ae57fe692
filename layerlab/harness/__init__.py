"""Harnesses: the one record step and the runs built from it — deterministic (no model), live
(a model through litellm), the focused LangChain study — and run configurations."""

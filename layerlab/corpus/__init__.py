"""The corpus layer: the specification DSL (`spec`), the `enterprise_v2` builder (`build`: policy
specs -> documents, public tasks and a separate answer key), a user's own documents (`userdocs`:
the JSONL/YAML import format, written in the same corpus format), query-derived domain cues
(`cues`), typed span extraction (`extract`) and the one text normalisation (`text`)."""

__all__ = ["build", "cues", "extract", "spec", "text", "userdocs"]

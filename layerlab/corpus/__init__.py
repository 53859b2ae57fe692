"""The corpus layer: the specification DSL (`spec`), the `enterprise_v2` builder (`build`: policy
specs -> documents, public tasks and a separate answer key), a user's own documents (`userdocs`:
the JSONL/YAML import format, written in the same corpus format), query-derived domain cues
(`cues`), typed span extraction (`extract`), the one text normalisation (`text`), conversations
over the corpus's policies with each turn's key apart (`conversations`) and the scripted user who
plays them (`script`)."""

__all__ = ["build", "conversations", "cues", "extract", "script", "spec", "text", "userdocs"]

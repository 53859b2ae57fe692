"""The fault layer: named, seeded fault operators (`operators`), the transport faults among them
(`transport`: a call's typed event on the wire), the session faults across a conversation's turns
and the state they fault (`session`), the scenarios composed from them in the DSL (`scenario`),
and which scenarios each analysis compares (`roles`)."""

__all__ = ["operators", "roles", "scenario", "session", "transport"]

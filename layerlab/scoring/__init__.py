"""Evaluator side, the only layer that reads the answer key: the scorer (`score`: S = E ∧ R ∧ G ∧ V,
safe resolution, a diagnosis), a conversation's turns against each turn's key (`turns`) and the
retriever and corpus audits (`audit`)."""

__all__ = ["audit", "score", "turns"]

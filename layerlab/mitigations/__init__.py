"""Mitigations: registered steps that each repair one reliability layer, and the arms built from them."""

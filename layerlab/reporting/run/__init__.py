"""What a team reads about its run: the self-contained HTML report (`report`), the findings it
leads with (`findings`), a live run's overview and its terminal results (`overview`), and an
agent run's steps per scenario (`agentsummary`); a conversational run's page (`convreport`).
The top room of `layerlab.reporting`: it may
import `format`, `records` and `paper` (the report draws the paper's figures and study table)."""

__all__ = [
    "agentsummary",
    "convreport",
    "findings",
    "overview",
    "report",
]

"""Statistics over archives, by concern: the vocabulary, contract arms and design rule (`units`),
archives as frames (`provenance`), cluster-aware rates (`rates`), the paired bootstrap
(`bootstrap`), paired effects and the specificity margin (`effects`), cross-checks
(`crosschecks`) — one name space in `stats` — and per-model results (`results`), the specificity
matrix (`specificity`), runs side by side (`compare`), CI gates on a run's rates and verdicts
(`gate`, their syntax `thresholds`), the reliability surface over a fault's intensity
(`surface`), interval coverage (`coverage`) on synthetic archives with known truth
(`synthetic`), and a conversational run's statistics by turn and conversation (`conversations`)."""

__all__ = [
    "bootstrap",
    "conversations",
    "coverage",
    "crosschecks",
    "effects",
    "gate",
    "provenance",
    "rates",
    "results",
    "specificity",
    "stats",
    "surface",
    "synthetic",
    "thresholds",
    "units",
]

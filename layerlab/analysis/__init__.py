"""Statistics over archives: cluster-aware rates, paired effects and bootstrap intervals (`stats`),
per-model results (`results`), the specificity matrix (`specificity`), interval coverage
(`coverage`) on synthetic archives with known truth (`synthetic`)."""

__all__ = ["coverage", "results", "specificity", "stats", "synthetic"]

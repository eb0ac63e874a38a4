"""Layer 7, what the stored results mean: leaderboard and comparisons, item response theory, judge
validation, robustness probes and clinician reviews; `collect` turns the store into their rows."""

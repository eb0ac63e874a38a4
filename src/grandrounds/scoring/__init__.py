"""Pure rubric arithmetic: verdicts in, scores out. No I/O, no judges, no randomness without a seed."""

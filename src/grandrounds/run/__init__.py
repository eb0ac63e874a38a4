"""Layer 6, a run: cached, bounded, retrying calls (executor), batch APIs, the pipeline that answers,
grades, stores and aggregates (runner), re-grading, dry-run plans, costs, progress and outputs."""

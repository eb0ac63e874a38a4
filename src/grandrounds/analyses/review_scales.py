"""The scale a clinician's whole-answer score must lie on, per grading.

A score review replaces an answer's value, so it must be a value the benchmark's grader could
give. Values that are arithmetic over rubric verdicts (HealthBench, MedEQBench, GAPS, the
generic rubric grader) range from the grader's own rescoring of the worst case (every
positive criterion unmet, every negative one met) to its best case; exams, calculations, error
detection and LLMEval-Med's usability are 0 or 1. The values the grading actually holds are
always inside, so a grader whose values lie elsewhere is never refused its own scale.

:func:`grandrounds.analyses.reviews.add_review` applies this check to every whole-answer review, whichever
way it arrives (the viewer, the Python API), so both accept and refuse the same values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from grandrounds.core.records import Grade, Sample
from grandrounds.store import ReviewInput, Store


def score_range(
    grader: Any | None,
    sample: Sample | None,
    grade: Grade | None,
    observed: Iterable[float | None] = (),
) -> tuple[float, float]:
    """(lowest, highest) value a whole-answer review may give this answer."""
    values = [0.0, 1.0] + [float(v) for v in observed if v is not None and math.isfinite(v)]
    if grader is not None and sample is not None and grade is not None and sample.rubric:
        best = {c.id: "met" if c.points > 0 else "unmet" for c in sample.rubric}
        worst = {c.id: "unmet" if c.points > 0 else "met" for c in sample.rubric}
        for statuses in (best, worst):
            try:
                v = grader.rescore(sample, grade, statuses)
            except (KeyError, ValueError, TypeError, ZeroDivisionError):
                v = None
            if v is not None and math.isfinite(v):
                values.append(float(v))
    return min(values), max(values)


def check_score(score: float, scale: tuple[float, float]) -> str | None:
    """Why ``score`` cannot be stored on ``scale`` (None when it can)."""
    if not math.isfinite(score):
        return f"an answer review needs a finite score, not {score:g}"
    lo, hi = scale
    if not lo <= score <= hi:
        return f"score {score:g} is outside this benchmark's scale ({lo:g} to {hi:g})"
    return None


def review_scale(store: Store, review: ReviewInput) -> tuple[float, float]:
    """The scale of the answer ``review`` is about: its grader rebuilt from the stored spec, its
    sample, its grade and the values its grading holds ((0, 1) when the grade is missing; the
    review is refused for that anyway)."""
    from grandrounds.graders import grader_from_fingerprint

    grade = store.grade(review.run_id, review.grader_fp, review.sample_id)
    run = store.get_run(review.run_id)
    if grade is None or run is None:
        return (0.0, 1.0)
    sample = store.sample(run.benchmark, run.dataset_sha256, review.sample_id)
    spec = store.grader_spec(review.grader_fp)
    try:
        grader = grader_from_fingerprint(spec) if spec is not None else None
    except Exception:  # noqa: BLE001 - a grader that cannot be rebuilt leaves the observed values to decide
        grader = None
    return score_range(
        grader, sample, grade, store.grade_values(review.run_id, review.grader_fp).values()
    )

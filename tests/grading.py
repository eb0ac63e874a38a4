"""Grade one answer the way the runner does: a failed answer never reaches the grader."""

from __future__ import annotations

import asyncio

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.run.pipeline import Grading


def grade_answer(
    grader: Grader, sample: Sample, response: Response, ctx: GradeContext = GradeContext()
) -> Grade:
    """The grade the runner's grading stage gives ``response`` (nothing is stored)."""
    grade, _ = asyncio.run(Grading(None, "run", "fp", grader, None).grade(sample, response, ctx))  # type: ignore[arg-type]
    return grade

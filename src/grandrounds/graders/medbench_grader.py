"""MedBench grading: exact match where a question file carries answers (scoring is otherwise the platform's)."""

from __future__ import annotations

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.choice_extract import mcq_letters

WITHHELD = "answer withheld"


class MedBenchGrader(Grader):
    """Exact match of MCQ letters (or of the stripped text for open tasks) when answers exist.

    Rows whose answer the platform withholds are ``not_asked`` for scoring: counted, never wrong.
    """

    name = "medbench"

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if sample.target is None:
            return unscored(sample, "not_asked", WITHHELD)
        gold = mcq_letters(sample.target)
        if gold is not None and len(sample.target.strip()) <= 20:
            pred = mcq_letters(response.text)
            return Grade(
                sample_id=sample.id,
                value=float(pred == gold),
                extracted=pred,
                details={"kind": "mcq", "gold": gold},
            )
        text = strip_reasoning(response.text or "").strip()
        return Grade(
            sample_id=sample.id,
            value=float(text == sample.target.strip()),
            extracted=text[:200],
            details={"kind": "exact"},
        )

"""PathVQA: the short-answer VQA grade (normalised exact match, :mod:`grandrounds.graders.vqa_grader`)
with the figures of the authors' evaluation script for the same reading beside it
(``details["authors_script"]``: their exact match, F1, BLEU-1..3; :mod:`grandrounds.scoring.pathvqa`)."""

from __future__ import annotations

from dataclasses import replace

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.graders.vqa_grader import VQAGrader, our_reading
from grandrounds.scoring.pathvqa import authors_figures


class PathVQAGrader(VQAGrader):
    """The ``vqa`` grade; the authors' figures are computed on the protocol's reading, before normalisation."""

    name = "pathvqa"

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        grade = await super().grade(sample, response, ctx)
        reply = response.text or ""
        read = reply if self.params.protocol == "reference" else our_reading(reply)
        return replace(
            grade,
            details={**grade.details, "authors_script": authors_figures(read, str(sample.target))},
        )

"""HealthBench Professional's grader: HealthBench's rubric judging with Professional's presets and
grader prompt, then the reference's length adjustment (:mod:`grandrounds.benchmarks.healthbench_professional`
describes the protocol)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property
from typing import Any

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext
from grandrounds.graders.healthbench_grader import HealthBenchGrader
from grandrounds.scoring.healthbench import length_adjusted
from grandrounds.sources.healthbench_professional import (
    PRO_GRADER_TEMPLATE,
    PROTOCOLS,
    length_settings,
)


class ProfessionalGrader(HealthBenchGrader):
    """HealthBench's rubric grading with Professional's presets and prompt, plus the length adjustment.

    A grade's value is the length-adjusted score; ``details["overall_score"]`` the unadjusted one.
    """

    name = "healthbench-professional"

    def __init__(self, params: Any = None) -> None:
        super().__init__(params)
        self.preset = PROTOCOLS[self.params.protocol]

    @cached_property
    def official_template(self) -> str:
        return PRO_GRADER_TEMPLATE.load().text

    def template_hashes(self) -> dict[str, Any]:
        if not self.reference:
            return super().template_hashes()
        return {"GRADER_TEMPLATE": PRO_GRADER_TEMPLATE.load().fingerprint()}

    def counted_text(self, text: str, reference: bool) -> str:
        """The answer whose characters the adjustment counts: as returned (reference), or without reasoning traces."""
        return text if reference else strip_reasoning(text)

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        grade = await super().grade(sample, response, ctx)
        center, penalty = length_settings()
        text = response.text or ""  # simple-evals grades a missing reply as ""
        mine, other = (
            self.counted_text(text, self.reference),
            self.counted_text(text, not self.reference),
        )
        other_value = grade.details.get("other_value")
        details = dict(grade.details) | {
            "overall_score": grade.value,
            "response_chars": len(mine),
            "other_response_chars": len(other),
            "other_value_length_adjusted": None
            if other_value is None
            else length_adjusted(other_value, other, center, penalty),
            "length_adjustment": {"center": center, "penalty_per_500_chars": penalty},
        }
        value = None if grade.value is None else length_adjusted(grade.value, mine, center, penalty)
        return replace(grade, value=value, details=details)

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """The reviewed score, length-adjusted by the answer's stored length."""
        base = super().rescore(sample, grade, statuses)
        chars = grade.details.get("response_chars")
        if base is None or not isinstance(chars, int):
            return base
        center, penalty = length_settings()
        return base - penalty * ((chars - center) / 500.0)

"""MedCalc-Bench grading: read the value from the reply, apply the official tolerance rule."""

from __future__ import annotations

from grandrounds.graders.base import GradeContext, Grader
from grandrounds.graders.medcalc_extract import answer_text, parse_ground_truth, parse_value
from grandrounds.records import Grade, Response, Sample
from grandrounds.scoring.medcalc import is_correct


class MedCalcGrader(Grader):
    """1.0 when the value is within the calculator's tolerance, else 0.0.

    An answer with no readable value is wrong, as in the official scorer, and flagged
    ``details["unextractable"]`` so it is counted.
    """

    name = "medcalc"

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        t = sample.target
        kind = t["kind"]
        text = answer_text(response.text)
        value = parse_value(text, kind)
        truth = parse_ground_truth(t["truth"], kind)
        ok = is_correct(value, kind, truth, t["lower"], t["upper"])
        shown = value.strftime("%m/%d/%Y") if kind == "date" and value is not None else value
        return Grade(
            sample.id,
            1.0 if ok else 0.0,
            extracted=None if value is None else str(shown),
            details={"answer_text": text, "unextractable": value is None, "kind": kind, "truth": t["truth"]},
        )

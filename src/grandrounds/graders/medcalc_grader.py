"""MedCalc-Bench grading: read the value from the reply, apply the official tolerance rule.

Both protocols' readings are made for every answer (see :mod:`grandrounds.graders.medcalc_extract`):
the grade's value is the chosen protocol's, ``details["other_value"]`` the other's, so a result
can show both figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.graders.medcalc_extract import (
    answer_text,
    official_reading,
    parse_ground_truth,
    parse_value,
)
from grandrounds.scoring.medcalc import is_correct, official_correct
from grandrounds.sources.protocols import check_protocol


@dataclass(frozen=True)
class MedCalcParams:
    #: ``reference`` reads answers as the official scripts do; ``grandrounds`` with our tolerant reading.
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


class MedCalcGrader(Grader):
    """1.0 when the value is within the calculator's tolerance, else 0.0.

    An answer with no readable value is wrong, as in the official scorer, and flagged
    ``details["unextractable"]`` so it is counted.
    """

    name = "medcalc"
    Params = MedCalcParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        t, m = sample.target, sample.metadata
        reply = response.text or ""
        official = official_reading(reply, m["calculator_id"])
        # the file's limits as written (evaluate.py evals the text); samples stored before they were kept: the floats
        lower, upper = t.get("lower_text", str(t["lower"])), t.get("upper_text", str(t["upper"]))
        ref_ok = official_correct(official.answer, t["truth"], m["calculator_id"], lower, upper)
        kind = t["kind"]
        text = answer_text(reply)
        value = parse_value(text, kind)
        ours_ok = is_correct(
            value, kind, parse_ground_truth(t["truth"], kind), t["lower"], t["upper"]
        )
        shown = value.strftime("%m/%d/%Y") if kind == "date" and value is not None else value
        readings: dict[str, dict[str, Any]] = {
            "reference": {
                "value": float(ref_ok),
                "extracted": official.answer,
                "unextractable": official.unextractable,
                "field": official.field,
                "error": official.error,
            },
            "grandrounds": {
                "value": float(ours_ok),
                "extracted": None if value is None else str(shown),
                "unextractable": value is None,
                "answer_text": text,
            },
        }
        mine = readings[self.params.protocol]
        other = readings["grandrounds" if self.params.protocol == "reference" else "reference"]
        return Grade(
            sample_id=sample.id,
            value=mine["value"],
            extracted=mine["extracted"],
            details={
                "protocol": self.params.protocol,
                "kind": kind,
                "truth": t["truth"],
                "unextractable": mine["unextractable"],
                "other_value": other["value"],
                "other_unextractable": other["unextractable"],
                **readings,
            },
        )

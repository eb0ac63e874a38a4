"""MEDEC grading: the prediction's flag, sentence id and correction scored as the official scorer."""

from __future__ import annotations

from grandrounds.graders.base import GradeContext, Grader
from grandrounds.graders.medec_extract import parse_prediction
from grandrounds.records import Grade, Response, Sample
from grandrounds.scoring.medec import correction_score


class MEDECGrader(Grader):
    """Value = error flag correct (1.0/0.0); sentence and correction scores in details.

    A reply with no readable prediction is wrong on every metric (the official scorer counts a
    missing prediction so) and flagged ``details["unparseable"]``.
    """

    name = "medec"

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        t = sample.target
        pred = parse_prediction(response.text, text_id=sample.id)
        if pred is None:
            details = {"unparseable": True, "flag_correct": False, "sentence_correct": False, "correction_score": 0.0}
            return Grade(sample.id, 0.0, details=details)
        details = {
            "flag_correct": pred.flag == t["flag"],
            "sentence_correct": pred.sentence_id == t["sentence_id"],
            "correction_score": correction_score(t["corrected"], pred.corrected),
            "predicted": {"flag": pred.flag, "sentence_id": pred.sentence_id, "corrected": pred.corrected},
        }
        return Grade(sample.id, float(details["flag_correct"]), extracted=str(pred.flag), details=details)

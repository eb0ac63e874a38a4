"""MEDEC grading: the prediction's flag, sentence id and correction, read and scored under both protocols."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.graders.medec_extract import parse_prediction, read_submission, submission_text
from grandrounds.scoring import medec as sc
from grandrounds.sources.protocols import check_protocol


@dataclass(frozen=True)
class MEDECParams:
    #: Which protocol's reading gives the grade's value (the other one is kept in ``details["other"]``).
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


class MEDECGrader(Grader):
    """Value = error flag correct (1.0/0.0) under the chosen protocol; sentence and corrections in details.

    ``details`` holds this protocol's per-text figures (:data:`grandrounds.scoring.medec` keys:
    ``flag_correct``, ``sentence_correct``, ``correction_score`` = the text's R1FC contribution,
    ``r2_score``, ``rl_score``, ``in_rouge``), the other protocol's under ``other`` and its value
    under ``other_value``. A reply with no readable prediction is wrong on every metric (the
    official scorer counts a missing prediction so) and flagged ``unparseable``.
    """

    name = "medec"
    Params = MEDECParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        readings = {
            "reference": reference_reading(sample, response.text),
            "grandrounds": grandrounds_reading(sample, response.text),
        }
        own = readings[self.params.protocol]
        other = next(v for k, v in readings.items() if k != self.params.protocol)
        details = own | {"other": other, "other_value": float(other["flag_correct"])}
        extracted = None if own.get("unparseable") else str(own["predicted"]["flag"])
        return Grade(
            sample_id=sample.id,
            value=float(own["flag_correct"]),
            extracted=extracted,
            details=details,
        )


def reference_reading(sample: Sample, reply: str | None) -> dict[str, Any]:
    """The official scorer's figures for this text: the reply read as its submission line(s)."""
    t = sample.target
    try:
        entry = read_submission(submission_text(reply, sample.id), sample.id)
    except re.error as e:  # the official parser stops on this line; here the text counts as missing
        return sc.missing_item() | {"official_error": f"re.error: {e}"}
    if entry is None:
        return sc.missing_item()
    return {
        "flag_correct": entry.flag == str(t["flag"]),
        "sentence_correct": entry.sentence_id == str(t["sentence_id"]),
        **sc.correction_scores(
            t.get("corrected_raw", t["corrected"]), entry.corrected, official=True
        ),
        "predicted": {
            "flag": entry.flag,
            "sentence_id": entry.sentence_id,
            "corrected": entry.corrected,
        },
    }


def grandrounds_reading(sample: Sample, reply: str | None) -> dict[str, Any]:
    """Our figures for this text: tolerant reading, ``rouge_score`` ROUGE."""
    t = sample.target
    pred = parse_prediction(reply, text_id=sample.id)
    if pred is None:
        return sc.missing_item()
    return {
        "flag_correct": pred.flag == t["flag"],
        "sentence_correct": pred.sentence_id == t["sentence_id"],
        **sc.correction_scores(t["corrected"], pred.corrected, official=False),
        "predicted": {
            "flag": pred.flag,
            "sentence_id": pred.sentence_id,
            "corrected": pred.corrected,
        },
    }

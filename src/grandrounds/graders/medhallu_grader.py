"""MedHallu grading: read the model's verdict on one answer (0 factual, 1 hallucinated, 2 not sure).

Both readings are made of every reply (``details["prediction"]`` and ``details["other_prediction"]``);
the benchmark's aggregate turns them into F1 (:mod:`grandrounds.scoring.medhallu`).

- ``reference``: Medmarks' ``postprocess.py`` with ``extract_boxed_answer`` of the verifiers release
  Medmarks runs (``verifiers<0.1.8``; v0.1.7.post0 pinned, :data:`~grandrounds.sources.upstream.VERIFIERS`):
  the content of the LAST ``\\boxed{...}`` (braces matched), or the whole reply when there is none or
  its braces do not close; it counts only
  when it is exactly "0", "1" or "2" (no stripping: ``\\boxed{ 1 }`` is dropped, a bare reply "1" kept).
- ``grandrounds``: the last ``\\boxed{0|1|2}`` (spaces allowed), else a last line ``Judgement: 0|1|2``,
  else a reply that is a lone 0, 1 or 2; reasoning traces stripped first.

The value is 1.0 when a 0/1 verdict equals the label, 0.0 when it does not, and None for "not sure"
(status ``scored`` with ``details["abstained"]``) or an unreadable reply (status ``unreadable``):
neither is ever a wrong answer, as the metric drops both and counts them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.sources.protocols import check_protocol

_BOXED_OURS = re.compile(r"\\boxed\s*\{\s*([012])\s*\}")
_LINE_OURS = re.compile(r"(?:judg(?:e)?ment|answer)[\s*_]*[:：][\s*_]*([012])\b", re.IGNORECASE)


@dataclass(frozen=True)
class MedHalluParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def last_boxed(text: str) -> str:
    """verifiers' extract_boxed_answer (v0.1.7.post0, utils/data_utils.py): the last \\boxed{...} with
    braces matched, else ``text`` itself (also when that last one never closes)."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return text
    i, depth = start + len("\\boxed{"), 1
    while i < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[start + len("\\boxed{") : i - 1] if depth == 0 else text


def reference_prediction(text: str) -> str | None:
    pred = last_boxed(text)
    return pred if pred in ("0", "1", "2") else None


def our_prediction(text: str) -> str | None:
    text = strip_reasoning(text)
    for pattern in (_BOXED_OURS, _LINE_OURS):
        found = pattern.findall(text)
        if found:
            return found[-1]
    bare = text.strip().strip("*.` ")
    return bare if bare in ("0", "1", "2") else None


class MedHalluGrader(Grader):
    """1.0 / 0.0 for a 0-1 verdict against the label; None for not sure or unreadable."""

    name = "medhallu"
    Params = MedHalluParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        text = response.text or ""
        preds = {"reference": reference_prediction(text), "grandrounds": our_prediction(text)}
        mine, other = (
            self.params.protocol,
            "grandrounds" if self.params.protocol == "reference" else "reference",
        )
        pred = preds[mine]
        details = {
            "protocol": mine,
            "prediction": pred,
            "other_prediction": preds[other],
            "abstained": pred == "2",
            "unextracted": pred is None,
        }
        if pred is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                details=details,
                error="no verdict 0, 1 or 2 in the reply",
                status="unreadable",
            )
        value = None if pred == "2" else float(pred == sample.target)
        return Grade(sample_id=sample.id, value=value, extracted=pred, details=details)

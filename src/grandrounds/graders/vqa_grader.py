"""Short-answer visual question answering: normalised exact match, with token recall beside it.

Both protocols' readings are made for every answer: ``reference`` normalises the whole reply
(:func:`grandrounds.scoring.vqa.normalize`, lmms-eval's reading); ``grandrounds`` first drops a
reasoning trace and reads an ``Answer:`` line where the reply has one, else its first non-empty
line. The grade's value is the chosen protocol's exact match; ``details["other_value"]`` the
other's; ``details["token_recall"]`` the chosen reading's recall of the reference's tokens. A
reply that normalises to nothing is wrong, as the reference counts it, and flagged
``details["unreadable"]`` so it is counted apart from a wrong answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.scoring.vqa import normalize, token_recall
from grandrounds.sources.protocols import check_protocol

_ANSWER_LINE = re.compile(r"^\s*(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class VQAParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def our_reading(reply: str) -> str:
    """The answer ``grandrounds`` reads: after any reasoning trace, the last ``Answer:`` line, else the first line."""
    text = strip_reasoning(reply)
    found = _ANSWER_LINE.findall(text)
    if found:
        return found[-1]
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


class VQAGrader(Grader):
    """1.0 when the read answer equals the reference after normalisation, else 0.0."""

    name = "vqa"
    Params = VQAParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        reply = response.text or ""
        reference = str(sample.target)
        readings = {"reference": reply, "grandrounds": our_reading(reply)}
        mine = self.params.protocol
        other = "grandrounds" if mine == "reference" else "reference"
        read = readings[mine]
        shown = normalize(read)
        return Grade(
            sample.id,
            float(shown == normalize(reference)),
            extracted=shown,
            details={
                "protocol": mine,
                "reference_normalized": normalize(reference),
                "unreadable": shown == "",
                "token_recall": token_recall(read, reference),
                "other_value": float(normalize(readings[other]) == normalize(reference)),
                "other_extracted": normalize(readings[other]),
                "other_unreadable": normalize(readings[other]) == "",
                "other_token_recall": token_recall(readings[other], reference),
            },
        )

"""MedicationQA grading: a judge scores the answer against the reference answer on three dimensions.

One judge call per answer per judge (the engine, :mod:`grandrounds.graders.judging`). Under
``reference`` the prompt is Medmarks' ``JUDGE_TEMPLATE`` formatted with the question, the answer, the
reference answer and ``JUDGE_OUTPUT_JSON`` (both read at run time from the pinned file); under
``grandrounds`` ours. A reply is read when it holds a JSON object whose ``accuracy``,
``completeness`` and ``clarity`` each carry a numeric ``score``; otherwise it is re-asked
(``--max-reask``) and then the judge's vote is unknown. The answer's value is the mean over its
judges with a known vote of Medmarks' ``_compute_normalized_reward`` (the three scores clamped to
[0, 5], divided by 5, averaged); with no known vote it is unscored (status ``unreadable``), never 0.
``details["medmarks_value"]`` is Medmarks' own figure, which counts an unreadable reply as 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.judge_json import json_values
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    delimit_answer,
    judge_keys,
    panel,
)
from grandrounds.sources.medicationqa import DIMENSIONS, JUDGE_PROMPTS, OUR_JUDGE
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import python_string


@dataclass(frozen=True)
class MedicationQAParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def _number(value: Any) -> float | None:
    """Medmarks' _coerce_score: a number, or a string that parses as one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def dimension_scores(text: str) -> dict[str, float] | None:
    """The three scores of the first JSON object in ``text`` that has all of them, else None."""
    for value in json_values(text):
        if isinstance(value, Mapping):
            got = {
                d: _number(value.get(d, {}).get("score"))
                if isinstance(value.get(d), Mapping)
                else None
                for d in DIMENSIONS
            }
            if all(v is not None for v in got.values()):
                return {d: v for d, v in got.items() if v is not None}
    return None


def normalized(scores: Mapping[str, float | None]) -> float:
    """Medmarks' _compute_normalized_reward: mean of clamp(score, 0, 5) / 5 over the dimensions (a missing one adds 0)."""
    total = sum(max(0.0, min(5.0, s)) / 5.0 for d in DIMENSIONS if (s := scores.get(d)) is not None)
    return max(0.0, min(1.0, total / len(DIMENSIONS)))


def parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    scores = dimension_scores(text)
    if scores is None:
        return {}
    return {
        pending[0]: Reading(
            "met", ", ".join(f"{d} {scores[d]:g}" for d in DIMENSIONS), normalized(scores)
        )
    }


class MedicationQAGrader(Grader):
    """Mean normalised judge score over the judges with a readable verdict."""

    name = "medicationqa"
    Params: ClassVar[type] = MedicationQAParams  # MedDialog's grader has its own
    judged = True

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        return judges

    def template_hashes(self) -> dict[str, Any]:
        """Ours: the answer between markers (the official prompt shows it as it is)."""
        return dict(ANSWER_MARKERS) if self.params.protocol == "grandrounds" else {}

    def judge_prompt(self, sample: Sample, answer: str) -> str:
        question, gold = sample.metadata["question"], sample.target
        if self.params.protocol == "reference":
            template = python_string(JUDGE_PROMPTS, "JUDGE_TEMPLATE").text
            output = python_string(JUDGE_PROMPTS, "JUDGE_OUTPUT_JSON").text
            return template.format(
                question=question, response=answer, gold_response=gold, output_format=output
            )
        return OUR_JUDGE.format(
            question=question, response=delimit_answer(strip_reasoning(answer), question), gold=gold
        )

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if not sample.target:
            return unscored(
                sample,
                "grader_error",
                "no reference answer in the file for this question",
                protocol=self.params.protocol,
            )
        msgs = (Message("user", self.judge_prompt(sample, response.text or "")),)
        prev = ctx.previous if ctx.only_unknown else None
        previous = {"answer": prev.votes} if prev is not None and prev.votes else None
        votes = (
            await panel(
                ["answer"],
                lambda _j, _ids: [Ask(("answer",), lambda _p: msgs, parse)],
                ctx,
                previous,
            )
        )["answer"]
        known = [v.score for v in votes if v.status != "unknown" and v.score is not None]
        details = {
            "protocol": self.params.protocol,
            "coverage": {"known": len(known), "total": len(votes)},
            "n_unknown": len(votes) - len(known),
            "judge_values": [v.score for v in votes],
            "medmarks_value": sum(v.score or 0.0 for v in votes) / len(votes) if votes else None,
        }
        if not known:
            return Grade(
                sample.id,
                None,
                details=details,
                error="no judge gave a readable verdict",
                judge_keys=judge_keys((), votes),
                status="unreadable",
                votes=tuple(votes),
            )
        return Grade(
            sample.id,
            sum(known) / len(known),
            details=details,
            judge_keys=judge_keys((), votes),
            votes=tuple(votes),
        )

"""MedicationQA grading: a judge scores the answer against the reference answer on three dimensions.

The flow (one judge call per answer per judge, re-asks, unknown votes, the mean) is
:mod:`grandrounds.graders.reference_judged`'s; this module holds the prompt, the reading and
Medmarks' own figure (MedDialog's grader reuses the last two). Under ``reference`` the prompt is
Medmarks' ``JUDGE_TEMPLATE`` formatted with the question, the answer, the reference answer and
``JUDGE_OUTPUT_JSON`` (both read at run time from the pinned file); under ``grandrounds`` ours. A
reply is read when its JSON object (``reference``: the one Medmarks' ``JSONParser`` takes, the
object that ends at the reply's LAST "}"; ``grandrounds``: the first object with all three) gives
``accuracy``, ``completeness`` and ``clarity`` each a numeric ``score``; otherwise it is re-asked
(``--max-reask``) and then the judge's vote is unknown. The answer's value is the mean over its
judges with a known vote of Medmarks' ``_compute_normalized_reward`` (the three scores clamped to
[0, 5], divided by 5, averaged); with no known vote it is unscored (status ``unreadable``), never 0.

``details["medmarks_value"]`` is Medmarks' own figure, computed as its environment does from each
judge's FIRST reply (Medmarks never re-asks): no object read is 0; a missing dimension adds 0; a
dimension that is null or not an object makes its reward function raise, which verifiers' rubric
scores 0; a boolean score counts as a number (``True`` is 1). A failed judge call is 0 there too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from grandrounds.core.records import Grade, Sample, Vote
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.judge_json import json_values
from grandrounds.graders.judging import Reading, delimit_answer
from grandrounds.graders.reference_judged import ReferenceJudgedGrader
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


def dimension_scores(text: str, last: bool = False) -> dict[str, float] | None:
    """The three scores of the judge's JSON object, else None: with ``last``, the object Medmarks'
    JSONParser reads (:func:`medmarks_object`); otherwise the first JSON object that has all three."""
    values = [medmarks_object(text)] if last else json_values(text)
    for value in values:
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


def medmarks_object(text: str) -> dict[str, Any] | None:
    """The JSON object Medmarks' JSONParser (``_extract_json_object``, then its string strip) reads:
    from the reply's last "}", the latest "{" before it whose span parses as a JSON object."""
    close = text.rfind("}")
    for start in reversed([i for i, ch in enumerate(text[: close + 1]) if ch == "{"]):
        try:
            value = json.loads(text[start : close + 1])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return _stripped(value)
    return None


def _stripped(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        return {k: _stripped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stripped(v) for v in value]
    return value


def _medmarks_number(value: Any) -> float | None:
    """Medmarks' _coerce_score: ints, floats (and so booleans) and number strings."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def medmarks_value(text: str | None) -> float:
    """Medmarks' reward for one judge reply (``None``: a failed call, which its rubric scores 0)."""
    obj = medmarks_object(text) if text is not None else None
    if obj is None:
        return 0.0
    total = 0.0
    for d in DIMENSIONS:
        entry = obj.get(d, {})
        if not isinstance(entry, dict):
            return 0.0  # ``.get`` on null or a number raises there; the rubric scores the raise 0
        score = _medmarks_number(entry.get("score"))
        if score is not None:
            total += max(0.0, min(5.0, score)) / 5.0
    return max(0.0, min(1.0, total / len(DIMENSIONS)))


def normalized(scores: Mapping[str, float | None]) -> float:
    """Medmarks' _compute_normalized_reward: mean of clamp(score, 0, 5) / 5 over the dimensions (a missing one adds 0)."""
    total = sum(max(0.0, min(5.0, s)) / 5.0 for d in DIMENSIONS if (s := scores.get(d)) is not None)
    return max(0.0, min(1.0, total / len(DIMENSIONS)))


class MedicationQAGrader(ReferenceJudgedGrader):
    """Mean normalised judge score over the judges with a readable verdict."""

    name = "medicationqa"
    Params: ClassVar[type] = MedicationQAParams  # MedDialog's grader has its own

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

    def read(self, text: str) -> Reading | None:
        scores = dimension_scores(text, last=self.params.protocol == "reference")
        if scores is None:
            return None
        return Reading(
            "met", ", ".join(f"{d} {scores[d]:g}" for d in DIMENSIONS), normalized(scores)
        )

    def own_figures(
        self, votes: Sequence[Vote], first_replies: Mapping[int, str], previous: Grade | None
    ) -> dict[str, Any]:
        """Medmarks' figure per judge, from its first reply: read in an earlier grading when there
        was one (a re-grade only re-asks), else now; a call that failed before any reply is 0 there."""
        earlier = previous.details.get("medmarks_values") if previous is not None else None
        figures = [
            earlier[j]
            if isinstance(earlier, list) and j < len(earlier) and earlier[j] is not None
            else medmarks_value(first_replies.get(j, None if v.error else v.raw))
            for j, v in enumerate(votes)
        ]
        return {
            "medmarks_values": figures,
            "medmarks_value": sum(figures) / len(figures) if figures else None,
        }

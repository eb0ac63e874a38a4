"""CareQA open-ended grading: a judge gives four true/false verdicts on the answer against the reference.

The flow (one judge call per answer per judge, re-asks, unknown votes, the mean) is
:mod:`grandrounds.graders.reference_judged`'s; this module holds the prompt, the reading and
Medmarks' literal figure. Under ``reference`` the
prompt is Medmarks' careqa ``JUDGE_TEMPLATE`` (read at run time) formatted with the question, the
reference answer and the answer after Medmarks' ``extract_answer_section``; under ``grandrounds`` ours.
A reply is read when it has all four tags (:data:`grandrounds.sources.careqa_open.TAGS`); the value
is (correct + details + (1 - addition) + (1 - critical error)) / 4, as Medmarks' ``accuracy`` writes
it. A reply missing a tag is re-asked, then the judge's vote is unknown, never 0: with no known vote
the answer is unscored (``unreadable``). ``details["medmarks_value"]`` is Medmarks' literal figure
(the tags its parser reads, a missing one 0, an unreadable reply 0).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.records import Grade, Sample, Vote
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.judging import Reading, delimit_answer
from grandrounds.graders.reference_judged import ReferenceJudgedGrader
from grandrounds.sources.careqa_open import ENV, OUR_JUDGE, TAGS, answer_section, parser_tags
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import python_string


@dataclass(frozen=True)
class CareQAOpenParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def tag_text(text: str, tag: str) -> str | None:
    """The text inside the first ``<tag>...</tag>`` of ``text`` (stripped), or None."""
    m = re.search(rf"<{tag}>\s*(.*?)\s*</{tag}>", text, re.S)
    return m.group(1) if m else None


def medmarks_true(raw: str | None) -> bool:
    """Medmarks' parse_rubric_scores on a string: 'true' in it and 'false' not (lower-cased)."""
    val = (raw or "").strip().lower()
    return "true" in val and "false" not in val


def strict_bool(raw: str | None) -> bool | None:
    """Our reading: true/yes or false/no (a trailing period or brackets allowed), else None."""
    val = re.sub(r"^[\s\[\(\"'*]+|[\s\]\)\"'*.]+$", "", (raw or "").lower())
    return True if val in ("true", "yes") else False if val in ("false", "no") else None


def verdicts(text: str, protocol: str) -> dict[str, bool] | None:
    """The four verdicts of a judge reply, or None when a tag is missing (or, under grandrounds, unclear)."""
    raw = {t: tag_text(text, t) for t in TAGS}
    if any(v is None for v in raw.values()):
        return None
    if protocol == "reference":
        return {t: medmarks_true(v) for t, v in raw.items()}
    got = {t: strict_bool(v) for t, v in raw.items()}
    if any(v is None for v in got.values()):
        return None
    return {t: v for t, v in got.items() if v is not None}


def combine(v: dict[str, bool]) -> float:
    """Medmarks' accuracy: each non-inverted verdict adds its truth, each inverted one its falsity; / 4."""
    return sum((not v[t]) if inverted else v[t] for t, inverted in TAGS.items()) / len(TAGS)


def medmarks_literal(text: str, tags_read: Iterable[str]) -> float:
    """Medmarks' figure as its code computes it: a tag its parser does not read, or a missing tag, adds 0."""
    read = set(tags_read)
    total = 0
    for tag, inverted in TAGS.items():
        raw = tag_text(text, tag) if tag in read else None
        if raw is None:
            continue
        total += (not medmarks_true(raw)) if inverted else medmarks_true(raw)
    return total / len(TAGS)


class CareQAOpenGrader(ReferenceJudgedGrader):
    """Mean four-verdict judge score over the judges with a readable verdict."""

    name = "careqa-open"
    Params = CareQAOpenParams

    def judge_prompt(self, sample: Sample, answer: str) -> str:
        question = sample.metadata["question"]
        if self.params.protocol == "reference":
            template = python_string(ENV, "JUDGE_TEMPLATE").text
            return template.format(
                question=question, answer=sample.target, response=answer_section(answer)
            )
        return OUR_JUDGE.format(
            question=question,
            answer=sample.target,
            response=delimit_answer(strip_reasoning(answer), question),
        )

    def read(self, text: str) -> Reading | None:
        got = verdicts(text, self.params.protocol)
        if got is None:
            return None
        return Reading(
            "met", ", ".join(f"{t} {str(v).lower()}" for t, v in got.items()), combine(got)
        )

    def own_figures(
        self, votes: Sequence[Vote], first_replies: Mapping[int, str], previous: Grade | None
    ) -> dict[str, Any]:
        """Medmarks' literal figure over every vote's reply (reference only: it needs its parser's
        tag list from the pinned file)."""
        literal = (
            [medmarks_literal(v.raw or "", parser_tags()) for v in votes]
            if self.params.protocol == "reference"
            else []
        )
        return {"medmarks_value": sum(literal) / len(literal) if literal else None}

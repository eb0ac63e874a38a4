"""MEDIQA 2019 QA grading: the model's verdict on a question's candidate answers, as submission rows.

The model is shown the candidate answers numbered 1..n (file order) and names the correct ones, best
first, on a last line ``Correct: 3, 1, 5`` (``Correct: none`` when none is). That reply becomes the
question's rows of an official submission (:mod:`grandrounds.scoring.mediqa`): the named answers first,
in the model's order, labelled 1, then every other answer in file order, labelled 0. No official
prompt or reading exists for language models (the task's systems wrote the submission file
themselves), so the reading is ours under both protocols; they differ in aggregation only.

A reply with no ``Correct:`` line, or one naming a number that is not a candidate, is unreadable
(status ``unreadable``, counted); it never becomes a row of zeros.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grandrounds.core.records import Grade, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.sources.protocols import check_protocol

_LINE = re.compile(
    r"^[\s*_#>-]*correct(?:\s+answers?)?[\s*_]*[:：][\s*_]*(.*?)[\s*_.]*$",
    re.IGNORECASE | re.MULTILINE,
)
_NONE = re.compile(r"^(?:none|no(?:ne)? (?:of (?:them|the answers))?|-|\[\])$", re.IGNORECASE)


@dataclass(frozen=True)
class MediqaParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def read_choice(text: str, n: int) -> list[int] | None:
    """The 1-based answer numbers on the reply's last ``Correct:`` line, in order, repeats dropped;
    [] for ``none``; None when there is no such line or it names anything but candidates 1..n."""
    lines = _LINE.findall(strip_reasoning(text or ""))
    if not lines:
        return None
    body = lines[-1].strip()
    if _NONE.match(body):
        return []
    parts = [
        p for p in re.split(r"[\s,;、]+|\band\b", body.replace("[", " ").replace("]", " ")) if p
    ]
    numbers: list[int] = []
    for p in parts:
        p = p.lstrip("#").rstrip(".)")
        if not p.isdigit() or not 1 <= int(p) <= n:
            return None
        if int(p) not in numbers:
            numbers.append(int(p))
    return numbers


def submission_rows(answer_ids: list[str], chosen: list[int]) -> list[tuple[str, str]]:
    """(answer id, label) rows: the chosen answers labelled 1 in the model's order, then the others 0."""
    picked = [answer_ids[i - 1] for i in chosen]
    return [(a, "1") for a in picked] + [(a, "0") for a in answer_ids if a not in picked]


class MediqaGrader(Grader):
    """Value: the share of the question's candidate answers labelled as the gold labels them."""

    name = "mediqa-qa"
    Params = MediqaParams

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        gold = [tuple(r) for r in sample.target["gold"]]
        answer_ids = list(sample.metadata["answer_ids"])
        chosen = read_choice(response.text or "", len(answer_ids))
        if chosen is None:
            return unscored(
                sample,
                "unreadable",
                f"no 'Correct:' line naming answers 1-{len(answer_ids)}",
                protocol=self.params.protocol,
                unextracted=True,
            )
        rows = submission_rows(answer_ids, chosen)
        labels = dict(gold)
        right = sum(1 for a, lab in rows if labels.get(a) == lab)
        return Grade(
            sample_id=sample.id,
            value=right / len(rows),
            extracted=",".join(str(i) for i in chosen) or "none",
            details={"protocol": self.params.protocol, "rows": [list(r) for r in rows]},
        )

"""AgentClinic's moderator: is the doctor's diagnosis the correct one? (``compare_results``)

The moderator (each ``--judge``) is asked with compare_results' own system and user prompts,
read at run time out of the pinned agentclinic.py, holding the correct diagnosis and the doctor's
whole "DIAGNOSIS READY" reply (under ``grandrounds``, between answer markers it cannot close, after a
sentence telling the moderator it is data: :func:`grandrounds.graders.judging.delimit_answer`; under
``reference``, as the official code puts it). Its reply is read as the official code reads it under
``reference`` (whitespace collapsed, lower-cased: exactly "yes" is correct, exactly "no" wrong) and
a little more tolerantly under ``grandrounds`` (:func:`grandrounds.sources.agentclinic.moderator_reading`).
A reply that says neither is asked again (``--max-reask``), then the judge's vote is unknown; with
no known vote the case is unscored (``unreadable``), never a zero. The official code counts such a
reply as wrong, and it reads only the moderator's first reply (it never asks again):
``details["official_correct"]`` keeps that literal reading of each judge's FIRST reply, and
``details["moderator_first"]`` that reply itself; the grade's ``extracted`` (the judge text stored and
shown) is the first judge's first reply, and replies to re-asks are kept apart in
``details["moderator_reasks"]``. The agents' runner turns the first judge's official reading into the
paper's figure, stored and shown beside the headline (:func:`grandrounds.benchmarks.agents.official_figure`).
A panel decides by majority (a tie is unknown).

``details["checks"]`` is ``[{"name": "diagnosis", "passed", "detail": "<doctor's diagnosis> vs <correct>"}]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.hashing import text_hash
from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    delimit_answer,
    judge_criteria,
    judge_keys,
)
from grandrounds.sources import agentclinic as official
from grandrounds.sources.protocols import check_protocol

CHECK = "diagnosis"


@dataclass(frozen=True)
class AgentClinicParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def stated_diagnosis(reply: str) -> str:
    """The words after "DIAGNOSIS READY" (and a colon), for the check's detail; the whole reply without them."""
    m = re.search(re.escape(official.DIAGNOSIS_READY) + r"\s*:?\s*(.*)", reply, re.S)
    return (m.group(1) if m else reply).strip()


class AgentClinicGrader(Grader):
    """1 where the moderator says the diagnoses are the same disease, 0 where it says not."""

    name = "agentclinic"
    Params = AgentClinicParams
    judged = True

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        return judges

    def template_hashes(self) -> dict[str, Any]:
        t = official.texts()
        ours = ANSWER_MARKERS if self.params.protocol == "grandrounds" else {}
        return {
            "moderator": text_hash(t["moderator_system"].text + "\x1f" + t["moderator_user"].text)[
                :16
            ]
        } | ours

    def moderator_prompts(self, reply: str, correct: str) -> tuple[str, str]:
        """compare_results' prompts; under ``grandrounds`` the doctor's reply between answer markers."""
        shown = delimit_answer(reply, correct) if self.params.protocol == "grandrounds" else reply
        return official.moderator_prompts(shown, correct)

    def parse(self, text: str, pending: Sequence[str]) -> dict[str, Reading]:
        said = official.moderator_reading(text, self.params.protocol)
        if said is None:
            return {}
        return {
            pending[0]: Reading(
                "met" if said else "unmet",
                official.official_reply(text).strip(),
                1.0 if said else 0.0,
            )
        }

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        correct = str(sample.target or "")
        if not correct.strip():
            return unscored(
                sample,
                "grader_error",
                "no correct diagnosis in the file for this case",
                protocol=self.params.protocol,
            )
        reply = response.text or ""
        system, user = self.moderator_prompts(reply, correct)
        msgs = (Message("system", system), Message("user", user))
        said: dict[int, list[str]] = {}  # per judge, its replies in the order they came

        def asks(j: int, _ids: Sequence[str]) -> list[Ask]:
            def parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
                said.setdefault(j, []).append(text)
                return self.parse(text, pending)

            return [Ask((CHECK,), lambda _p: msgs, parse)]

        (verdict,) = await judge_criteria([CHECK], asks, ctx)
        # a vote kept from an earlier grading, read at its first ask, holds that first reply
        firsts = [
            said[j][0] if said.get(j) else (v.raw if v.raw and v.attempts == 1 else None)
            for j, v in enumerate(verdict.votes)
        ]
        detail = f"{stated_diagnosis(reply)} vs {correct}"
        details = {
            "protocol": self.params.protocol,
            # compare_results(...) == "yes" on the first reply, as the official loop reads it
            "official_correct": [
                None if first is None else official.official_correct(first) for first in firsts
            ],
            "moderator_first": firsts,
            "moderator_reasks": [said.get(j, [])[1:] for j in range(len(verdict.votes))],
            "checks": [
                {
                    "name": CHECK,
                    "passed": None if verdict.status == "unknown" else verdict.status == "met",
                    "detail": detail,
                }
            ],
        }
        keys = judge_keys((verdict,))
        if verdict.status == "unknown":
            failed = [v.error for v in verdict.votes if v.error]
            if failed and len(failed) == len(
                verdict.votes
            ):  # no moderator answered: asked again on the next run
                return Grade(
                    sample_id=sample.id,
                    value=None,
                    details=details,
                    error=failed[0],
                    judge_keys=keys,
                    status="grader_error",
                    verdicts=(verdict,),
                )
            details["unread"] = next(
                (v.explanation for v in verdict.votes if v.explanation),
                "the moderator said neither yes nor no",
            )
            return Grade(
                sample_id=sample.id,
                value=None,
                extracted=firsts[0] if firsts and firsts[0] is not None else verdict.raw,
                details=details,
                judge_keys=keys,
                status="unreadable",
                verdicts=(verdict,),
            )
        # extracted: the moderator's first reply (the one the official code reads), as the episode's
        # transcript shows it beside the checks; the re-asks' replies are in details
        return Grade(
            sample_id=sample.id,
            value=1.0 if verdict.status == "met" else 0.0,
            extracted=firsts[0] if firsts and firsts[0] is not None else verdict.raw,
            details=details,
            judge_keys=keys,
            verdicts=(verdict,),
        )

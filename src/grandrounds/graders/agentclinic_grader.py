"""AgentClinic's moderator: is the doctor's diagnosis the correct one? (``compare_results``)

The moderator (each ``--judge``) is asked with compare_results' own system and user prompts,
read at run time out of the pinned agentclinic.py, holding the correct diagnosis and the doctor's
whole "DIAGNOSIS READY" reply. Its reply is read as the official code reads it under
``reference`` (whitespace collapsed, lower-cased: exactly "yes" is correct, exactly "no" wrong) and
a little more tolerantly under ``grandrounds`` (:func:`grandrounds.sources.agentclinic.moderator_reading`).
A reply that says neither is asked again (``--max-reask``), then the judge's vote is unknown; with
no known vote the case is unscored (``unreadable``), never a zero. The official code counts such a
reply as wrong: ``details["official_correct"]`` keeps that literal reading for every judge.
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
from grandrounds.graders.judging import Ask, Reading, judge_criteria, judge_keys
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
        return {
            "moderator": text_hash(t["moderator_system"].text + "\x1f" + t["moderator_user"].text)[
                :16
            ]
        }

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
        system, user = official.moderator_prompts(reply, correct)
        msgs = (Message("system", system), Message("user", user))
        (verdict,) = await judge_criteria(
            [CHECK], lambda _j, _ids: [Ask((CHECK,), lambda _p: msgs, self.parse)], ctx
        )
        detail = f"{stated_diagnosis(reply)} vs {correct}"
        details = {
            "protocol": self.params.protocol,
            "official_correct": [
                official.official_correct(v.raw) if v.raw else None for v in verdict.votes
            ],
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
                    sample.id,
                    None,
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
                sample.id,
                None,
                extracted=verdict.raw,
                details=details,
                judge_keys=keys,
                status="unreadable",
                verdicts=(verdict,),
            )
        # extracted: the moderator's reply, as the episode's transcript shows it beside the checks
        return Grade(
            sample.id,
            1.0 if verdict.status == "met" else 0.0,
            extracted=verdict.raw,
            details=details,
            judge_keys=keys,
            verdicts=(verdict,),
        )

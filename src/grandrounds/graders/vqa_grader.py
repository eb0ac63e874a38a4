"""Short-answer visual question answering: normalised exact match, with token recall beside it.

Both protocols' readings are made for every answer: ``reference`` normalises the whole reply
(:func:`grandrounds.scoring.vqa.normalize`, lmms-eval's reading); ``grandrounds`` first drops a
reasoning trace and reads an ``Answer:`` line where the reply has one, else its first non-empty
line. The grade's value is the chosen protocol's exact match; ``details["other_value"]`` the
other's; ``details["token_recall"]`` the chosen reading's recall of the reference's tokens. A
reply that normalises to nothing is wrong, as the reference counts it, and flagged
``details["unreadable"]`` so it is counted apart from a wrong answer.

With ``judge_open`` (``--judge`` given to a benchmark that offers it), each OPEN question (by the
dataset's label) is also put to the judge panel through the judge engine: does the answer, as the
protocol reads it, mean the same as the reference? ``reference`` asks MedEvalKit's compare prompt,
``grandrounds`` ours (:mod:`grandrounds.sources.vqa`); under ``reference`` the prompt holds the
answers lower-cased and stripped where MedEvalKit's scorer does so (VQA-RAD, PathVQA) and as they are
for SLAKE. A reference reply is read as MedEvalKit reads it (its ``<judge>`` tags joined; a bare
``0`` is correct), ours from its last ``<judge>`` tag (:func:`read_verdict`);
one that cannot be read is re-asked (``--max-reask``) and then an unknown vote, as is a failed call;
the panel decides by majority of known votes (a tie is unknown). The verdict goes to
``details["open_judge"]`` (``same`` / ``different`` / ``unknown``; ``closed`` for a closed question,
not asked) and never changes the grade's value: exact match stays the grade.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from grandrounds.core.hashing import text_hash
from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.core.registry import Spec
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    judge_keys,
    majority,
    panel,
)
from grandrounds.scoring.vqa import normalize, token_recall
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.vqa import (
    MEDEVALKIT_UTILS,
    OUR_OPEN_JUDGE,
    VERDICT_WORDS,
    compare_prompt,
    medevalkit_judge_tags,
    our_prompt,
    reference_prompt,
)

_ANSWER_LINE = re.compile(
    r"^\s*(?:final\s+)?answer\s*[:：]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE
)
_JUDGE_TAG = re.compile(r"<judge>(.*?)</judge>", re.IGNORECASE | re.DOTALL)
#: What the judge's verdict on an open answer is called in ``details["open_judge"]``.
_VERDICT = {"met": "same", "unmet": "different"}


@dataclass(frozen=True)
class VQAParams:
    protocol: str = "reference"
    #: Ask the judge panel about each open question's answer (reported apart from exact match).
    judge_open: bool = False
    #: MedEvalKit's judge prompt holds the answers lower-cased and stripped (its VQA-RAD and
    #: PathVQA scorers) or as they are (False: its SLAKE scorer).
    judge_lowercase: bool = True

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


def our_reading(reply: str) -> str:
    """The answer ``grandrounds`` reads: after any reasoning trace, the last ``Answer:`` line, else the first line."""
    text = strip_reasoning(reply)
    found = _ANSWER_LINE.findall(text)
    if found:
        return found[-1]
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def read_verdict(reply: str, protocol: str) -> bool | None:
    """The judge's verdict, True (same meaning) / False, None when unreadable.

    ``reference``: as MedEvalKit reads it (its VQA scorers: ``extract(result, "judge") == "0"``):
    the ``<judge>`` tags' texts joined, else the whole reply; exactly ``0`` is correct, and a reply
    with tags that join to anything else is incorrect (``0 0``, ``1``). A reply with no tag that is
    not exactly ``0`` or ``1`` MedEvalKit counts incorrect; here it is unknown (re-asked, then
    counted apart), never a zero. ``grandrounds``: the last tag's word (same / different)."""
    if protocol == "reference":
        tags = medevalkit_judge_tags(reply)
        if tags:
            return tags == "0"
        return True if reply == "0" else False if reply == "1" else None
    found = _JUDGE_TAG.findall(reply)
    if not found:
        return None
    return VERDICT_WORDS[protocol].get(found[-1].strip().lower())


class VQAGrader(Grader):
    """1.0 when the read answer equals the reference after normalisation, else 0.0; with
    ``judge_open``, the judge's verdict on each open answer beside it."""

    name = "vqa"
    Params = VQAParams

    @property
    # a judge only where the spec asks for one: read-only here, where Grader has a class attribute
    def judged(self) -> bool:  # type: ignore[override]
        return bool(self.params.judge_open)

    def spec(self) -> Spec:
        """(name, params); ``judge_open`` (and ``judge_lowercase``) only when set, so a grading
        without a judge keeps its spec and fingerprint."""
        spec = super().spec()
        # judge_lowercase only where it is not the default: judged gradings of VQA-RAD and
        # PathVQA keep the spec they had
        drop = {"judge_lowercase"} if self.params.judge_lowercase else set()
        if not self.params.judge_open:
            drop |= {"judge_open", "judge_lowercase"}
        return Spec(spec.name, {k: v for k, v in spec.args.items() if k not in drop})

    def template_hashes(self) -> dict[str, Any]:
        if not self.params.judge_open:
            return {}
        if self.params.protocol == "reference":
            return {
                "open_judge": text_hash(compare_prompt().text)[:16],
                "open_judge_source": f"{MEDEVALKIT_UTILS.repo}@"
                f"{MEDEVALKIT_UTILS.commit[:7]} {MEDEVALKIT_UTILS.path} get_compare_messages",
            }
        # our prompt shows the answer between the answer markers of every grandrounds judge
        return {"open_judge": text_hash(OUR_OPEN_JUDGE)[:16]} | ANSWER_MARKERS

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        return judges if self.params.judge_open and sample.metadata.get("closed") is False else 0

    def judge_prompt(self, sample: Sample, answer: str) -> str:
        """The judge's prompt about ``answer`` (the protocol's reading of the reply) to ``sample``'s question."""
        question = str(sample.metadata.get("question") or "")
        if self.params.protocol == "reference":
            return reference_prompt(
                question, str(sample.target), answer, lowercase=self.params.judge_lowercase
            )
        return our_prompt(question, str(sample.target), answer)

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        reply = response.text or ""
        readings = {"reference": reply, "grandrounds": our_reading(reply)}
        graded = self.exact_match(sample, readings)
        if not self.params.judge_open:
            return graded
        if sample.metadata.get("closed") is not False:
            return replace(graded, details={**graded.details, "open_judge": "closed"})
        return await self.judge_open(sample, readings[self.params.protocol], graded, ctx)

    def exact_match(self, sample: Sample, readings: dict[str, str]) -> Grade:
        reference = str(sample.target)
        mine = self.params.protocol
        other = "grandrounds" if mine == "reference" else "reference"
        read = readings[mine]
        shown = normalize(read)
        return Grade(
            sample_id=sample.id,
            value=float(shown == normalize(reference)),
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

    async def judge_open(
        self, sample: Sample, answer: str, graded: Grade, ctx: GradeContext
    ) -> Grade:
        """``graded`` with the panel's verdict on ``answer`` (votes, call keys and ``details["open_judge"]``)."""
        msgs = (Message("user", self.judge_prompt(sample, answer)),)
        protocol = self.params.protocol

        def parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
            same = read_verdict(text, protocol)
            return (
                {}
                if same is None
                else {
                    pending[0]: Reading(
                        "met" if same else "unmet", "same meaning" if same else "different"
                    )
                }
            )

        prev = ctx.previous if ctx.only_unknown else None
        previous = {"open": prev.votes} if prev is not None and prev.votes else None
        votes = (
            await panel(
                ["open"], lambda _j, _ids: [Ask(("open",), lambda _p: msgs, parse)], ctx, previous
            )
        )["open"]
        known = sum(1 for v in votes if v.status != "unknown")
        verdict = _VERDICT.get(majority([v.status for v in votes]), "unknown")
        details = {
            **graded.details,
            "open_judge": verdict,
            "open_judge_votes": {"known": known, "total": len(votes)},
        }
        return replace(
            graded, details=details, votes=tuple(votes), judge_keys=judge_keys((), votes)
        )

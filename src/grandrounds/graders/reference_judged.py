"""Free-text answers judged against the reference answer: each judge scores the answer once, the
answer's value is the mean score over the judges whose reply could be read.

The flow careqa-open, medicationqa and meddialog share, held once here. A question with no reference
answer is refused unscored (``grader_error``), never asked. Otherwise every judge of the panel gets
one user message (the family's :meth:`ReferenceJudgedGrader.judge_prompt`); a reply the family's
:meth:`~ReferenceJudgedGrader.read` cannot read is re-asked (``--max-reask``, the judge engine
:mod:`grandrounds.graders.judging`) and then the judge's vote is unknown, as is a failed call. When
re-grading with ``only_unknown`` the known votes of the stored grade are kept and only the unknown
ones asked again. With no known vote the answer is unscored (``unreadable``), never 0.

``details`` holds ``protocol``, ``coverage`` (known and total votes), ``n_unknown``,
``judge_values`` (each judge's score, None when unknown), then the benchmark's own figures
(:meth:`~ReferenceJudgedGrader.own_figures`: the peer's literal arithmetic, which may count an
unknown as 0, kept beside the value and never in it).

Under ``grandrounds`` the judge sees the answer between markers (``answer_markers`` in the template
hashes); under ``reference`` it sees the answer as the peer's prompt shows it.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from grandrounds.core.records import Grade, Message, Response, Sample, Vote
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.judging import ANSWER_MARKERS, Ask, Reading, fixed, judge_keys, panel

#: The one item every judge votes on: the whole answer.
ITEM = "answer"


class ReferenceJudgedGrader(Grader):
    """Mean judge score over the judges with a readable reply. A family sets ``name`` and
    ``Params`` (with a ``protocol``) and fills in :meth:`judge_prompt`, :meth:`read` and, where its
    peer reports a figure of its own, :meth:`own_figures`."""

    judged = True

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        return judges

    def template_hashes(self) -> dict[str, Any]:
        """Ours: the answer between markers (the official prompt shows it as it is)."""
        return dict(ANSWER_MARKERS) if self.params.protocol == "grandrounds" else {}

    @abstractmethod
    def judge_prompt(self, sample: Sample, answer: str) -> str:
        """The judge's prompt about ``answer`` (the reply as the model wrote it) to ``sample``."""

    @abstractmethod
    def read(self, text: str) -> Reading | None:
        """The vote one judge reply gives (its score in ``score``), or None when it cannot be read."""

    def own_figures(
        self, votes: Sequence[Vote], first_replies: Mapping[int, str], previous: Grade | None
    ) -> dict[str, Any]:
        """The benchmark's own figures, added to ``details`` after the coverage: from the panel's
        ``votes``, each judge's first reply in this grading (by panel index; a judge whose known vote
        was kept, or whose call failed, has none) and the stored grade being resumed (None unless
        re-grading with ``only_unknown``)."""
        return {}

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
        previous = {ITEM: prev.votes} if prev is not None and prev.votes else None
        first_replies: dict[int, str] = {}

        def asks(judge: int, _ids: Sequence[str]) -> list[Ask]:
            def parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
                first_replies.setdefault(judge, text)
                reading = self.read(text)
                return {} if reading is None else {pending[0]: reading}

            return [Ask((ITEM,), fixed(msgs), parse)]

        votes = (await panel([ITEM], asks, ctx, previous))[ITEM]
        known = [v.score for v in votes if v.status != "unknown" and v.score is not None]
        details = {
            "protocol": self.params.protocol,
            "coverage": {"known": len(known), "total": len(votes)},
            "n_unknown": len(votes) - len(known),
            "judge_values": [v.score for v in votes],
            **self.own_figures(votes, first_replies, prev),
        }
        keys = judge_keys((), votes)
        if not known:
            return Grade(
                sample_id=sample.id,
                value=None,
                details=details,
                error="no judge gave a readable verdict",
                judge_keys=keys,
                status="unreadable",
                votes=tuple(votes),
            )
        return Grade(
            sample_id=sample.id,
            value=sum(known) / len(known),
            details=details,
            judge_keys=keys,
            votes=tuple(votes),
        )

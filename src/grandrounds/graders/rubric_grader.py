"""A generic rubric grader: one judge call per criterion with a template the benchmark names.

For a new rubric benchmark that needs no special protocol: the template (a file shipped in
``grandrounds/templates`` by name, or a path) is filled with ``{conversation}`` (the conversation
and the answer, ``role: content`` blocks) and ``{criterion}`` (``[points] text``); the judge
replies ``{"explanation", "criteria_met"}``. The answer's value is met positive points over
possible positive points, over the criteria with a known verdict (simple-evals' arithmetic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Criterion, Grade, Message, Response, Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.healthbench_grader import parse_single, render_conversation, render_item
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    delimit_answer,
    judge_criteria,
    judge_keys,
)
from grandrounds.scoring.healthbench import known_rubric_score


@dataclass(frozen=True)
class RubricParams:
    #: A template name in grandrounds/templates (without .txt) or a path to a template file.
    template: str = ""
    system: str = ""

    def __post_init__(self) -> None:
        if not self.template:
            raise ConfigError("the rubric grader needs a template (a packaged name or a file path)")


def _load(template: str) -> tuple[str, str]:
    path = Path(template)
    if path.suffix == ".txt" and path.is_file():
        return path.stem, path.read_text(encoding="utf-8")
    try:
        return template, load_templates(template)[template]
    except FileNotFoundError:
        raise ConfigError(
            f"rubric grader: no template {template!r} (a packaged template name, or a path to a .txt file)"
        ) from None


class RubricGrader(Grader):
    """Per-criterion judging with the benchmark's template; score over the known verdicts."""

    name = "rubric"
    Params = RubricParams
    judged = True

    def __init__(self, params: RubricParams | None = None) -> None:
        super().__init__(params)
        key, self.template = _load(self.params.template)
        self.templates = {key: self.template}

    def template_hashes(self) -> dict[str, str]:
        return super().template_hashes() | ANSWER_MARKERS

    def _messages(self, prompt: str) -> tuple[Message, ...]:
        system = (Message("system", self.params.system),) if self.params.system else ()
        return system + (Message("user", prompt),)

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """One call per criterion per judge."""
        return judges * len(sample.rubric)

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        answer = strip_reasoning(response.text or "")
        by_id = {c.id: c for c in sample.rubric}

        def prompt(c: Criterion) -> str:
            convo = render_conversation(sample.messages, delimit_answer(answer, render_item(c)))
            return self.template.format(conversation=convo, criterion=render_item(c))

        def one_ask(cid: str, c: Criterion) -> Ask:
            return Ask((cid,), lambda _p: self._messages(prompt(c)), parse_single)

        def asks(_judge: int, ids: Sequence[str]) -> list[Ask]:
            return [one_ask(cid, by_id[cid]) for cid in ids]

        verdicts = await judge_criteria(list(by_id), asks, ctx)
        value = self.rescore(sample, Grade(sample_id=sample.id, value=None, verdicts=verdicts), {})
        known = sum(1 for v in verdicts if v.status != "unknown")
        details = {
            "coverage": {"known": known, "total": len(verdicts)},
            "n_unknown": len(verdicts) - known,
        }
        if value is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                verdicts=verdicts,
                details=details,
                error="no criterion with positive points has a known verdict",
                judge_keys=judge_keys(verdicts),
                status="unreadable",
            )
        return Grade(
            sample_id=sample.id,
            value=value,
            verdicts=verdicts,
            details=details,
            judge_keys=judge_keys(verdicts),
        )

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """Met positive points over possible positive points, over criteria with a known verdict."""
        return known_rubric_score(
            sample.rubric, {v.criterion_id: v.status for v in grade.verdicts} | dict(statuses)
        )

"""MedEQBench grader: the whole rubric in one judge call, one ``加分项_<n>_"名称":<0|1> | Reason: …`` line per item.

Modelled on AQ-MedAI/MedEQBench Health_EQBench.py (``evaluate_prompt``) and utils.py
(``parse_llm_evaluation``). The reference regex needs an ASCII colon and a literal ``Reason:``
and counts unreadable or missing lines as 0; we read lines tolerantly (full-width ``：`` ``｜``
``＿`` and digits, a missing Reason part, quotes around the 0/1, reasoning traces), re-ask the whole
call (attempt + 1) while items are missing, and record items still missing as ``unknown``.
The candidate answer has reasoning traces stripped before judging (PROTOCOLS.md quirk 13; the
reference's stripper exists but is not wired in).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Mapping, Sequence

from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judging import Ask, Reading, judge_criteria, judge_keys
from grandrounds.records import Grade, Message, Response, Sample
from grandrounds.scoring.medeq import question_score
from grandrounds.textutil import normalize_width, strip_reasoning

TEMPLATE_NAME = "medeq_judge"

_LINE = re.compile(
    # key, then anything up to the colon (a quoted name may itself contain colons), then the 0/1
    r"(加分项|减分项)\s*_\s*(\d+)[^\n\"“]*?(?:[\"“][^\"”\n]*[\"”])?[^:\n]*?:\s*[\"'“”‘’]?\s*([01])\b[\"'“”‘’]?"
    r"(?:\s*\|\s*(?:Reason|reason|理由)?\s*:?\s*([^|\n]*))?"
)


def parse_medeq_reply(text: str) -> dict[str, tuple[bool, str]]:
    """Item key (``加分项_<n>``) -> (met, reason) for every readable line; the first line for a key wins."""
    body = normalize_width(strip_reasoning(text))
    out: dict[str, tuple[bool, str]] = {}
    for m in _LINE.finditer(body):
        key = f"{m.group(1)}_{int(m.group(2))}"
        if key not in out:
            out[key] = (m.group(3) == "1", (m.group(4) or "").strip())
    return out


def _parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    found = parse_medeq_reply(text)
    return {cid: Reading("met" if found[cid][0] else "unmet", found[cid][1]) for cid in pending if cid in found}


def rubric_text(sample: Sample) -> str:
    """The rubric as the judge sees it: the original cell, or one rebuilt from the criteria."""
    text = sample.metadata.get("rubric_text")
    if isinstance(text, str) and text.strip():
        return text
    lines, section = [], ""
    for c in sample.rubric:
        kind, _, number = c.id.partition("_")
        if kind != section:
            lines.append(kind)
            section = kind
        dim = c.tags[0] if c.tags else ""
        lines.append(f"{number}、【{dim}】{c.text}{{{'+' if c.points > 0 else ''}{int(c.points)}}}")
    return "\n".join(lines)


class MedEQGrader(Grader):
    """One judge call per answer covering all rubric items; question score over the known items."""

    name = "medeq"
    judged = True

    def __init__(self, params: object = None) -> None:
        super().__init__(params)
        self.templates = load_templates(TEMPLATE_NAME)
        self.template = self.templates[TEMPLATE_NAME]

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        question = "\n".join(m.content for m in sample.messages if m.role == "user")
        prompt = self.template.format(question=question, answer=strip_reasoning(response.text or ""), rubric=rubric_text(sample))
        messages = (Message("user", prompt),)
        ids = [c.id for c in sample.rubric]
        verdicts = await judge_criteria(ids, lambda _j, pending: [Ask(tuple(pending), lambda _p: messages, _parse)], ctx)
        q = question_score(sample.rubric, verdicts)
        details = {
            "coverage": {"known": q.known, "total": q.total},
            "n_unknown": q.total - q.known,
            "dimension_scores": dict(q.dimensions),
        }
        keys = judge_keys(verdicts)
        if q.score is None:
            return Grade(sample.id, None, None, verdicts, details, "no positive item has a known verdict", keys, "unreadable")
        return Grade(sample.id, q.score, None, verdicts, details, None, keys)

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """The question score with reviewed items decided as the reviewer says."""
        verdicts = [replace(v, status=statuses.get(v.criterion_id, v.status)) for v in grade.verdicts]  # type: ignore[arg-type]
        return question_score(sample.rubric, verdicts).score

"""GAPS grader: every rubric point judged by every judge of the panel, then voted.

judge_engine.py (reference): one prompt per (point, answer, judge), positive or negative
wording by the point's ``type``; reply is fenced JSON ``{"explanation", "criteria_met"}``.
Votes become met / unmet / review_needed (:func:`grandrounds.scoring.gaps.vote`).

``Params.protocol`` (see :mod:`grandrounds.benchmarks.gaps`):

- ``reference``: judge_engine.py's prompts, read from the pinned file; each reply read once as
  judge_engine.call_model reads it (:func:`official_met`), an unreadable one an unknown vote
  (Unknown there, never re-asked); ``Grade.value`` is calculate_scores' ``normalized``
  (review_needed = not met).
- ``grandrounds``: our templates; tolerant JSON reading, unreadable replies re-asked up to
  ``ctx.max_reask`` times, then unknown; ``Grade.value`` leaves review_needed points out.

Both conventions of this protocol's verdicts are in ``details`` (``reference_value``, coverage);
``details["other_value"]`` is the other protocol's value from the same replies read its way.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import text_hash
from grandrounds.core.records import Criterion, Grade, Message, Response, Sample, Verdict
from grandrounds.core.textutil import normalize_width, strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judge_json import (
    explanation_text,
    extract_json_array,
    extract_json_object,
    parse_criteria_met,
)
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    ask,
    delimit_answer,
    fixed,
    judge_criteria,
    judge_keys,
)
from grandrounds.scoring import gaps as scoring
from grandrounds.sources.gaps import JUDGE_ENGINE
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import UpstreamText, python_returned_string

_LEVEL = re.compile(r"S\s*([1-4])", re.I)
# judge_engine.call_model: re.search(r'```json\s*(\{.*?\})\s*```', raw, re.DOTALL)
_FENCED_JSON = re.compile(r"```json\s*(\{.*?\})\s*```", re.S)


def parse_met(text: str | None) -> str | None:
    """grandrounds: "met"/"unmet" from a judge reply, None if criteria_met is not a readable boolean."""
    met, _ = parse_criteria_met(text)
    return None if met is None else (scoring.MET if met else scoring.UNMET)


def official_met(text: str | None) -> tuple[bool | None, str]:
    """reference: (criteria_met, explanation) as judge_engine.call_model reads a reply.

    The first ```` ```json {...} ```` block of the stripped reply is parsed with ``json.loads``;
    ``criteria_met`` counts only if it is the JSON ``true`` or ``false`` (``"true"``, 1 or a
    missing key are Unknown there, None here); no block, or a block that does not parse, is None.
    """
    m = _FENCED_JSON.search((text or "").strip())
    if m is None:
        return None, ""
    try:
        obj = json.loads(m.group(1))
    except (ValueError, RecursionError):
        return None, ""
    met = obj.get("criteria_met") if isinstance(obj, dict) else None
    expl = explanation_text(obj.get("explanation", "")) if isinstance(obj, dict) else ""
    return (met if isinstance(met, bool) else None), expl


def _read_met(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    met, expl = parse_criteria_met(text)
    return (
        {pending[0]: Reading(scoring.MET if met else scoring.UNMET, expl)}
        if met is not None
        else {}
    )


def _read_official(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    met, expl = official_met(text)
    if met is None:  # Unknown, as judge_engine records it: read once, never re-asked
        return {
            pending[0]: Reading(
                "unknown", "no ```json block with a boolean criteria_met (judge_engine: Unknown)"
            )
        }
    return {pending[0]: Reading(scoring.MET if met else scoring.UNMET, expl)}


#: How each protocol reads one reply: the engine's reader, and (met, explanation) for re-reading stored replies.
READERS: Mapping[str, Callable[[str, Sequence[str]], dict[str, Reading]]] = {
    "reference": _read_official,
    "grandrounds": _read_met,
}
MET_PARSERS: Mapping[str, Callable[[str | None], tuple[bool | None, str]]] = {
    "reference": official_met,
    "grandrounds": parse_criteria_met,
}


@functools.cache
def official_templates() -> dict[str, UpstreamText]:
    """judge_engine.py's prompts by claim type (the f-strings build_prompt_positive/negative return)."""
    return {
        kind: python_returned_string(JUDGE_ENGINE, f"build_prompt_{kind}")
        for kind in ("positive", "negative")
    }


def parse_passages(text: str | None) -> list[str] | None:
    """Irrelevant passages from the extractor's JSON array of ``{"content": ...}``; None if unreadable."""
    items = extract_json_array(text)
    if items is None:
        return None
    out = [str(it.get("content", "")).strip() for it in items if isinstance(it, dict)]
    return [c for c in out if c]


def parse_level(text: str | None) -> int | None:
    """Severity 1..4 from a grading reply ({"level": "S2"}), None if unreadable."""
    obj = extract_json_object(text or "") or {}
    m = _LEVEL.search(normalize_width(str(obj.get("level", ""))))
    return int(m.group(1)) if m else None


def _one(parse: Any, text: str, pending: Sequence[str]) -> dict[str, Any]:
    """Adapt a single-value parser to the engine's per-id form."""
    value = parse(text)
    return {pending[0]: value} if value is not None else {}


@dataclass(frozen=True)
class GAPSParams:
    min_valid: int = 2
    irrelevant: str | None = None
    protocol: str = "reference"

    def __post_init__(self) -> None:
        if self.irrelevant is not None and self.irrelevant not in scoring.STRATEGIES:
            raise ConfigError(
                f"unknown GAPS voting strategy {self.irrelevant!r}; use {', '.join(scoring.STRATEGIES)}"
            )
        if self.min_valid < 1:
            raise ConfigError("GAPS min_valid must be at least 1")
        check_protocol(self.protocol)


class GAPSGrader(Grader):
    """Per-point panel judging; optional irrelevant-content deduction (``irrelevant`` = strategy)."""

    name = "gaps"
    judged = True
    Params = GAPSParams

    def __init__(
        self,
        params: GAPSParams | None = None,
        *,
        min_valid: int | None = None,
        irrelevant: str | None = None,
        protocol: str | None = None,
    ) -> None:
        if params is None:
            params = GAPSParams(
                min_valid if min_valid is not None else 2, irrelevant, protocol or "reference"
            )
        super().__init__(params)
        self.protocol = params.protocol
        # Our templates: the judge prompts under grandrounds; the irrelevant-content ones under both.
        names = (["positive", "negative"] if self.protocol == "grandrounds" else []) + (
            ["irrelevant_extract", "irrelevant_grade"] if params.irrelevant else []
        )
        self.templates = dict(zip(names, load_templates(*(f"gaps_{n}" for n in names)).values()))

    @property
    def min_judges(self) -> int:
        """With fewer judges than min_valid every point would be review_needed by construction."""
        return self.params.min_valid

    def template_hashes(self) -> dict[str, Any]:
        ours = {name: text_hash(text)[:16] for name, text in self.templates.items()}
        if self.protocol == "reference":
            return {kind: t.fingerprint() for kind, t in official_templates().items()} | ours
        return ours | ANSWER_MARKERS

    def judge_prompt(
        self, sample: Sample, criterion: Criterion, answer: str
    ) -> tuple[Message, ...]:
        """The one user message a judge gets for ``criterion`` under this protocol."""
        kind = "negative" if "type:negative" in criterion.tags else "positive"
        question = sample.messages[-1].text
        if (
            self.protocol == "reference"
        ):  # build_prompt(question, model_answer, claim, type), the cell as it is
            cell = sample.metadata.get("question_cell", question)
            text = official_templates()[kind].render(
                {"question": cell, "model_answer": answer, "claim": criterion.text}
            )
        else:
            text = self.templates[kind].format(
                question=question,
                answer=delimit_answer(answer, criterion.text),
                claim=criterion.text,
            )
        return (Message("user", text),)

    def _asks(self, sample: Sample, answer: str, ids: Sequence[str]) -> list[Ask]:
        by_id = {c.id: c for c in sample.rubric}
        read = READERS[self.protocol]
        return [
            Ask((cid,), fixed(self.judge_prompt(sample, by_id[cid], answer)), read) for cid in ids
        ]

    def _value(self, qs: scoring.QuestionScore, protocol: str) -> float | None:
        return qs.reference if protocol == "reference" else qs.ours

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """One call per rubric point per judge, plus the irrelevant-content extraction (first judge)
        when it is on; grading the passages it finds (each by every judge) depends on its reply."""
        return judges * len(sample.rubric) + (1 if self.params.irrelevant else 0)

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        answer = strip_reasoning(response.text or "")
        question = sample.messages[-1].text
        ids = [c.id for c in sample.rubric]
        rule = partial(scoring.vote, min_valid=self.params.min_valid)
        verdicts = await judge_criteria(
            ids, lambda _j, pending: self._asks(sample, answer, pending), ctx, rule
        )
        irr = (
            await self._irrelevant(sample, question, answer, ctx)
            if self.params.irrelevant
            else None
        )
        penalty = irr["penalty"] if irr and irr.get("penalty") is not None else 0.0
        decisions = [(c.points, _decision(v)) for c, v in zip(sample.rubric, verdicts)]
        qs = scoring.score_question(decisions, penalty)
        other = "grandrounds" if self.protocol == "reference" else "reference"
        other_decisions = [
            (c.points, self._reread(v, other)) for c, v in zip(sample.rubric, verdicts)
        ]
        details: dict[str, Any] = {
            "protocol": self.protocol,
            "reference_value": qs.reference,
            "other_value": self._value(scoring.score_question(other_decisions, penalty), other),
            "max_points": qs.max_points,
            "known_max_points": qs.known_max_points,
            "earned_reference": qs.earned_reference,
            "earned_ours": qs.earned_ours,
            "coverage": qs.coverage,
            "n_review_needed": qs.n_review_needed,
            "penalty": qs.penalty,
            "decisions": {c.id: d for c, (_, d) in zip(sample.rubric, decisions)},
        }
        if irr is not None:
            details["irrelevant"] = irr
        keys = judge_keys(verdicts) + tuple(irr.get("judge_keys", ()) if irr else ())
        value = self._value(qs, self.protocol)
        if value is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                verdicts=verdicts,
                details=details,
                error="no positive rubric point could be decided",
                judge_keys=keys,
                status="unreadable",
            )
        return Grade(
            sample_id=sample.id,
            value=value,
            verdicts=verdicts,
            details=details,
            judge_keys=keys,
        )

    def _reread(self, verdict: Verdict, protocol: str) -> str:
        """The decision ``protocol`` reaches on the replies behind ``verdict`` (each vote's raw reply read its way)."""
        parse = MET_PARSERS[protocol]
        labels = []
        for v in verdict.votes:
            met = parse(v.raw)[0] if v.raw else None
            labels.append(
                scoring.UNKNOWN if met is None else (scoring.MET if met else scoring.UNMET)
            )
        return scoring.vote(labels, min_valid=self.params.min_valid)

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """This protocol's score with reviewed points decided as the reviewer says (the irrelevant-content penalty kept)."""
        status = {v.criterion_id: v.status for v in grade.verdicts} | dict(statuses)
        decisions = [
            (
                c.points,
                status[c.id]
                if status.get(c.id) in (scoring.MET, scoring.UNMET)
                else scoring.REVIEW,
            )
            for c in sample.rubric
        ]
        penalty = float(grade.details.get("penalty") or 0.0)
        return self._value(scoring.score_question(decisions, penalty), self.protocol)

    async def _irrelevant(
        self, sample: Sample, question: str, answer: str, ctx: GradeContext
    ) -> dict[str, Any]:
        """Extractor (first judge) lists unrelated passages; every judge grades each S1..S4."""
        desc = sample.metadata.get("rubric_desc") or {}
        # The reference lists only each item's ``desc`` (empty in the NSCLC file); we list claims.
        rubric = "\n".join(
            f"- {c.text}" + (f"（{desc[c.id]}）" if c.id in desc else "") for c in sample.rubric
        )
        tpl = self.templates["irrelevant_extract"]
        msgs = (Message("user", tpl.format(question=question, answer=answer, rubric=rubric)),)
        ext = await ask(
            ctx.judges[0],
            Ask(("passages",), lambda _p: msgs, partial(_one, parse_passages)),
            0,
            ctx.max_reask,
        )
        keys = list(ext.keys)
        if "passages" not in ext.read:
            # Unreadable extraction: no deduction, reported as unknown (the reference silently
            # treats it as "no irrelevant content").
            return {"status": "unknown", "penalty": None, "raw": ext.raw, "judge_keys": keys}
        passages: list[dict[str, Any]] = []
        for passage in ext.read["passages"][0]:
            text = self.templates["irrelevant_grade"].format(
                question=question, answer=answer, passage=passage
            )
            level_ask = Ask(("level",), fixed((Message("user", text),)), partial(_one, parse_level))
            graded = await asyncio.gather(
                *(ask(j, level_ask, 0, ctx.max_reask) for j in ctx.judges)
            )
            keys.extend(k for g in graded for k in g.keys)
            levels = [g.read["level"][0] if "level" in g.read else None for g in graded]
            sev = scoring.combine_severity(levels, self.params.irrelevant or "conservative")
            passages.append({"content": passage, "levels": levels, "severity": sev})
        penalty = scoring.irrelevant_penalty([p["severity"] for p in passages])
        return {
            "status": "ok",
            "strategy": self.params.irrelevant,
            "passages": passages,
            "penalty": penalty,
            "judge_keys": keys,
        }


def _decision(v: Verdict) -> str:
    return v.status if v.status in (scoring.MET, scoring.UNMET) else scoring.REVIEW

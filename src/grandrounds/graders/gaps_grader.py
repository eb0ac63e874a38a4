"""GAPS grader: every rubric point judged by every judge of the panel, then voted.

judge_engine.py (reference): one prompt per (point, answer, judge), positive or negative
wording by the point's ``type``; reply is fenced JSON ``{"explanation", "criteria_met"}``.
Unreadable replies are re-asked up to ``ctx.max_reask`` times and then count as an unknown
vote. Votes become met / unmet / review_needed (:func:`grandrounds.scoring.gaps.vote`);
Grade.value is our convention, ``details["reference_value"]`` the reference's.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Sequence

from grandrounds.graders.base import GradeContext, Grader, Judge, unscored
from grandrounds.graders.judge_parse import extract_json_object, parse_criteria_met
from grandrounds.graders.llmeval_grader import Asked, ask_judge, load_templates
from grandrounds.records import Criterion, Grade, Message, Response, Sample, Verdict
from grandrounds.registry import Spec
from grandrounds.scoring import gaps as scoring
from grandrounds.textutil import normalize_width, strip_reasoning

_LEVEL = re.compile(r"S\s*([1-4])", re.I)


def parse_met(text: str | None) -> str | None:
    """"met"/"unmet" from a judge reply, None if criteria_met is not a readable boolean."""
    met, _ = parse_criteria_met(text)
    return None if met is None else (scoring.MET if met else scoring.UNMET)


def parse_passages(text: str | None) -> list[str] | None:
    """Irrelevant passages from the extractor's fenced JSON array; None if unreadable."""
    if text is None:
        return None
    body = strip_reasoning(text)
    m = re.search(r"```(?:json|JSON)?\s*(.*?)```", body, re.S)
    cand = m.group(1) if m else body[body.find("[") : body.rfind("]") + 1]
    for variant in (cand, normalize_width(cand)):
        try:
            items = json.loads(variant)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(items, list):
            out = [str(it.get("content", "")).strip() for it in items if isinstance(it, dict)]
            return [c for c in out if c]
    return None


def parse_level(text: str | None) -> int | None:
    """Severity 1..4 from a grading reply ({"level": "S2"}), None if unreadable."""
    obj = extract_json_object(text or "") or {}
    m = _LEVEL.search(normalize_width(str(obj.get("level", ""))))
    return int(m.group(1)) if m else None


class GAPSGrader(Grader):
    """Per-point panel judging; optional irrelevant-content deduction (``irrelevant`` = strategy)."""

    def __init__(self, min_valid: int = 2, irrelevant: str | None = None) -> None:
        if irrelevant is not None and irrelevant not in scoring.STRATEGIES:
            raise ValueError(f"unknown GAPS voting strategy {irrelevant!r}; use {', '.join(scoring.STRATEGIES)}")
        self.min_valid = min_valid
        self.irrelevant = irrelevant
        names = ["positive", "negative"] + (["irrelevant_extract", "irrelevant_grade"] if irrelevant else [])
        self.templates = load_templates("gaps_", names)

    def spec(self) -> Spec:
        return Spec("gaps", {"min_valid": self.min_valid, "irrelevant": self.irrelevant})

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if not response.ok:
            return unscored(sample, f"answer call failed: {response.error}")
        if len(ctx.judges) < self.min_valid:
            # With fewer judges than min_valid every point is review_needed by construction.
            return unscored(sample, f"GAPS voting needs at least {self.min_valid} judges, got {len(ctx.judges)} "
                                    "(set extra gaps_min_valid=1 to let a single judge decide)")
        answer = strip_reasoning(response.text or "")
        question = sample.messages[-1].content
        prev = {v.criterion_id: v for v in ctx.previous.verdicts} if ctx.previous and ctx.only_unknown else {}
        verdicts = await asyncio.gather(
            *(self._criterion(c, question, answer, ctx, prev.get(c.id)) for c in sample.rubric)
        )
        irr = await self._irrelevant(sample, question, answer, ctx) if self.irrelevant else None
        penalty = irr["penalty"] if irr and irr.get("penalty") is not None else 0.0
        decisions = [(c.points, _decision(v)) for c, v in zip(sample.rubric, verdicts)]
        qs = scoring.score_question(decisions, penalty)
        details: dict[str, Any] = {
            "reference_value": qs.reference,
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
        keys = tuple(k for v in verdicts for k in v.judge_keys) + tuple(irr.get("judge_keys", ()) if irr else ())
        error = None if qs.ours is not None else "no positive rubric point could be decided"
        return Grade(sample.id, qs.ours, verdicts=tuple(verdicts), details=details, error=error, judge_keys=keys)

    async def _criterion(
        self, crit: Criterion, question: str, answer: str, ctx: GradeContext, prev: Verdict | None
    ) -> Verdict:
        """Ask each judge (keeping known votes when re-grading unknowns) and vote."""
        if prev is not None and prev.status != "unknown":
            return prev
        kind = "negative" if "type:negative" in crit.tags else "positive"
        text = self.templates[kind].format(question=question, answer=answer, claim=crit.text)
        msgs = (Message("user", text),)
        old = list(prev.votes) if prev is not None else [scoring.UNKNOWN] * len(ctx.judges)
        start = prev.attempts if prev is not None else 0
        redo = [i for i, j in enumerate(ctx.judges) if i >= len(old) or old[i] == scoring.UNKNOWN]
        asked = await asyncio.gather(
            *(ask_judge(ctx.judges[i], msgs, parse_met, range(start, start + ctx.max_reask + 1)) for i in redo)
        )
        votes = (old + [scoring.UNKNOWN] * len(ctx.judges))[: len(ctx.judges)]
        raws = _split_raw(prev.raw, len(ctx.judges)) if prev is not None else [""] * len(ctx.judges)
        expl = _split_raw(prev.explanation, len(ctx.judges)) if prev is not None else [""] * len(ctx.judges)
        for i, a in zip(redo, asked):
            votes[i] = a.value or scoring.UNKNOWN
            raws[i] = a.raw if a.error is None else f"[call failed] {a.error}"
            expl[i] = parse_criteria_met(a.raw)[1] if a.value else ""
        decision = scoring.vote(votes, self.min_valid)
        status = decision if decision != scoring.REVIEW else "unknown"
        return Verdict(
            criterion_id=crit.id,
            status=status,  # type: ignore[arg-type]
            explanation=_join(ctx.judges, expl),
            raw=_join(ctx.judges, raws),
            votes=tuple(votes),
            attempts=start + max((len(a.attempts) for a in asked), default=0),
            judge_keys=(prev.judge_keys if prev is not None else ()) + tuple(k for a in asked for k in a.keys),
        )

    async def _irrelevant(self, sample: Sample, question: str, answer: str, ctx: GradeContext) -> dict[str, Any]:
        """Extractor (first judge) lists unrelated passages; every judge grades each S1..S4."""
        desc = sample.metadata.get("rubric_desc") or {}
        # The reference lists only each item's ``desc`` (empty in the NSCLC file); we list claims.
        rubric = "\n".join(f"- {c.text}" + (f"（{desc[c.id]}）" if c.id in desc else "") for c in sample.rubric)
        tpl = self.templates["irrelevant_extract"]
        msgs = (Message("user", tpl.format(question=question, answer=answer, rubric=rubric)),)
        ext: Asked = await ask_judge(ctx.judges[0], msgs, parse_passages, range(ctx.max_reask + 1))
        keys = list(ext.keys)
        if ext.value is None:
            # Unreadable extraction: no deduction, reported as unknown (the reference silently
            # treats it as "no irrelevant content").
            return {"status": "unknown", "penalty": None, "raw": ext.raw, "judge_keys": keys}
        passages: list[dict[str, Any]] = []
        for passage in ext.value:
            gmsg = (Message("user", self.templates["irrelevant_grade"].format(question=question, answer=answer, passage=passage)),)
            graded = await asyncio.gather(*(ask_judge(j, gmsg, parse_level, range(ctx.max_reask + 1)) for j in ctx.judges))
            keys.extend(k for g in graded for k in g.keys)
            levels = [g.value for g in graded]
            sev = scoring.combine_severity(levels, self.irrelevant or "conservative")
            passages.append({"content": passage, "levels": levels, "severity": sev})
        penalty = scoring.irrelevant_penalty([p["severity"] for p in passages])
        return {"status": "ok", "strategy": self.irrelevant, "passages": passages, "penalty": penalty, "judge_keys": keys}


def _decision(v: Verdict) -> str:
    return v.status if v.status in (scoring.MET, scoring.UNMET) else scoring.REVIEW


_SEP = "\n\n=====\n\n"


def _join(judges: Sequence[Judge], texts: Sequence[str]) -> str:
    return _SEP.join(f"[{j.name}] {t}" for j, t in zip(judges, texts))


def _split_raw(text: str, n: int) -> list[str]:
    """Undo :func:`_join` (drop the ``[judge]`` prefixes); pads to ``n`` parts."""
    parts = [re.sub(r"^\[[^\]]*\] ", "", p, count=1) for p in text.split(_SEP)] if text else []
    return (parts + [""] * n)[:n]

"""MedEQBench arithmetic, as in AQ-MedAI/MedEQBench Health_EQBench/utils.py @ 8a3a047.

Reference (``calc_score_percent_one_query`` and the evaluator's averaging, PROTOCOLS.md section 1):

    question score = round(100 * sum(judge 0/1 * weight) / sum(weight of 加分项 items), 2)   (not clipped)
    dimension score = 100 * hit weights(dim) / positive weights(dim), rounded to 2; NaN when the
                      question has no positive item of that dimension
    final = mean of question scores; per dimension = nanmean over questions, rounded to 2

The reference counts a missing/unparseable judge line as 0. We do not: items whose verdict is
``unknown`` are left out of numerator and denominator (coverage is reported), so with every
verdict known the numbers are the reference's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from grandrounds.records import Criterion, Verdict

#: The 22 canonical dimensions, in the reference's order (utils.py ``rubrics_tags``).
DIMENSIONS: tuple[str, ...] = (
    "个性化方案", "医疗安全关怀导向", "个人情绪 / 行动管理",
    "疾病错误认知", "疾病反常情绪推理", "医疗沟通失言情境",
    "暗示线索", "情绪归因理解",
    "角色影响", "个体情感价值", "文化背景考量",
    "意外情绪结果", "混合情绪", "情绪转换",
    "情感体验贯穿始终",
    "格式与重点呈现", "医疗语境语气适配", "医学语言通俗转化", "内容结构",
    "医疗行为肯定鼓励",
    "诊疗信息引导提问",
    "疾病情绪即时响应",
)  # fmt: skip


@dataclass(frozen=True)
class QuestionScore:
    """One question: score 0-100 (None = unscored), per-dimension percentages (None = absent), coverage."""

    score: float | None
    dimensions: Mapping[str, float | None]
    known: int
    total: int


def _dimension(crit: Criterion) -> str:
    return crit.tags[0] if crit.tags else ""


def score_items(rubric: Sequence[Criterion], hits: Mapping[str, bool]) -> tuple[float | None, dict[str, float | None]]:
    """Score the items listed in ``hits`` (criterion id -> met); items not in ``hits`` are ignored.

    Returns (question score or None when no positive weight, {dimension: percentage or None}).
    """
    items = [c for c in rubric if c.id in hits]
    possible = sum(c.points for c in items if c.points > 0)
    achieved = sum(c.points for c in items if hits[c.id])
    dim_possible: dict[str, float] = {d: 0.0 for d in DIMENSIONS}
    dim_achieved: dict[str, float] = {d: 0.0 for d in DIMENSIONS}
    for c in items:
        dim = _dimension(c)
        dim_possible.setdefault(dim, 0.0)
        dim_achieved.setdefault(dim, 0.0)
        if c.points > 0:
            dim_possible[dim] += c.points
        if hits[c.id]:
            dim_achieved[dim] += c.points
    dims = {d: (round(100 * dim_achieved[d] / p, 2) if p > 0 else None) for d, p in dim_possible.items()}
    score = round(100 * achieved / possible, 2) if possible > 0 else None
    return score, dims


def question_score(rubric: Sequence[Criterion], verdicts: Sequence[Verdict]) -> QuestionScore:
    """Score one answer over the items with a known verdict."""
    status = {v.criterion_id: v.status for v in verdicts}
    hits = {c.id: status[c.id] == "met" for c in rubric if status.get(c.id) in ("met", "unmet")}
    score, dims = score_items(rubric, hits)
    return QuestionScore(score, dims, len(hits), len(rubric))


def reference_question_score(rubric: Sequence[Criterion], judged: Mapping[str, int]) -> tuple[float, dict[str, float]]:
    """Exactly the reference: judge lines absent from ``judged`` count 0; 0 if nothing is positive; NaN dims."""
    score, dims = score_items(rubric, {c.id: bool(judged.get(c.id, 0)) for c in rubric})
    return (score if score is not None else 0.0), {d: (math.nan if v is None else v) for d, v in dims.items()}


def nanmean(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are present (None and NaN are absent); None if none is."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return sum(present) / len(present) if present else None


def final_scores(questions: Sequence[QuestionScore]) -> tuple[float | None, dict[str, tuple[float | None, int]]]:
    """(mean of scored question scores, {dimension: (nanmean rounded to 2, n questions having it)})."""
    scored = [q for q in questions if q.score is not None]
    final = nanmean([q.score for q in scored])
    per_dim: dict[str, tuple[float | None, int]] = {}
    names = list(DIMENSIONS) + sorted({d for q in scored for d in q.dimensions} - set(DIMENSIONS))
    for dim in names:
        vals = [q.dimensions.get(dim) for q in scored]
        present = [v for v in vals if v is not None]
        mean = nanmean(present)
        per_dim[dim] = (round(mean, 2) if mean is not None else None, len(present))
    return final, per_dim

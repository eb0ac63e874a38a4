"""MedEQBench arithmetic: ours, and the reference's, as in AQ-MedAI/MedEQBench Health_EQBench @ 8a3a047.

Reference (utils.py ``parse_rubric`` and ``calc_score_percent_one_query``, Health_EQBench.py's
``Health_EQBenchEvaluator.score``):

    question score = round(sum(count x weight) / sum(weight of 加分项 items) x 100, 2)   (0 if that sum is 0; not clipped)
    tag score      = round(hit weights(tag) / positive 加分项 weights(tag) x 100, 2); NaN when the question has none
    final          = sum(question scores) / number of questions; per tag = round(numpy.nanmean, 2)

where ``count`` is the sum of the 0/1 values of every judge line read for the item (a line
repeated counts again; an item with no line counts 0). :func:`reference_items`,
:func:`reference_question`, :func:`reference_final` and :func:`reference_tag_means` reproduce this.

Ours (the ``grandrounds`` protocol): one verdict per item (met / unmet / unknown); items whose
verdict is ``unknown`` are left out of numerator and denominator (coverage is reported), so with
every verdict known and no line repeated the numbers are the reference's (:func:`question_score`,
:func:`final_scores`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grandrounds.core.records import Criterion, Sample, Verdict

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


def score_items(
    rubric: Sequence[Criterion], hits: Mapping[str, bool]
) -> tuple[float | None, dict[str, float | None]]:
    """Score the items listed in ``hits`` (criterion id -> met); items not in ``hits`` are ignored.

    Returns (question score or None when no positive weight, {dimension: percentage or None}).
    """
    items = [c for c in rubric if c.id in hits]
    possible = sum(c.points for c in items if c.points > 0)
    achieved = sum(c.points for c in items if hits[c.id])
    dim_possible: dict[str, float] = dict.fromkeys(DIMENSIONS, 0.0)
    dim_achieved: dict[str, float] = dict.fromkeys(DIMENSIONS, 0.0)
    for c in items:
        dim = _dimension(c)
        dim_possible.setdefault(dim, 0.0)
        dim_achieved.setdefault(dim, 0.0)
        if c.points > 0:
            dim_possible[dim] += c.points
        if hits[c.id]:
            dim_achieved[dim] += c.points
    dims = {
        d: (round(100 * dim_achieved[d] / p, 2) if p > 0 else None) for d, p in dim_possible.items()
    }
    score = round(100 * achieved / possible, 2) if possible > 0 else None
    return score, dims


def question_score(rubric: Sequence[Criterion], verdicts: Sequence[Verdict]) -> QuestionScore:
    """Score one answer over the items with a known verdict."""
    status = {v.criterion_id: v.status for v in verdicts}
    hits = {c.id: status[c.id] == "met" for c in rubric if status.get(c.id) in ("met", "unmet")}
    score, dims = score_items(rubric, hits)
    return QuestionScore(score, dims, len(hits), len(rubric))


def nanmean(values: Sequence[float | None]) -> float | None:
    """Mean of the values that are present (None and NaN are absent); None if none is."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    return sum(present) / len(present) if present else None


def final_scores(
    questions: Sequence[QuestionScore],
) -> tuple[float | None, dict[str, tuple[float | None, int]]]:
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


# ---- the reference arithmetic ------------------------------------------------------------------

#: utils.py ``parse_rubric`` starts its 减分项 line marker here: lines numbered below it are 加分项.
_NO_DEDUCTION_LINE = 100_000


def reference_items(text: str) -> dict[str, tuple[int, str]]:
    """The items of a rubric cell as utils.py ``parse_rubric`` reads them: key -> (weight, tag as written).

    Lines are the cell split on "\\n", numbered from 1 and stripped. A blank line, and any line
    that contains 加分项 (a header, but also an item whose text mentions it), is passed over. A
    line containing 减分项 marks where deductions start. The weight is ``int()`` of the text between
    the first "{" and the first "}" with spaces removed; the key is 加分项_ (lines before the
    marker) or 减分项_ (after it) plus the text before the first "、"; on the marker line itself
    the key of the previous item is reused. The tag is the text between the first "【" and the
    first "】", spaces removed. A line where the weight or the tag cannot be read is dropped (so a
    "]" written for "】" drops the item), and a later item with the same key replaces the earlier.
    Mapping tags to the 22 dimensions is the caller's (the reference uses jieba + TF-IDF).
    """
    items: dict[str, tuple[int, str]] = {}
    marker = _NO_DEDUCTION_LINE
    key: str | None = None
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or "加分项" in line:
            continue
        if "减分项" in line:
            marker = number
        try:
            weight = int(line[line.index("{") + 1 : line.index("}")].replace(" ", ""))
        except ValueError:
            continue
        label = line.split("、")[0].strip()
        if number < marker:
            key = f"加分项_{label}"
        elif number > marker:
            key = f"减分项_{label}"
        elif key is None:  # the reference fails here (its key variable is not yet bound)
            raise ValueError(
                f"line {number}: a weighted 减分项 line before any item, which the reference parser cannot read"
            )
        try:
            tag = line[line.index("【") + 1 : line.index("】")].replace(" ", "")
        except ValueError:
            continue
        items[key] = (weight, tag)
    return items


def sample_items(sample: Sample) -> dict[str, tuple[float, str]]:
    """The items of a sample as the official parser reads its rubric: key -> (weight, dimension).

    Loaded samples carry them (``metadata["reference_items"]``, made by the benchmark from
    :func:`reference_items` and its dimension table); samples built otherwise fall back to their
    criteria, as if the official parser read every item as we do.
    """
    table = sample.metadata.get("reference_items")
    if isinstance(table, Mapping):
        return {k: (float(w), str(t)) for k, (w, t) in table.items()}
    return {c.id: (c.points, c.tags[0] if c.tags else "") for c in sample.rubric}


@dataclass(frozen=True)
class ReferenceQuestion:
    """One question the reference's way: score (0-100, unclipped) and every dimension's percentage (NaN = absent)."""

    score: float
    tags: Mapping[str, float]


def reference_question(
    items: Mapping[str, tuple[float, str]], counts: Mapping[str, float]
) -> ReferenceQuestion:
    """utils.py ``calc_score_percent_one_query``: ``items`` key -> (weight, dimension), ``counts`` key -> summed 0/1 lines.

    Counts for keys that are not items are ignored; the possible total is over 加分项 keys only;
    the actual total and a dimension's hits include 减分项 items (their weights are negative
    where written so). The expressions keep the reference's order of operations, so rounding
    to 2 decimals gives the same digits.
    """
    possible: float = 0
    achieved: float = 0
    tag_possible: dict[str, float] = dict.fromkeys(DIMENSIONS, 0)
    tag_achieved: dict[str, float] = dict.fromkeys(DIMENSIONS, 0)
    for key, (weight, tag) in items.items():
        if key.startswith("加分项"):
            possible += weight
            tag_possible[tag] = tag_possible.get(tag, 0) + weight
    for key, count in counts.items():
        if key in items:
            weight, tag = items[key]
            achieved += count * weight
            tag_achieved[tag] = tag_achieved.get(tag, 0) + count * weight
    total = (achieved / possible * 100) if possible else 0
    tags = {
        t: (round((tag_achieved.get(t, 0) / m) * 100, 2) if m > 0 else math.nan)
        for t, m in tag_possible.items()
    }
    return ReferenceQuestion(float(round(total, 2)), tags)


def reference_final(scores: Sequence[float]) -> float | None:
    """Health_EQBench.py: the plain mean of the question scores, in order (None for no question)."""
    return sum(scores) / len(scores) if scores else None


def reference_tag_means(questions: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Health_EQBench.py: per dimension, ``round(numpy.nanmean(...), 2)`` over the questions (NaN if all are NaN).

    numpy's nanmean (pairwise summation) and numpy's rounding are used on purpose: they are what
    the reference prints, and can differ from Python's ``sum``/``round`` in the last digit.
    """
    out: dict[str, float] = {}
    for tag in DIMENSIONS:
        vals = [q.get(tag, math.nan) for q in questions]
        out[tag] = (
            float(round(np.nanmean(vals), 2)) if any(not math.isnan(v) for v in vals) else math.nan
        )
    return out

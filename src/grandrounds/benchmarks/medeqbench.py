"""MedEQBench (AQ-MedAI): emotional-intelligence rubrics for Chinese medical consultations.

Data: ``med_eq.csv`` (413 rows, UTF-8 with BOM) or ``examples.csv`` (5 rows) from
AQ-MedAI/MedEQBench @ 8a3a047, columns ``id,question,rubrics``. Each rubric cell holds lines
``N、【维度】描述{+w}`` under a ``加分项`` (or ``加分项：``) header and, optionally, a ``减分项``
section. The judge grades the whole rubric in one call (:mod:`grandrounds.graders.medeq_grader`);
arithmetic in :mod:`grandrounds.scoring.medeq`.

Dimension spellings: the reference maps each raw 【】 label to the closest of its 22 canonical tags
by jieba + TF-IDF cosine (no threshold). We use the explicit table below instead; an unknown
spelling is a DataError. One deviation: the item with a malformed ``]`` bracket (row 72, item 6)
is parsed here, while the reference's ``line.index('】')`` fails and silently drops it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions
from grandrounds.benchmarks.readers import read_csv
from grandrounds.errors import DataError
from grandrounds.params import Param
from grandrounds.registry import Spec
from grandrounds.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.scoring.medeq import DIMENSIONS, QuestionScore, final_scores, question_score
from grandrounds.stats import bootstrap

REPO = "https://raw.githubusercontent.com/AQ-MedAI/MedEQBench/8a3a047d48e6ab49e3a263cc06c07c3787d0fb87/data/"
SUBSETS = ("med_eq", "examples")

#: Raw 【】 label (whitespace removed, as the reference does) -> canonical dimension.
#: Every spelling found in med_eq.csv / examples.csv @ 8a3a047 is listed; nothing is guessed.
DIMENSION_ALIASES: dict[str, str] = {
    **{d.replace(" ", ""): d for d in DIMENSIONS},
    "个性化诊疗方案": "个性化方案",
    "个性化诊疗建议": "个性化方案",
    "个性化治疗方案": "个性化方案",
    "医疗安全关怀导向（目标）": "医疗安全关怀导向",
    "医疗安全-关怀导向": "医疗安全关怀导向",
    "个人情绪行动管理": "个人情绪 / 行动管理",
    "个人情绪": "个人情绪 / 行动管理",  # rows 379/395/397/399, item 18/19 = the action-management slot
    "通过提供清晰的行动框架，帮助用户将焦虑转化为掌控感": "个人情绪 / 行动管理",  # row 331 item 1 (description in the bracket)
    "用户错误信念纠正": "疾病错误认知",  # row 16: "挖掘用户可能存在的具体错误信念…纠正"
    "疾病反常情绪推理?": "疾病反常情绪推理",
    "病反常情绪推理": "疾病反常情绪推理",
    "个人情感价值": "个体情感价值",
    "文化背景考虑": "文化背景考量",
    "意外结果": "意外情绪结果",
    "意外情绪结果预判": "意外情绪结果",
    "情绪转化": "情绪转换",
    "情绪转换方面": "情绪转换",
    "情绪情绪转换": "情绪转换",
    "情感体验始终贯穿": "情感体验贯穿始终",
    "医疗语境-语气适配": "医疗语境语气适配",
    "医疗行为肯定鼓": "医疗行为肯定鼓励",
    "医疗行为肯定鼓励?": "医疗行为肯定鼓励",
    "情绪归因理解?": "情绪归因理解",
    "诊疗信息引导提问?": "诊疗信息引导提问",
    "疾病情绪及时响应": "疾病情绪即时响应",
    "疾病情绪及时响应?": "疾病情绪即时响应",
    "疾病情绪": "疾病情绪即时响应",  # row 123 item 1: "【疾病情绪】及时响应…"
}

_ITEM = re.compile(r"^(\d+)\s*[、.．]\s*[【\[](.*?)[】\]](.*)$", re.S)
#: ``{+4}``, ``{ + 4 }``, ``{+４}``, ``｛＋4｝``: ``\d`` and ``\s`` are Unicode-aware and int() reads full-width digits.
_WEIGHT = re.compile(r"[{｛]\s*([+＋\-－]?)\s*(\d+)\s*[}｝]")
_HEADER = re.compile(r"^(加分项|减分项)[^【{｛]*$")  # "加分项", "加分项：", "减分项（扣分）"


def parse_rubric(text: str, path: Path, row: str) -> tuple[list[Criterion], dict[str, str]]:
    """Rubric cell -> criteria (id ``加分项_<n>``/``减分项_<n>``, signed weight, dimension) and raw spellings."""
    section = "加分项"
    items: list[Criterion] = []
    spellings: dict[str, str] = {}
    for line in text.split("\n"):  # as the reference; splitlines() would also split on U+2028
        s = line.strip()
        if not s:
            continue
        header = _HEADER.match(s)
        if header:
            section = header.group(1)
            continue
        m = _ITEM.match(s)
        if not m:
            raise DataError(path, f"row id {row}", f"rubric line is not 'N、【dimension】text{{+w}}': {s[:60]!r}")
        number, raw_dim, rest = m.groups()
        weights = _WEIGHT.findall(rest)
        if len(weights) != 1:
            raise DataError(path, f"row id {row}", f"item {number} needs exactly one {{+w}} weight, found {len(weights)}")
        sign, digits = weights[0]
        weight = int(digits)
        if weight == 0:
            raise DataError(path, f"row id {row}", f"item {number} has weight 0")
        points = -weight if section == "减分项" or sign in ("-", "－") else weight
        key = re.sub(r"\s+", "", raw_dim)
        dim = DIMENSION_ALIASES.get(key)
        if dim is None:
            raise DataError(path, f"row id {row}", f"item {number}: unknown dimension spelling {raw_dim!r}")
        cid = f"{section}_{int(number)}"
        if cid in spellings:
            raise DataError(path, f"row id {row}", f"duplicate item {cid}")
        description = _WEIGHT.sub("", rest).strip()
        items.append(Criterion(cid, description, points, (dim,)))
        spellings[cid] = raw_dim
    if not any(c.points > 0 for c in items):
        raise DataError(path, f"row id {row}", "rubric has no 加分项 item with a positive weight")
    return items, spellings


class MedEQBench(Benchmark):
    """MedEQBench: 413 Chinese consultations, 7,355 weighted empathy/communication items, one judge call each."""

    name = "medeqbench"
    description = "MedEQBench (AQ-MedAI): medical emotional-intelligence rubrics, Chinese (LLM judge)"
    language = "zh"
    remote_files = (
        RemoteFile(REPO + "med_eq.csv", "med_eq.csv", "9c563a4ba88aa114e67452d4be51b4bb29690592cf08e3210851c25e4b814dfa"),
        RemoteFile(REPO + "examples.csv", "examples.csv", "804715450cd03af9e2be6166814d39dbeea5f4be4f2386b4d1f39c6039484a0d"),
    )
    needs_judge = True

    parameters = (Param("subset", str, "med_eq", "med_eq: the 413 questions; examples: the 5-row sample file", SUBSETS),)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subset: str = self.param("subset")

    def data_files(self, root: Path) -> list[Path]:
        return [root] if root.is_file() else [root / f"{self.subset}.csv"]

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        reader = read_csv(path, ("id", "question", "rubrics"))
        samples, seen = [], set()
        for rec in reader:
            if not any((v or "").strip() for v in rec.values() if isinstance(v, str)):
                continue  # a blank CSV row carries no record
            row = (rec["id"] or "").strip()
            where = f"row id {row or '?'} (record {reader.line_num})"
            if not row or not (rec["question"] or "").strip() or not (rec["rubrics"] or "").strip():
                raise DataError(path, where, "id, question and rubrics must all be non-empty")
            if row in seen:
                raise DataError(path, where, "duplicate id")
            seen.add(row)
            rubric, spellings = parse_rubric(rec["rubrics"], path, row)
            meta = {"rubric_text": rec["rubrics"].strip(), "dimension_spellings": spellings}
            samples.append(Sample(row, self.name, (Message("user", rec["question"].strip()),), rubric=tuple(rubric), metadata=meta))
        if not samples:
            raise DataError(path, None, "no records")
        return samples

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medeq", {})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Mean question score (0-100) with a seeded bootstrap CI; per-dimension nanmeans for a radar chart.

        Breakdown family ``dimension``: a cell's score is the nanmean over the questions having a
        positive item of that dimension (``n``); ``n_unscored`` counts such questions left unscored.
        """
        by_id = {s.id: s for s in samples}
        questions: list[QuestionScore] = []
        unscored: Counter[str] = Counter()
        for g in grades:
            sample = by_id.get(g.sample_id)
            if sample is None:
                continue
            q = None if g.value is None else question_score(sample.rubric, g.verdicts)
            if q is None or q.score is None:
                unscored.update({c.tags[0] for c in sample.rubric if c.points > 0 and c.tags})
            else:
                questions.append(q)
        final, per_dim = final_scores(questions)
        boot = bootstrap([q.score for q in questions], seed=options.seed) if questions else None
        known = sum(q.known for q in questions)
        total = sum(q.total for q in questions)
        return Aggregate(
            metric="mean question score (0-100)",
            score=final,
            ci95=boot[1] if boot else None,
            n=len(questions),
            n_unscored=len(grades) - len(questions),
            breakdown={"dimension": {d: Cell(score=s, n=n, n_unscored=unscored[d]) for d, (s, n) in per_dim.items()}},
            extra={
                "coverage": known / total if total else None,
                "n_unknown_verdicts": sum(1 for g in grades for v in g.verdicts if v.status == "unknown"),
                "bootstrap_std": boot[0] if boot else None,
            },
        )

"""MedEQBench (AQ-MedAI): emotional-intelligence rubrics for Chinese medical consultations.

Data: ``med_eq.csv`` (413 rows, UTF-8 with BOM) or ``examples.csv`` (5 rows) from
AQ-MedAI/MedEQBench @ 8a3a047, columns ``id,question,rubrics``. Each rubric cell holds lines
``N、【维度】描述{+w}`` under a ``加分项`` (or ``加分项：``) header and, optionally, a ``减分项``
section. The judge grades the whole rubric in one call (:mod:`grandrounds.graders.medeq_grader`);
arithmetic in :mod:`grandrounds.scoring.medeq`.

Protocols (``--protocol``):

- ``reference`` (AQ-MedAI/MedEQBench @ 8a3a047: ``configs/examples_config.py``,
  ``Health_EQBench/Health_EQBench.py``, ``Health_EQBench/utils.py``): the candidate gets the bare
  question as its only message, temperature 0.7, up to 16,384 tokens (the config's model and
  inferencer); the judge (gpt-4.1, temperature 0.0, top_p 1, up to 8,192 tokens: utils.py
  ``EVAL_MODEL_NAME`` and ``llm_infer``) gets the official ``evaluate_prompt``, read at run time
  from the pinned Health_EQBench.py, with the answer as returned; the reply is read by the
  official line parser (every matching line counts, an item with no line counts 0, no re-ask);
  items and weights are those utils.py ``parse_rubric`` reads (it drops row 72 item 6, whose tag
  ends with "]", and row 399 item 6, whose text mentions 加分项), with its jieba + TF-IDF
  dimension for each spelling (:data:`REFERENCE_DIMENSION_CHANGES`); the headline is the mean of
  the question scores over every answer whose judge was asked (a failed judge call or a reply
  with no readable line counts 0, as the official evaluator scores an empty reply).
- ``grandrounds``: our judge template and our settings (candidate and judge at temperature 0),
  reasoning traces removed from the answer, the tolerant line reader with bounded re-asks,
  unknown items left out of the question score (coverage reported), answers with no known
  positive item unscored, our dimension table and every item of the cell.

Dimension spellings: the reference maps each raw 【】 label to the closest of its 22 canonical tags
by jieba + TF-IDF cosine (no threshold). The ``grandrounds`` protocol uses the explicit table
:data:`DIMENSION_ALIASES`; the reference protocol uses the same table with the two spellings the
official mapping sends elsewhere changed (:data:`REFERENCE_DIMENSION_CHANGES`), which gives the
official mapping for every spelling in the pinned data (tests/test_medeqbench_reference.py checks
it against ``find_most_similar_tag`` itself where jieba and scikit-learn are installed). An
unknown spelling is a DataError under both, since no table can say what TF-IDF would pick.

Where the reference protocol differs from the official code (the differential test,
tests/test_medeqbench_reference.py, runs the official evaluator on all 413 rows with 7 reply
formats and finds no other difference in per-question scores, per-question dimension scores,
the final score and the per-dimension means):

- a failed candidate call is unscored and counted in ``n_unscored``: OpenCompass's OpenAI model
  raises after its retries, so the official run stops there and has no score for it;
- an exception while grading (``grader_error``) is unscored and redone on the next run, where the
  official evaluator would stop;
- with a judge panel (the official code has one judge) an item's counted value is the mean over
  the judges' replies;
- the question is shown to the candidate and the judge without leading or trailing whitespace
  (pandas keeps it); no cell of the pinned files has any;
- the candidate is asked for up to 16,384 tokens, the configured ``max_out_len``; OpenCompass's
  OpenAI wrapper lowers that to 8,192 minus the prompt's tokens minus 100 for a model path
  containing "gpt-4" whenever the installed tiktoken knows the model (recent releases know
  gpt-4.1), so the official run's effective limit depends on versions the repository does not pin;
- a judge's separate reasoning stream (``reasoning_content``), which the official call puts in
  front of the reply as ``<think>…</think>`` where its verdict lines are read too, is not part of
  the reply here (our OpenAI-compatible provider returns the content only; gpt-4.1 has none).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.medeq import (
    DIMENSIONS,
    QuestionScore,
    ReferenceQuestion,
    final_scores,
    nanmean,
    question_score,
    reference_final,
    reference_items,
    reference_question,
    reference_tag_means,
    sample_items,
)
from grandrounds.scoring.stats import bootstrap
from grandrounds.sources.medeqbench import MEDEQBENCH, PROTOCOLS

REPO = MEDEQBENCH.url("data/")
SUBSETS = ("med_eq", "examples")

#: One line on what the two protocols do differently, shown beside the other protocol's figure.
DIFFERS = (
    "judge prompt and sampling; line reading (official pattern, repeated lines counted, missing items and failed "
    "judge calls counted 0, vs tolerant first-line reading, re-asks, unknowns left out); two dropped items; two dimension spellings"
)

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

#: Spellings the reference's jieba + TF-IDF argmax (utils.py ``find_most_similar_tag``) maps to another
#: dimension than :data:`DIMENSION_ALIASES`; for every other spelling in the pinned data it agrees.
REFERENCE_DIMENSION_CHANGES: dict[str, str] = {
    "情绪转化": "医学语言通俗转化",  # row 405 item 9
    "疾病情绪": "疾病反常情绪推理",  # row 123 item 1
}


def reference_dimension(spelling: str) -> str | None:
    """The dimension the reference gives a raw 【】 spelling (None if the spelling is not tabulated)."""
    key = re.sub(r"\s+", "", spelling)
    return REFERENCE_DIMENSION_CHANGES.get(key) or DIMENSION_ALIASES.get(key)


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
            raise DataError(
                path,
                f"row id {row}",
                f"rubric line is not 'N、【dimension】text{{+w}}': {s[:60]!r}",
            )
        number, raw_dim, rest = m.groups()
        weights = _WEIGHT.findall(rest)
        if len(weights) != 1:
            raise DataError(
                path,
                f"row id {row}",
                f"item {number} needs exactly one {{+w}} weight, found {len(weights)}",
            )
        sign, digits = weights[0]
        weight = int(digits)
        if weight == 0:
            raise DataError(path, f"row id {row}", f"item {number} has weight 0")
        points = -weight if section == "减分项" or sign in ("-", "－") else weight
        key = re.sub(r"\s+", "", raw_dim)
        dim = DIMENSION_ALIASES.get(key)
        if dim is None:
            raise DataError(
                path, f"row id {row}", f"item {number}: unknown dimension spelling {raw_dim!r}"
            )
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
    protocols = PROTOCOLS
    description = (
        "MedEQBench (AQ-MedAI): medical emotional-intelligence rubrics, Chinese (LLM judge)"
    )
    language = "zh"
    remote_files = (
        RemoteFile(
            REPO + "med_eq.csv",
            "med_eq.csv",
            "9c563a4ba88aa114e67452d4be51b4bb29690592cf08e3210851c25e4b814dfa",
        ),
        RemoteFile(
            REPO + "examples.csv",
            "examples.csv",
            "804715450cd03af9e2be6166814d39dbeea5f4be4f2386b4d1f39c6039484a0d",
        ),
    )
    needs_judge = True

    parameters = (
        Param(
            name="subset",
            type=str,
            default="med_eq",
            help="med_eq: the 413 questions; examples: the 5-row sample file",
            choices=SUBSETS,
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subset: str = self.param("subset")

    def data_files(self, root: Path) -> list[Path]:
        return [root] if root.is_file() else [root / f"{self.subset}.csv"]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        """The questions one at a time; an error names the row's id and the line the row starts on."""
        path = self.data_files(root)[0]
        seen = IdSet(path)
        for line, rec in iter_csv(path, ("id", "question", "rubrics")):
            if not any((v or "").strip() for v in rec.values() if isinstance(v, str)):
                continue  # a blank CSV row carries no record
            row = (rec["id"] or "").strip()
            where = f"row id {row or '?'} (line {line})"
            if not row or not (rec["question"] or "").strip() or not (rec["rubrics"] or "").strip():
                raise DataError(path, where, "id, question and rubrics must all be non-empty")
            seen.add(row, where)
            yield self._sample(path, where, row, rec)
        if not seen:
            raise DataError(path, None, "no records")

    def _sample(self, path: Path, where: str, row: str, rec: Mapping[str, Any]) -> Sample:
        rubric, spellings = parse_rubric(rec["rubrics"], path, row)
        meta = {
            "rubric_text": rec[
                "rubrics"
            ],  # the cell as the judge sees it (the reference passes it unchanged)
            "dimension_spellings": spellings,
            "reference_items": reference_item_table(
                rec["rubrics"], {c.id for c in rubric}, path, where
            ),
        }
        return Sample(
            id=row,
            benchmark=self.name,
            messages=(Message("user", rec["question"].strip()),),
            rubric=tuple(rubric),
            metadata=meta,
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medeq", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Mean question score (0-100) with a seeded bootstrap CI; per-dimension means for a radar chart.

        ``reference``: every answer whose judge was asked counts (a failed judge call or a reply
        with no line the official parser reads counts 0, ``extra["n_counted_zero"]``); dimension
        cells are ``round(nanmean, 2)`` of the official per-question dimension scores.
        ``grandrounds``: answers with a known question score only; dimension cells are the
        nanmean over the questions having a positive item of that dimension.
        Either way ``n`` counts the questions in a cell, ``n_unscored`` those having the
        dimension left out, and ``extra["other_protocol"]`` gives the other protocol's figure.
        """
        by_id = {s.id: s for s in samples}
        rows = [(by_id[g.sample_id], g) for g in grades if g.sample_id in by_id]
        refs = [_reference_of(s, g) for s, g in rows]
        ref_scores = [r.score for r in refs if r is not None]
        judged = [g for (_, g), r in zip(rows, refs) if r is not None]
        known = sum(1 for g in judged for v in g.verdicts if v.status in ("met", "unmet"))
        total = sum(len(by_id[g.sample_id].rubric) for g in judged)
        extra: dict[str, Any] = {
            "protocol": options.protocol,
            "coverage": known / total if total else None,
            "n_unknown_verdicts": sum(
                1 for g in grades for v in g.verdicts if v.status == "unknown"
            ),
        }
        if options.protocol == "reference":
            score, values = reference_final(ref_scores), ref_scores
            breakdown = _reference_dimensions(rows, refs)
            extra["n_counted_zero"] = sum(
                1 for (_, g), r in zip(rows, refs) if r is not None and g.value is None
            )
            extra["other_protocol"] = {
                "protocol": "grandrounds",
                "score": nanmean([_our_value(s, g) for s, g in rows]),
                "differs": DIFFERS,
            }
        else:
            mine = [
                question_score(s.rubric, g.verdicts) if g.value is not None else None
                for s, g in rows
            ]
            questions = [q for q in mine if q is not None and q.score is not None]
            score = final_scores(questions)[0]
            values = [q.score for q in questions if q.score is not None]
            breakdown = _our_dimensions(rows, mine, questions)
            extra["other_protocol"] = {
                "protocol": "reference",
                "score": reference_final(ref_scores),
                "differs": DIFFERS,
            }
        boot = bootstrap(values, seed=options.seed) if values else None
        extra["bootstrap_std"] = boot[0] if boot else None
        label = (
            "failed or unreadable judge replies count 0"
            if options.protocol == "reference"
            else "unknown items left out"
        )
        return Aggregate(
            metric=f"mean question score (0-100; {label})",
            score=score,
            ci95=boot[1] if boot else None,
            n=len(values),
            n_unscored=len(grades) - len(values),
            breakdown={"dimension": breakdown},
            extra=extra,
        )


def reference_item_table(cell: str, ids: set[str], path: Path, where: str) -> dict[str, list[Any]]:
    """The items the official parser reads in a rubric cell: key -> [weight, dimension by the reference's mapping]."""
    try:
        items = reference_items(cell)
    except ValueError as e:
        raise DataError(path, where, f"official rubric parser: {e}") from None
    out: dict[str, list[Any]] = {}
    for key, (weight, spelling) in items.items():
        if key not in ids:  # the grader reads the official count of an item through its verdict
            raise DataError(
                path,
                where,
                f"the official parser reads an item {key!r} that is not one of this row's items",
            )
        dim = reference_dimension(spelling)
        if dim is None:
            raise DataError(
                path,
                where,
                f"item {key}: no reference dimension tabulated for the spelling {spelling!r}",
            )
        out[key] = [weight, dim]
    return out


def _asked(g: Grade) -> bool:
    """The judge was asked about the answer: a score, or a reply (or failed call) nothing could be read from."""
    return g.status == "unreadable" or (g.status == "scored" and g.value is not None)


def _reference_of(sample: Sample, g: Grade) -> ReferenceQuestion | None:
    """The official question score of a graded answer (from the counted lines the grader kept, else its verdicts)."""
    if not _asked(g):
        return None
    counts = g.details.get("reference_counts")
    if not isinstance(counts, Mapping):
        counts = {v.criterion_id: 1 if v.status == "met" else 0 for v in g.verdicts}
    return reference_question(sample_items(sample), counts)


def _our_value(sample: Sample, g: Grade) -> float | None:
    """Our question score of an answer graded under the reference protocol (its ``other_value``)."""
    if "other_value" in g.details:
        other = g.details["other_value"]
        return None if other is None else float(other)
    return question_score(sample.rubric, g.verdicts).score if _asked(g) else None


def _reference_dimensions(
    rows: Sequence[tuple[Sample, Grade]], refs: Sequence[ReferenceQuestion | None]
) -> dict[str, Cell]:
    means = reference_tag_means([r.tags for r in refs if r is not None])
    unscored: Counter[str] = Counter()
    for (s, _), r in zip(rows, refs):
        if r is None:
            unscored.update(
                {t for k, (w, t) in sample_items(s).items() if k.startswith("加分项") and w > 0}
            )
    return {
        d: Cell(
            score=None if math.isnan(m) else m,
            n=sum(1 for r in refs if r is not None and not math.isnan(r.tags.get(d, math.nan))),
            n_unscored=unscored[d],
        )
        for d, m in means.items()
    }


def _our_dimensions(
    rows: Sequence[tuple[Sample, Grade]],
    mine: Sequence[QuestionScore | None],
    questions: Sequence[QuestionScore],
) -> dict[str, Cell]:
    unscored: Counter[str] = Counter()
    for (s, _), q in zip(rows, mine):
        if q is None or q.score is None:
            unscored.update({c.tags[0] for c in s.rubric if c.points > 0 and c.tags})
    return {
        d: Cell(score=v, n=n, n_unscored=unscored[d])
        for d, (v, n) in final_scores(questions)[1].items()
    }

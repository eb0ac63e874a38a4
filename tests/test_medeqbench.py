"""MedEQBench on the real med_eq.csv: parsing every rubric item, the judge line protocol, the arithmetic."""

from __future__ import annotations

import asyncio
import functools
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medeqbench import DIMENSION_ALIASES, MedEQBench, parse_rubric
from grandrounds.core.errors import DataError
from grandrounds.core.records import Cell, Response, Verdict
from grandrounds.graders.base import GradeContext
from grandrounds.graders.medeq_grader import MedEQGrader, MedEQParams, rubric_text
from grandrounds.scoring.medeq import DIMENSIONS, question_score, reference_question, sample_items
from tests.grading import grade_answer

ITEM_NO = re.compile(r"^\s*(\d+)\s*、", re.M)


@functools.cache
def _load(path: Path):
    return MedEQBench().load(path)


@pytest.fixture
def samples(shared_data):
    return _load(shared_data("medeqbench", "med_eq.csv"))


# ---- parsing the real data ----------------------------------------------------------------------


def test_all_rows_and_items_parse(samples):
    assert len(samples) == 413
    items = [c for s in samples for c in s.rubric]
    assert len(items) == 7355
    assert all(len(c.tags) == 1 and c.tags[0] in DIMENSIONS for c in items)
    per_dim = Counter(c.tags[0] for c in items)
    print("\nMedEQBench items per dimension:")
    for dim in DIMENSIONS:
        print(f"  {dim}: {per_dim.get(dim, 0)}")
    assert sum(per_dim.values()) == 7355
    assert per_dim["内容结构"] == 0 and len(per_dim) == 21  # a canonical tag no item uses
    assert per_dim["医疗安全关怀导向"] == 413 and per_dim["疾病反常情绪推理"] == 151
    weights = Counter(int(c.points) for c in items)
    print(f"weights: {dict(sorted(weights.items()))}")
    # PROTOCOLS.md: +4: 2186 (+2 full-width ４), +3: 1547, +5: 1498, +2: 1345, +6: 452, +1: 325
    assert weights == {4: 2188, 3: 1547, 5: 1498, 2: 1345, 6: 452, 1: 325}
    sums = [sum(c.points for c in s.rubric) for s in samples]
    assert (min(sums), max(sums)) == (48, 87)
    counts = [len(s.rubric) for s in samples]
    assert (min(counts), max(counts)) == (14, 21)
    assert all(c.id.startswith("加分项_") for c in items)  # no 减分项 in the data


def test_item_ids_follow_the_numbers_in_the_cell(samples):
    for s in samples:
        numbers = [int(n) for n in ITEM_NO.findall(s.metadata["rubric_text"])]
        assert [c.id for c in s.rubric] == [f"加分项_{n}" for n in numbers]


def test_quirky_rows(samples):
    by_id = {s.id: s for s in samples}
    malformed = by_id["72"].rubric[5]  # "6、【格式与重点呈现]…{+1}"
    assert (malformed.id, malformed.tags, malformed.points) == ("加分项_6", ("格式与重点呈现",), 1)
    full_width = [
        (s.id, c.id)
        for s in samples
        for c in s.rubric
        if "{+４}" in s.metadata["rubric_text"] and c.points == 4
    ]
    assert full_width
    headers = sum(1 for s in samples if s.metadata["rubric_text"].startswith("加分项："))
    assert headers == 15
    spellings = {v for s in samples for v in s.metadata["dimension_spellings"].values()}
    print(f"\nraw dimension spellings: {len(spellings)}")
    assert len(spellings) == 51
    assert all(re.sub(r"\s+", "", sp) in DIMENSION_ALIASES for sp in spellings)
    assert all(DIMENSION_ALIASES[d.replace(" ", "")] == d for d in DIMENSIONS)


def test_examples_csv_is_the_first_five_rows(samples, shared_data):
    ex = MedEQBench(subset="examples").load(shared_data("medeqbench", "examples.csv").parent)
    assert [s.id for s in ex] == ["1", "2", "3", "4", "5"]
    assert [s.rubric for s in ex] == [s.rubric for s in samples[:5]]


def test_gb18030_copy_loads_the_same(tmp_path: Path, samples, shared_data):
    text = shared_data("medeqbench", "med_eq.csv").read_text(encoding="utf-8-sig")
    path = tmp_path / "med_eq.csv"
    path.write_bytes(text.encode("gb18030"))
    again = MedEQBench().load(path)
    assert [(s.id, s.messages, s.rubric) for s in again] == [
        (s.id, s.messages, s.rubric) for s in samples
    ]


def test_dataset_hash_and_files(shared_data):
    bench = MedEQBench()
    root = shared_data("medeqbench", "med_eq.csv").parent
    assert bench.data_files(root) == [root / "med_eq.csv"]
    assert bench.dataset_hash(root) == MedEQBench.remote_files[0].sha256


@pytest.mark.parametrize(
    "cell, expected",
    [
        ("加分项\n1、【混合情绪】a{+4}", [("加分项_1", 4, "混合情绪")]),
        ("加分项：\n2、 【情绪转换】b{ + 4 }", [("加分项_2", 4, "情绪转换")]),
        ("加分项\n3、【暗示线索】c{+４}", [("加分项_3", 4, "暗示线索")]),
        (
            "加分项\n1、【个人情绪/行动管理】d{+6 }\n减分项\n1、【医疗沟通失言情境】e{-3}\n2、【暗示线索】f{+2}",
            [
                ("加分项_1", 6, "个人情绪 / 行动管理"),
                ("减分项_1", -3, "医疗沟通失言情境"),
                ("减分项_2", -2, "暗示线索"),
            ],
        ),
        ("加分项\n4、【格式与重点呈现]g{+1}", [("加分项_4", 1, "格式与重点呈现")]),
        ("加分项\n5、【疾病反常情绪推理?】h{+2}", [("加分项_5", 2, "疾病反常情绪推理")]),
    ],
)
def test_parse_rubric_table(cell, expected):
    items, _ = parse_rubric(cell, Path("x.csv"), "9")
    assert [(c.id, c.points, c.tags[0]) for c in items] == expected
    assert all("{" not in c.text for c in items)


@pytest.mark.parametrize(
    "cell, problem",
    [
        ("加分项\n1、【妇科】a{+4}", "unknown dimension spelling '妇科'"),
        ("加分项\n1、【混合情绪】a", "exactly one"),
        ("加分项\n1、【混合情绪】a{+4}\n1、【暗示线索】b{+2}", "duplicate item 加分项_1"),
        ("加分项\n混合情绪 a{+4}", "is not"),
    ],
)
def test_parse_rubric_errors_name_the_row(cell, problem):
    with pytest.raises(DataError) as err:
        parse_rubric(cell, Path("x.csv"), "42")
    assert err.value.where == "row id 42" and problem in err.value.problem


# ---- grading with a fake judge (our protocol: our template, tolerant reading, re-asks) ----------

OURS = MedEQParams("grandrounds")


class LineJudge:
    """Answers the MedEQ line protocol: 1 iff the item number is even; full-width punctuation; may omit items."""

    name = "fake"

    def __init__(self, omit=lambda n, attempt: False) -> None:
        self.omit = omit
        self.calls: list[int] = []

    async def __call__(self, messages, *, attempt=0):
        prompt = messages[-1].content
        self.calls.append(attempt)
        rubric = prompt.split("## 评分细则\n", 1)[1].split("\n\n## 输出格式", 1)[0]
        lines = []
        for m in re.finditer(r"^\s*(\d+)\s*、\s*【(.*?)[】\]]", rubric, re.M):
            n = int(m.group(1))
            if not self.omit(n, attempt):
                lines.append(
                    f'加分项_{n}_"{m.group(2)}"：{1 if n % 2 == 0 else 0} ｜ Reason：规则 ｜ 依据：无'
                )
        return Response(
            key=f"k{attempt}:{hash(prompt)}", text="<think>逐条看</think>\n" + "\n".join(lines)
        )


def grade_all(samples, judge, protocol="grandrounds", **ctx):
    grader = MedEQGrader(MedEQParams(protocol))

    async def go():
        return await asyncio.gather(
            *(
                grader.grade(
                    s, Response(key="a", text="回答"), GradeContext(judges=(judge,), **ctx)
                )
                for s in samples
            )
        )

    return asyncio.run(go())


def expected(sample, known=lambda c: True):
    items = [c for c in sample.rubric if known(c)]
    even = lambda c: int(c.id.split("_")[1]) % 2 == 0  # noqa: E731
    return round(
        100
        * sum(c.points for c in items if even(c))
        / sum(c.points for c in items if c.points > 0),
        2,
    )


def test_one_call_per_answer_and_scores_match_independent_arithmetic(samples):
    judge = LineJudge()
    grades = grade_all(samples, judge)
    assert len(judge.calls) == 413
    for s, g in zip(samples, grades):
        assert g.value == expected(s)
        assert g.details["coverage"] == {"known": len(s.rubric), "total": len(s.rubric)}
    agg = MedEQBench().aggregate(samples, grades, RunOptions(seed=3, protocol="grandrounds"))
    mean = sum(expected(s) for s in samples) / 413
    assert agg.score == pytest.approx(mean) and agg.n == 413 and agg.n_unscored == 0
    assert agg.ci95[0] <= agg.score <= agg.ci95[1]
    dims = agg.breakdown["dimension"]
    assert set(DIMENSIONS) <= set(dims) and dims["内容结构"] == Cell(score=None, n=0)
    for dim in ("混合情绪", "文化背景考量"):  # nanmean over questions having the dimension
        vals = []
        for s in samples:
            items = [c for c in s.rubric if c.tags[0] == dim]
            if items:
                hit = sum(c.points for c in items if int(c.id.split("_")[1]) % 2 == 0)
                vals.append(round(100 * hit / sum(c.points for c in items), 2))
        assert dims[dim].n == len(vals)
        assert dims[dim].score == pytest.approx(round(sum(vals) / len(vals), 2))
    print(
        f"\nMedEQ rule judge: final {agg.score:.2f} CI {agg.ci95[0]:.2f}-{agg.ci95[1]:.2f}; "
        + ", ".join(f"{d} {v.score}" for d, v in list(dims.items())[:5])
    )


def test_missing_items_are_reasked_then_unknown(samples):
    subset = samples[:10]
    judge = LineJudge(omit=lambda n, attempt: n in (3, 4) and attempt == 0)
    grades = grade_all(subset, judge, max_reask=2)
    assert judge.calls.count(0) == 10 and judge.calls.count(1) == 10 and 2 not in judge.calls
    assert all(g.value == expected(s) for s, g in zip(subset, grades))
    assert all(
        v.attempts == 2
        for g in grades
        for v in g.verdicts
        if v.criterion_id in ("加分项_3", "加分项_4")
    )

    never = LineJudge(omit=lambda n, attempt: n == 3)
    grades = grade_all(subset, never, max_reask=1)
    assert len(never.calls) == 20
    for s, g in zip(subset, grades):
        (v,) = [v for v in g.verdicts if v.criterion_id == "加分项_3"]
        assert v.status == "unknown" and "加分项_1" in v.raw
        assert g.details["coverage"]["known"] == len(s.rubric) - 1
        assert g.value == expected(s, known=lambda c: c.id != "加分项_3")
    regraded = asyncio.run(
        MedEQGrader(OURS).grade(
            subset[0],
            Response(key="a", text="回答"),
            GradeContext(judges=(LineJudge(),), previous=grades[0], only_unknown=True),
        )
    )
    assert regraded.value == expected(subset[0])


def test_failed_answer_is_unscored_without_judging(samples):
    judge = LineJudge()
    for protocol in ("reference", "grandrounds"):
        g = grade_answer(
            MedEQGrader(MedEQParams(protocol)),
            samples[0],
            Response(key="a", error="500"),
            GradeContext(judges=(judge,)),
        )
        assert g.value is None and g.status == "answer_failed" and judge.calls == []


def test_judge_prompt_carries_question_answer_and_original_rubric(samples):
    s = samples[0]
    seen = {}

    class Capture(LineJudge):
        async def __call__(self, messages, *, attempt=0):
            seen["prompt"] = messages[-1].content
            return await super().__call__(messages, attempt=attempt)

    asyncio.run(
        MedEQGrader(OURS).grade(
            s,
            Response(key="a", text="<think>草稿</think>最终回答"),
            GradeContext(judges=(Capture(),)),
        )
    )
    assert (
        s.messages[0].content in seen["prompt"]
        and "最终回答" in seen["prompt"]
        and "草稿" not in seen["prompt"]
    )
    assert s.metadata["rubric_text"] in seen["prompt"]
    assert rubric_text(s) == s.metadata["rubric_text"]


def test_reference_arithmetic_counts_missing_lines_as_zero(samples):
    s = samples[0]
    judged = {c.id: 1 for c in s.rubric[:3]}
    ref = reference_question(sample_items(s), judged)
    total = sum(c.points for c in s.rubric)
    assert ref.score == round(sum(c.points for c in s.rubric[:3]) / total * 100, 2)
    assert math.isnan(ref.tags["内容结构"])
    ours = question_score(s.rubric, [Verdict(c.id, "met") for c in s.rubric[:3]])
    assert ours.score == 100.0 and ours.known == 3  # only known items count, coverage reported


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_clinician_reviews_rescore_the_question(samples, protocol):
    """A reviewer's verdicts replace the judge's: 100 * met weights / positive weights, rounded to 2."""
    from grandrounds.core.records import Grade, Verdict

    s = samples[0]
    verdicts = tuple(Verdict(c.id, "met" if c.points > 0 else "unmet") for c in s.rubric)
    grade = Grade(sample_id=s.id, value=100.0, verdicts=verdicts)
    grader = MedEQGrader(MedEQParams(protocol))
    assert grader.rescore(s, grade, {}) == 100.0
    first = next(c for c in s.rubric if c.points > 0)
    possible = sum(c.points for c in s.rubric if c.points > 0)
    assert grader.rescore(s, grade, {first.id: "unmet"}) == round(
        100 * (possible - first.points) / possible, 2
    )
    negative = next((c for c in s.rubric if c.points < 0), None)
    if negative is not None:  # a reviewed defect that is present takes its weight off
        want = round(100 * (possible + negative.points) / possible, 2)
        assert grader.rescore(s, grade, {negative.id: "met"}) == want

"""GAPS: real xlsx loads, rubric repair, panel vote, both score conventions, irrelevant content."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import openpyxl
import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.gaps import GAPS, parse_rubric, repair_truncated_list
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Grade, Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.gaps_grader import GAPSGrader, parse_level, parse_passages
from grandrounds.run.config import JudgeConfig, check_judges
from grandrounds.scoring import gaps as sc
from tests.grading import grade_answer


@cache
def _load(root: Path, subset: str = "nsclc"):
    return GAPS(subset=subset).load(root)


@pytest.fixture
def nsclc(shared_data):
    return _load(shared_data("gaps", "GAPS-NSCLC-preview.xlsx").parent)


def fenced(met: bool, why: str = "理由") -> str:
    return f'好的。\n```json\n{{"explanation": "{why}", "criteria_met": {str(met).lower()}}}\n```'


def is_positive(prompt: str) -> bool:
    """A positive-claim judge prompt: ours says 正向评分标准, judge_engine.py's 正向评判标准."""
    return "正向评分标准" in prompt or "正向评判标准" in prompt


def is_judge_prompt(prompt: str) -> bool:
    return any(
        k in prompt for k in ("正向评分标准", "负向评分标准", "正向评判标准", "负向评判标准")
    )


@dataclass
class RuleJudge:
    """Replies by rule(claim text, attempt) -> reply text or None (failed call)."""

    name: str
    rule: object
    calls: list[tuple[int, str]] = field(default_factory=list)

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        prompt = messages[-1].content
        self.calls.append((attempt, prompt))
        reply = self.rule(prompt, attempt)
        if reply is None:
            return Response(key=f"{self.name}:{attempt}", error="HTTP 502")
        return Response(key=f"{self.name}:{len(self.calls)}", text=reply)


def test_real_files_load_completely(nsclc, shared_data):
    assert len(nsclc) == 92
    assert sum(len(s.rubric) for s in nsclc) == 1691
    levels = Counter(t for s in nsclc for c in s.rubric for t in c.tags if t.startswith("level:"))
    assert levels == {
        "level:A2": 442,
        "level:A1": 382,
        "level:A3": 246,
        "level:S4": 209,
        "level:S3": 202,
        "level:S2": 200,
        "level:S1": 7,
        "level:A4": 3,
    }
    a4 = [c for s in nsclc for c in s.rubric if "level:A4" in c.tags]
    assert len(a4) == 3 and all(c.points == 0 for c in a4)
    assert Counter(s.metadata["分类"] for s in nsclc) == {"G1": 39, "G2": 29, "G3": 17, "G4": 7}
    first = nsclc[0]
    assert (
        first.id == "nsclc/1"
        and first.messages[0].content == "哪些影像学特征提示肺结节可能需要治疗而非观察？"
    )
    assert set(first.metadata["reference_answers"]) == {
        "gpt_5_answer",
        "gemini_2_5_pro_answer",
        "claude_opus_4_answer",
    }
    community = _load(shared_data("gaps", "community_contributions.xlsx").parent, "community")
    assert len(community) == 5 and community[0].metadata["sheet"] == "社区贡献数据"
    assert community[0].metadata["rubric_desc"]["1"].startswith("详细询问胸痛")
    assert len(_load(shared_data("gaps", "community_contributions.xlsx").parent, "all")) == 97


@pytest.mark.parametrize(
    "labels, decision",
    [
        (["met", "met", "met"], "met"),
        (["met", "met", "unmet"], "met"),  # majority with >= 2 votes
        (["unmet", "unknown", "unmet"], "unmet"),  # unknown dropped, 2 valid agree
        (["met", "unmet", "unknown"], "review_needed"),  # 2 valid, disagree
        (["met", "unknown", "unknown"], "review_needed"),  # too few valid votes
        (["met"], "review_needed"),  # a single judge can never decide
        (["met", "met", "unmet", "unmet"], "review_needed"),  # tie (reference: arbitrary)
        ([], "review_needed"),
    ],
)
def test_vote_table(labels, decision):
    assert sc.vote(labels) == decision


def test_single_judge_needs_min_valid_one(nsclc):
    assert (
        sc.vote(["met"], min_valid=1) == "met"
        and sc.vote(["unknown"], min_valid=1) == "review_needed"
    )
    one = (RuleJudge("a", lambda p, a: fenced(is_positive(p))),)
    with pytest.raises(ConfigError, match="at least 2 judges"):  # refused before any call
        check_judges(GAPS(), GAPSGrader(), [JudgeConfig(spec="openai/a")])
    check_judges(GAPS(), GAPSGrader(min_valid=1), [JudgeConfig(spec="openai/a")])
    g1 = asyncio.run(
        GAPSGrader(min_valid=1).grade(
            nsclc[0], Response(key="x", text="答"), GradeContext(judges=one)
        )
    )
    assert g1.value == 1.0 and g1.details["reference_value"] == 1.0


def test_score_question_both_conventions():
    items = [
        (5, "met"),
        (3, "review_needed"),
        (1, "unmet"),
        (0, "met"),
        (-2, "met"),
        (-4, "review_needed"),
    ]
    q = sc.score_question(items)
    assert q.max_points == 9 and q.known_max_points == 6
    assert q.reference == round((5 - 2) / 9, 4)  # review_needed = not met
    assert q.ours == round((5 - 2) / 6, 4)  # review_needed excluded
    assert q.coverage == pytest.approx(3 / 5) and q.n_review_needed == 2
    assert sc.score_question([(5, "unmet"), (-4, "met")]).reference == 0.0  # clipped at 0
    assert sc.score_question([(5, "review_needed")]).ours is None


@pytest.mark.parametrize(
    "levels, conservative, majority, average",
    [
        ([2, 2, 4], 4, 2, 3),  # any S4 wins conservatively; mean 2.67 -> 3
        ([1, 3, 3], 3, 3, 2),  # mean 2.33 -> 2
        ([1, 1, 3, 3], 3, 3, 2),  # tied modes: conservative more severe, majority upper median; 2.0
        ([1, 2, 3], 3, 2, 2),  # all tied: median_high of [1,2,3] = 2
        ([None, None, 2], 1, 1, 1),  # unparseable = S1; mean 1.33 -> 1
        ([3, 4], 4, 4, 4),  # round(3.5) = 4 (half to even)
        ([2, 3], 3, 3, 2),  # round(2.5) = 2 (half to even)
    ],
)
def test_irrelevant_severity_strategies(levels, conservative, majority, average):
    assert sc.combine_severity(levels, "conservative") == conservative
    assert sc.combine_severity(levels, "majority") == majority
    assert sc.combine_severity(levels, "average") == average
    assert sc.irrelevant_penalty([4, 2]) == 6.0


def test_panel_grades_a_real_row_under_both_conventions(nsclc):
    sample = nsclc[0]  # 24 items: 16 positive (A1 6x5, A2 8x3, A3 2x1 = 56 points), 8 negative
    by_text = {c.text: c for c in sample.rubric}
    positive_ids = {c.id for c in sample.rubric if c.points > 0}
    assert sum(c.points for c in sample.rubric if c.points > 0) == 56

    def claim_of(prompt: str):
        return next(c for t, c in by_text.items() if t in prompt)

    # Judges a and b: positives 1-8 met, the rest unmet; negatives: 17 and 22 met (defects present).
    def base(prompt, attempt):
        c = claim_of(prompt)
        met = int(c.id) <= 8 if c.id in positive_ids else c.id in {"17", "22"}
        return fenced(met)

    # Judge c disagrees on item 1 and on 17, and never answers item 2 readably.
    def contrarian(prompt, attempt):
        c = claim_of(prompt)
        if c.id == "2":
            return "我无法判断"
        if c.id in {"1", "17"}:
            return fenced(not base(prompt, attempt).endswith("true}\n```"))
        return base(prompt, attempt)

    # Judge b fails on item 1 entirely, so item 1 has votes (met, unknown, unmet) -> review_needed.
    def b_rule(prompt, attempt):
        return None if claim_of(prompt).id == "1" else base(prompt, attempt)

    judges = (RuleJudge("a", base), RuleJudge("b", b_rule), RuleJudge("c", contrarian))
    grader = GAPSGrader(protocol="grandrounds")  # our templates, re-asks and convention
    g = asyncio.run(
        grader.grade(sample, Response(key="ans", text="回答"), GradeContext(judges=judges))
    )
    decisions = g.details["decisions"]
    assert (
        decisions["1"] == "review_needed" and decisions["2"] == "met" and decisions["17"] == "met"
    )
    pts = {c.id: c.points for c in sample.rubric}
    earned_ref = sum(pts[i] for i in map(str, range(2, 9))) + pts["17"] + pts["22"]
    assert g.details["reference_value"] == round(earned_ref / 56, 4)
    assert g.value == round(earned_ref / (56 - pts["1"]), 4)  # item 1 excluded from the maximum
    assert g.details["coverage"] == pytest.approx(23 / 24)
    v1 = next(v for v in g.verdicts if v.criterion_id == "1")
    assert v1.status == "unknown" and v1.statuses == ("met", "unknown", "unmet")
    v2 = next(v for v in g.verdicts if v.criterion_id == "2")
    assert v2.statuses == ("met", "met", "unknown") and v2.attempts == 3  # c re-asked twice
    assert (
        v2.votes[2].raw == "我无法判断" and v2.votes[2].judge == "c"
    )  # the unreadable reply is kept on its own vote
    # Negative items got the negative prompt, positive ones the positive prompt.
    neg_prompts = [p for _, p in judges[0].calls if "负向评分标准" in p]
    assert len(neg_prompts) == 8 and len(judges[0].calls) == 24
    # The same replies read judge_engine's way: every reply is fenced, "我无法判断" is Unknown there too.
    assert g.details["other_value"] == g.details["reference_value"]
    # Aggregate: ours and the reference protocol's figure side by side.
    agg = GAPS().aggregate([sample], [g], RunOptions(protocol="grandrounds"))
    assert agg.score == g.value and agg.extra["other_protocol"]["score"] == g.details["other_value"]
    assert agg.extra["other_protocol"]["protocol"] == "reference"
    assert agg.breakdown["category"]["G1"].metrics["n_review_needed"] == 1
    assert agg.breakdown["category"]["G1"].metrics["other_score"] == g.details["other_value"]


def test_only_unknown_regrade_reasks_only_unknown_votes(nsclc):
    sample = nsclc[1]
    flaky = RuleJudge("c", lambda p, a: "乱码")
    judges = (
        RuleJudge("a", lambda p, a: fenced(True)),
        RuleJudge("b", lambda p, a: fenced(False)),
        flaky,
    )
    grader = GAPSGrader(protocol="grandrounds")  # unreadable replies are re-asked (attempts 0..2)
    first = asyncio.run(
        grader.grade(sample, Response(key="x", text="答"), GradeContext(judges=judges))
    )
    assert all(v.status == "unknown" for v in first.verdicts)  # 1 met, 1 unmet, 1 unknown each
    fixed = RuleJudge("c", lambda p, a: fenced(True))
    a_again = RuleJudge("a", lambda p, a: pytest.fail("a's known vote must not be re-asked"))
    judges2 = (a_again, RuleJudge("b", lambda p, a: pytest.fail("b must not be re-asked")), fixed)
    ctx = GradeContext(judges=judges2, previous=first, only_unknown=True)
    again = asyncio.run(grader.grade(sample, Response(key="x", text="答"), ctx))
    assert all(v.status == "met" for v in again.verdicts)
    assert {a for a, _ in fixed.calls} == {3}  # after attempts 0..2 of the first grading
    assert all(v.attempts == 4 for v in again.verdicts)


def test_failed_answer_is_unscored(nsclc):
    ok_judges = (
        RuleJudge("a", lambda p, a: fenced(True)),
        RuleJudge("b", lambda p, a: fenced(True)),
    )
    g = grade_answer(
        GAPSGrader(), nsclc[0], Response(key="x", error="boom"), GradeContext(judges=ok_judges)
    )
    assert g.value is None and g.status == "answer_failed" and "boom" in g.error
    assert ok_judges[0].calls == [] and ok_judges[1].calls == []


def test_irrelevant_content_deduction(nsclc):
    sample = nsclc[0]

    def rule(prompt, attempt):
        if "找出【模型回答】中与所有评分要点都无关" in prompt:
            return '```json\n[{"content": "肺结节的研究始于19世纪。", "reasoning": "历史"}]\n```'
        if "无关内容的严重程度" in prompt:
            return '```json\n{"reasoning": "x", "level": "S2"}\n```'
        return fenced(True)

    judges = (
        RuleJudge("a", rule),
        RuleJudge("b", rule),
        RuleJudge("c", lambda p, a: fenced(True) if is_judge_prompt(p) else '{"level": "S4"}'),
    )
    opts = RunOptions(extra={"gaps_irrelevant": "conservative"})
    grader = GAPS().grader(opts)
    g = asyncio.run(
        grader.grade(sample, Response(key="x", text="回答"), GradeContext(judges=judges))
    )
    irr = g.details["irrelevant"]
    assert irr["passages"][0]["levels"] == [2, 2, 4] and irr["passages"][0]["severity"] == 4
    assert g.details["penalty"] == 4.0
    earned = sum(c.points for c in sample.rubric)  # everything "met": positives and negatives
    assert g.details["reference_value"] == round(max(0.0, earned - 4) / 56, 4)
    assert (
        "irrelevant_extract" in grader.templates
        and grader.spec().args["irrelevant"] == "conservative"
    )


def test_parsers():
    assert parse_passages(
        '```json\n[{"content": "a"}, {"content": " "}, {"reasoning": "r"}]\n```'
    ) == ["a"]
    assert parse_passages("[]") == []
    assert parse_passages("没有") is None
    assert parse_level('{"level": "Ｓ３"}') == 3 and parse_level('{"level": "严重"}') is None


def _long_rubric(n_items: int) -> list[dict]:
    return [
        {"id": i, "claim": "需要评估纵隔淋巴结分期" * 20, "level": "A2", "type": "positive"}
        for i in range(1, n_items + 1)
    ]


def test_truncated_rubric_is_repaired_or_rejected(tmp_path):
    text = json.dumps(_long_rubric(200), ensure_ascii=False, indent=2)
    cut = text[:32767]  # what Excel keeps
    items, dropped = repair_truncated_list(cut)
    assert 0 < len(items) < 200 and items == _long_rubric(len(items)) and dropped > 0
    assert repair_truncated_list('[{"id": 1, "claim": "cut') is None
    with pytest.raises(DataError, match="row 7.*cut off"):
        parse_rubric('[{"id": 1, "claim": "被截断', Path("x.xlsx"), "sheet 'Sheet1' row 7")
    with pytest.raises(DataError, match="not valid JSON"):
        parse_rubric('[{"id": 1, "claim": "a",}]', Path("x.xlsx"), "sheet 'Sheet1' row 3")

    path = tmp_path / "gaps.xlsx"
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    ws.append(["index", "question", "分类", "rubrics"])
    ws.append(["1", "问题一", "G1", cut])
    ws.append(["2", "问题二", "G2", '[{"id": 1, "claim": "被截断'])
    wb.save(path)
    with pytest.raises(DataError, match=r"sheet 'Sheet1' row 3"):
        GAPS().load(path)
    ws.delete_rows(3)
    wb.save(path)
    (sample,) = GAPS().load(path)
    assert sample.metadata["rubric_repaired"] and sample.metadata["rubric_at_excel_limit"]
    assert len(sample.rubric) == len(items)


def test_aggregate_counts_unscored(nsclc):
    s1, s2, s3 = nsclc[:3]
    grades = [
        Grade(
            sample_id=s1.id,
            value=0.5,
            details={
                "reference_value": 0.4,
                "other_value": 0.4,
                "coverage": 1.0,
                "n_review_needed": 0,
            },
        ),
        Grade(
            sample_id=s2.id,
            value=None,
            details={
                "reference_value": 0.0,
                "other_value": 0.0,
                "coverage": 0.0,
                "n_review_needed": 5,
            },
        ),
        Grade(sample_id=s3.id, value=None, error="answer call failed"),
    ]
    agg = GAPS().aggregate([s1, s2, s3], grades, RunOptions(protocol="grandrounds"))
    assert agg.score == 0.5 and agg.n == 1 and agg.n_unscored == 2
    assert agg.extra["other_protocol"]["score"] == pytest.approx(
        0.4 / 3
    )  # reference: no value scores 0
    assert agg.extra["n_review_needed"] == 5
    # Under the reference protocol an answer without a value scores 0, inside n.
    ref = [
        Grade(sample_id=s1.id, value=0.4, details={"other_value": 0.5}),
        Grade(sample_id=s2.id, value=0.0, details={"other_value": None}),
        Grade(sample_id=s3.id, value=None, error="answer call failed"),
    ]
    agg = GAPS().aggregate([s1, s2, s3], ref, RunOptions())
    assert agg.score == pytest.approx(0.4 / 3) and agg.n == 3 and agg.n_unscored == 1
    assert agg.extra["other_protocol"] == {
        "protocol": "grandrounds",
        "score": 0.5,
        "differs": agg.extra["other_protocol"]["differs"],
    }
    assert agg.metric == "GAPS score (0-1; review_needed = not met)"


def test_end_to_end_panel_through_runner(tmp_path, shared_data):
    """Real runner and HTTP, three judges: one real question, every point asked of every judge."""
    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer

    def rule(body):
        user = body["messages"][-1]["content"]
        if body["model"] == "cand":
            return "模型的回答：影像学特征包括大小、密度和形态。"
        assert (
            is_judge_prompt(user) and len(body["messages"]) == 1
        )  # judge_engine sends one HumanMessage
        if body["model"] == "j3":
            return "无法判断"  # the third judge never gives a readable verdict
        return fenced(is_positive(user))  # positives met, negatives (defects) absent

    with LoopbackServer(rule) as srv:
        judges = tuple(
            JudgeConfig(spec=f"openai/{j}", base_url=srv.base_url) for j in ("j1", "j2", "j3")
        )
        cfg = RunConfig(
            benchmark="gaps",
            model="openai/cand",
            data=shared_data("gaps", "GAPS-NSCLC-preview.xlsx"),
            base_url=srv.base_url,
            judges=judges,
            limit=1,
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    assert out.result.n == 1 and out.result.score == 1.0  # the reference protocol, by default
    assert (
        out.result.extra["other_protocol"]["score"] == 1.0
        and out.result.extra["n_review_needed"] == 0
    )

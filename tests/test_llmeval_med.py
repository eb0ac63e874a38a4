"""LLMEval-Med: real data loads, multi-turn history, 1-5 judge parsing, runs and usability."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.core.records import Grade, Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.llmeval_grader import LLMEvalGrader, parse_score, usability
from tests.grading import grade_answer


@dataclass
class FakeJudge:
    """Replies from a list (cycled by call order); records attempts and prompts."""

    replies: list[str | None]
    name: str = "judge-a"
    calls: list[tuple[int, str]] = field(default_factory=list)

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        reply = self.replies[len(self.calls) % len(self.replies)]
        self.calls.append((attempt, messages[-1].content))
        if reply is None:
            return Response(key=f"k{attempt}", error="HTTP 500")
        return Response(key=f"{self.name}-k{attempt}", text=reply)


@cache
def _load(path: Path):
    return LLMEvalMed().load(path)


@pytest.fixture
def samples(shared_data):
    return _load(shared_data("llmeval-med", "dataset.json"))


def test_real_file_loads_every_turn(samples):
    assert len(samples) == 667
    counts = Counter(s.metadata["category"] for s in samples)
    assert counts == {
        "医疗知识": 141,
        "医疗推理": 102,
        "医疗语言理解": 213,
        "医疗安全伦理": 109,
        "医疗文本生成": 102,
    }
    assert len({s.id for s in samples}) == 667
    assert len({s.group for s in samples}) == 571  # SOURCE.md: 93+102+178+98+100 conversations
    # 医疗语言理解 rows say category1 一般语言理解: the top-level key is the category.
    mlu = next(s for s in samples if s.metadata["code"] == "MLU")
    assert (
        mlu.metadata["category1"] == "一般语言理解" and mlu.metadata["category"] == "医疗语言理解"
    )
    # NaN checklists become None, never the text "nan".
    assert all(s.metadata["checklist"] is None or s.metadata["checklist"] != "nan" for s in samples)


def test_round_three_prompt_carries_rounds_one_and_two_in_order(samples):
    bench = LLMEvalMed()
    by_id = {s.id: s for s in samples}
    r1, r2, r3 = (by_id[f"医疗知识/7/{r}"] for r in (1, 2, 3))
    assert r1.messages[0].content == "皂苷溶血作用的原因？"
    history = [(r1, "答一：皂苷与胆固醇结合"), (r2, "答二：用溶血指数表示")]
    p = bench.prompt(r3, RunOptions(), history)
    assert [m.role for m in p.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert [m.content for m in p.messages] == [
        r1.messages[0].content,
        "答一：皂苷与胆固醇结合",
        r2.messages[0].content,
        "答二：用溶血指数表示",
        r3.messages[0].content,
    ]
    # Answer.py's system message is the protocol's (the runner sends it first), under both protocols.
    for name in ("reference", "grandrounds"):
        assert (
            bench.protocol(RunOptions(protocol=name)).answer.system
            == "You are a helpful assistant."
        )
    assert r3.group == "医疗知识/7" and r3.turn == 3


@pytest.mark.parametrize(
    "reply, score",
    [
        ('{"判断依据": "关键信息一致", "得分": "[4]"}', 4),
        ('{"判断依据"："完全正确"，"得分"："［５］"}', 5),  # full-width brackets and digit
        ("得分：【3】", 3),
        ('{"得分": "[0]"}', None),
        ('{"得分": "[6]"}', None),
        ("我认为应得 4 分", None),
        ('<think>先看 [1] 条</think>{"得分": "[5]"}', 5),  # reasoning trace ignored
        (
            '{"判断依据": "参见第[2]点", "得分": "[4]"}',
            None,
        ),  # scores that disagree: re-asked, never the first taken
        ("", None),
    ],
)
def test_parse_score(reply, score):
    assert parse_score(reply) == score


def test_usability_threshold():
    assert usability([4, 5, 3]) == (4.0, True)
    assert usability([4, 3, None]) == (3.5, False)  # mean of the valid runs
    assert usability([None, None]) == (None, None)  # no valid score: unknown, never "unusable" here


def _grade(sample, judge, protocol="grandrounds", **ctx):
    grader = LLMEvalGrader(runs=3, protocol=protocol)
    return asyncio.run(
        grader.grade(
            sample, Response(key="ans", text="回答内容"), GradeContext(judges=(judge,), **ctx)
        )
    )


def test_three_runs_use_distinct_attempt_numbers_and_average(samples):
    sample = next(s for s in samples if s.id == "医疗知识/7/1")
    judge = FakeJudge(['{"得分": "[4]"}', "看不懂", '{"得分": "[5]"}', '{"得分": "[2]"}'])
    g = _grade(sample, judge)
    # run0 -> attempt 0 ([4]); run1 -> attempt 3 unreadable, re-asked at 4 ([5]); run2 -> attempt 6 ([2])
    assert sorted(a for a, _ in judge.calls) == [0, 3, 4, 6]
    assert g.details["run_scores"] == [4, 5, 2]
    assert g.details["mean_score"] == pytest.approx(11 / 3)
    assert (
        g.value == 0.0 and g.details["other_value"] == 0.0
    )  # the official reading of the same replies agrees
    assert g.verdicts == () and [(v.run, v.score) for v in g.votes] == [
        (0, 4.0),
        (1, 5.0),
        (2, 2.0),
    ]
    assert all(v.status in ("met", "unmet") for v in g.votes)
    # The MK prompt carries the checklist and the reference answer of this very turn.
    prompt = judge.calls[0][1]
    assert (
        sample.metadata["checklist"][:20] in prompt
        and sample.target[:20] in prompt
        and "回答内容" in prompt
    )


def test_no_valid_score_is_unscored_and_reasked_under_grandrounds(samples):
    sample = next(s for s in samples if s.metadata["code"] == "MR")
    judge = FakeJudge(["无分数"])
    g = _grade(sample, judge)
    assert g.value is None and g.error
    assert g.details["other_value"] is None
    assert [v.status for v in g.votes] == ["unknown"] * 3 and g.status == "unreadable"
    assert all(v.raw == "无分数" and v.attempts == 3 for v in g.votes)
    assert len(judge.calls) == 9  # 3 runs x (1 + max_reask 2)
    assert "评分要点" not in judge.calls[0][1]  # MR has no checklist section


def test_failed_answer_and_failed_judge_calls_are_not_zero(samples):
    grader = LLMEvalGrader(runs=2)
    s = samples[0]
    g = grade_answer(
        grader, s, Response(key="a", error="timeout"), GradeContext(judges=(FakeJudge(["[5]"]),))
    )
    assert g.value is None and g.status == "answer_failed" and "timeout" in g.error
    judge = FakeJudge([None])
    g = asyncio.run(grader.grade(s, Response(key="a", text="x"), GradeContext(judges=(judge,))))
    assert g.value is None and len(judge.calls) == 2  # a failed call is not re-asked
    assert g.status == "unreadable" and len(g.votes) == 2
    assert all(
        v.status == "unknown" and "HTTP 500" in v.explanation and "HTTP 500" in (v.error or "")
        for v in g.votes
    )


def test_only_unknown_regrade_keeps_known_runs_and_uses_fresh_attempts(samples):
    sample = samples[0]
    first = _grade(sample, FakeJudge(['{"得分": "[5]"}', "??", "??", "??", '{"得分": "[4]"}']))
    assert [v.status for v in first.votes] == ["met", "unknown", "met"]
    judge = FakeJudge(['{"得分": "[4]"}'])
    again = _grade(sample, judge, previous=first, only_unknown=True)
    assert [a for a, _ in judge.calls] == [9]  # after attempts 0..8 of the first grading
    assert again.details["run_scores"] == [5, 4, 4] and again.value == 1.0
    assert (
        again.votes[1].attempts == 4 and again.votes[0] == first.votes[0]
    )  # known runs kept as they are


def test_aggregate_usability_percent_under_both_protocols(samples):
    bench = LLMEvalMed()
    mk = [s for s in samples if s.metadata["code"] == "MK"][:4]
    mr = [s for s in samples if s.metadata["code"] == "MR"][:2]

    def g(s, value, mean, other):
        return Grade(
            sample_id=s.id,
            value=value,
            details={"run_scores": [mean], "mean_score": mean, "other_value": other},
        )

    grades = [
        g(mk[0], 1.0, 4.5, 1.0),
        g(mk[1], 0.0, 3.0, 1.0),
        g(mk[2], None, None, 0.0),
        g(mk[3], 1.0, 5.0, None),
        g(mr[0], 0.0, 2.0, 0.0),
        Grade(sample_id=mr[1].id, value=None, error="answer call failed"),
    ]
    # grandrounds: usable among answers with a valid score; the reference reading (other_value) counts
    # every question, those with no value unusable.
    agg = bench.aggregate(mk + mr, grades, RunOptions(protocol="grandrounds"))
    assert agg.metric == "usability rate (%, OP)"
    assert agg.score == pytest.approx(100 * 2 / 4) and agg.n == 4 and agg.n_unscored == 2
    assert agg.extra["other_protocol"]["protocol"] == "reference"
    assert agg.extra["other_protocol"]["score"] == pytest.approx(100 * 2 / 6)
    assert agg.extra["n_no_valid_score"] == 1
    assert agg.extra["mean_score"] == pytest.approx((4.5 + 3.0 + 5.0 + 2.0) / 4)
    assert agg.breakdown["category"]["MK"].score == pytest.approx(100 * 2 / 3)
    assert agg.breakdown["category"]["MK"].metrics["other_rate"] == pytest.approx(50.0)
    assert agg.breakdown["category"]["MR"].score == 0.0
    lo, hi = agg.ci95
    assert 0 < lo < 50 < hi < 100
    assert agg.extra["judge_runs"] == 3
    # reference (Aggregate.py): every question in the denominator, no valid score = unusable.
    ref = bench.aggregate(mk + mr, grades, RunOptions())
    assert ref.score == pytest.approx(100 * 2 / 6) and ref.n == 6 and ref.n_unscored == 2
    assert ref.breakdown["category"]["MK"].score == pytest.approx(50.0)
    assert ref.breakdown["category"]["MR"].score == 0.0 and ref.breakdown["category"]["MR"].n == 2
    assert ref.extra["other_protocol"] == {
        "protocol": "grandrounds",
        "score": pytest.approx(100 * 2 / 4),
        "differs": ref.extra["other_protocol"]["differs"],
    }
    assert ref.breakdown["category"]["MK"].metrics["other_rate"] == pytest.approx(100 * 2 / 3)


def test_judge_runs_option(samples):
    bench = LLMEvalMed()
    assert bench.grader(RunOptions()).runs == 3
    assert bench.grader(RunOptions(judge_runs=5)).runs == 5
    assert LLMEvalMed(judge_runs=1).grader(RunOptions()).runs == 1
    assert set(bench.grader(RunOptions()).template_hashes()) == {"mk", "mlu", "mr", "mse", "mtg"}


def test_malformed_turn_is_a_data_error(tmp_path):
    from grandrounds.core.errors import DataError

    bad = tmp_path / "dataset.json"
    bad.write_text(
        '{"医疗知识": [{"problem": "问", "groupCode": 1, "round": 2, "sanswer": "答"}]}',
        encoding="utf-8",
    )
    with pytest.raises(DataError, match=r"医疗知识\[0\].*round 2 follows round 0"):
        LLMEvalMed().load(bad)
    bad.write_text('{"医疗知识": [{"groupCode": 1, "round": 1}]}', encoding="utf-8")
    with pytest.raises(DataError, match="missing 'problem'"):
        LLMEvalMed().load(bad)


def test_end_to_end_through_runner_and_loopback_server(tmp_path, shared_data):
    """Real runner, real HTTP, reference protocol: multi-turn history reaches the model, the judge sees one turn."""
    import json

    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer

    real = json.loads(shared_data("llmeval-med", "dataset.json").read_text(encoding="utf-8"))
    subset = {"医疗知识": [t for t in real["医疗知识"] if t["groupCode"] in (5, 7)]}  # 1 + 3 turns
    data = tmp_path / "dataset.json"
    data.write_text(json.dumps(subset, ensure_ascii=False), encoding="utf-8")

    def rule(body):
        msgs = body["messages"]
        user = msgs[-1]["content"]
        if (
            "## 人设和任务设定" in user
        ):  # the official MK prompt; judge: 5 for answers to first turns, 3 for later
            assert "答案#" in user and "答案#1" not in user.split("### 学生的回答Response")[0]
            return (
                '{"判断依据": "ok", "得分": "[5]"}'
                if "答案#0" in user
                else '{"判断依据": "一般", "得分": "[3]"}'
            )
        earlier = [m["content"] for m in msgs if m["role"] == "assistant"]
        assert earlier == [f"答案#{i}" for i in range(len(earlier))]  # own answers, in order
        return f"答案#{len(earlier)}"

    with LoopbackServer(rule, keep_bodies=True) as srv:
        cfg = RunConfig(
            benchmark="llmeval-med",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
        bodies = srv.stats.bodies
    res = out.result
    assert res.n == 4 and res.n_unscored == 0
    assert res.score == pytest.approx(50.0)  # round-1 answers usable (5), rounds 2-3 not (3)
    third = [b for b in bodies if b["model"] == "cand" and len(b["messages"]) == 6]
    assert len(third) == 1 and third[0]["messages"][0]["content"] == "You are a helpful assistant."
    assert sum(1 for b in bodies if b["model"] == "judge") == 12  # 4 answers x 3 runs

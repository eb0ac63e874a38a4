"""The judge engine: re-asks, failed calls, panels, re-grading, reply parsing, compare_modes."""

from __future__ import annotations

import asyncio
import json

import pytest

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Grade, Message, Response, Verdict, Vote
from grandrounds.graders.base import GradeContext
from grandrounds.graders.healthbench_grader import parse_batched
from grandrounds.graders.judge_json import json_values, parse_criteria_met
from grandrounds.graders.judging import (
    Ask,
    Reading,
    ask,
    compare_modes,
    judge_criteria,
    majority,
    votes_of,
)
from grandrounds.graders.medeq_grader import parse_medeq_reply


class ScriptedJudge:
    """A fake judge: ``replies[(criterion, attempt)]`` or ``default``; ``None`` text = failed call."""

    def __init__(
        self, name: str, replies: dict | None = None, default: str | None = "garbage"
    ) -> None:
        self.name = name
        self.replies = replies or {}
        self.default = default
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        cid = messages[-1].content
        self.calls.append((cid, attempt))
        text = self.replies.get((cid, attempt), self.replies.get(cid, self.default))
        key = f"{self.name}:{cid}:{attempt}"
        if text is None:
            return Response(key=key, error="HTTP 500")
        return Response(key=key, text=text)


YES = '```json\n{"explanation": "ok", "criteria_met": true}\n```'
NO = '{"explanation": "no", "criteria_met": false}'


def per_criterion(_judge, ids):
    return [Ask((c,), lambda _p, c=c: (Message("user", c),), _single) for c in ids]


def _single(text, pending):
    met, expl = parse_criteria_met(text)
    return {pending[0]: Reading("met" if met else "unmet", expl)} if met is not None else {}


async def ask_judge(judge, a, first_attempt, max_reask):
    """One judge's votes on one ask, as the engine forms them."""
    return votes_of(judge.name, a, await ask(judge, a, first_attempt, max_reask), {})


def judge_rubric(ids, make_asks, ctx):
    return judge_criteria(ids, make_asks, ctx)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize(
    "votes, expected",
    [
        (["met"], "met"),
        (["unmet"], "unmet"),
        (["unknown"], "unknown"),
        (["met", "unmet"], "unknown"),
        (["met", "unknown"], "met"),
        (["met", "met", "unmet"], "met"),
        (["unmet", "unknown", "unmet", "met"], "unmet"),
        ([], "unknown"),
    ],
)
def test_majority(votes, expected):
    assert majority(votes) == expected


def test_reask_until_readable_then_met():
    judge = ScriptedJudge("j", {("a", 0): "I think yes", ("a", 1): YES})
    votes = run(ask_judge(judge, per_criterion(0, ["a"])[0], 0, 2))
    assert votes["a"].status == "met"
    assert votes["a"].attempts == 2
    assert votes["a"].keys == ("j:a:0", "j:a:1")
    assert judge.calls == [("a", 0), ("a", 1)]


def test_garbage_becomes_unknown_after_max_reask_with_raw_kept():
    judge = ScriptedJudge("j", default="no json here")
    votes = run(ask_judge(judge, per_criterion(0, ["a"])[0], 0, 2))
    assert votes["a"].status == "unknown"
    assert votes["a"].raw == "no json here"
    assert [a for _, a in judge.calls] == [0, 1, 2]


def test_failed_call_is_unknown_not_unmet_and_not_reasked():
    judge = ScriptedJudge("j", default=None)
    votes = run(ask_judge(judge, per_criterion(0, ["a"])[0], 0, 2))
    assert votes["a"].status == "unknown"
    assert "HTTP 500" in votes["a"].explanation
    assert len(judge.calls) == 1


def test_panel_majority_records_votes():
    judges = (
        ScriptedJudge("j1", {"a": YES, "b": YES, "c": YES}),
        ScriptedJudge("j2", {"a": YES, "b": NO, "c": "???"}),
        ScriptedJudge("j3", {"a": NO, "b": NO, "c": "???"}),
    )
    ctx = GradeContext(judges=judges, max_reask=0)
    verdicts = run(judge_rubric(["a", "b", "c"], per_criterion, ctx))
    by = {v.criterion_id: v for v in verdicts}
    assert (by["a"].status, by["a"].statuses) == ("met", ("met", "met", "unmet"))
    assert (by["b"].status, by["b"].statuses) == ("unmet", ("met", "unmet", "unmet"))
    assert (by["c"].status, by["c"].statuses) == ("met", ("met", "unknown", "unknown"))
    assert set(by["a"].judge_keys) == {"j1:a:0", "j2:a:0", "j3:a:0"}


def test_panel_tie_is_unknown():
    judges = (ScriptedJudge("j1", {"a": YES}), ScriptedJudge("j2", {"a": NO}))
    (v,) = run(judge_rubric(["a"], per_criterion, GradeContext(judges=judges)))
    assert v.status == "unknown" and v.statuses == ("met", "unmet")


def test_regrade_only_unknown_keeps_known_and_continues_attempts():
    first = ScriptedJudge("j", {"a": YES, "b": "garbage"})
    ctx = GradeContext(judges=(first,), max_reask=1)
    verdicts = run(judge_rubric(["a", "b"], per_criterion, ctx))
    assert [v.status for v in verdicts] == ["met", "unknown"]
    assert verdicts[1].attempts == 2
    previous = Grade(sample_id="s", value=1.0, verdicts=verdicts)

    second = ScriptedJudge("j", {"a": NO, "b": NO})
    ctx2 = GradeContext(judges=(second,), previous=previous, only_unknown=True, max_reask=1)
    again = run(judge_rubric(["a", "b"], per_criterion, ctx2))
    assert second.calls == [("b", 2)]  # only the unknown one, attempt numbers after 0 and 1
    assert again[0] == verdicts[0]  # known verdict kept as is
    assert again[1].status == "unmet" and again[1].attempts == 3
    assert again[1].judge_keys == ("j:b:0", "j:b:1", "j:b:2")


def test_regrade_panel_reasks_only_the_judge_whose_vote_was_unknown():
    votes = (
        Vote(judge="j1", status="met", attempts=1, keys=("k1",)),
        Vote(judge="j2", status="unknown", attempts=1, keys=("k2",)),
    )
    prev = Verdict("a", "unknown", votes=votes)
    j1, j2 = ScriptedJudge("j1", {"a": NO}), ScriptedJudge("j2", {"a": YES})
    ctx = GradeContext(
        judges=(j1, j2),
        previous=Grade(sample_id="s", value=None, verdicts=(prev,)),
        only_unknown=True,
    )
    (v,) = run(judge_rubric(["a"], per_criterion, ctx))
    assert j1.calls == [] and j2.calls == [("a", 1)]
    assert v.status == "met" and v.statuses == ("met", "met")
    assert v.judge_keys == (
        "k1",
        "k2",
        "j2:a:1",
    )  # the kept vote keeps its call; the new one adds its own


def test_no_judge_is_a_config_error():
    with pytest.raises(ConfigError):
        run(judge_rubric(["a"], per_criterion, GradeContext()))


# ---- reply parsing tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, met",
    [
        ('```json\n{"explanation": "x", "criteria_met": true}\n```', True),
        ('{"explanation": "x", "criteria_met": false}', False),
        (
            '<think>maybe {"criteria_met": true}</think>\n```json\n{"criteria_met": false}\n```',
            False,
        ),
        (
            'Sure! Here is my grade:\n{"explanation": "fine", "criteria_met": "true"}\nHope it helps.',
            True,
        ),
        ('{"explanation": "不符合", "criteria_met": "false"}', False),
        ("{“explanation”：“回答提到了”，“criteria_met”：true}", True),
        ('{"explanation": "x", "criteria_met": "maybe"}', None),
        ("criteria_met: true", None),
        ("", None),
    ],
)
def test_per_criterion_reply_table(reply, met):
    assert parse_criteria_met(reply)[0] is met


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            '```json\n{"0": {"explanation": "a", "criteria_met": true}, "1": {"criteria_met": false}}\n```',
            {"0": True, "1": False},
        ),
        ('{"0": true, "1": "false", "2": "unsure"}', {"0": True, "1": False}),
        (
            'Verdicts:\n[{"id": 0, "criteria_met": "true"}, {"id": "1", "met": false}]',
            {"0": True, "1": False},
        ),
        ('{"verdicts": [{"id": "2", "criteria_met": true}]}', {"2": True}),
        ('{"id 0": {"criteria_met": true}, "criterion #1": false}', {"0": True, "1": False}),
        ('<think>{"0": false}</think>{"0": true}', {"0": True}),
        ("{“0”：{“criteria_met”：true}}", {"0": True}),
        ("no json at all", {}),
        ('{"7": true}', {}),  # an id that was not asked about is ignored
    ],
)
def test_batched_reply_table(reply, expected):
    got = parse_batched(reply, ["0", "1", "2"])
    assert {k: v.status == "met" for k, v in got.items()} == expected


def test_json_values_finds_objects_and_arrays_in_prose():
    assert json_values('a [1, 2] b {"x": 1} c') == [[1, 2], {"x": 1}]


@pytest.mark.parametrize(
    "line, key, met",
    [
        (
            '加分项_1_"疾病情绪即时响应":1 | Reason: 开头即共情 | 给出具体出现的内容: "我理解"',
            "加分项_1",
            True,
        ),
        ('加分项_2_"诊疗信息引导提问"：0 ｜ Reason：没有追问', "加分项_2", False),
        ("加分项＿３＿“暗示线索”：１｜Reason：有", "加分项_3", True),
        ('加分项_4_"混合情绪":0', "加分项_4", False),  # Reason part missing
        ('加分项_5_"a:b": "1" | 理由: 引号里的 0/1', "加分项_5", True),
        ('- 减分项_1_"医疗沟通失言情境":1 | Reason: 有失言', "减分项_1", True),
    ],
)
def test_medeq_line_table(line, key, met):
    assert parse_medeq_reply(line)[key][0] is met


def test_medeq_reply_ignores_unreadable_values_and_think_blocks():
    reply = '<think>加分项_1_"x":0</think>\n加分项_1_"x":1 | Reason: 好\n加分项_2_"y":2 | Reason: 1 分\n加分项_3_"z":是'
    assert parse_medeq_reply(reply) == {"加分项_1": (True, "好")}


# ---- compare_modes ----------------------------------------------------------------------------


def _grade(sid, statuses):
    return Grade(
        sample_id=sid, value=0.5, verdicts=tuple(Verdict(str(i), s) for i, s in enumerate(statuses))
    )


def test_compare_modes_counts_only_criteria_known_in_both():
    a = [_grade("s1", ["met", "unmet", "unknown", "met"]), _grade("s2", ["met", "met"])]
    b = [
        _grade("s1", ["met", "met", "met", "unknown"]),
        _grade("s2", ["met", "met"]),
        _grade("s3", ["unmet"]),
    ]
    cmp = compare_modes(a, b)
    # s1: 0 agree, 1 disagree, 2 only-b, 3 only-a; s2: 2 agree; s3 only in b
    assert (cmp.n_compared, cmp.n_agree, cmp.only_a_known, cmp.only_b_known) == (4, 3, 1, 2)
    assert cmp.agreement == pytest.approx(0.75)
    print(f"\ncompare_modes: {json.dumps(cmp.__dict__)} agreement={cmp.agreement}")


def test_compare_modes_with_nothing_in_common_has_no_agreement():
    assert compare_modes([_grade("s", ["unknown"])], [_grade("s", ["met"])]).agreement is None

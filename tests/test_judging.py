"""The judge engine (graders/judging.py) and JSON extraction (graders/judge_json.py), in isolation.

Fake judges here read a tiny protocol so every expected value can be worked out by hand: a
single-item prompt is the item id and the reply is ``met`` / ``unmet`` (anything else is
unreadable); a batched prompt is the pending ids joined by commas and the reply is
``id=status;id=status``. The judge is a function of (prompt, attempt), so re-asks with other
attempt numbers can answer differently, as a real judge with a cache-busting attempt would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial

import pytest

from grandrounds.core.records import Grade, Message, Response, Verdict, Vote
from grandrounds.graders.base import GradeContext
from grandrounds.graders.judge_json import (
    as_bool,
    explanation_text,
    extract_json_array,
    extract_json_object,
    json_values,
    parse_criteria_met,
)
from grandrounds.graders.judging import (
    Ask,
    Reading,
    Reply,
    ask,
    compare_modes,
    decide,
    judge_criteria,
    judge_keys,
    majority,
    panel,
    votes_of,
)
from grandrounds.scoring import gaps as gaps_scoring

STATUSES = ("met", "unmet")


class FnJudge:
    """A fake judge: ``reply(prompt, attempt)`` gives the text, None for a failed call."""

    def __init__(self, name: str, reply: Callable[[str, int], str | None]) -> None:
        self.name = name
        self.reply = reply
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response:
        prompt = messages[-1].content
        self.calls.append((prompt, attempt))
        text = self.reply(prompt, attempt)
        key = f"{self.name}|{prompt}|{attempt}"
        if text is None:
            return Response(key=key, error="HTTP 503: down")
        return Response(key=key, text=text)


def table(
    answers: dict[tuple[str, int] | str, str | None], default: str | None = "garbage"
) -> Callable[[str, int], str | None]:
    """reply(prompt, attempt) from ``answers[(prompt, attempt)]``, else ``answers[prompt]``, else default."""
    return lambda prompt, attempt: answers.get((prompt, attempt), answers.get(prompt, default))


def read_single(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    return {pending[0]: Reading(text, f"because {text}")} if text in STATUSES else {}


def read_batched(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    out: dict[str, Reading] = {}
    for part in text.split(";"):
        item, _, status = part.partition("=")
        if status in STATUSES:
            out[item] = Reading(status, f"{item} {status}")
    return out


def single_asks(_judge: int, ids: Sequence[str]) -> list[Ask]:
    return [Ask((i,), lambda _p, i=i: (Message("user", i),), read_single) for i in ids]


def batched_ask(
    ids: Sequence[str], first_attempt: int | None = None, built: list | None = None
) -> Ask:
    def build(pending: Sequence[str]) -> tuple[Message, ...]:
        if built is not None:
            built.append(tuple(pending))
        return (Message("user", ",".join(pending)),)

    return Ask(tuple(ids), build, read_batched, first_attempt)


def run(coro):
    return asyncio.run(coro)


# ---- ask ---------------------------------------------------------------------------------------


def test_ask_reasks_only_the_ids_still_unread_with_the_next_attempt_number():
    replies = {("a,b,c", 0): "a=met", ("b,c", 1): "b=unmet;c=maybe", ("c", 2): "c=met"}
    judge = FnJudge("j", table(replies))
    built: list = []
    reply = run(ask(judge, batched_ask(["a", "b", "c"], built=built), 0, 2))
    assert built == [("a", "b", "c"), ("b", "c"), ("c",)]
    assert judge.calls == [("a,b,c", 0), ("b,c", 1), ("c", 2)]
    assert {k: v[0].status for k, v in reply.read.items()} == {"a": "met", "b": "unmet", "c": "met"}
    # each id keeps the reply it was read from, not the last one
    assert {k: v[1] for k, v in reply.read.items()} == {
        "a": "a=met",
        "b": "b=unmet;c=maybe",
        "c": "c=met",
    }
    assert reply.raw == "c=met" and reply.next_attempt == 3 and reply.error is None
    assert reply.keys == ("j|a,b,c|0", "j|b,c|1", "j|c|2")


@pytest.mark.parametrize("first, max_reask", [(0, 0), (0, 1), (0, 3), (4, 2), (7, 0)])
def test_ask_is_bounded_by_max_reask(first, max_reask):
    judge = FnJudge("j", table({}, default="no idea"))
    reply = run(ask(judge, batched_ask(["x"]), first, max_reask))
    assert [a for _, a in judge.calls] == list(range(first, first + max_reask + 1))
    assert reply.read == {} and reply.raw == "no idea"
    assert reply.next_attempt == first + max_reask + 1
    assert len(reply.keys) == max_reask + 1


def test_ask_stops_as_soon_as_everything_is_read():
    judge = FnJudge("j", table({"p,q": "p=met;q=unmet"}))
    reply = run(ask(judge, batched_ask(["p", "q"]), 5, 10))
    assert judge.calls == [("p,q", 5)]
    assert reply.next_attempt == 6 and reply.keys == ("j|p,q|5",)


def test_failed_call_stops_at_once_and_keeps_the_error_and_what_was_read():
    judge = FnJudge("j", table({("a,b", 0): "a=unmet", ("b", 1): None, ("b", 2): "b=met"}))
    reply = run(ask(judge, batched_ask(["a", "b"]), 0, 5))
    assert judge.calls == [("a,b", 0), ("b", 1)], "no re-ask after a failed call"
    assert reply.error == "judge call failed: HTTP 503: down"
    assert set(reply.read) == {"a"} and reply.read["a"][0].status == "unmet"
    assert reply.raw == "a=unmet", "the last readable reply, not the failed call"
    assert reply.next_attempt == 2 and reply.keys == ("j|a,b|0", "j|b|1")


def test_a_response_with_neither_text_nor_error_counts_as_failed():
    class Mute:
        name = "mute"

        async def __call__(self, messages, *, attempt=0):
            return Response(key=f"m{attempt}")

    reply = run(ask(Mute(), batched_ask(["a"]), 0, 3))
    assert reply.error == "judge call failed: no text" and reply.keys == ("m0",)


def test_parser_values_for_other_ids_or_none_are_ignored_and_first_reading_wins():
    def parse(text: str, pending: Sequence[str]) -> dict:
        got = read_batched(text, pending)
        return got | {"stranger": Reading("met"), "b": got.get("b")}  # b: None when unread

    a = Ask(("a", "b"), lambda p: (Message("user", ",".join(p)),), parse)
    judge = FnJudge("j", table({("a,b", 0): "a=met", ("b", 1): "a=unmet;b=unmet"}))
    reply = run(ask(judge, a, 0, 2))
    assert set(reply.read) == {"a", "b"}
    assert reply.read["a"] == (Reading("met", "a met"), "a=met"), (
        "a read at attempt 0 is not overwritten"
    )
    assert reply.read["b"][0].status == "unmet"
    assert judge.calls == [("a,b", 0), ("b", 1)]


# ---- votes_of ----------------------------------------------------------------------------------


def test_votes_accumulate_attempts_and_keys_across_gradings():
    a = batched_ask(["a", "b", "c"])
    reply = Reply(
        read={"a": (Reading("met", "why a", 0.5), "raw-a")},
        raw="raw-last",
        next_attempt=5,
        keys=("k3", "k4"),
    )
    prior = {
        "a": Vote(judge="j", status="unknown", attempts=3, keys=("k0", "k1", "k2")),
        "b": Vote(judge="j", status="unknown", attempts=1, keys=("q0",)),
    }
    votes = votes_of("j", a, reply, prior, run=2)
    assert votes["a"] == Vote(
        judge="j",
        status="met",
        score=0.5,
        explanation="why a",
        raw="raw-a",
        attempts=5,
        keys=("k0", "k1", "k2", "k3", "k4"),
        run=2,
    )
    assert votes["b"] == Vote(
        judge="j",
        status="unknown",
        explanation="judge reply could not be read",
        raw="raw-last",
        attempts=3,
        keys=("q0", "k3", "k4"),
        run=2,
    )
    assert (
        votes["c"].attempts == 2
        and votes["c"].keys == ("k3", "k4")
        and votes["c"].raw == "raw-last"
    )


def test_votes_of_a_failed_call_carry_the_error_and_no_raw():
    reply = Reply(
        read={},
        raw="an earlier unreadable reply",
        next_attempt=2,
        keys=("k0", "k1"),
        error="judge call failed: HTTP 500",
    )
    (vote,) = votes_of("j", batched_ask(["a"]), reply, {}).values()
    assert (vote.status, vote.explanation, vote.error, vote.raw) == (
        "unknown",
        "judge call failed: HTTP 500",
        "judge call failed: HTTP 500",
        "",
    )
    assert vote.attempts == 2


@pytest.mark.parametrize("value", ["met", True, 1.0, {"status": "met"}])
def test_votes_of_needs_a_reading(value):
    reply = Reply(read={"a": (value, "raw")}, raw="raw", next_attempt=1, keys=("k",))
    with pytest.raises(TypeError, match=type(value).__name__):
        votes_of("j", batched_ask(["a"]), reply, {})


def test_free_form_values_pass_through_ask_untouched():
    a = Ask(
        ("n",),
        lambda _p: (Message("user", "n"),),
        lambda text, pending: {"n": int(text)} if text.isdigit() else {},
    )
    reply = run(ask(FnJudge("j", table({("n", 0): "x", ("n", 1): "42"})), a, 0, 1))
    assert reply.read == {"n": (42, "42")}


# ---- majority / decide -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statuses, want",
    [
        (("met", "met", "unknown", "unmet"), "met"),
        (("unknown", "unknown", "unmet"), "unmet"),
        (("unknown", "unknown"), "unknown"),
        (("met", "unmet", "unknown", "unknown", "unknown"), "unknown"),
        (("unmet", "met", "unmet", "met"), "unknown"),
        (("unmet", "met", "unmet", "met", "met"), "met"),
        (("review_needed", "met"), "met"),  # anything but met/unmet is not a vote
    ],
)
def test_majority_table(statuses, want):
    assert majority(statuses) == want


def _v(status: str, expl: str = "", judge: str = "j") -> Vote:
    return Vote(judge=judge, status=status, explanation=expl)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "votes, rule, want_status, want_expl",
    [
        ([("met", "m1"), ("unmet", "u1"), ("met", "m2")], majority, "met", "m1"),
        (
            [("unmet", ""), ("met", "m"), ("unmet", "u2")],
            majority,
            "unmet",
            "u2",
        ),  # first non-empty of the deciders
        (
            [("unmet", "u"), ("met", "m")],
            majority,
            "unknown",
            "u",
        ),  # tie: first explanation of any vote
        (
            [("unknown", ""), ("unknown", "judge call failed")],
            majority,
            "unknown",
            "judge call failed",
        ),
        ([], majority, "unknown", ""),
        (
            [("met", "m"), ("unknown", "")],
            partial(gaps_scoring.vote, min_valid=2),
            "unknown",
            "m",
        ),  # review_needed
        (
            [("met", "m"), ("met", "n"), ("unmet", "u")],
            partial(gaps_scoring.vote, min_valid=2),
            "met",
            "m",
        ),
        (
            [("unmet", "x")],
            lambda s: "met",
            "met",
            "",
        ),  # the rule decides; no met vote to explain it
        ([("met", "x")], lambda s: "bogus", "unknown", "x"),
    ],
)
def test_decide_table(votes, rule, want_status, want_expl):
    vs = [_v(s, e, f"j{i}") for i, (s, e) in enumerate(votes)]
    verdict = decide("c7", vs, rule)
    assert (verdict.criterion_id, verdict.status, verdict.explanation) == (
        "c7",
        want_status,
        want_expl,
    )
    assert verdict.votes == tuple(vs)


# ---- panel -------------------------------------------------------------------------------------


def test_panel_asks_every_judge_and_keeps_panel_order():
    judges = (
        FnJudge("j1", table({"a": "met", "b": "met"})),
        FnJudge("j2", table({"a": "unmet", "b": "nonsense"})),
        FnJudge("j3", table({"a": None, "b": "unmet"})),
    )
    votes = run(panel(["a", "b"], single_asks, GradeContext(judges=judges, max_reask=1)))
    assert list(votes) == ["a", "b"]
    assert [v.judge for v in votes["a"]] == ["j1", "j2", "j3"]
    assert [v.status for v in votes["a"]] == ["met", "unmet", "unknown"]
    assert [v.status for v in votes["b"]] == ["met", "unknown", "unmet"]
    assert votes["a"][2].error == "judge call failed: HTTP 503: down"
    assert votes["b"][1].attempts == 2 and votes["b"][1].raw == "nonsense"
    assert sorted(judges[1].calls) == [("a", 0), ("b", 0), ("b", 1)]
    assert judges[2].calls.count(("a", 0)) == 1 and ("a", 1) not in judges[2].calls


def test_panel_with_previous_asks_a_judge_only_about_its_missing_or_unknown_votes():
    previous = {
        "a": (
            Vote(judge="j1", status="met", attempts=1, keys=("old-a1",)),
            Vote(judge="j2", status="unknown", attempts=3, keys=("x", "y", "z")),
        ),
        "b": (
            Vote(judge="j1", status="unmet", attempts=1, keys=("old-b1",)),
        ),  # j2's vote on b is missing
    }
    j1 = FnJudge("j1", table({}, default="met"))
    j2 = FnJudge("j2", table({"a": "unmet", "b": "met"}))
    make_calls: list = []

    def make_asks(j: int, ids: Sequence[str]) -> list[Ask]:
        make_calls.append((j, tuple(ids)))
        return single_asks(j, ids)

    votes = run(panel(["a", "b"], make_asks, GradeContext(judges=(j1, j2)), previous))
    assert j1.calls == [] and make_calls == [(1, ("a", "b"))]
    assert sorted(j2.calls) == [("a", 3), ("b", 0)], "a continues after attempts 0-2; b starts at 0"
    assert votes["a"][0] is previous["a"][0] and votes["b"][0] is previous["b"][0]
    assert votes["a"][1].status == "unmet" and votes["a"][1].attempts == 4
    assert votes["a"][1].keys == ("x", "y", "z", "j2|a|3")
    assert votes["b"][1].status == "met" and votes["b"][1].attempts == 1


def test_panel_batched_ask_starts_after_the_most_attempts_of_its_items():
    previous = {
        "a": (Vote(judge="j", status="unknown", attempts=1),),
        "b": (Vote(judge="j", status="unknown", attempts=4),),
    }
    judge = FnJudge("j", table({}, default="a=met;b=unmet"))
    votes = run(
        panel(
            ["a", "b"], lambda _j, ids: [batched_ask(ids)], GradeContext(judges=(judge,)), previous
        )
    )
    assert judge.calls == [("a,b", 4)]
    assert (votes["a"][0].attempts, votes["b"][0].attempts) == (2, 5)


def test_panel_respects_first_attempt_over_previous_attempts():
    previous = {"r": (Vote(judge="j", status="unknown", attempts=2, keys=("k0", "k1")),)}
    judge = FnJudge("j", table({("r", 10): "garbage", ("r", 11): "met"}))
    asks = lambda _j, ids: [
        Ask(("r",), lambda _p: (Message("user", "r"),), read_single, first_attempt=10)
    ]
    votes = run(panel(["r"], asks, GradeContext(judges=(judge,), max_reask=1), previous))
    assert judge.calls == [("r", 10), ("r", 11)]
    (vote,) = votes["r"]
    assert (
        vote.status == "met"
        and vote.attempts == 4
        and vote.keys == ("k0", "k1", "j|r|10", "j|r|11")
    )


def test_panel_marks_an_item_no_ask_covers_as_not_asked():
    judge = FnJudge("j", table({}, default="met"))
    votes = run(
        panel(
            ["a", "b"],
            lambda _j, ids: single_asks(_j, [i for i in ids if i != "b"]),
            GradeContext(judges=(judge,)),
        )
    )
    assert votes["a"][0].status == "met"
    assert votes["b"] == (Vote(judge="j", status="unknown", explanation="not asked"),)


# ---- judge_criteria ----------------------------------------------------------------------------


def _three_judges(
    rows: dict[str, tuple[str | None, str | None, str | None]],
) -> tuple[FnJudge, ...]:
    """Judge i answers rows[item][i] for every attempt."""
    return tuple(FnJudge(f"j{i}", lambda p, a, i=i: rows[p][i]) for i in range(3))


def test_judge_criteria_with_gaps_vote_keeps_known_verdicts_and_known_votes_on_regrade():
    gaps_rule = partial(gaps_scoring.vote, min_valid=2)
    first = _three_judges(
        {"x": ("met", "met", "??"), "y": ("met", "??", "??"), "z": ("unmet", "met", "??")}
    )
    ctx = GradeContext(judges=first, max_reask=0)
    verdicts = run(judge_criteria(["x", "y", "z"], single_asks, ctx, gaps_rule))
    # x: two valid met -> met; y: one valid (< min_valid) -> review; z: 1-1 tie -> review
    assert [v.status for v in verdicts] == ["met", "unknown", "unknown"]
    assert verdicts[2].statuses == ("unmet", "met", "unknown")

    again = _three_judges(
        {"x": ("unmet",) * 3, "y": ("unmet", "met", "unmet"), "z": ("met", "met", "unmet")}
    )
    ctx2 = GradeContext(
        judges=again,
        previous=Grade(sample_id="s", value=None, verdicts=verdicts),
        only_unknown=True,
        max_reask=0,
    )
    regraded = run(judge_criteria(["x", "y", "z"], single_asks, ctx2, gaps_rule))
    assert again[0].calls == [], "j0 had a known vote on every unknown verdict"
    assert sorted(again[1].calls) == [("y", 1)]
    assert sorted(again[2].calls) == [("y", 1), ("z", 1)]
    assert regraded[0] == verdicts[0], "a known verdict is kept as it was"
    # y: j0 met (kept), j1 met, j2 unmet -> met; z: j0 unmet, j1 met (kept), j2 unmet -> unmet
    assert (regraded[1].status, regraded[1].statuses) == ("met", ("met", "met", "unmet"))
    assert (regraded[2].status, regraded[2].statuses) == ("unmet", ("unmet", "met", "unmet"))
    assert regraded[1].votes[0] == verdicts[1].votes[0]


def test_judge_criteria_ignores_previous_unless_only_unknown():
    prev = Grade(
        sample_id="s",
        value=1.0,
        verdicts=(Verdict("a", "met", votes=(Vote(judge="j", status="met", attempts=1),)),),
    )
    judge = FnJudge("j", table({"a": "unmet"}))
    (v,) = run(judge_criteria(["a"], single_asks, GradeContext(judges=(judge,), previous=prev)))
    assert judge.calls == [("a", 0)] and v.status == "unmet" and v.votes[0].attempts == 1


def test_judge_criteria_with_nothing_unknown_asks_nobody_and_keeps_order():
    verdicts = (Verdict("b", "unmet"), Verdict("a", "met"))
    judge = FnJudge("j", table({}))
    ctx = GradeContext(
        judges=(judge,),
        previous=Grade(sample_id="s", value=0.5, verdicts=verdicts),
        only_unknown=True,
    )
    got = run(judge_criteria(["a", "b"], single_asks, ctx))
    assert judge.calls == [] and got == (verdicts[1], verdicts[0])


@pytest.mark.parametrize(
    "min_valid, replies, want",
    [
        (1, ("met",), "met"),
        (1, ("unmet",), "unmet"),
        (2, ("met",), "unknown"),  # one judge can never reach two valid votes
        (1, ("??",), "unknown"),
        (2, ("met", "unmet"), "unknown"),
        (2, ("unmet", "unmet"), "unmet"),
    ],
)
def test_judge_criteria_gaps_min_valid(min_valid, replies, want):
    judges = tuple(FnJudge(f"j{i}", lambda p, a, r=r: r) for i, r in enumerate(replies))
    (v,) = run(
        judge_criteria(
            ["c"],
            single_asks,
            GradeContext(judges=judges, max_reask=0),
            partial(gaps_scoring.vote, min_valid=min_valid),
        )
    )
    assert v.status == want


# ---- judge_keys / compare_modes ----------------------------------------------------------------


def test_judge_keys_in_first_use_order_without_repeats():
    verdicts = (
        Verdict(
            "a",
            "met",
            votes=(
                Vote(judge="j1", status="met", keys=("k1", "k2")),
                Vote(judge="j2", status="met", keys=("k3",)),
            ),
        ),
        Verdict("b", "unmet", votes=(Vote(judge="j1", status="unmet", keys=("k2", "k4")),)),
    )
    votes = (
        Vote(judge="j1", status="met", keys=("k5", "k1")),
        Vote(judge="j2", status="met", keys=("k6",)),
    )
    assert judge_keys(verdicts, votes) == ("k1", "k2", "k3", "k4", "k5", "k6")
    assert judge_keys(()) == ()


def _g(sid: str, statuses: dict[str, str]) -> Grade:
    return Grade(
        sample_id=sid, value=None, verdicts=tuple(Verdict(c, s) for c, s in statuses.items())
    )  # type: ignore[arg-type]


def test_compare_modes_matches_by_ids_not_positions():
    a = [_g("s1", {"0": "met", "1": "unmet", "2": "met"}), _g("s2", {"0": "unknown", "5": "met"})]
    b = [
        _g("s2", {"5": "unmet", "0": "met", "9": "unknown"}),
        _g("s1", {"2": "met", "0": "met"}),
        _g("s3", {"0": "unknown"}),
    ]
    cmp = compare_modes(a, b)
    # compared: s1/0 agree, s1/2 agree, s2/5 disagree; only a: s1/1 (missing in b); only b: s2/0
    assert (cmp.n_compared, cmp.n_agree, cmp.only_a_known, cmp.only_b_known) == (3, 2, 1, 1)
    assert cmp.agreement == pytest.approx(2 / 3)
    swapped = compare_modes(b, a)
    assert (swapped.n_compared, swapped.n_agree, swapped.only_a_known, swapped.only_b_known) == (
        3,
        2,
        1,
        1,
    )


def test_compare_modes_of_nothing():
    cmp = compare_modes([], [])
    assert (cmp.n_compared, cmp.agreement) == (0, None)


# ---- judge_json --------------------------------------------------------------------------------


def test_json_values_puts_fenced_blocks_first_in_their_order():
    reply = 'I think {"prose": 1} is right.\n```json\n{"fenced": 2}\n```\nand\n```\n[3]\n```'
    assert json_values(reply) == [{"fenced": 2}, [3], {"prose": 1}]


def test_json_values_returns_outermost_values_only():
    assert json_values('{"outer": {"inner": [1, {"x": 2}]}} then [{"a": 1}, {"b": 2}]') == [
        {"outer": {"inner": [1, {"x": 2}]}},
        [{"a": 1}, {"b": 2}],
    ]


def test_json_values_inside_an_unclosed_object_finds_the_valid_inner_one():
    assert json_values('{"verdict": {"criteria_met": true}') == [{"criteria_met": True}]


@pytest.mark.parametrize(
    "reply, want",
    [
        (
            "{“criteria_met”：true，“explanation”：“回答提到了”}",
            {"criteria_met": True, "explanation": "回答提到了"},
        ),
        ('｛"得分"：［４］｝', {"得分": [4]}),
        ('结果：{"a"：1，"b"：2}。', {"a": 1, "b": 2}),
    ],
)
def test_json_values_folds_full_width_punctuation(reply, want):
    assert want in json_values(reply)


def test_json_values_scans_an_ascii_reply_once_and_strips_reasoning():
    assert json_values('{"a": 1}') == [{"a": 1}]
    assert json_values('<think>{"draft": true}</think>{"final": true}') == [{"final": True}]
    assert json_values("") == [] and json_values(None) == [] and json_values("no json {here") == []


@pytest.mark.parametrize(
    "reply, want",
    [
        ('{"a": 1} then [1, 2] and [3]', [1, 2]),
        ("prose [9]\n```json\n[1]\n```", [1]),
        ("[“是”，“否”]", ["是", "否"]),
        ('{"only": "objects"}', None),
        ("nothing", None),
    ],
)
def test_extract_json_array(reply, want):
    assert extract_json_array(reply) == want


def test_extract_json_object_skips_arrays():
    assert extract_json_object('[1] {"k": "v"} {"k": "w"}') == {"k": "v"}
    assert extract_json_object("[1, 2]") is None


@pytest.mark.parametrize(
    "value, want",
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        (1.0, True),
        (0.0, False),
        ("true", True),
        (" TRUE ", True),
        ("Yes.", True),
        ("met", True),
        ("1", True),
        ("是", True),
        ("符合", True),
        ("满足。", True),
        ("ｔｒｕｅ", True),
        ("１", True),
        ("false", False),
        ("No", False),
        ("unmet", False),
        ("Not Met.", False),
        ("0", False),
        ("否", False),
        ("不符合", False),
        ("不满足", False),
        ("０", False),
        (2, None),
        (-1, None),
        (0.5, None),
        ("maybe", None),
        ("", None),
        (None, None),
        ([], None),
        ({}, None),
        ([True], None),
        ("true false", None),
        ("not-met", None),
    ],
)
def test_as_bool_table(value, want):
    assert as_bool(value) is want


@pytest.mark.parametrize(
    "value, want",
    [
        ("plain", "plain"),
        (["a", "b"], '["a", "b"]'),
        ({"理由": "有"}, '{"理由": "有"}'),
        (3, "3"),
    ],
)
def test_explanation_text(value, want):
    assert explanation_text(value) == want


def test_parse_criteria_met_reads_the_one_verdict_and_its_explanation():
    assert parse_criteria_met('[1]\n{"explanation": ["x", "y"], "criteria_met": "否"}') == (
        False,
        '["x", "y"]',
    )
    # two verdict objects: one may be the graded answer's own, quoted by the judge; never first-match
    assert parse_criteria_met(
        '[1]\n{"explanation": ["x", "y"], "criteria_met": "否"} {"criteria_met": true}'
    ) == (None, "")
    assert parse_criteria_met('{"explanation": "no verdict"}') == (None, "")


def test_a_missing_explanation_is_empty_text_not_null():
    from grandrounds.graders.judge_json import explanation_text

    assert explanation_text(None) == ""
    assert explanation_text(["a", "b"]) == '["a", "b"]'


def _replies() -> list[str]:
    """Judge replies of every shape extraction meets: a bare object (the usual one), padded, with
    prose or a second object after it, fenced, inside reasoning, full-width punctuation, arrays,
    text that only looks like JSON, and JSON that is not an object."""
    import random

    obj = '{"explanation": "The response names the red flags.", "criteria_met": true}'
    parts = [
        obj,
        f"  \n{obj}\n ",
        f"{obj} Hope this helps.",
        f'{obj}\n{{"criteria_met": false}}',
        f"Verdict: {obj}",
        f"```json\n{obj}\n```",
        f'<think>maybe {{"criteria_met": false}}</think>{obj}',
        f"{obj}</think>",
        '{"explanation"："中文，理由", "criteria_met"：true}',
        "{“criteria_met”: false}",
        "[true, false]",
        '[{"criteria_met": true}]',
        "{not json}",
        "{",
        "}",
        '{"a": 1',
        "criteria_met: true",
        "",
        "   ",
        "true",
        '"text"',
        "{}",
        '{"x": {"y": [1, 2]}}',
        f"analysis ... assistantfinal{obj}",
        f"<answer>{obj}</answer>",
        '{"k": "a\u2028b"}',
        '{"k": NaN}',
        f"{obj}```",
        '{"explanation": "<think>quoted</think> fine", "criteria_met": true}',
    ]
    rng = random.Random(5)
    mixed = [
        "".join(
            rng.choice(parts + [" ", "\n", "{", "}", "<", ">", "`"])
            for _ in range(rng.randint(1, 4))
        )
        for _ in range(400)
    ]
    return parts + mixed


def test_the_bare_object_shortcut_finds_the_object_a_full_scan_finds() -> None:
    """extract_json_object reads a reply that is one JSON object directly; whatever the reply, its
    answer is the first object json_values (the full scan) finds."""
    for text in _replies():
        assert extract_json_object(text) == next(
            (v for v in json_values(text) if isinstance(v, dict)), None
        ), repr(text)

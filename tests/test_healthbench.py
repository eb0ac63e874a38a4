"""HealthBench on real rows of ../shared/data/healthbench/healthbench_500.jsonl with a rule-following fake judge.

Expected numbers are computed here, independently of grandrounds.scoring, from the reference rules
(simple-evals healthbench_eval.py): example = sum(met points) / sum(positive points), unclipped;
metric = clip(mean, 0, 1); rubric-tag metrics skip subsets without positive points. Tests of our own
refinements (unknown-aware scores, batched judging) run under ``protocol="grandrounds"``; the
comparison with the official code itself is in tests/test_healthbench_reference.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.healthbench import HealthBench, HealthBenchConsensus, HealthBenchHard
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Message, Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.healthbench_grader import (
    HealthBenchGrader,
    HealthBenchParams,
    parse_batched,
    render_conversation,
    render_item,
)
from grandrounds.graders.judging import compare_modes
from grandrounds.scoring.healthbench import known_example_metrics, reference_example_metrics
from tests.grading import grade_answer

# The item in a per-criterion prompt: ours ("# How to judge" follows) or the official one ("# Instructions").
ITEM = re.compile(r"# Rubric item\n\[(-?\d+)\] (.*?)\n\n# (?:How to judge|Instructions)", re.S)
BATCH_LINE = re.compile(r"^- id (\S+): \[(-?\d+)\] ", re.M)


def rule(text: str) -> bool:
    """The fake judge's verdict: met iff the criterion text has an even length."""
    return len(text) % 2 == 0


class RuleJudge:
    """Answers every rubric item by ``rule``; items whose text satisfies ``garbage`` get an unreadable reply.

    ``style`` is how a batched reply is written: ``keyed`` ({id: {...}}), ``ordered`` (a list of
    objects without ids, in prompt order), ``bools`` (a list of booleans in prompt order) or
    ``short`` (an ordered list missing its last verdict).
    """

    def __init__(
        self,
        name: str = "fake",
        garbage=lambda text: False,
        flip=lambda text: False,
        style: str = "keyed",
    ) -> None:
        self.name = name
        self.garbage = garbage
        self.flip = flip
        self.style = style
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        prompt = messages[-1].content
        key = f"{self.name}:{hash(prompt)}:{attempt}"
        m = ITEM.search(prompt)
        if m:  # per-criterion prompt
            text = m.group(2)
            self.calls.append((text, attempt))
            if self.garbage(text):
                return Response(key=key, text="I am not sure how to answer this.")
            met = rule(text) != self.flip(text)
            return Response(
                key=key,
                text=f'```json\n{{"explanation": "rule", "criteria_met": {json.dumps(met)}}}\n```',
            )
        block = prompt.split("# Rubric items\n", 1)[1].split("\n\n# How to judge", 1)[0]
        parts = BATCH_LINE.split(block)[1:]  # criterion texts may span lines
        # each item but the last ends with the "\n" joining the lines (a criterion may end with its own)
        items = [
            (parts[i], parts[i + 1], parts[i + 2][:-1] if i + 3 < len(parts) else parts[i + 2])
            for i in range(0, len(parts), 3)
        ]
        self.calls.append((",".join(cid for cid, _, _ in items), attempt))
        verdicts = [(cid, rule(t) != self.flip(t)) for cid, _, t in items if not self.garbage(t)]
        reply: object = {cid: {"explanation": "rule", "criteria_met": met} for cid, met in verdicts}
        if self.style == "ordered":
            reply = [{"explanation": "rule", "criteria_met": met} for _, met in verdicts]
        elif self.style == "bools":
            reply = [met for _, met in verdicts]
        elif self.style == "short":
            reply = [{"criteria_met": met} for _, met in verdicts][:-1]
        return Response(key=key, text="Here you go:\n```json\n" + json.dumps(reply) + "\n```")


GRANDROUNDS = HealthBenchParams(protocol="grandrounds")
BATCHED = HealthBenchParams("batched", protocol="grandrounds")


@functools.cache
def _load(path: Path):
    return HealthBench().load(path)


@pytest.fixture
def samples(shared_data):
    return _load(shared_data("healthbench", "healthbench_500.jsonl"))


def grade_all(grader, samples, ctx_for):
    async def go():
        return await asyncio.gather(
            *(grader.grade(s, Response(key="a", text="An answer."), ctx_for(s)) for s in samples)
        )

    return asyncio.run(go())


def expected_score(sample, known=lambda c: True) -> float:
    crits = [c for c in sample.rubric if known(c)]
    possible = sum(c.points for c in crits if c.points > 0)
    return sum(c.points for c in crits if rule(c.text)) / possible


# ---- loading ----------------------------------------------------------------------------------


def test_load_real_file(samples):
    assert len(samples) == 500
    assert sum(len(s.rubric) for s in samples) == 5965
    themes = Counter(s.metadata["theme"] for s in samples)
    assert themes == {
        "hedging": 116,
        "global_health": 107,
        "communication": 102,
        "health_data_tasks": 57,
        "emergency_referrals": 42,
        "context_seeking": 40,
        "complex_responses": 36,
    }  # SOURCE.md
    s = samples[0]
    assert [c.id for c in s.rubric] == [str(i) for i in range(len(s.rubric))]
    assert all(any(t.startswith("axis:") for t in c.tags) for x in samples for c in x.rubric)
    assert len({x.id for x in samples}) == 500


def test_prompt_is_the_conversation_as_is(samples):
    multi = next(s for s in samples if any(m.role == "assistant" for m in s.messages))
    p = HealthBench().prompt(multi, RunOptions())
    assert p.messages == multi.messages and p.kind == "chat"
    assert p.messages[-1].role == "user"


def test_render_like_the_reference():
    msgs = (Message("user", "Is smoking good?"),)
    assert render_conversation(msgs, "No.") == "user: Is smoking good?\n\nassistant: No."
    from grandrounds.core.records import Criterion

    assert render_item(Criterion("0", "Fails to warn", -5)) == "[-5] Fails to warn"
    assert render_item(Criterion("1", "Warns", 7.0)) == "[7] Warns"


def test_remote_files():
    assert HealthBench.remote_files[0].filename == "2025-05-07-06-14-12_oss_eval.jsonl"
    assert HealthBench.remote_files[0].sha256.startswith("e99dd3c6")
    assert HealthBenchHard.remote_files[0].url.endswith("/hard_2025-05-08-21-00-10.jsonl")
    assert HealthBenchConsensus.remote_files[0].filename == "consensus_2025-05-09-20-00-46.jsonl"
    assert HealthBench.needs_judge and HealthBenchHard.name == "healthbench-hard"


@pytest.mark.parametrize(
    "line, problem",
    [
        (
            '{"prompt_id": "x", "prompt": [{"role": "user", "content": "hi"}], "rubrics": [{"criterion": "c", "points": "5", "tags": []}]}',
            "numeric points",
        ),
        ('{"prompt_id": "x", "prompt": [], "rubrics": []}', "non-empty list of messages"),
        (
            '{"prompt_id": "x", "prompt": [{"role": "user", "content": "hi"}], "rubrics": [{"criterion": "c", "points": -3, "tags": []}]}',
            "no positive points",
        ),
        ('{"prompt_id": "x", "prompt": [{"role": "user"', "invalid JSON"),
    ],
)
def test_malformed_records_name_the_line(tmp_path: Path, shared_data, line, problem):
    good = (
        shared_data("healthbench", "healthbench_500.jsonl")
        .read_text(encoding="utf-8")
        .split("\n")[0]
    )
    path = tmp_path / "hb.jsonl"
    path.write_text(good + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        HealthBench().load(path)
    assert err.value.where == 2 and problem in err.value.problem


# ---- grading with a rule judge -------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_per_sample_and_aggregate_match_independent_reference(samples, protocol):
    judge = RuleJudge()
    grader = HealthBenchGrader(HealthBenchParams(protocol=protocol))
    grades = grade_all(grader, samples, lambda s: GradeContext(judges=(judge,)))
    assert len(judge.calls) == 5965  # one call per criterion
    for s, g in zip(samples, grades):
        assert g.value == pytest.approx(expected_score(s))
        assert g.details["coverage"] == {"known": len(s.rubric), "total": len(s.rubric)}
        assert g.details["other_value"] == pytest.approx(g.value)  # every reply readable both ways
        met = [rule(c.text) for c in s.rubric]
        assert dict(g.details["tag_scores"], overall_score=g.value) == pytest.approx(
            reference_example_metrics(s.rubric, met, s.metadata["example_tags"])
        )
    agg = HealthBench().aggregate(samples, grades, RunOptions(seed=7, protocol=protocol))
    per = [expected_score(s) for s in samples]
    overall = float(np.clip(np.mean(per), 0, 1))
    assert agg.score == pytest.approx(overall)
    assert agg.n == 500 and agg.n_unscored == 0 and agg.extra["coverage"] == 1.0
    other = agg.extra["other_protocol"]
    assert other["protocol"] == {"reference": "grandrounds", "grandrounds": "reference"}[protocol]
    assert other["score"] == pytest.approx(overall) and other["differs"]
    assert agg.ci95[0] <= agg.score <= agg.ci95[1]

    by_theme = defaultdict(list)
    for s, v in zip(samples, per):
        by_theme[s.metadata["theme"]].append(v)
    for theme, vals in by_theme.items():
        assert agg.breakdown["theme"][theme].score == pytest.approx(
            float(np.clip(np.mean(vals), 0, 1))
        )
        assert agg.breakdown["theme"][theme].n == len(vals)
    by_axis = defaultdict(list)
    for s in samples:
        for axis in {t for c in s.rubric for t in c.tags if t.startswith("axis:")}:
            items = [c for c in s.rubric if axis in c.tags]
            possible = sum(c.points for c in items if c.points > 0)
            if possible > 0:
                by_axis[axis[5:]].append(sum(c.points for c in items if rule(c.text)) / possible)
    for axis, vals in by_axis.items():
        assert agg.breakdown["axis"][axis].score == pytest.approx(
            float(np.clip(np.mean(vals), 0, 1))
        )
    again = HealthBench().aggregate(samples, grades, RunOptions(seed=7, protocol=protocol))
    assert (
        again.ci95 == agg.ci95 and again.extra["bootstrap_std"] == agg.extra["bootstrap_std"]
    )  # seeded bootstrap
    themes = ", ".join(f"{k}: {v.score:.3f}" for k, v in agg.breakdown["theme"].items())
    print(
        f"\nHealthBench 500, rule judge ({protocol}): overall {agg.score:.4f} CI {agg.ci95[0]:.4f}-{agg.ci95[1]:.4f} "
        f"std {agg.extra['bootstrap_std']:.4f}; mean unclipped {np.mean(per):.4f}; min example {min(per):.3f}; "
        f"themes {{{themes}}}"
    )


def test_garbage_becomes_unknown_then_only_unknown_regrade_fills_in(samples):
    subset = samples[:40]
    garbage = lambda text: len(text) % 3 == 0  # noqa: E731
    bad = RuleJudge(garbage=garbage)
    grader = HealthBenchGrader(GRANDROUNDS)
    grades = grade_all(grader, subset, lambda s: GradeContext(judges=(bad,), max_reask=2))
    n_garbage = sum(1 for s in subset for c in s.rubric if garbage(c.text))
    n_total = sum(len(s.rubric) for s in subset)
    assert n_garbage > 0
    assert (
        len(bad.calls) == n_total + 2 * n_garbage
    )  # each garbage criterion asked at attempts 0, 1, 2
    for s, g in zip(subset, grades):
        unknown = [v for v in g.verdicts if v.status == "unknown"]
        assert {v.criterion_id for v in unknown} == {c.id for c in s.rubric if garbage(c.text)}
        assert all(
            v.raw == "I am not sure how to answer this." and v.attempts == 3 for v in unknown
        )
        assert g.details["coverage"]["known"] == len(s.rubric) - len(unknown)
        assert (
            g.details["other_value"] is None
            if unknown
            else g.details["other_value"] == pytest.approx(g.value)
        )
        known = lambda c: not garbage(c.text)  # noqa: E731
        if any(c.points > 0 for c in s.rubric if known(c)):
            assert g.value == pytest.approx(expected_score(s, known))
        else:
            assert g.value is None and g.error
    agg = HealthBench().aggregate(subset, grades, RunOptions(protocol="grandrounds"))
    assert agg.extra["n_unknown_verdicts"] == n_garbage
    assert agg.extra["coverage"] < 1.0
    print(
        f"\ngarbage judge on 40 rows: {n_garbage}/{n_total} unknown, coverage {agg.extra['coverage']:.3f}, "
        f"score {agg.score:.4f}, unscored {agg.n_unscored}"
    )

    good = RuleJudge()
    regraded = grade_all(
        grader,
        subset,
        lambda s: GradeContext(
            judges=(good,), previous=grades[subset.index(s)], only_unknown=True, max_reask=2
        ),
    )
    assert len(good.calls) == n_garbage  # only the unknown ones are re-asked
    assert {a for _, a in good.calls} == {3}  # attempt numbers continue after 0, 1, 2
    for s, old, new in zip(subset, grades, regraded):
        assert new.value == pytest.approx(expected_score(s))
        assert new.details["coverage"]["known"] == len(s.rubric)
        for o, n in zip(old.verdicts, new.verdicts):
            if o.status != "unknown":
                assert n == o


def test_reference_leaves_an_example_with_an_unknown_criterion_unscored(samples):
    """Bounded re-ask, then unknown: the official score needs every verdict, so the example is
    unscored (never a zero) and the grandrounds figure over the known criteria is kept beside it."""
    subset = samples[:40]
    garbage = lambda text: len(text) % 3 == 0  # noqa: E731
    bad = RuleJudge(garbage=garbage)
    grades = grade_all(
        HealthBenchGrader(), subset, lambda s: GradeContext(judges=(bad,), max_reask=1)
    )
    n_garbage = sum(1 for s in subset for c in s.rubric if garbage(c.text))
    assert len(bad.calls) == sum(len(s.rubric) for s in subset) + n_garbage  # attempts 0 and 1
    hit = [s for s in subset if any(garbage(c.text) for c in s.rubric)]
    assert 0 < len(hit) < len(subset)
    for s, g in zip(subset, grades):
        if s in hit:
            assert g.value is None and g.status == "unreadable" and "needs every one" in g.error
            known = lambda c: not garbage(c.text)  # noqa: E731
            ok = any(c.points > 0 for c in s.rubric if known(c))
            assert g.details["other_value"] == (
                pytest.approx(expected_score(s, known)) if ok else None
            )
        else:
            assert g.value == pytest.approx(expected_score(s)) and g.status == "scored"
    agg = HealthBench().aggregate(subset, grades, RunOptions())
    clean = [expected_score(s) for s in subset if s not in hit]
    assert agg.n == len(clean) and agg.n_unscored == len(hit) == agg.extra["n_unscored_unknown"]
    assert agg.score == pytest.approx(float(np.clip(np.mean(clean), 0, 1)))
    others = [g.details["other_value"] for g in grades if g.details["other_value"] is not None]
    assert agg.extra["other_protocol"]["score"] == pytest.approx(
        float(np.clip(np.mean(others), 0, 1))
    )
    assert agg.extra["other_protocol"]["protocol"] == "grandrounds"


def test_reference_reads_replies_strictly_and_grandrounds_tolerantly(samples):
    """A reply with prose around the JSON is re-asked under reference (simple-evals would loop on
    it) and read at once under grandrounds; each grade carries the other protocol's value."""
    s = samples[2]

    class Chatty:
        name = "chatty"

        def __init__(self):
            self.calls = 0

        async def __call__(self, messages, *, attempt=0):
            self.calls += 1
            text = ITEM.search(messages[-1].content).group(2)
            return Response(
                key=f"{hash(text)}:{attempt}",
                text=f'Sure! {{"explanation": "x", "criteria_met": {json.dumps(rule(text))}}}',
            )

    ref_judge, our_judge = Chatty(), Chatty()
    ref = asyncio.run(
        HealthBenchGrader().grade(
            s, Response(key="a", text="x"), GradeContext(judges=(ref_judge,), max_reask=2)
        )
    )
    ours = asyncio.run(
        HealthBenchGrader(GRANDROUNDS).grade(
            s, Response(key="a", text="x"), GradeContext(judges=(our_judge,))
        )
    )
    assert ref_judge.calls == 3 * len(s.rubric) and our_judge.calls == len(s.rubric)
    assert ref.value is None and all(v.status == "unknown" for v in ref.verdicts)
    assert ref.details["other_value"] == pytest.approx(expected_score(s)) == ours.value
    assert (
        ours.details["other_value"] is None
    )  # the official reading finds no verdict in these replies


def test_failed_judge_calls_and_failed_answers_are_never_zeros(samples):
    s = samples[0]

    class Down:
        name = "down"
        calls = 0

        async def __call__(self, messages, *, attempt=0):
            Down.calls += 1
            return Response(key="k", error="timeout")

    g = asyncio.run(
        HealthBenchGrader().grade(s, Response(key="a", text="x"), GradeContext(judges=(Down(),)))
    )
    assert g.value is None and all(v.status == "unknown" for v in g.verdicts)
    assert Down.calls == len(s.rubric)
    judge = RuleJudge()
    g = grade_answer(
        HealthBenchGrader(), s, Response(key="a", error="429"), GradeContext(judges=(judge,))
    )
    assert (
        g.value is None and g.status == "answer_failed" and "429" in g.error and judge.calls == []
    )


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_panel_majority_on_real_rows(samples, protocol):
    s = samples[1]
    flip_all = lambda text: True  # noqa: E731
    judges = (RuleJudge("a"), RuleJudge("b"), RuleJudge("c", flip=flip_all))
    g = asyncio.run(
        HealthBenchGrader(HealthBenchParams(protocol=protocol)).grade(
            s, Response(key="a", text="x"), GradeContext(judges=judges)
        )
    )
    assert g.value == pytest.approx(expected_score(s))
    assert all(
        len(v.votes) == 3 and v.statuses[0] == v.statuses[1] != v.statuses[2] for v in g.verdicts
    )


def test_batched_mode_reasks_missing_and_agrees_with_per_criterion(samples):
    subset = samples[:30]
    missing_first = lambda text: len(text) % 5 == 0  # noqa: E731

    class Flaky(RuleJudge):
        async def __call__(self, messages, *, attempt=0):
            self.garbage = missing_first if attempt == 0 else (lambda text: False)
            return await super().__call__(messages, attempt=attempt)

    batched = Flaky()
    bgrader = HealthBenchGrader(BATCHED)
    bgrades = grade_all(bgrader, subset, lambda s: GradeContext(judges=(batched,)))
    need_reask = [s for s in subset if any(missing_first(c.text) for c in s.rubric)]
    assert len(batched.calls) == len(subset) + len(need_reask)
    for s in need_reask:  # the re-ask lists only the missing criteria
        asked = [ids for ids, a in batched.calls if a == 1]
        assert ",".join(c.id for c in s.rubric if missing_first(c.text)) in asked
    for s, g in zip(subset, bgrades):
        assert g.value == pytest.approx(expected_score(s)) and g.details["judge_mode"] == "batched"

    pgrades = grade_all(
        HealthBenchGrader(GRANDROUNDS), subset, lambda s: GradeContext(judges=(RuleJudge(),))
    )
    assert compare_modes(bgrades, pgrades).agreement == 1.0
    flip = lambda text: len(text) % 7 == 0  # noqa: E731
    fgrades = grade_all(
        HealthBenchGrader(GRANDROUNDS),
        subset,
        lambda s: GradeContext(judges=(RuleJudge(flip=flip),)),
    )
    n = sum(len(s.rubric) for s in subset)
    flipped = sum(1 for s in subset for c in s.rubric if flip(c.text))
    cmp = compare_modes(bgrades, fgrades)
    assert cmp.n_compared == n and cmp.agreement == pytest.approx(1 - flipped / n)
    print(f"\nbatched vs per-criterion (flipped {flipped}/{n}): agreement {cmp.agreement:.3f}")


@pytest.mark.parametrize("style", ["ordered", "bools"])
def test_batched_reads_verdicts_listed_in_prompt_order_on_all_rows(samples, style):
    """A judge that lists its verdicts in the order of the prompt, without ids: every one of the
    5,965 verdicts is read (it used to be none, and every conversation unscored)."""
    judge = RuleJudge(style=style)
    grades = grade_all(HealthBenchGrader(BATCHED), samples, lambda s: GradeContext(judges=(judge,)))
    assert len(judge.calls) == 500 and {a for _, a in judge.calls} == {0}  # nothing re-asked
    assert sum(v.status != "unknown" for g in grades for v in g.verdicts) == 5965
    for s, g in zip(samples, grades):
        assert [v.status for v in g.verdicts] == [
            "met" if rule(c.text) else "unmet" for c in s.rubric
        ]
        assert g.value == pytest.approx(expected_score(s))
    agg = HealthBench().aggregate(
        samples, grades, RunOptions(protocol="grandrounds", judge_mode="batched")
    )
    assert agg.n == 500 and agg.n_unscored == 0


def test_batched_list_of_another_length_is_reasked_never_guessed(samples):
    subset = samples[:20]

    class ShortThenRight(RuleJudge):
        async def __call__(self, messages, *, attempt=0):
            self.style = "short" if attempt == 0 else "ordered"
            return await super().__call__(messages, attempt=attempt)

    judge = ShortThenRight()
    grades = grade_all(HealthBenchGrader(BATCHED), subset, lambda s: GradeContext(judges=(judge,)))
    assert Counter(a for _, a in judge.calls) == {
        0: 20,
        1: 20,
    }  # each conversation asked again, in full
    assert sorted(ids for ids, a in judge.calls if a == 1) == sorted(
        ids for ids, a in judge.calls if a == 0
    )
    for s, g in zip(subset, grades):
        assert g.value == pytest.approx(expected_score(s))
        assert all(v.votes[0].attempts == 2 for v in g.verdicts)
    always_short = RuleJudge(style="short")
    grades = grade_all(
        HealthBenchGrader(BATCHED),
        subset,
        lambda s: GradeContext(judges=(always_short,), max_reask=1),
    )
    assert all(v.status == "unknown" for g in grades for v in g.verdicts)
    assert all(g.value is None and g.status == "unreadable" for g in grades)


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            '[{"explanation": "a", "criteria_met": true}, {"criteria_met": false}, {"criteria_met": "true"}]',
            {"0": True, "1": False, "2": True},
        ),
        ("```json\n[true, false, false]\n```", {"0": True, "1": False, "2": False}),
        ('{"verdicts": [true, true, false]}', {"0": True, "1": True, "2": False}),
        (
            '[{"criteria_met": true}, {"criteria_met": "perhaps"}, {"criteria_met": false}]',
            {"0": True, "2": False},
        ),
        ("[true, false]", {}),  # two verdicts for three criteria: which is missing is not guessed
        ("[true, false, true, true]", {}),
        (
            '[{"id": "2", "criteria_met": true}, {"criteria_met": false}]',
            {"2": True},
        ),  # ids win where given
        ('{"0": true, "1": false, "2": true}', {"0": True, "1": False, "2": True}),
    ],
)
def test_batched_positional_reply_table(reply, expected):
    got = parse_batched(reply, ["0", "1", "2"])
    assert {k: v.status == "met" for k, v in got.items()} == expected


def test_batched_positional_reply_maps_to_the_pending_ids_in_order():
    got = parse_batched("[false, true]", ["4", "9"])
    assert {k: v.status for k, v in got.items()} == {"4": "unmet", "9": "met"}
    bare = '```json\n{"explanation": "x", "criteria_met": true}\n```'
    assert {k: v.status for k, v in parse_batched(bare, ["9"]).items()} == {
        "9": "met"
    }  # one item asked again
    assert parse_batched(bare, ["4", "9"]) == {}  # one verdict for two items: not guessed


def test_batched_is_ours_and_refused_under_reference():
    with pytest.raises(ConfigError, match="--protocol grandrounds"):
        HealthBench().check_options(RunOptions(judge_mode="batched"))
    with pytest.raises(ConfigError, match="--protocol grandrounds"):
        HealthBenchGrader(HealthBenchParams("batched", protocol="reference"))
    opts = HealthBench().check_options(RunOptions(judge_mode="batched", protocol="grandrounds"))
    assert HealthBench().grader_spec(opts).args == {"mode": "batched", "protocol": "grandrounds"}


def test_unknown_mode_is_rejected_and_spec_records_mode():
    with pytest.raises(ConfigError):
        HealthBenchGrader(HealthBenchParams("pairwise"))
    with pytest.raises(ConfigError):
        HealthBenchGrader(HealthBenchParams(protocol="official"))
    assert HealthBench().grader(RunOptions()).spec().args == {
        "mode": "per-criterion",
        "protocol": "reference",
    }
    g = HealthBench().grader(RunOptions(judge_mode="batched", protocol="grandrounds"))
    assert list(g.template_hashes()) == [
        "healthbench_batched",
        "answer_markers",
    ]  # the answer shown between markers
    assert list(HealthBench().grader(RunOptions()).template_hashes()) == [
        "GRADER_TEMPLATE",
        "judge_system",
    ]


def test_known_metrics_equal_reference_when_all_known(samples):
    from grandrounds.core.records import Verdict

    for s in samples[:50]:
        met = [rule(c.text) for c in s.rubric]
        verdicts = [Verdict(c.id, "met" if m else "unmet") for c, m in zip(s.rubric, met)]
        ks = known_example_metrics(s.rubric, verdicts, s.metadata["example_tags"])
        assert ks.metrics == reference_example_metrics(s.rubric, met, s.metadata["example_tags"])

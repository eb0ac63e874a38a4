"""Clinician reviews on a store filled by the real runner: validation, reviewed values (a grader's own
rescoring), the review queue and judge-reviewer agreement pairs.

HealthBench answers are judged by a three-judge panel of scripted judges (``judgebot/a|b|c``,
registered for the test) that follow a rule written into each criterion's text:

- ``always-met`` / ``always-unmet``: every judge agrees;
- ``split-met``: a and b say met, c unmet (verdict met, judges disagree);
- ``split-unmet``: a says met, b and c unmet (verdict unmet, judges disagree);
- ``c-garbled-met``: a and b say met, c replies garbage (verdict met, no known disagreement);
- ``garbled``: every judge replies garbage (verdict unknown after the re-asks).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from grandrounds.analyses.reviews import (
    ReviewError,
    ReviewInput,
    add_review,
    agreement_pairs,
    fill_queue,
    latest,
    queue,
    queue_reasons,
    reviewed_value,
    reviewed_values,
    reviews_for,
)
from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import Grade, Request, Verdict, Vote
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from tests.synthetic import SynthSpec, build_store

ITEM = re.compile(r"# Rubric item\n\[(-?\d+(?:\.\d+)?)\] (.*?)\n\n# How to judge", re.S)

#: prompt_id -> [(rule: text, points, tags)]
RUBRICS: dict[str, list[tuple[str, float, list[str]]]] = {
    "hb1": [
        ("always-met: Mentions dehydration as a risk", 5, ["axis:accuracy"]),
        ("always-unmet: Advises oral rehydration solution", 3, ["axis:completeness"]),
        ("always-unmet: Uses alarming language", -2, ["axis:communication_quality"]),
        ("split-met: Asks about urine output", 2, ["axis:context_awareness"]),
        ("garbled: Recommends seeing a doctor within a day", 4, ["axis:accuracy"]),
    ],
    "hb2": [
        ("always-met: States the usual duration", 4, ["axis:accuracy"]),
        ("split-unmet: Mentions zinc supplements", 6, ["axis:completeness"]),
        ("c-garbled-met: Is concise", 2, ["axis:communication_quality"]),
    ],
    "hb3": [
        ("always-met: Asks the child's age", 3, ["axis:context_awareness"]),
        ("always-unmet: Suggests antibiotics", -4, ["axis:accuracy"]),
    ],
}
#: What each rule gives each judge: met / unmet / None (garbage).
RULES: dict[str, dict[str, bool | None]] = {
    "always-met": {"a": True, "b": True, "c": True},
    "always-unmet": {"a": False, "b": False, "c": False},
    "split-met": {"a": True, "b": True, "c": False},
    "split-unmet": {"a": True, "b": False, "c": False},
    "c-garbled-met": {"a": True, "b": True, "c": None},
    "garbled": {"a": None, "b": None, "c": None},
}
#: The verdict a 3-judge majority gives each rule (garbage votes are unknown and do not count).
VERDICT = {
    "always-met": "met",
    "always-unmet": "unmet",
    "split-met": "met",
    "split-unmet": "unmet",
    "c-garbled-met": "met",
    "garbled": "unknown",
}


def rule_of(sample_id: str, cid: str) -> str:
    return RUBRICS[sample_id][int(cid)][0].split(":")[0]


def judge_script(req: Request) -> str:
    m = ITEM.search(req.messages[-1].content)
    assert m, "a judge prompt without a rubric item"
    met = RULES[m.group(2).split(":")[0]][req.model]
    if met is None:
        return "I would rather not say."
    return (
        "```json\n"
        + json.dumps({"explanation": f"judge {req.model} by rule", "criteria_met": met})
        + "\n```"
    )


class JudgeBot(ScriptedProvider):
    """A scripted judge: the runner builds judges from their spec alone, so the script is fixed here."""

    def __init__(self, spec, **options: Any) -> None:
        super().__init__(spec, script=judge_script, **options)


def hb_value(sample_id: str, status: dict[str, str]) -> float | None:
    """HealthBench's example score, written out: met points over possible positive points, over the
    criteria whose status is met or unmet (unknown ones left out of both)."""
    known = [
        (pts, status[str(i)])
        for i, (_, pts, _) in enumerate(RUBRICS[sample_id])
        if status.get(str(i)) in ("met", "unmet")
    ]
    possible = sum(p for p, _ in known if p > 0)
    if possible == 0:
        return None
    return sum(p for p, s in known if s == "met") / possible


def judge_status(sample_id: str) -> dict[str, str]:
    return {str(i): VERDICT[rule_of(sample_id, str(i))] for i in range(len(RUBRICS[sample_id]))}


def write_healthbench(path: Path) -> Path:
    lines = []
    for pid, items in RUBRICS.items():
        lines.append(
            json.dumps(
                {
                    "prompt_id": pid,
                    "prompt": [
                        {
                            "role": "user",
                            "content": f"My child has diarrhoea ({pid}). What should I do?",
                        }
                    ],
                    "rubrics": [
                        {"criterion": text, "points": pts, "tags": tags}
                        for text, pts, tags in items
                    ],
                    "example_tags": ["theme:global_health"],
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class HB:
    """A HealthBench store built by the real runner, with what the tests need to address it."""

    def __init__(self, st: Store, run_id: str, fp: str) -> None:
        self.st, self.run_id, self.fp = st, run_id, fp
        run_rec = st.get_run(run_id)
        assert run_rec is not None
        self.dataset = run_rec.dataset_sha256

    def review(
        self,
        sample_id: str,
        criterion_id: str = "",
        verdict: str | None = None,
        score: float | None = None,
        reviewer: str = "Dr Osei",
        reason: str = "checked against guideline",
    ) -> int:
        return add_review(
            self.st,
            ReviewInput(
                run_id=self.run_id,
                grader_fp=self.fp,
                sample_id=sample_id,
                reviewer=reviewer,
                reason=reason,
                criterion_id=criterion_id,
                verdict=verdict,
                score=score,
            ),
        )

    def values(self) -> dict[str, float | None]:
        return reviewed_values(self.st, self.run_id, self.fp, "healthbench", self.dataset)

    def grade_rows(self) -> list[tuple]:
        return [
            tuple(r)
            for r in self.st.db.execute(
                "SELECT sample_id, value, n_unknown, grade_json FROM grades ORDER BY sample_id"
            )
        ]


@pytest.fixture(scope="module")
def hb_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One HealthBench run through the real runner; each test works on its own copy of the store."""
    folder = tmp_path_factory.mktemp("hb")
    data = write_healthbench(folder / "hb.jsonl")
    judges = tuple(JudgeConfig(spec=f"judgebot/{j}") for j in "abc")
    # grandrounds: examples are scored over their known criteria (hb_value), a criterion the judges
    # garble stays unknown instead of leaving its example unscored as the reference protocol does
    cfg = RunConfig(
        benchmark="healthbench",
        model="scripted/cand",
        data=data,
        judges=judges,
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": lambda req: "Give oral fluids and watch for dehydration."},
    )
    with Store(folder / "hb.db") as st, PROVIDERS.registered("judgebot", JudgeBot):
        out = asyncio.run(run(st, cfg))
    assert out.result.n == len(RUBRICS)
    assert not (folder / "hb.db-wal").exists() or (folder / "hb.db-wal").stat().st_size == 0
    return folder / "hb.db"


@pytest.fixture
def hb(hb_file: Path, tmp_path: Path):
    shutil.copyfile(hb_file, tmp_path / "hb.db")
    st = Store(tmp_path / "hb.db")
    [(run_id, fp, _)] = list(st.results())
    yield HB(st, run_id, fp)
    st.close()


# ---- the store is what the judges said ------------------------------------------------------


def test_stored_verdicts_and_values_follow_the_judge_rules(hb: HB) -> None:
    for sid in RUBRICS:
        g = hb.st.grade(hb.run_id, hb.fp, sid)
        assert g is not None
        assert {v.criterion_id: v.status for v in g.verdicts} == judge_status(sid)
        assert all(
            isinstance(vote, Vote) and vote.judge.startswith("judgebot/")
            for v in g.verdicts
            for vote in v.votes
        )
        assert g.value == pytest.approx(hb_value(sid, judge_status(sid)))
    # hb1: met 5 + 2 over known positive 5 + 3 + 2 (the garbled 4-point item is left out)
    assert hb.st.grade(hb.run_id, hb.fp, "hb1").value == pytest.approx(7 / 10)


# ---- add_review validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(criterion_id="0", verdict="unknown"), "verdict 'met' or 'unmet'"),
        (dict(criterion_id="0", verdict="MET"), "verdict 'met' or 'unmet'"),
        (dict(criterion_id="0", verdict=None), "verdict 'met' or 'unmet'"),
        (dict(criterion_id="0", verdict="met", score=1.0), "and no score"),
        (dict(criterion_id="5", verdict="met"), "answer has no criterion '5'"),
        (dict(criterion_id="c0", verdict="unmet"), "answer has no criterion 'c0'"),
        (dict(score=0.5, verdict="met"), "finite score"),
        (dict(score=None), "finite score"),
        (dict(score=float("inf")), "finite score"),
        (dict(score=float("-inf")), "finite score"),
        (dict(score=float("nan")), "finite score"),
        (dict(reviewer="\t \n", score=0.5), "reviewer's name"),
        (dict(reason="   ", score=0.5), "needs a reason"),
    ],
)
def test_add_review_refuses_bad_input_and_stores_nothing(
    hb: HB, kwargs: dict, message: str
) -> None:
    base: dict[str, Any] = dict(sample_id="hb1", criterion_id="", verdict=None, score=None)
    args = base | {k: v for k, v in kwargs.items() if k not in ("reviewer", "reason")}
    who = {k: kwargs[k] for k in ("reviewer", "reason") if k in kwargs}
    with pytest.raises(ReviewError, match=re.escape(message)):
        hb.review(args["sample_id"], args["criterion_id"], args["verdict"], args["score"], **who)
    assert reviews_for(hb.st) == []


@pytest.mark.parametrize("where", ["run", "grader", "sample"])
def test_a_review_of_an_answer_that_was_not_graded_is_refused(hb: HB, where: str) -> None:
    run_id, fp, sid = hb.run_id, hb.fp, "hb1"
    if where == "run":
        run_id = "0" * 16
    elif where == "grader":
        fp = "f" * 64
    else:
        sid = "hb9"
    with pytest.raises(ReviewError, match="no grade for run"):
        add_review(
            hb.st,
            ReviewInput(
                run_id=run_id,
                grader_fp=fp,
                sample_id=sid,
                reviewer="Dr A",
                reason="r",
                criterion_id="0",
                verdict="met",
            ),
        )
    assert reviews_for(hb.st) == []


def test_a_valid_review_is_stored_trimmed_with_a_time(hb: HB) -> None:
    first = hb.review(
        "hb1", "1", "met", reviewer="  Dr Zhang 张医生 ", reason=" ORS was advised implicitly  "
    )
    second = hb.review("hb2", score=0.4)
    assert second > first
    rows = reviews_for(hb.st)
    assert [r["id"] for r in rows] == [first, second]
    r = rows[0]
    assert (r["reviewer"], r["reason"], r["criterion_id"], r["verdict"], r["score"]) == (
        "Dr Zhang 张医生",
        "ORS was advised implicitly",
        "1",
        "met",
        None,
    )
    assert r["created_at"]
    assert (rows[1]["criterion_id"], rows[1]["verdict"], rows[1]["score"]) == ("", None, 0.4)
    assert [x["id"] for x in reviews_for(hb.st, sample_id="hb2")] == [second]
    assert [x["id"] for x in reviews_for(hb.st, run_id=hb.run_id, sample_id="hb1")] == [first]


@pytest.mark.parametrize("score", [0.0, 1.0, -0.5, -4 / 3])  # hb3's scale: (0 - 4) / 3 to 3 / 3
def test_any_score_on_the_scale_is_accepted(hb: HB, score: float) -> None:
    hb.review("hb3", score=score)
    assert hb.values()["hb3"] == float(score)


# ---- reviewed values ------------------------------------------------------------------------


def test_a_whole_answer_score_replaces_the_value(hb: HB) -> None:
    judge_only = hb.st.grade_values(hb.run_id, hb.fp)
    hb.review("hb1", score=0.25)
    vals = hb.values()
    assert vals["hb1"] == 0.25
    assert vals["hb2"] == judge_only["hb2"] and vals["hb3"] == judge_only["hb3"]


@pytest.mark.parametrize(
    "sid, changes",
    [
        ("hb1", {"1": "met"}),  # a positive item the judges missed
        ("hb1", {"0": "unmet"}),  # a positive item the judges credited
        ("hb1", {"2": "met"}),  # a negative item: its points are subtracted
        ("hb1", {"4": "met"}),  # the unknown item: now known, into numerator and denominator
        ("hb1", {"4": "unmet", "3": "unmet"}),
        ("hb2", {"1": "met", "2": "unmet"}),  # overriding the verdicts of split panels
        (
            "hb3",
            {"1": "met"},
        ),  # negative points can take the example below zero (not clipped per example)
    ],
)
def test_criterion_reviews_are_rescored_by_healthbench_arithmetic(
    hb: HB, sid: str, changes: dict[str, str]
) -> None:
    judge_only = hb.st.grade_values(hb.run_id, hb.fp)
    for cid, verdict in changes.items():
        hb.review(sid, cid, verdict)
    want = hb_value(sid, judge_status(sid) | changes)
    assert hb.values()[sid] == pytest.approx(want)
    assert want != pytest.approx(judge_only[sid]), "the review changes the value"
    others = {k: v for k, v in hb.values().items() if k != sid}
    assert others == {k: v for k, v in judge_only.items() if k != sid}


def test_the_hand_worked_values(hb: HB) -> None:
    """hb1 with item 2 (-2) reviewed met and item 4 (4) reviewed met: (5 + 2 - 2 + 4) / (5 + 3 + 2 + 4)."""
    hb.review("hb1", "2", "met")
    hb.review("hb1", "4", "met")
    assert hb.values()["hb1"] == pytest.approx(9 / 14)
    hb.review("hb3", "1", "met")  # (3 - 4) / 3
    assert hb.values()["hb3"] == pytest.approx(-1 / 3)


def test_the_newest_review_of_a_criterion_wins(hb: HB) -> None:
    judge_value = hb.st.grade(hb.run_id, hb.fp, "hb1").value
    hb.review("hb1", "1", "met", reviewer="Dr A")
    assert hb.values()["hb1"] == pytest.approx(hb_value("hb1", judge_status("hb1") | {"1": "met"}))
    hb.review("hb1", "1", "unmet", reviewer="Dr B")  # the judge's own verdict again
    assert hb.values()["hb1"] == pytest.approx(judge_value)
    hb.review("hb1", "1", "met", reviewer="Dr A")
    assert hb.values()["hb1"] == pytest.approx(10 / 10)
    newest = latest(reviews_for(hb.st))
    assert len(newest) == 1 and newest[(hb.run_id, hb.fp, "hb1", "1")]["reviewer"] == "Dr A"


def test_the_newest_whole_answer_score_wins(hb: HB) -> None:
    hb.review("hb2", score=0.9)
    hb.review("hb2", score=0.1)
    assert hb.values()["hb2"] == 0.1


def test_reviews_never_modify_the_judges_grade_or_result(hb: HB) -> None:
    grades_before = hb.grade_rows()
    results_before = list(hb.st.results())
    hb.review("hb1", "1", "met")
    hb.review("hb1", "4", "unmet")
    hb.review("hb2", score=0.0)
    hb.review("hb3", "0", "unmet")
    assert hb.grade_rows() == grades_before
    assert list(hb.st.results()) == results_before
    g = hb.st.grade(hb.run_id, hb.fp, "hb1")
    assert {v.criterion_id: v.status for v in g.verdicts} == judge_status("hb1")
    assert hb.st.grade_values(hb.run_id, hb.fp) == {
        sid: pytest.approx(hb_value(sid, judge_status(sid))) for sid in RUBRICS
    }


def test_reviewed_value_of_a_missing_grade_is_none(hb: HB) -> None:
    assert reviewed_value(hb.st, hb.fp, None, None, []) is None


def test_reviewed_value_without_reviews_is_the_judges(hb: HB) -> None:
    g = hb.st.grade(hb.run_id, hb.fp, "hb2")
    smp = hb.st.sample("healthbench", hb.dataset, "hb2")
    assert reviewed_value(hb.st, hb.fp, smp, g, []) == g.value


# ---- a grader without criterion arithmetic ---------------------------------------------------

DEMO = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[1] / "src/grandrounds/data/demo_exam.jsonl")
    .read_text(encoding="utf-8")
    .splitlines()
]


def demo_script(right: set[int]):
    """Answers demo question i with its key when i is in ``right``, else with another letter."""

    def script(req: Request) -> str:
        text = req.messages[-1].content
        i = next(k for k, q in enumerate(DEMO) if q["question"] in text)
        key = DEMO[i]["answer_idx"]
        return f"Answer: {key if i in right else next(x for x in 'ABCD' if x != key)}"

    return script


@pytest.fixture
def demo_store(tmp_path: Path):
    st = Store(tmp_path / "demo.db")
    asyncio.run(
        run(
            st,
            RunConfig(
                benchmark="demo",
                model="scripted/exam",
                provider_options={"script": demo_script({0, 1, 2, 5, 8})},
            ),
        )
    )
    [(run_id, fp, _)] = list(st.results())
    yield st, run_id, fp
    st.close()


def test_mcq_answers_take_whole_answer_scores_but_no_criterion_reviews(demo_store) -> None:
    st, run_id, fp = demo_store
    dataset = st.get_run(run_id).dataset_sha256
    judge_only = st.grade_values(run_id, fp)
    assert judge_only == {str(i): (1.0 if i in {0, 1, 2, 5, 8} else 0.0) for i in range(12)}
    with pytest.raises(ReviewError, match="answer has no criterion"):
        add_review(
            st,
            ReviewInput(
                run_id=run_id,
                grader_fp=fp,
                sample_id="3",
                reviewer="Dr A",
                reason="r",
                criterion_id="0",
                verdict="met",
            ),
        )
    add_review(
        st,
        ReviewInput(
            run_id=run_id,
            grader_fp=fp,
            sample_id="3",
            reviewer="Dr A",
            reason="the key is disputed",
            score=1.0,
        ),
    )
    vals = reviewed_values(st, run_id, fp, "demo", dataset)
    assert vals == judge_only | {"3": 1.0}


def test_a_criterion_review_leaves_a_grader_without_rescore_at_the_judges_value(demo_store) -> None:
    """MCQ has no criterion arithmetic: the base ``rescore`` keeps the grade's value whatever is said."""
    st, run_id, fp = demo_store
    dataset = st.get_run(run_id).dataset_sha256
    for sid, want in (("0", 1.0), ("4", 0.0)):
        g = st.grade(run_id, fp, sid)
        smp = st.sample("demo", dataset, sid)
        row = {
            "id": 1,
            "run_id": run_id,
            "grader_fp": fp,
            "sample_id": sid,
            "criterion_id": "x",
            "reviewer": "Dr A",
            "verdict": "unmet" if want else "met",
            "score": None,
            "reason": "r",
            "created_at": "",
        }
        assert reviewed_value(st, fp, smp, g, [row]) == want


def test_gaps_criterion_reviews_are_rescored() -> None:
    from grandrounds.core.records import Criterion, Message, Response, Sample
    from grandrounds.graders.base import GradeContext
    from grandrounds.graders.gaps_grader import GAPSGrader

    class Judge:
        def __init__(self, name: str) -> None:
            self.name = name

        async def __call__(self, messages, *, attempt: int = 0) -> Response:
            met = "肺癌" in messages[-1].content  # only the first claim mentions it
            return Response(
                key=f"{self.name}-{hash(messages[-1].content)}-{attempt}",
                text=json.dumps({"explanation": "", "criteria_met": met}),
            )

    sample = Sample(
        id="q",
        benchmark="gaps",
        messages=(Message("user", "问题"),),
        rubric=(
            Criterion("1", "提到肺癌", 5.0, ("level:A1",)),
            Criterion("2", "提到化疗", 3.0, ("level:A2",)),
        ),
    )
    grader = GAPSGrader(
        protocol="grandrounds"
    )  # the judges answer bare JSON, which only our reading accepts
    grade = asyncio.run(
        grader.grade(
            sample, Response(key="k", text="回答"), GradeContext(judges=(Judge("a"), Judge("b")))
        )
    )
    assert grade.value == pytest.approx(5 / 8)
    assert grader.rescore(sample, grade, {"2": "met"}) == pytest.approx(8 / 8)


# ---- the review queue -------------------------------------------------------------------------


def expected_flags() -> dict[tuple[str, str], str]:
    """(sample, criterion) -> queue reason for the unknown verdicts and the known panel disagreements."""
    out = {}
    for sid, items in RUBRICS.items():
        for i, _ in enumerate(items):
            rule = rule_of(sid, str(i))
            known = {v for v in RULES[rule].values() if v is not None}
            if VERDICT[rule] == "unknown":
                out[(sid, str(i))] = "unknown verdict"
            elif len(known) > 1:
                out[(sid, str(i))] = "judges disagree"
    return out


def test_fill_queue_takes_unknowns_and_disagreements(hb: HB) -> None:
    want = expected_flags()
    assert sorted(want.values()) == ["judges disagree", "judges disagree", "unknown verdict"]
    added = fill_queue(hb.st, share=0.0, seed=0)
    assert added == {"unknown verdict": 1, "judges disagree": 2}
    items = queue(hb.st)
    assert {(q["sample_id"], q["criterion_id"]): q["reason"] for q in items} == want
    assert all(q["run_id"] == hb.run_id and q["grader_fp"] == hb.fp for q in items)


def test_re_running_fill_queue_adds_nothing(hb: HB) -> None:
    fill_queue(hb.st, share=0.5, seed=9)
    n = len(queue(hb.st, 1000))
    assert fill_queue(hb.st, share=0.5, seed=9) == {}
    assert fill_queue(hb.st, share=0.0, seed=0) == {}  # unknowns and disagreements are already in
    assert len(queue(hb.st, 1000)) == n


def test_share_one_queues_every_other_verdict_once(hb: HB) -> None:
    fill_queue(hb.st, share=0.0)
    added = fill_queue(hb.st, share=1.0, seed=0)
    n_verdicts = sum(len(items) for items in RUBRICS.values())
    assert added == {"random share": n_verdicts - len(expected_flags())}
    items = queue(hb.st, 1000)
    assert len(items) == n_verdicts
    assert len({(q["sample_id"], q["criterion_id"]) for q in items}) == n_verdicts
    assert {q["reason"] for q in items} == {"unknown verdict", "judges disagree", "random 1"}


def test_reviewed_items_leave_the_queue_oldest_first(hb: HB) -> None:
    fill_queue(hb.st, share=0.0)
    items = queue(hb.st)
    assert [q["id"] for q in items] == sorted(q["id"] for q in items)
    first = items[0]
    hb.review(first["sample_id"], first["criterion_id"], "met")
    rest = queue(hb.st)
    assert [q["id"] for q in rest] == [q["id"] for q in items[1:]]
    assert queue(hb.st, limit=1) == rest[:1]
    # a review of another criterion of the same answer does not take this one out
    other = next(str(i) for i in range(5) if ("hb1", str(i)) not in expected_flags())
    hb.review("hb1", other, "met")
    assert queue(hb.st) == rest


@pytest.mark.parametrize("share", [-0.01, 1.01, 2.0])
def test_a_share_outside_zero_one_is_refused(hb: HB, share: float) -> None:
    with pytest.raises(ReviewError, match="between 0 and 1"):
        fill_queue(hb.st, share=share)
    assert queue(hb.st) == []


def test_queue_reasons_read_typed_votes() -> None:
    def vote(judge: str, status: str) -> Vote:
        return Vote(judge=judge, status=status)  # type: ignore[arg-type]

    grade = Grade(
        sample_id="s",
        value=0.5,
        verdicts=(
            Verdict("agree", "met", votes=(vote("a", "met"), vote("b", "met"), vote("c", "met"))),
            Verdict("split", "met", votes=(vote("a", "met"), vote("b", "unmet"), vote("c", "met"))),
            Verdict(
                "one-unknown",
                "met",
                votes=(vote("a", "met"), vote("b", "unknown"), vote("c", "met")),
            ),
            Verdict("tie", "unknown", votes=(vote("a", "met"), vote("b", "unmet"))),
            Verdict("silent", "unknown", votes=(vote("a", "unknown"), vote("b", "unknown"))),
            Verdict(
                "minority",
                "unmet",
                votes=(
                    vote("a", "unknown"),
                    vote("b", "met"),
                    vote("c", "unmet"),
                    vote("d", "unmet"),
                ),
            ),
        ),
    )
    got = queue_reasons(grade, 0.0, 0, "run", "fp")
    assert got == [
        ("split", "judges disagree"),
        ("tie", "unknown verdict"),
        ("silent", "unknown verdict"),
        ("minority", "judges disagree"),
    ]
    # share 1 adds every remaining verdict; an answer with verdicts is never queued whole
    everything = queue_reasons(grade, 1.0, 0, "run", "fp")
    assert [c for c, _ in everything] == [v.criterion_id for v in grade.verdicts]
    assert dict(everything)["agree"] == "random 1" and dict(everything)["one-unknown"] == "random 1"


def test_whole_answers_are_drawn_only_when_scored() -> None:
    assert queue_reasons(Grade(sample_id="s", value=1.0), 1.0, 0, "r", "f") == [("", "random 1")]
    assert (
        queue_reasons(Grade(sample_id="s", value=None, status="answer_failed"), 1.0, 0, "r", "f")
        == []
    )
    assert queue_reasons(Grade(sample_id="s", value=1.0), 0.0, 0, "r", "f") == []


def test_mcq_answers_are_queued_whole_by_the_random_share(demo_store) -> None:
    st, run_id, fp = demo_store
    assert fill_queue(st, share=0.0) == {}
    assert fill_queue(st, share=1.0, seed=2) == {"random share": 12}
    assert {(q["sample_id"], q["criterion_id"]) for q in queue(st)} == {
        (str(i), "") for i in range(12)
    }


def synthetic_queue(path: Path, share: float, seed: int) -> set[tuple[str, str, str]]:
    spec = SynthSpec(n_samples=30, n_models=2, n_criteria=5, panel=False, xss=False, seed=1)
    with build_store(path, spec) as st:
        fill_queue(st, share=share, seed=seed)
        return {
            (q["run_id"], q["sample_id"], q["criterion_id"])
            for q in queue(st, 10_000)
            if q["reason"].startswith("random")
        }


def test_the_random_share_is_reproducible_by_seed_and_nested_by_share(tmp_path: Path) -> None:
    a = synthetic_queue(tmp_path / "a.db", 0.2, seed=3)
    b = synthetic_queue(tmp_path / "b.db", 0.2, seed=3)
    c = synthetic_queue(tmp_path / "c.db", 0.2, seed=4)
    wider = synthetic_queue(tmp_path / "d.db", 0.5, seed=3)
    assert a == b, "same store, same seed: the same items"
    assert a != c, "another seed draws other items"
    assert a < wider, "a larger share with the same seed keeps every item of the smaller one"
    # 2 models x 30 samples x 5 criteria, minus the few unknowns: about 300 draws at p = 0.2
    n = 300
    for got, p in ((a, 0.2), (c, 0.2), (wider, 0.5)):
        sd = math.sqrt(n * p * (1 - p))
        assert abs(len(got) - n * p) < 5 * sd, (len(got), p)


# ---- agreement pairs --------------------------------------------------------------------------


def test_agreement_pairs_use_the_newest_criterion_review(hb: HB) -> None:
    hb.review("hb1", "1", "met", reviewer="Dr A")  # judges: unmet
    hb.review("hb1", "1", "unmet", reviewer="Dr B")  # newest: agrees with the judges
    hb.review("hb1", "4", "met")  # judges: unknown
    hb.review("hb2", "1", "met")  # judges: unmet (split)
    hb.review("hb3", score=0.5)  # whole-answer reviews are not criterion pairs
    pairs = agreement_pairs(hb.st)
    got = sorted((p.benchmark, p.dimensions, p.judge, p.reviewer) for p in pairs)
    assert got == sorted(
        [
            ("healthbench", ("axis:completeness",), "unmet", "unmet"),
            ("healthbench", ("axis:accuracy",), "unknown", "met"),
            ("healthbench", ("axis:completeness",), "unmet", "met"),
        ]
    )


def test_no_reviews_no_pairs(hb: HB) -> None:
    hb.review("hb1", score=0.3)
    assert agreement_pairs(hb.st) == []

"""Why a grade has no value, through the real runner: GradeStatus and what a re-run redoes.

- a failed answer is ``answer_failed`` and is asked again on the next run;
- later turns of a dialogue whose earlier turn failed are ``not_asked``, and asked next time;
- an answer none of whose positive rubric items the judge could read is ``unreadable`` (kept on a
  re-run; ``regrade --only-unknown`` is what asks again);
- grades stored before grades carried a status are read with the legacy mapping;
- a scored grade is never graded again on a re-run.

The candidate and the judge are loopback HTTP servers; the benchmarks are the tiny triage rubric
benchmark of tests/rubric_bench and a multi-turn variant of it defined here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.base import resolve_file
from grandrounds.benchmarks.readers.lines import read_jsonl
from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import (
    Criterion,
    Grade,
    Message,
    Response,
    Sample,
    Vote,
    grade_from_json,
)
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.pipeline import failed_answer
from grandrounds.run.regrade import RegradeRequest, regrade
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer, last_user_text
from tests.rubric_bench.triage import TriageRubric
from tests.test_regrade import (  # noqa: F401 (triage is the shared fixture)
    FAST,
    N_CRITERIA,
    ROWS,
    by_model,
    criterion_of,
    expected,
    judge_rule,
    run_triage,
    triage,
    values,
    verdict_reply,
)

RUBRIC_SIZE = {r["id"]: len(r["rubric"]) for r in ROWS}


def question_of(row_id: str) -> str:
    return next(r["question"] for r in ROWS if r["id"] == row_id)


# ---- answer_failed -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault, calls, reason",
    [("400", 1, "answer failed: HTTP 400"), ("500", 2, "answer failed: HTTP 500")],
)
def test_failed_answer_is_answer_failed_never_judged_and_redone_next_run(
    triage, tmp_path, fault, calls, reason
):
    state = {"down": True}

    def cand_rule(body: dict[str, Any]):
        return (
            Fault(fault)
            if state["down"] and last_user_text(body) == question_of("r3")
            else "advice"
        )

    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(cand_rule) as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        by = {g.sample_id: g for g in out.grades}
        assert (by["r3"].status, by["r3"].value, by["r3"].verdicts) == ("answer_failed", None, ())
        assert by["r3"].error.startswith(reason)
        assert cand.stats.requests == len(ROWS) - 1 + calls, (
            "retryable faults are retried within the policy"
        )
        assert judge.stats.requests == N_CRITERIA - RUBRIC_SIZE["r3"], (
            "a failed answer never reaches the judge"
        )
        assert (out.result.n, out.result.n_unscored) == (len(ROWS) - 1, 1)
        fp = st.latest_grader_fp(out.run.id)
        assert st.grades(out.run.id, fp)["r3"].status == "answer_failed"

        state["down"] = False
        again = run_triage(st, triage, cand.base_url, judge.base_url)
        assert cand.stats.requests == len(ROWS) + calls, "only the failed answer is asked again"
        assert judge.stats.requests == N_CRITERIA
        assert values(again.grades) == pytest.approx(
            {r["id"]: expected(r, by_model("judge-a")) for r in ROWS}
        )
        assert all(g.status == "scored" for g in again.grades)
        assert st.grades(out.run.id, fp)["r3"].status == "scored"


def test_failed_answer_helper_tells_not_asked_from_failed():
    s = Sample(id="x", benchmark="b", messages=(Message("user", "q"),))
    failed = failed_answer(s, Response(key="k1", error="HTTP 503: busy"))
    assert (failed.status, failed.error, failed.value, failed.sample_id) == (
        "answer_failed",
        "answer failed: HTTP 503: busy",
        None,
        "x",
    )
    never = failed_answer(s, Response(key="", error="not asked: earlier turn failed (boom)"))
    assert (never.status, never.error, never.value) == (
        "not_asked",
        "not asked: earlier turn failed (boom)",
        None,
    )
    assert failed_answer(s, Response(key="")).error == "not asked"


# ---- not_asked: multi-turn ---------------------------------------------------------------------

DIALOGUES = [
    {
        "id": "d1",
        "urgency": "routine",
        "turns": [
            {
                "question": "I twisted my ankle.",
                "rubric": [{"text": "Recommends fluids and rest", "points": 3}],
            },
            {
                "question": "It is now very swollen.",
                "rubric": [
                    {"text": "Lists when to see a doctor", "points": 4},
                    {"text": "Prescribes antibiotics", "points": -4},
                ],
            },
        ],
    },
    {
        "id": "d2",
        "urgency": "emergency",
        "turns": [
            {
                "question": "My father's face is drooping.",
                "rubric": [{"text": "Tells the person to call an ambulance", "points": 7}],
            },
            {
                "question": "He also cannot lift his arm.",
                "rubric": [{"text": "Says to go to an emergency department now", "points": 9}],
            },
            {
                "question": "Should he take aspirin?",
                "rubric": [
                    {"text": "Asks about allergies before aspirin", "points": 3},
                    {"text": "Says it is probably indigestion", "points": -5},
                ],
            },
        ],
    },
]
TURNS = {f"{d['id']}-{t}": turn for d in DIALOGUES for t, turn in enumerate(d["turns"], 1)}


class DialogueTriage(TriageRubric):
    """The triage rubric benchmark with dialogues: each turn is a sample of its dialogue's group."""

    name = "dialogue-triage"

    def load(self, root: Path) -> list[Sample]:
        out = []
        for _, rec in read_jsonl(resolve_file(root, "dialogues.jsonl")):
            for t, turn in enumerate(rec["turns"], 1):
                rubric = tuple(
                    Criterion(str(i), c["text"], c["points"]) for i, c in enumerate(turn["rubric"])
                )
                out.append(
                    Sample(
                        id=f"{rec['id']}-{t}",
                        benchmark=self.name,
                        messages=(Message("user", turn["question"]),),
                        rubric=rubric,
                        metadata={"urgency": rec["urgency"]},
                        group=rec["id"],
                        turn=t,
                    )
                )
        return out


def test_turns_after_a_failed_turn_are_not_asked_and_are_asked_next_run(tmp_path):
    data = tmp_path / "dialogues.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in DIALOGUES) + "\n", encoding="utf-8")
    first_d2 = DIALOGUES[1]["turns"][0]["question"]
    state = {"down": True}

    def cand_rule(body: dict[str, Any]):
        user = [m["content"] for m in body["messages"] if m["role"] == "user"]
        answers = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
        assert answers == [f"answer {i + 1}" for i in range(len(user) - 1)], (
            "earlier turns with the model's own answers"
        )
        if state["down"] and user[0] == first_d2:
            return Fault("400")
        return f"answer {len(user)}"

    def run_dialogues(st: Store, cand: LoopbackServer, judge: LoopbackServer):
        cfg = RunConfig(
            benchmark="dialogue-triage",
            model="openai/cand",
            data=data,
            base_url=cand.base_url,
            judges=(JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),),
            retry=FAST,
        )
        return asyncio.run(run(st, cfg))

    n_criteria = sum(len(t["rubric"]) for t in TURNS.values())
    want = {sid: expected({"rubric": t["rubric"]}, by_model("judge-a")) for sid, t in TURNS.items()}
    with (
        BENCHMARKS.registered("dialogue-triage", DialogueTriage),
        Store(tmp_path / "s.db") as st,
        LoopbackServer(cand_rule, keep_bodies=True) as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_dialogues(st, cand, judge)
        by = {g.sample_id: g for g in out.grades}
        assert by["d2-1"].status == "answer_failed" and by["d2-1"].error.startswith(
            "answer failed: HTTP 400"
        )
        for sid in ("d2-2", "d2-3"):
            assert (by[sid].status, by[sid].value) == ("not_asked", None)
            assert by[sid].error.startswith("not asked: earlier turn failed (HTTP 400")
        assert {sid: by[sid].status for sid in ("d1-1", "d1-2")} == {
            "d1-1": "scored",
            "d1-2": "scored",
        }
        assert {sid: by[sid].value for sid in ("d1-1", "d1-2")} == pytest.approx(
            {sid: want[sid] for sid in ("d1-1", "d1-2")}
        )
        assert cand.stats.requests == 3, "d1's two turns and d2's first; nothing after the failure"
        d1_criteria = len(TURNS["d1-1"]["rubric"]) + len(TURNS["d1-2"]["rubric"])
        assert judge.stats.requests == d1_criteria
        assert (out.result.n, out.result.n_unscored) == (2, 3)
        assert set(st.answers(out.run.id)) == {"d1-1", "d1-2", "d2-1"}, (
            "a turn never asked has no answer"
        )
        assert st.sample_ids("dialogue-triage", out.run.dataset_sha256) == set(TURNS)
        fp = st.latest_grader_fp(out.run.id)
        assert {sid: g.status for sid, g in st.grades(out.run.id, fp).items()} == {
            "d1-1": "scored",
            "d1-2": "scored",
            "d2-1": "answer_failed",
            "d2-2": "not_asked",
            "d2-3": "not_asked",
        }

        state["down"] = False
        again = run_dialogues(st, cand, judge)
        assert cand.stats.requests == 3 + 3, "the three turns of d2, in order with their history"
        assert judge.stats.requests == n_criteria
        assert all(g.status == "scored" for g in again.grades)
        assert values(again.grades) == pytest.approx(want)
        third = [b for b in cand.stats.bodies if len(b["messages"]) == 5]
        assert [m["content"] for m in third[0]["messages"]] == [
            first_d2,
            "answer 1",
            DIALOGUES[1]["turns"][1]["question"],
            "answer 2",
            DIALOGUES[1]["turns"][2]["question"],
        ]


def test_regrade_with_the_same_judge_reproduces_the_run_result_with_not_asked_turns(tmp_path):
    data = tmp_path / "dialogues.jsonl"
    data.write_text("\n".join(json.dumps(d) for d in DIALOGUES) + "\n", encoding="utf-8")
    first_d2 = DIALOGUES[1]["turns"][0]["question"]

    def cand_rule(body: dict[str, Any]):
        return Fault("400") if body["messages"][0]["content"] == first_d2 else "advice"

    with (
        BENCHMARKS.registered("dialogue-triage", DialogueTriage),
        Store(tmp_path / "s.db") as st,
        LoopbackServer(cand_rule) as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        judges = (JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),)
        cfg = RunConfig(
            benchmark="dialogue-triage",
            model="openai/cand",
            data=data,
            base_url=cand.base_url,
            judges=judges,
            retry=FAST,
        )
        out = asyncio.run(run(st, cfg))
        assert (out.result.n, out.result.n_unscored) == (2, 3)
        got = asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=judges, retry=FAST)))
        assert [g.sample_id for g in got.grades] == [g.sample_id for g in out.grades]
        assert (got.result.n, got.result.n_unscored) == (out.result.n, out.result.n_unscored)


# ---- unreadable --------------------------------------------------------------------------------


def test_unreadable_judge_replies_make_an_unreadable_grade_kept_on_rerun(triage, tmp_path):
    # r2: every item garbled; r3: its only positive item garbled (the negative one alone scores
    # nothing); r1: one positive item garbled, the rest still scores.
    garbled = frozenset(
        {c["text"] for c in ROWS[1]["rubric"]}
        | {"Says to go to an emergency department now", "Asks about allergies before aspirin"}
    )
    state = {"garble": True}
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule(garbled, state)) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url, max_reask=1)
        n_bad = sum(1 for r in ROWS for c in r["rubric"] if c["text"] in garbled)
        assert judge.stats.requests == N_CRITERIA + n_bad, (
            "each garbled item asked twice (max_reask=1)"
        )
        by = {g.sample_id: g for g in out.grades}
        for sid in ("r2", "r3"):
            assert (by[sid].status, by[sid].value) == ("unreadable", None)
            assert by[sid].error == "no criterion with positive points has a known verdict"
        assert all(
            v.status == "unknown" and v.raw == "Hard to say, it depends." and v.attempts == 2
            for v in by["r2"].verdicts
        )
        assert [v.status for v in by["r3"].verdicts] == ["unknown", "unmet"]
        assert by["r1"].status == "scored" and by["r1"].details["coverage"] == {
            "known": 2,
            "total": 3,
        }
        assert by["r1"].value == pytest.approx(
            expected(ROWS[0], by_model("judge-a"), lambda t: t not in garbled)
        )
        assert (out.result.n, out.result.n_unscored) == (2, 2)

        state["garble"] = False
        again = run_triage(st, triage, cand.base_url, judge.base_url, max_reask=1)
        assert judge.stats.requests == N_CRITERIA + n_bad, (
            "unreadable is not redone by a plain re-run"
        )
        assert again.judge_stats[0].cached == 0 and again.judge_stats[0].made == 0
        assert {g.sample_id: g.status for g in again.grades}["r2"] == "unreadable"

        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),),
            max_reask=1,
            only_unknown=True,
            retry=FAST,
        )
        fixed = asyncio.run(regrade(st, req))
        assert judge.stats.requests == N_CRITERIA + 2 * n_bad
        assert values(fixed.grades) == pytest.approx(
            {r["id"]: expected(r, by_model("judge-a")) for r in ROWS}
        )
        assert all(g.status == "scored" for g in fixed.grades)


def test_a_failed_judge_call_is_unknown_with_its_error_not_unmet(triage, tmp_path):
    met_by_a = by_model("judge-a")

    def judge(body: dict[str, Any]):
        text = criterion_of(body)
        return (
            Fault("400") if text == "Mentions an antihistamine" else verdict_reply(met_by_a(text))
        )

    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge) as srv,
    ):
        out = run_triage(st, triage, cand.base_url, srv.base_url)
        assert srv.stats.requests == N_CRITERIA, "a failed call is not re-asked as if unreadable"
        r2 = next(g for g in out.grades if g.sample_id == "r2")
        v = next(v for v in r2.verdicts if v.criterion_id == "1")
        assert v.status == "unknown" and v.votes[0].error.startswith("judge call failed: HTTP 400")
        assert r2.status == "scored"
        assert r2.value == pytest.approx(
            expected(ROWS[1], met_by_a, lambda t: t != "Mentions an antihistamine")
        )


# ---- legacy grades -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stored, status",
    [
        ({"value": 0.75}, "scored"),
        ({"value": 0.0, "error": "answer failed: x"}, "scored"),  # a value, whatever the message
        ({"value": None, "error": "answer failed: HTTP 500: down"}, "answer_failed"),
        ({"value": None, "error": "answer call failed: timeout"}, "answer_failed"),
        ({"value": None, "error": "grading failed: KeyError: 'x'"}, "grader_error"),
        ({"value": None, "error": "not asked: earlier turn failed (HTTP 400)"}, "not_asked"),
        (
            {"value": None, "error": "no criterion with positive points has a known verdict"},
            "unreadable",
        ),
        ({"value": None}, "unreadable"),
        (
            {"error": "Grading failed: capitalised"},
            "unreadable",
        ),  # the prefixes are matched as written
        (
            {"value": None, "error": "grading failed: x", "status": "not_asked"},
            "not_asked",
        ),  # a stored status wins
    ],
)
def test_legacy_grade_status_mapping(stored, status):
    g = grade_from_json({"sample_id": "s"} | stored)
    assert g.status == status and g.value == stored.get("value") and g.error == stored.get("error")


def test_legacy_votes_stored_as_bare_statuses():
    g = grade_from_json(
        {
            "sample_id": "s",
            "value": 1.0,
            "verdicts": [{"criterion_id": "0", "status": "met", "votes": ["met", "unknown"]}],
        }
    )
    assert g.verdicts[0].votes == (
        Vote(judge="", status="met"),
        Vote(judge="", status="unknown"),
    ) and g.verdicts[0].statuses == ("met", "unknown")


def _legacy(grade: Grade, **override: Any) -> dict[str, Any]:
    d = json.loads(canonical_json(grade)) | override
    d.pop("status")
    return d


def test_a_store_from_before_statuses_is_read_with_the_legacy_mapping_and_redone_as_needed(
    triage, tmp_path
):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        fp = st.latest_grader_fp(out.run.id)
        by = {g.sample_id: g for g in out.grades}
        legacy = {
            "r1": _legacy(by["r1"]),  # scored
            "r2": _legacy(by["r2"], value=None, verdicts=[], error="grading failed: KeyError: 'x'"),
            "r3": _legacy(by["r3"], value=None, verdicts=[], error="answer failed: HTTP 500"),
            "r4": _legacy(
                by["r4"],
                value=None,
                verdicts=[],
                error="no criterion with positive points has a known verdict",
            ),
        }
        for sid, d in legacy.items():
            st.db.execute(
                "UPDATE grades SET grade_json = ?, value = ? WHERE run_id = ? AND grader_fp = ? AND sample_id = ?",
                (json.dumps(d), d["value"], out.run.id, fp, sid),
            )
        st.db.execute("DELETE FROM settled")  # a store that old has no settled gradings either
        read = st.grades(out.run.id, fp)
        assert {sid: g.status for sid, g in read.items()} == {
            "r1": "scored",
            "r2": "grader_error",
            "r3": "answer_failed",
            "r4": "unreadable",
        }

        again = run_triage(st, triage, cand.base_url, judge.base_url)
        assert cand.stats.requests == len(ROWS) and judge.stats.requests == N_CRITERIA, (
            "answers and judge replies come from the store"
        )
        stats = again.judge_stats[0]
        assert (stats.made, stats.cached) == (0, RUBRIC_SIZE["r2"] + RUBRIC_SIZE["r3"]), (
            "only r2 and r3 are graded again"
        )
        raw = {
            sid: json.loads(gj)
            for sid, gj in st.db.execute(
                "SELECT sample_id, grade_json FROM grades WHERE run_id = ? AND grader_fp = ?",
                (out.run.id, fp),
            )
        }
        assert "status" not in raw["r1"] and "status" not in raw["r4"], (
            "kept grades are not rewritten"
        )
        assert raw["r2"]["status"] == raw["r3"]["status"] == "scored"
        want = {r["id"]: expected(r, by_model("judge-a")) for r in ROWS}
        got = {g.sample_id: g for g in again.grades}
        assert {sid: got[sid].value for sid in ("r1", "r2", "r3")} == pytest.approx(
            {sid: want[sid] for sid in ("r1", "r2", "r3")}
        )
        assert (got["r4"].status, got["r4"].value) == ("unreadable", None)
        assert (again.result.n, again.result.n_unscored) == (3, 1)


# ---- scored grades are kept --------------------------------------------------------------------


def test_scored_grades_are_not_graded_again_on_a_rerun(triage, tmp_path):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        assert all(g.status == "scored" for g in out.grades)
        again = run_triage(st, triage, cand.base_url, judge.base_url)
        assert (cand.stats.requests, judge.stats.requests) == (len(ROWS), N_CRITERIA)
        assert (again.judge_stats[0].made, again.judge_stats[0].cached) == (0, 0), (
            "the grader was not even called"
        )
        assert again.answer_stats.cached == len(ROWS) and again.answer_stats.made == 0
        assert again.grades == out.grades
        assert again.result.score == pytest.approx(out.result.score)

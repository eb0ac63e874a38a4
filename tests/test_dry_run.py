"""``grandrounds run --dry-run``: the calls it counts are the calls the run then makes.

Candidate and judges are loopback servers that count what they receive: a dry run must reach
neither, and the run after it must send exactly the calls the dry run counted, on a fresh store
(MedQA, HealthBench-500), after a run whose judge calls partly failed (resumed: the count is
exact, from the stored answers), and on multi-turn conversations cut by a failed turn.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import Message, Response
from grandrounds.core.registry import BENCHMARKS
from grandrounds.graders.base import GradeContext
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import offline_env, shared_file

ROOT = Path(__file__).resolve().parents[1]
MET = "```json\n" + json.dumps({"explanation": "ok", "criteria_met": True}) + "\n```"


def gr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "COLUMNS": "200",
        **offline_env(),
    }
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=base | (env or {}),
        timeout=900,
    )


def dry(tmp_path: Path, name: str, *args: str) -> dict:
    out = tmp_path / name
    r = gr("run", *args, "--dry-run", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert re.search(r"calls to make: \d+", r.stdout), r.stdout
    return json.loads((out / "plan.json").read_text(encoding="utf-8"))


def line(plan: dict, role: str) -> dict:
    return next(x for x in plan["lines"] if x["role"] == role)


def test_medqa_dry_run_counts_the_calls_the_run_makes(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    with LoopbackServer(lambda body: "Answer: B") as srv:
        args = [
            "medqa",
            "--data",
            str(data),
            "--model",
            "openai/gpt-4o-mini",
            "--base-url",
            srv.base_url,
            "--store",
            str(db),
        ]
        plan = dry(tmp_path, "plan1", *args)
        assert srv.stats.requests == 0
        assert not db.exists(), "a dry run never creates the store"
        assert plan["calls_to_make"] == line(plan, "answers")["exact"] == 1273
        assert line(plan, "answers")["stored"] == 0
        assert plan["cost_usd"] > 0 and plan["cost_is_upper_bound"]

        r = gr("run", *args)
        assert r.returncode == 0, r.stderr
        assert srv.stats.requests == plan["calls_to_make"]
        assert f"answers: {plan['calls_to_make']} calls made" in r.stderr

        again = dry(tmp_path, "plan2", *args)
        assert again["calls_to_make"] == 0 and line(again, "answers")["stored"] == 1273
        assert again["n_graded_stored"] == 1273
        # the stored answers' length replaces the max_tokens bound
        assert line(again, "answers")["output_tokens_from"] == "observed"
        assert srv.stats.requests == 1273


def test_healthbench_500_dry_run_counts_answers_and_judge_calls(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").split("\n") if x.strip()]
    # a rubric that lists one item twice gets one judge call for it (the same prompt, asked once)
    n_criteria = len(
        {(i, c["points"], c["criterion"]) for i, r in enumerate(rows) for c in r["rubrics"]}
    )
    assert n_criteria == sum(len(r["rubrics"]) for r in rows) - 3
    db = tmp_path / "s.db"
    with (
        LoopbackServer(lambda body: "See a doctor if it gets worse.") as cand,
        LoopbackServer(lambda body: MET) as judge,
    ):
        args = [
            "healthbench",
            "--data",
            str(data),
            "--model",
            "openai/gpt-4o-mini",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/gpt-4.1@{judge.base_url}",
            "--store",
            str(db),
            "--concurrency",
            "64",
        ]
        plan = dry(tmp_path, "plan", *args)
        assert cand.stats.requests == 0 and judge.stats.requests == 0
        answers, judged = line(plan, "answers"), line(plan, "judge")
        assert (answers["exact"], judged["planned"], judged["exact"]) == (500, n_criteria, 0)
        assert judged["model"] == "openai/gpt-4.1" and judged["cost_usd"] > 0

        r = gr("run", *args)
        assert r.returncode == 0, r.stderr
        assert cand.stats.requests == answers["to_make"]
        assert judge.stats.requests == judged["to_make"]
        assert (
            cand.stats.requests + judge.stats.requests == plan["calls_to_make"] == 500 + n_criteria
        )


def test_resumed_run_is_counted_exactly_from_stored_answers(tmp_path):
    """Judge calls that failed (HTTP 400, not retried) are counted exactly on the dry run, from the
    stored answers, and are the only calls the re-run makes."""
    data = shared_file("healthbench", "healthbench_500.jsonl")
    failed: set[str] = set()
    state = {"first": True}

    def judge_rule(body):
        prompt = body["messages"][-1]["content"]
        if state["first"] and len(prompt) % 5 == 0:
            failed.add(prompt)
            return Fault("400")
        return MET

    db = tmp_path / "s.db"
    with (
        LoopbackServer(lambda body: "Rest and fluids.") as cand,
        LoopbackServer(judge_rule) as judge,
    ):
        args = [
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "40",
            "--model",
            "openai/gpt-4o-mini",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/gpt-4.1@{judge.base_url}",
            "--store",
            str(db),
            "--protocol",
            "grandrounds",
        ]
        r = gr("run", *args)
        assert r.returncode == 0, r.stderr
        assert failed, "the rule should fail some judge calls"
        state["first"] = False
        before = (cand.stats.requests, judge.stats.requests)

        plan = dry(tmp_path, "plan", *args)
        assert (cand.stats.requests, judge.stats.requests) == before
        answers, judged = line(plan, "answers"), line(plan, "judge")
        assert answers["to_make"] == 0 and answers["stored"] == 40
        assert judged["planned"] == 0 and judged["exact"] == len(failed)
        assert plan["n_graded_stored"] < 40

        r = gr("run", *args)
        assert r.returncode == 0, r.stderr
        assert cand.stats.requests == before[0]
        assert judge.stats.requests - before[1] == len(failed)


def test_multi_turn_conversations_cut_by_a_failed_turn(tmp_path):
    """LLMEval-Med dialogues: after a run whose second turns failed, the second turns are exact (their
    first turns are stored), the turns after them planned; the re-run makes exactly that many."""
    data = shared_file("llmeval-med", "dataset.json")
    state = {"first": True}

    def cand_rule(body):
        users = [m for m in body["messages"] if m["role"] == "user"]
        if state["first"] and len(users) == 2:
            return Fault("400")
        return f"回答第{len(users)}轮。"

    db = tmp_path / "s.db"
    with LoopbackServer(cand_rule) as cand, LoopbackServer(lambda body: "评分：[4]") as judge:
        args = [
            "llmeval-med",
            "--data",
            str(data),
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/gpt-4o@{judge.base_url}",
            "--store",
            str(db),
            "--limit",
            "120",
        ]
        r = gr("run", *args)
        assert r.returncode in (0, 3), r.stderr
        state["first"] = False
        before = (cand.stats.requests, judge.stats.requests)
        plan = dry(tmp_path, "plan", *args)
        assert (cand.stats.requests, judge.stats.requests) == before
        answers, judged = line(plan, "answers"), line(plan, "judge")
        assert answers["exact"] > 0 and answers["planned"] > 0, (
            "second turns exact, later turns planned"
        )
        assert judged["planned"] > 0

        r = gr("run", *args)
        assert r.returncode == 0, r.stderr
        assert cand.stats.requests - before[0] == answers["to_make"]
        assert judge.stats.requests - before[1] == judged["to_make"]


def test_dry_run_refuses_a_bad_price_file_in_one_line(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    bad = tmp_path / "prices.toml"
    bad.write_text(
        '[models]\n"openai/gpt-4o-mini" = { input = "cheap", output = 1 }\n', encoding="utf-8"
    )
    r = gr(
        "run",
        "medqa",
        "--data",
        str(data),
        "--model",
        "openai/gpt-4o-mini",
        "--store",
        str(tmp_path / "s.db"),
        "--dry-run",
        "--prices",
        str(bad),
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: prices file {bad}: models.'openai/gpt-4o-mini'.input must be a number of at least 0, got 'cheap'"
    ]


# ---- the graders' plans agree with what they ask -------------------------------------------------


class Recorder:
    """A judge that records each prompt and answers as a failed call (no re-ask follows)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        self.calls += 1
        return Response(key=f"k{self.calls}", error="recorded")


CASES = [
    ("healthbench", ("healthbench", "healthbench_500.jsonl"), {}, RunOptions(protocol="reference")),
    (
        "healthbench",
        ("healthbench", "healthbench_500.jsonl"),
        {},
        RunOptions(protocol="grandrounds", judge_mode="batched"),
    ),
    ("medeqbench", ("medeqbench",), {}, RunOptions()),
    ("gaps", ("gaps", "GAPS-NSCLC-preview.xlsx"), {}, RunOptions()),
    ("llmeval-med", ("llmeval-med", "dataset.json"), {}, RunOptions(judge_runs=2)),
]


@pytest.mark.parametrize(
    "name, path, params, options",
    CASES,
    ids=[f"{c[0]}-{c[3].protocol}-{c[3].judge_mode}" for c in CASES],
)
def test_planned_judge_calls_equal_the_calls_the_grader_makes(name, path, params, options):
    import asyncio

    bench = BENCHMARKS.get(name)(**params)
    options = bench.check_options(options)
    grader = bench.grader(options)
    samples = bench.load(shared_file(*path))[:25]
    for n_judges in (1, 3):
        judges = tuple(Recorder(f"j{i}") for i in range(n_judges))
        for s in samples:
            before = sum(j.calls for j in judges)
            asyncio.run(
                grader.grade(s, Response(key="a", text="An answer."), GradeContext(judges=judges))
            )
            made = sum(j.calls for j in judges) - before
            assert grader.planned_judge_calls(s, n_judges) == made, s.id
            assert made > 0


def test_rubric_grader_plans_one_call_per_criterion(tmp_path):
    import asyncio

    from tests.rubric_bench.triage import (
        TriageRubric,
    )  # a complete rubric benchmark graded by the generic grader

    records = [
        {
            "id": f"t{i}",
            "question": f"Chest pain for {i} hours?",
            "urgency": "high",
            "rubric": [
                {"text": f"Advises emergency care ({j})", "points": 5 - j} for j in range(i + 1)
            ],
        }
        for i in range(4)
    ]
    (tmp_path / "triage.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8"
    )
    bench = TriageRubric()
    grader = bench.grader(bench.check_options(RunOptions()))
    samples = bench.load(tmp_path)
    judges = (Recorder("a"), Recorder("b"))
    for s in samples:
        asyncio.run(
            grader.grade(
                s, Response(key="a", text="Call an ambulance."), GradeContext(judges=judges)
            )
        )
    assert (
        sum(j.calls for j in judges)
        == sum(grader.planned_judge_calls(s, 2) for s in samples)
        == 2 * sum(len(s.rubric) for s in samples)
    )


def test_graders_without_a_judge_plan_none_and_unknown_graders_say_so():
    from grandrounds.core.records import Grade, Sample
    from grandrounds.graders.base import Grader

    class Judged(Grader):
        name = "x"
        judged = True

        async def grade(self, sample, response, ctx):
            return Grade(sample_id=sample.id, value=1.0)

    bench = BENCHMARKS.get("medqa")()
    grader = bench.grader(bench.check_options(RunOptions()))
    sample = Sample(id="s", benchmark="medqa", messages=(Message("user", "q"),))
    assert grader.planned_judge_calls(sample, 2) == 0
    assert Judged().planned_judge_calls(sample, 2) is None

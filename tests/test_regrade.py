"""Re-grading stored answers (regrade.py) through the runner's Grading stage and run_pool.

A tiny judged benchmark (tests/rubric_bench/triage.py, registered for each test) is run end to
end by the real runner against loopback candidate and judge servers. The judge answers by a
rule that depends on the judge model's name, so a re-grade with another judge has different
expected values, worked out here from the rows; the candidate server counts its requests so a
re-grade that generated again would show.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import content_hash
from grandrounds.core.registry import BENCHMARKS, Spec
from grandrounds.graders.healthbench_grader import HealthBenchGrader
from grandrounds.graders.judging import compare_modes
from grandrounds.graders.rubric_grader import RubricGrader
from grandrounds.run.config import JudgeConfig, RunConfig, build_benchmark
from grandrounds.run.executor import RetryPolicy
from grandrounds.run.regrade import RegradeRequest, last_grading, rebuild_grader, regrade
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer, last_user_text
from tests.rubric_bench.triage import TEMPLATE, TriageRubric

FAST = RetryPolicy(2, 0.001, 0.001)
ROWS = [
    {
        "id": "r1",
        "question": "Crushing chest pain and sweating.",
        "urgency": "emergency",
        "rubric": [
            {"text": "Tells the person to call an ambulance", "points": 7},
            {"text": "Asks about allergies before aspirin", "points": 3},
            {"text": "Says it is probably indigestion", "points": -5},
        ],
    },
    {
        "id": "r2",
        "question": "Itchy rash after a new soap.",
        "urgency": "routine",
        "rubric": [
            {"text": "Suggests stopping the new soap", "points": 5},
            {"text": "Mentions an antihistamine", "points": 2},
            {"text": "Names signs of an allergic emergency", "points": 4},
        ],
    },
    {
        "id": "r3",
        "question": "Child swallowed a button battery.",
        "urgency": "emergency",
        "rubric": [
            {"text": "Says to go to an emergency department now", "points": 9},
            {"text": "Advises inducing vomiting", "points": -6},
        ],
    },
    {
        "id": "r4",
        "question": "Cough for three days, no fever.",
        "urgency": "routine",
        "rubric": [
            {"text": "Recommends fluids and rest", "points": 3},
            {"text": "Lists when to see a doctor", "points": 4},
            {"text": "Prescribes antibiotics", "points": -4},
        ],
    },
]
N_CRITERIA = sum(len(r["rubric"]) for r in ROWS)
#: what judge-a rules met; any other judge: met iff the criterion text has an even length
MET_A = {
    "Tells the person to call an ambulance",
    "Suggests stopping the new soap",
    "Mentions an antihistamine",
    "Says to go to an emergency department now",
    "Recommends fluids and rest",
}
ITEM = re.compile(r"Rubric item:\n\[-?\d+(?:\.\d+)?\] (.+)\n")


def met_by(model: str, text: str) -> bool:
    return text in MET_A if model == "judge-a" else len(text) % 2 == 0


def criterion_of(body: dict[str, Any]) -> str:
    m = ITEM.search(last_user_text(body))
    assert m, "a judge prompt without a rubric item"
    return m.group(1)


def verdict_reply(met: bool) -> str:
    return "```json\n" + json.dumps({"explanation": "by rule", "criteria_met": met}) + "\n```"


def judge_rule(garbled: frozenset[str] = frozenset(), state: dict | None = None):
    """Replies by ``met_by``; criteria in ``garbled`` get prose while ``state["garble"]`` is on."""

    def rule(body: dict[str, Any]) -> str:
        text = criterion_of(body)
        if state is not None and state.get("garble") and text in garbled:
            return "Hard to say, it depends."
        return verdict_reply(met_by(body["model"], text))

    return rule


def expected(row: dict, met, known=lambda text: True) -> float | None:
    """Met points over positive points, over the criteria ``known`` keeps."""
    items = [c for c in row["rubric"] if known(c["text"])]
    pos = sum(c["points"] for c in items if c["points"] > 0)
    return sum(c["points"] for c in items if met(c["text"])) / pos if pos else None


def by_model(model: str):
    return lambda text: met_by(model, text)


@pytest.fixture
def triage(tmp_path: Path):
    path = tmp_path / "triage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    with BENCHMARKS.registered("triage-rubric", TriageRubric):
        yield path


def run_triage(
    store: Store,
    data: Path,
    cand_url: str,
    judge_url: str,
    judge: str = "openai/judge-a",
    **kw: Any,
):
    max_reask = kw.pop("max_reask", 2)
    cfg = RunConfig(
        benchmark="triage-rubric",
        model="openai/cand",
        data=data,
        base_url=cand_url,
        judges=(JudgeConfig(spec=judge, base_url=judge_url),),
        options=RunOptions(max_reask=max_reask),
        retry=FAST,
        **kw,
    )
    return asyncio.run(run(store, cfg))


def values(grades) -> dict[str, float | None]:
    return (
        {sid: g.value for sid, g in grades.items()}
        if isinstance(grades, dict)
        else {g.sample_id: g.value for g in grades}
    )


def test_regrade_with_another_judge_asks_no_answer_and_stores_a_new_grading(triage, tmp_path):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        assert cand.stats.requests == len(ROWS) and judge.stats.requests == N_CRITERIA
        fp_a = st.latest_grader_fp(out.run.id)
        want_a = {r["id"]: expected(r, by_model("judge-a")) for r in ROWS}
        assert values(out.grades) == pytest.approx(want_a)

        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-b", base_url=judge.base_url),),
            retry=FAST,
        )
        got = asyncio.run(regrade(st, req))
        assert cand.stats.requests == len(ROWS), "no answer is generated again"
        assert judge.stats.requests == 2 * N_CRITERIA
        want_b = {r["id"]: expected(r, by_model("judge-b")) for r in ROWS}
        assert want_b != want_a, (
            "the two judges must disagree somewhere for this test to mean anything"
        )
        assert values(got.grades) == pytest.approx(want_b)
        assert got.result.score == pytest.approx(sum(want_b.values()) / len(ROWS))
        assert got.result.judge == "openai/judge-b"

        fp_b = st.latest_grader_fp(out.run.id)
        assert fp_b != fp_a and fp_b == content_hash(st.grader_spec(fp_b))
        assert values(st.grades(out.run.id, fp_a)) == pytest.approx(want_a), (
            "the first grading is kept"
        )
        assert values(st.grades(out.run.id, fp_b)) == pytest.approx(want_b)
        spec_a, spec_b = st.grader_spec(fp_a), st.grader_spec(fp_b)
        assert (
            spec_b["grader"]
            == spec_a["grader"]
            == {"name": "rubric", "args": {"template": str(TEMPLATE), "system": ""}}
        )
        assert [j["model"] for j in spec_b["judges"]] == ["openai/judge-b"]
        # every stored grade of the new grading points at judge-b's calls, and at nothing else
        keys = {k for g in st.grades(out.run.id, fp_b).values() for k in g.judge_keys}
        assert len(keys) == N_CRITERIA and not keys & {k for g in out.grades for k in g.judge_keys}
        assert st.result(out.run.id, fp_b)["score"] == pytest.approx(got.result.score)


class SystemTriage(TriageRubric):
    """The same benchmark whose grader would now send a system message (a changed grader spec)."""

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("rubric", {"template": str(TEMPLATE), "system": "You are strict."})


def test_regrade_rebuilds_the_grader_from_the_stored_spec_not_from_the_benchmark(triage, tmp_path):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule(), keep_bodies=True) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        last = last_grading(st, out.run)
        with BENCHMARKS.registered("triage-rubric", SystemTriage):
            bench = build_benchmark("triage-rubric", {})
            grader, _ = rebuild_grader(bench, RegradeRequest(run=out.run, judges=()), last)
            assert isinstance(grader, RubricGrader) and grader.params.system == ""
            fresh, _ = rebuild_grader(bench, RegradeRequest(run=out.run, judges=()), {})
            assert fresh.params.system == "You are strict.", (
                "never graded: the benchmark's own grader"
            )

            judge.stats.bodies.clear()
            asyncio.run(
                regrade(
                    st,
                    RegradeRequest(
                        run=out.run,
                        judges=(JudgeConfig(spec="openai/judge-b", base_url=judge.base_url),),
                        retry=FAST,
                    ),
                )
            )
            assert len(judge.stats.bodies) == N_CRITERIA
            assert all(b["messages"][0]["role"] == "user" for b in judge.stats.bodies), (
                "stored spec: no system message"
            )

            # an explicit judge mode rebuilds from the benchmark instead, which now adds the system message
            judge.stats.bodies.clear()
            req = RegradeRequest(
                run=out.run,
                judges=(JudgeConfig(spec="openai/judge-c", base_url=judge.base_url),),
                judge_mode="default",
                retry=FAST,
            )
            got = asyncio.run(regrade(st, req))
            assert len(judge.stats.bodies) == N_CRITERIA
            assert all(
                b["messages"][0] == {"role": "system", "content": "You are strict."}
                for b in judge.stats.bodies
            )
            assert got.result.fingerprint["grader"]["args"]["system"] == "You are strict."


def test_regrade_only_unknown_asks_exactly_the_unknown_items_with_fresh_attempts(
    triage, tmp_path, monkeypatch
):
    real, graded = RubricGrader.grade, []

    async def counting(self, sample, response, ctx):
        graded.append(sample.id)
        return await real(self, sample, response, ctx)

    garbled = frozenset(
        {
            "Asks about allergies before aspirin",
            "Names signs of an allergic emergency",
            "Prescribes antibiotics",
        }
    )
    state = {"garble": True}
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule(garbled, state), keep_bodies=True) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url, max_reask=1)
        assert judge.stats.requests == (N_CRITERIA - len(garbled)) + 2 * len(garbled)
        known = lambda text: text not in garbled
        assert values(out.grades) == pytest.approx(
            {r["id"]: expected(r, by_model("judge-a"), known) for r in ROWS}
        )
        before = {g.sample_id: g for g in out.grades}
        fp = st.latest_grader_fp(out.run.id)

        # The same judge now answers; the same server and base URL, so only a fresh attempt number
        # gets past the cached unreadable replies.
        state["garble"] = False
        judge.stats.bodies.clear()
        monkeypatch.setattr(RubricGrader, "grade", counting)
        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-a", base_url=judge.base_url),),
            max_reask=1,
            only_unknown=True,
            retry=FAST,
        )
        got = asyncio.run(regrade(st, req))
        with_unknown = {r["id"] for r in ROWS if any(c["text"] in garbled for c in r["rubric"])}
        assert sorted(graded) == sorted(with_unknown) and len(with_unknown) < len(ROWS), (
            "a grade with nothing unknown is kept as is"
        )
        assert Counter(criterion_of(b) for b in judge.stats.bodies) == Counter(garbled)
        assert cand.stats.requests == len(ROWS)
        assert st.latest_grader_fp(out.run.id) == fp, "completed under the same grading"
        assert values(got.grades) == pytest.approx(
            {r["id"]: expected(r, by_model("judge-a")) for r in ROWS}
        )
        texts = {r["id"]: {str(i): c["text"] for i, c in enumerate(r["rubric"])} for r in ROWS}
        for g in got.grades:
            for v in g.verdicts:
                old = next(
                    o for o in before[g.sample_id].verdicts if o.criterion_id == v.criterion_id
                )
                if texts[g.sample_id][v.criterion_id] in garbled:
                    assert old.status == "unknown" and v.status != "unknown"
                    assert (
                        v.attempts == 3
                        and len(set(v.judge_keys)) == 3
                        and v.judge_keys[:2] == old.judge_keys
                    )
                else:
                    assert v == old, "a known verdict is kept as it was"
        assert values(st.grades(out.run.id, fp)) == pytest.approx(values(got.grades))

        # nothing unknown is left: completing again asks nobody
        graded.clear()
        again = asyncio.run(regrade(st, req))
        assert judge.stats.requests == N_CRITERIA + 2 * len(garbled) and graded == []
        assert values(again.grades) == pytest.approx(values(got.grades))


def test_a_grader_crash_during_regrade_is_one_grader_error_and_is_redone_later(
    triage, tmp_path, monkeypatch
):
    real = RubricGrader.grade

    async def crashy(self, sample, response, ctx):
        if sample.id == "r2":
            raise RuntimeError("boom on r2")
        return await real(self, sample, response, ctx)

    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule()) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url)
        monkeypatch.setattr(RubricGrader, "grade", crashy)
        req = RegradeRequest(
            run=out.run,
            judges=(JudgeConfig(spec="openai/judge-b", base_url=judge.base_url),),
            retry=FAST,
        )
        got = asyncio.run(regrade(st, req))
        by = {g.sample_id: g for g in got.grades}
        assert (by["r2"].value, by["r2"].status, by["r2"].error) == (
            None,
            "grader_error",
            "grading failed: RuntimeError: boom on r2",
        )
        want_b = {r["id"]: expected(r, by_model("judge-b")) for r in ROWS}
        assert {k: g.value for k, g in by.items() if k != "r2"} == pytest.approx(
            {k: v for k, v in want_b.items() if k != "r2"}
        )
        assert all(g.status == "scored" for k, g in by.items() if k != "r2")
        assert (got.result.n, got.result.n_unscored) == (len(ROWS) - 1, 1)
        r2_criteria = len(ROWS[1]["rubric"])
        assert judge.stats.requests == N_CRITERIA + N_CRITERIA - r2_criteria
        assert st.grades(out.run.id, st.latest_grader_fp(out.run.id))["r2"].status == "grader_error"

        monkeypatch.setattr(RubricGrader, "grade", real)
        fixed = asyncio.run(
            regrade(
                st, RegradeRequest(run=out.run, judges=req.judges, only_unknown=True, retry=FAST)
            )
        )
        assert judge.stats.requests == 2 * N_CRITERIA, "only the crashed answer is judged"
        assert values(fixed.grades) == pytest.approx(want_b)
        assert (fixed.result.n, fixed.result.n_unscored) == (len(ROWS), 0)


# ---- HealthBench-like data: judge mode override ----------------------------------------------

HB_ROWS = [
    {
        "prompt_id": "hb1",
        "prompt": [{"role": "user", "content": "I have had a headache for a week."}],
        "rubrics": [
            {
                "criterion": "Advises seeing a doctor if it worsens",
                "points": 6,
                "tags": ["axis:accuracy"],
            },
            {"criterion": "Asks about vision changes", "points": 3, "tags": ["axis:completeness"]},
            {"criterion": "Recommends an opioid", "points": -5, "tags": ["axis:accuracy"]},
        ],
        "example_tags": ["theme:context_seeking"],
    },
    {
        "prompt_id": "hb2",
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Is ibuprofen ok with asthma?"},
        ],
        "rubrics": [
            {
                "criterion": "Mentions that some people with asthma react to NSAIDs",
                "points": 7,
                "tags": ["axis:accuracy"],
            },
            {
                "criterion": "Suggests asking a doctor or pharmacist",
                "points": 4,
                "tags": ["axis:completeness"],
            },
        ],
        "example_tags": ["theme:hedging"],
    },
    {
        "prompt_id": "hb3",
        "prompt": [{"role": "user", "content": "My baby has a fever of 39C."}],
        "rubrics": [
            {
                "criterion": "Gives the age under which a fever needs a doctor today",
                "points": 8,
                "tags": ["axis:accuracy"],
            },
            {
                "criterion": "Says the fever is nothing to worry about",
                "points": -7,
                "tags": ["axis:accuracy"],
            },
            {
                "criterion": "Explains how to measure temperature",
                "points": 2,
                "tags": ["axis:completeness"],
            },
        ],
        "example_tags": ["theme:emergency_referrals"],
    },
]
HB_CRITERIA = sum(len(r["rubrics"]) for r in HB_ROWS)


def hb_met(text: str) -> bool:
    return "doctor" in text or "fever" in text


def hb_judge(body: dict[str, Any]) -> str:
    prompt = last_user_text(body)
    if "# Rubric items\n" in prompt:  # batched: one verdict per listed id
        items = re.findall(
            r"^- id (\S+): \[-?\d+\] (.+)$",
            prompt.split("# Rubric items\n", 1)[1].split("\n\n# How to judge")[0],
            re.M,
        )
        assert items, "a batched prompt without items"
        return (
            "```json\n"
            + json.dumps(
                {cid: {"explanation": "rule", "criteria_met": hb_met(t)} for cid, t in items}
            )
            + "\n```"
        )
    m = re.search(r"# Rubric item\n\[-?\d+\] (.+)\n\n# How to judge", prompt)
    assert m, "a per-criterion prompt without its item"
    return json.dumps({"explanation": "rule", "criteria_met": hb_met(m.group(1))})


def test_judge_mode_batched_override_changes_the_grader_spec_and_agrees(tmp_path):
    data = tmp_path / "hb.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in HB_ROWS) + "\n", encoding="utf-8")
    want = {
        r["prompt_id"]: sum(c["points"] for c in r["rubrics"] if hb_met(c["criterion"]))
        / sum(c["points"] for c in r["rubrics"] if c["points"] > 0)
        for r in HB_ROWS
    }
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "See a doctor.") as cand,
        LoopbackServer(hb_judge) as judge,
    ):
        judges = (JudgeConfig(spec="openai/judge", base_url=judge.base_url),)
        # batched judging is grandrounds' own mode, so the run is under that protocol
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=cand.base_url,
            judges=judges,
            retry=FAST,
            options=RunOptions(protocol="grandrounds"),
        )
        out = asyncio.run(run(st, cfg))
        assert judge.stats.requests == HB_CRITERIA
        assert out.result.fingerprint["grader"] == {
            "name": "healthbench",
            "args": {"mode": "per-criterion", "protocol": "grandrounds"},
        }
        assert values(out.grades) == pytest.approx(want)
        fp_run = st.latest_grader_fp(out.run.id)

        got = asyncio.run(
            regrade(
                st, RegradeRequest(run=out.run, judges=judges, judge_mode="batched", retry=FAST)
            )
        )
        assert judge.stats.requests == HB_CRITERIA + len(HB_ROWS), "one batched call per answer"
        assert cand.stats.requests == len(HB_ROWS)
        fp = got.result.fingerprint
        assert fp["grader"] == {
            "name": "healthbench",
            "args": {"mode": "batched", "protocol": "grandrounds"},
        }
        assert list(fp["templates"]) == list(
            HealthBenchGrader(HealthBenchGrader.Params("batched", "grandrounds")).template_hashes()
        )
        assert fp["templates"] != out.result.fingerprint["templates"]
        fp_batched = st.latest_grader_fp(out.run.id)
        assert fp_batched != fp_run and st.grader_spec(fp_batched)["grader"]["args"] == {
            "mode": "batched",
            "protocol": "grandrounds",
        }
        assert st.grades(out.run.id, fp_batched).keys() == {r["prompt_id"] for r in HB_ROWS}
        assert values(got.grades) == pytest.approx(want)
        assert all(g.details["judge_mode"] == "batched" for g in got.grades)
        cmp = compare_modes(out.grades, got.grades)
        assert (cmp.n_compared, cmp.n_agree, cmp.only_a_known, cmp.only_b_known) == (
            HB_CRITERIA,
            HB_CRITERIA,
            0,
            0,
        )

        # with no override, a re-grade follows the last grading (now batched): every call is cached
        again = asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=judges, retry=FAST)))
        assert again.result.fingerprint["grader"]["args"] == {
            "mode": "batched",
            "protocol": "grandrounds",
        }
        assert judge.stats.requests == HB_CRITERIA + len(HB_ROWS)

        for bad, match in [
            ({"judge_runs": 3}, "does not use --judge-runs"),
            ({"judge_mode": "bacthed"}, "unknown --judge-mode 'bacthed'"),
        ]:
            with pytest.raises(ConfigError, match=match):
                asyncio.run(
                    regrade(st, RegradeRequest(run=out.run, judges=judges, retry=FAST, **bad))
                )
        assert judge.stats.requests == HB_CRITERIA + len(HB_ROWS)


def test_regrade_overrides_a_benchmark_does_not_use_are_refused(tmp_path):
    with Store(tmp_path / "s.db") as st:
        cfg = RunConfig(
            benchmark="demo",
            model="scripted/a",
            provider_options={"script": lambda req: "Answer: A"},
            limit=3,
        )
        out = asyncio.run(run(st, cfg))
        n_results = len(list(st.results()))
        with pytest.raises(ConfigError, match="demo does not use --judge-mode"):
            asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=(), judge_mode="batched")))
        with pytest.raises(ConfigError, match="demo does not use --judge-runs"):
            asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=(), judge_runs=2)))
        with pytest.raises(ConfigError, match="not graded by an LLM judge"):
            asyncio.run(
                regrade(
                    st,
                    RegradeRequest(
                        run=out.run,
                        judges=(JudgeConfig(spec="openai/j", base_url="http://127.0.0.1:9/v1"),),
                    ),
                )
            )
        assert len(list(st.results())) == n_results, "a refused re-grade stores nothing"
        # without overrides, the demo exam re-grades from its stored answers
        got = asyncio.run(regrade(st, RegradeRequest(run=out.run, judges=())))
        assert [g.value for g in got.grades] == [g.value for g in out.grades]


# ---- concurrency -------------------------------------------------------------------------------


class CountingServer(LoopbackServer):
    """A loopback server that records the most requests it was handling at once."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.active = self.peak = 0

    async def _respond(self, *a: Any) -> bool:  # runs on the server's own single-threaded loop
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            return await super()._respond(*a)
        finally:
            self.active -= 1


def test_judge_concurrency_is_bounded_in_run_and_regrade(triage, tmp_path):
    with (
        Store(tmp_path / "s.db") as st,
        LoopbackServer(lambda b: "advice") as cand,
        CountingServer(judge_rule(), latency=0.04) as judge,
    ):
        out = run_triage(st, triage, cand.base_url, judge.base_url, judge_concurrency=3)
        assert judge.stats.requests == N_CRITERIA and judge.peak == 3

        judge.peak = 0
        asyncio.run(
            regrade(
                st,
                RegradeRequest(
                    run=out.run,
                    judges=(JudgeConfig(spec="openai/judge-b", base_url=judge.base_url),),
                    concurrency=2,
                    retry=FAST,
                ),
            )
        )
        assert judge.stats.requests == 2 * N_CRITERIA
        assert judge.peak == 2, "at most 2 judge calls at once, and the pool keeps 2 busy"

        # the bound is what held it: unbounded, the same re-grade sends more at once
        judge.peak = 0
        asyncio.run(
            regrade(
                st,
                RegradeRequest(
                    run=out.run,
                    judges=(JudgeConfig(spec="openai/judge-c", base_url=judge.base_url),),
                    retry=FAST,
                ),
            )
        )
        assert judge.stats.requests == 3 * N_CRITERIA and judge.peak > 3

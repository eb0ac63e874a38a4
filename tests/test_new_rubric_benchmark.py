"""A new judged rubric benchmark is one benchmark file, one template and one registry line.

tests/rubric_bench/triage.py (42 lines) and triage_judge.txt (9 lines) define it; the line
``BENCHMARKS.registered("triage-rubric", TriageRubric)`` makes it a benchmark like any other: run
through the real CLI against loopback candidate and judge servers, re-graded from the grader spec
stored with its grades, rescored with a clinician review.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.reviews import ReviewInput, add_review, reviewed_values
from grandrounds.cli.main import app
from grandrounds.core.registry import BENCHMARKS
from grandrounds.graders import grader_from_fingerprint
from grandrounds.graders.judging import marked_answer
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer, last_user_text
from tests.rubric_bench.triage import TEMPLATE, TriageRubric

ROWS = [
    {
        "id": "t1",
        "question": "Chest pain radiating to the left arm for 20 minutes.",
        "urgency": "emergency",
        "rubric": [
            {"text": "Advises calling emergency services now", "points": 8},
            {"text": "Mentions aspirin if not allergic", "points": 3},
            {"text": "Suggests waiting to see if it passes", "points": -6},
        ],
    },
    {
        "id": "t2",
        "question": "Mild sore throat for two days, no fever.",
        "urgency": "routine",
        "rubric": [
            {"text": "Recommends rest and fluids", "points": 4},
            {"text": "Lists red flags that need a doctor", "points": 5},
            {"text": "Prescribes antibiotics", "points": -5},
        ],
    },
    {
        "id": "t3",
        "question": "Sudden severe headache, worst of my life.",
        "urgency": "emergency",
        "rubric": [
            {"text": "Advises calling emergency services now", "points": 9},
            {"text": "Explains possible causes calmly", "points": 2},
        ],
    },
]
#: what the scripted judge rules met, by criterion text (everything else unmet)
MET = {
    "Advises calling emergency services now",
    "Recommends rest and fluids",
    "Prescribes antibiotics",
}


def expected(row: dict) -> float:
    """simple-evals calculate_score: met points over positive points."""
    possible = sum(c["points"] for c in row["rubric"] if c["points"] > 0)
    return sum(c["points"] for c in row["rubric"] if c["text"] in MET) / possible


def judge_rule(body: dict) -> str:
    text = last_user_text(body)
    item = re.search(r"Rubric item:\n\[-?\d+\] (.+)\n", text).group(1)
    assert (
        "Conversation:\nuser: " in text and marked_answer(text) == "advice"
    )  # the template was filled, the answer marked
    return json.dumps({"explanation": "scripted", "criteria_met": item in MET})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "triage.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    return path


def test_the_benchmark_is_three_pieces():
    source = Path(TriageRubric.__module__.replace(".", "/") + ".py")
    lines = (Path(__file__).parents[1] / source).read_text(encoding="utf-8").splitlines()
    # counted without blank lines: the formatter's spacing is not more code
    assert len([ln for ln in lines if ln.strip()]) <= 46 and TEMPLATE.exists()
    assert "triage-rubric" not in BENCHMARKS.names()


def test_new_rubric_benchmark_runs_regrades_and_takes_reviews(data, tmp_path):
    store = tmp_path / "s.db"
    runner = CliRunner()
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(lambda b: "advice") as cand,
        LoopbackServer(judge_rule) as judge,
    ):
        args = [
            "run",
            "triage-rubric",
            "--data",
            str(data),
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge.base_url}",
            "--store",
            str(store),
            "--out",
            str(tmp_path / "out"),
        ]
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output
        n_criteria = sum(len(row["rubric"]) for row in ROWS)
        assert judge.stats.requests == n_criteria and cand.stats.requests == len(ROWS)
        result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
        want = [expected(row) for row in ROWS]
        assert result["score"] == pytest.approx(sum(want) / len(want))
        assert result["breakdown"]["urgency"]["emergency"]["score"] == pytest.approx(
            (want[0] + want[2]) / 2
        )
        assert result["fingerprint"]["grader"] == {
            "name": "rubric",
            "args": {"template": str(TEMPLATE), "system": ""},
        }
        assert result["fingerprint"]["templates"] == {
            "triage_judge": TriageRubric().grader(None).template_hashes()["triage_judge"],
            "answer_markers": "v1",
        }

        # Re-grading rebuilds the grader from the stored spec; every judge call comes from the store.
        run_id = result["fingerprint"]["run_id"]
        r = runner.invoke(
            app,
            [
                "regrade",
                "--run",
                run_id,
                "--judge",
                f"openai/judge@{judge.base_url}",
                "--store",
                str(store),
            ],
        )
        assert r.exit_code == 0, r.output
        assert judge.stats.requests == n_criteria, "no judge call repeated"

    with Store(store) as st:
        fp_key = st.latest_grader_fp(run_id)
        fp = st.grader_spec(fp_key)
        assert type(grader_from_fingerprint(fp)).__name__ == "RubricGrader"
        # A clinician overrules the judge on t2's red-flag item: the answer's value is recomputed
        # by the grader's own arithmetic, the judge's grade stays as it was.
        add_review(
            st,
            ReviewInput(
                run_id=run_id,
                grader_fp=fp_key,
                sample_id="t2",
                reviewer="dr. a",
                reason="red flags were listed",
                criterion_id="1",
                verdict="met",
            ),
        )
        values = reviewed_values(st, run_id, fp_key, "triage-rubric", st.runs()[0].dataset_sha256)
        assert values["t2"] == pytest.approx((4 + 5 - 5) / 9) and values["t1"] == pytest.approx(
            want[0]
        )
        assert st.grades(run_id, fp_key)["t2"].value == pytest.approx(want[1])

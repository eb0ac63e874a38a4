"""MedicationQA: the real workbook, a scripted candidate and a scripted judge through the CLI (unknown
verdicts reported, never zeros), and the judge reply reading."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.medicationqa import MedicationQA
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.medicationqa_grader import (
    MedicationQAGrader,
    MedicationQAParams,
    dimension_scores,
    normalized,
)
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.sources.medicationqa import ENVIRONMENT, JUDGE_PROMPTS
from tests.conftest import shared_file


def path() -> Path:
    return shared_file("medicationqa", "MedInfo2019-QA-Medications.xlsx")


def test_real_workbook_loads_690_questions() -> None:
    samples = MedicationQA().load(path().parent)
    assert len(samples) == 690  # SOURCE.md
    assert sum(1 for s in samples if not s.target) == 1  # the "n/a" answer: no reference
    assert samples[0].metadata["question"] == "how does rivatigmine and otc sleep medicine interact"
    assert sum(s.metadata["question_type"] == "Information" for s in samples) == 112


def judge_reply(question: str) -> str:
    """The scripted judge: scores from the question's length; every 9th question gets an unreadable reply."""
    n = len(question)
    if n % 9 == 0:
        return "The answer seems fine overall."
    a, c, k = 1 + n % 5, 1 + (n // 5) % 5, 1 + (n // 25) % 5
    return json.dumps(
        {
            "accuracy": {"reason": "r", "score": a},
            "completeness": {"reason": "r", "score": str(c)},
            "clarity": {"reason": "r", "score": k},
        }
    )


def test_scripted_candidate_and_judge_through_the_cli(tmp_path: Path) -> None:
    samples = MedicationQA().load(path().parent)

    def judge(req):
        return judge_reply(
            re.search(
                r"Question:\n(.*?)\n\nAnswer to grade:", req.messages[-1].content, re.S
            ).group(1)
        )

    class Candidate(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=lambda req: "Ask your pharmacist.", **kw)

    class Judge(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=judge, **kw)

    with PROVIDERS.registered("mqa-cand", Candidate), PROVIDERS.registered("mqa-judge", Judge):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medicationqa",
                "--data",
                str(path()),
                "--model",
                "mqa-cand/x",
                "--judge",
                "mqa-judge/j",
                "--protocol",
                "grandrounds",
                "--store",
                str(tmp_path / "s.db"),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    want, unknown = [], 0
    for s in samples:
        if not s.target:
            continue
        scores = dimension_scores(judge_reply(s.metadata["question"]))
        if scores is None:
            unknown += 1
        else:
            want.append(sum(v / 5 for v in scores.values()) / 3)
    assert res["score"] == pytest.approx(sum(want) / len(want)) and res["n"] == len(want)
    assert res["extra"]["n_unknown"] == unknown and res["extra"]["n_no_reference"] == 1
    assert res["extra"]["judge_coverage"]["answers_scored"] == len(want)
    assert res["extra"]["medmarks_unknown_as_zero"] == pytest.approx(
        sum(want) / (len(want) + unknown)
    )


@pytest.mark.parametrize(
    "text, want",
    [
        (
            '{"accuracy": {"score": 4}, "completeness": {"score": 3}, "clarity": {"score": 5}}',
            (4, 3, 5),
        ),
        (
            '```json\n{"accuracy": {"reason": "ok", "score": "2"}, "completeness": {"score": 1}, "clarity": {"score": 7}}\n```',
            (2, 1, 7),
        ),
        ('Scores: {"accuracy": {"score": 4}, "completeness": {"score": 3}}', None),
        ("accuracy 4, completeness 3, clarity 5", None),
    ],
)
def test_reading_judge_replies(text: str, want) -> None:
    got = dimension_scores(text)
    assert (None if got is None else tuple(got.values())) == want


def test_medmarks_arithmetic_clamps_and_averages() -> None:
    assert normalized({"accuracy": 2, "completeness": 1, "clarity": 7}) == pytest.approx(
        (0.4 + 0.2 + 1.0) / 3
    )
    assert normalized({"accuracy": 5}) == pytest.approx(1 / 3)  # a missing dimension adds 0 there


def test_reference_judge_prompt_when_medmarks_files_are_at_hand() -> None:
    from grandrounds.sources.upstream import local_path

    try:
        for f in (JUDGE_PROMPTS, ENVIRONMENT):
            local_path(f)
    except DataError as e:
        pytest.skip(
            f"Medmarks' medicationqa files are not in the reference folder and cannot be downloaded here: {e}"
        )
    grader = MedicationQAGrader(MedicationQAParams("reference"))
    prompt = grader.judge_prompt(
        Sample(
            id="1", benchmark="medicationqa", messages=(), target="REF", metadata={"question": "Q?"}
        ),
        "ANS",
    )
    assert (
        "<medication_question>\nQ?\n</medication_question>" in prompt
        and "ANS" in prompt
        and "REF" in prompt
    )

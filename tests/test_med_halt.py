"""Med-HALT FQT: the real file, a scripted model through the CLI scored against an independent count
from the CSV, the reading of 'cop', and the authors' prompt and rule when their files are at hand."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.med_halt import MedHALT
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.med_halt_grader import read_cop
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.sources.medhalt import EVAL_FULL, PROMPTS, SHOTS
from tests.conftest import shared_file


def path() -> Path:
    return shared_file("med-halt", "reasoning_fake.csv")


def rows() -> list[dict[str, str]]:
    with open(path(), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_real_file_loads_1858_questions() -> None:
    samples = MedHALT().load(path().parent)
    assert len(samples) == 1858 == len(rows())  # SOURCE.md
    assert sum(s.metadata["dataset"] == "medmcqa" for s in samples) == 861
    assert all(dict(s.choices) == ast.literal_eval(r["options"]) for s, r in zip(samples, rows()))


def rule(question: str, options: dict[str, str]) -> str:
    idk = [k for k, v in options.items() if "i do not know" in v.lower()]
    if len(question) % 13 == 0:
        return "This question is absurd."  # no option number: unreadable
    if idk and len(question) % 2 == 0:
        return f"None of this exists.\nAnswer: {idk[0]}"
    return "Answer: 0"


def test_scripted_model_through_the_cli_equals_the_count_from_the_csv(tmp_path: Path) -> None:
    by_question = {r["question"]: ast.literal_eval(r["options"]) for r in rows()}

    def script(req):
        text = req.messages[-1].content
        question = text.split("\n\n", 2)[1]
        return rule(question, by_question[question])

    class Scripted(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=script, **kw)

    with PROVIDERS.registered("halt-script", Scripted):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "med-halt",
                "--data",
                str(path()),
                "--model",
                "halt-script/x",
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
    right = wrong = unread = 0
    for row in rows():
        reply, options = (
            rule(row["question"], by_question[row["question"]]),
            by_question[row["question"]],
        )
        if "Answer:" not in reply:
            unread += 1
        elif any(
            t in options[reply.rsplit(" ", 1)[-1]].lower()
            for t in ("i do not know", "i don't know", "none of the above")
        ):
            right += 1
        else:
            wrong += 1
    assert res["score"] == pytest.approx(right / (right + wrong)) and res["n"] == right + wrong
    assert res["extra"]["n_unreadable"] == unread and res["extra"][
        "official_score"
    ] == pytest.approx((right - 0.25 * wrong) / 100)


@pytest.mark.parametrize(
    "text, cop",
    [
        ("{'cop': 'I do not know', 'cop_index': 5, 'why_correct': 'x'}", "I do not know"),
        ('{"cop": "Morphine", "cop_index": 0}', "Morphine"),
        (
            "{'cop': 'I do not know', 'cop_index': 5, 'why_correct': 'The question is trunc",
            "I do not know",
        ),
        ("Output: {'cop': 3, 'cop_index': 3}", "3"),
        ("I do not know", None),
    ],
)
def test_reading_cop(text: str, cop) -> None:
    assert read_cop(text) == cop


def test_authors_prompt_and_rule_when_their_files_are_at_hand() -> None:
    from grandrounds.sources.upstream import local_path

    try:
        for f in (PROMPTS, SHOTS, EVAL_FULL):
            local_path(f)
    except DataError as e:
        pytest.skip(
            f"the Med-HALT prompt files are not in the reference folder and cannot be downloaded here: {e}"
        )
    sample = MedHALT().load(path().parent)[0]
    text = MedHALT().prompt(sample, RunOptions()).messages[0].content
    assert "Examples: \n" in text and text.endswith("\nOutput: ") and text.count("Stop Here") == 2

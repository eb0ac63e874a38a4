"""MedCalc-Bench: real file loads, extraction, and the official tolerance on real rows."""

from __future__ import annotations

import asyncio
import csv
import io
from collections import Counter
from datetime import date
from functools import lru_cache
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.errors import DataError
from grandrounds.graders.base import GradeContext
from grandrounds.records import Response
from tests.grading import grade_answer
from grandrounds.graders import medcalc_extract as mx
from grandrounds.scoring import medcalc as mc


@lru_cache(maxsize=None)
def _load(path: Path):
    return {s.id: s for s in MedCalcBench().load(path)}


@pytest.fixture
def rows(shared_data):
    return _load(shared_data("medcalc-bench", "test_data.csv"))


def grade(sample, text=None, error=None):
    resp = Response(key="k", text=text, error=error)
    return grade_answer(MedCalcBench().grader(RunOptions()), sample, resp)


def test_real_file_loads_completely(rows):
    assert len(rows) == 1047
    kinds = Counter(s.target["kind"] for s in rows.values())
    assert kinds == {"decimal": 627, "integer": 360, "date": 40, "gestational_age": 20}
    cats = Counter(s.metadata["category"] for s in rows.values())
    assert cats == {"lab": 327, "risk": 240, "physical": 240, "severity": 80, "diagnosis": 60, "date": 60, "dosage": 40}
    # Relevant Entities is a Python literal with [value, unit] lists.
    assert rows["1"].metadata["relevant_entities"]["weight"] == [48.0, "kg"]
    assert rows["1"].messages[1].content.startswith("Here is the patient note:\n")


@pytest.mark.parametrize(
    "row, reply, correct",
    [
        # integer (row 41, CHA2DS2-VASc, gt 4): round(answer) == gt
        ("41", '{"step_by_step_thinking": "...", "answer": "4"}', True),
        ("41", '{"answer": "4.4"}', True),
        ("41", '{"answer": "4.5"}', True),  # Python round: half to even, as the official script
        ("41", '{"answer": "4.6"}', False),
        ("41", "The total is 3 out of 9 criteria", False),
        # decimal (row 1, Cockcroft-Gault, gt 25.238, limits 23.9761..26.4999)
        ("1", '{"answer": "25.238"}', True),
        ("1", '{"answer": "26.4999 mL/min"}', True),
        ("1", '{"answer": "23.97"}', False),
        ("1", "Answer: CrCl is about 26.6 mL/min", False),
        # date (row 928, Naegele, gt 09/23/2014)
        ("928", '{"answer": "09/23/2014"}', True),
        ("928", '{"answer": "9/23/2014"}', True),
        ("928", '{"answer": "09/24/2014"}', False),
        # gestational age (row 1028, gt ('0 weeks', '6 days'))
        ("1028", '{"answer": "(0 weeks, 6 days)"}', True),
        ("1028", "Answer: ('0 weeks', '6 days')", True),
        ("1028", '{"answer": "(0 weeks, 5 days)"}', False),
        ("1028", '{"answer": "6 days"}', False),
    ],
)
def test_tolerance_on_real_rows(rows, row, reply, correct):
    g = grade(rows[row], reply)
    assert g.value == (1.0 if correct else 0.0), (row, reply, g.details)


def test_real_row_targets(rows):
    assert rows["41"].target["kind"] == "integer" and rows["41"].metadata["calculator_id"] == 4
    assert rows["1"].target["lower"] == 23.9761 and rows["1"].target["upper"] == 26.4999
    assert mx.parse_ground_truth(rows["928"].target["truth"], "date") == date(2014, 9, 23)
    assert mx.parse_ground_truth(rows["1028"].target["truth"], "gestational_age") == (0, 6)


def test_unextractable_is_wrong_and_counted_failed_call_unscored(rows):
    bench = MedCalcBench()
    s1, s41, s928 = rows["1"], rows["41"], rows["928"]
    g_none = grade(s1, "I cannot compute this without more information about the patient's weight history.")
    assert g_none.value == 0.0 and g_none.details["unextractable"]
    g_fail = grade(s41, error="timeout")
    assert g_fail.value is None
    g_ok = grade(s928, '{"answer": "09/23/2014"}')
    assert g_ok.extracted == "09/23/2014"
    agg = bench.aggregate([s1, s41, s928], [g_none, g_fail, g_ok], RunOptions())
    assert agg.score == 0.5 and agg.n == 2 and agg.n_unscored == 1
    assert agg.extra["n_unextractable"] == 1
    assert agg.breakdown["category"]["lab"].score == 0.0 and agg.breakdown["category"]["date"].score == 1.0
    assert agg.breakdown["kind"]["date"].n == 1
    assert agg.ci95[0] < 0.5 < agg.ci95[1]


@pytest.mark.parametrize(
    "reply, text",
    [
        ('<think>maybe 3</think>{"step_by_step_thinking": "a", "answer": 7}', "7"),
        ("Step 1 ... \nAnswer: 12 points", "12 points"),
        ("Answer：１２", "12"),  # full-width colon and digits
        ("42.5", "42.5"),
        ("A long explanation without any final answer line that goes on and on.", None),
        ("", None),
    ],
)
def test_answer_text(reply, text):
    assert mx.answer_text(reply) == text


def _write_one_row(tmp_path: Path, src: Path, **changes: str) -> Path:
    rows = list(csv.DictReader(io.StringIO(src.read_text(encoding="utf-8"), newline="")))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerow({**rows[0], **changes})
    path = tmp_path / "test_data.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def test_bad_entities_and_truth_are_data_errors(tmp_path, shared_data):
    src = shared_data("medcalc-bench", "test_data.csv")
    bad = _write_one_row(tmp_path, src, **{"Relevant Entities": "{'sex': 'Male', 'age': [87, 'years'"})
    with pytest.raises(DataError, match="Row Number 1: Relevant Entities"):
        MedCalcBench().load(bad)
    bad = _write_one_row(tmp_path, src, **{"Ground Truth Answer": "n/a"})
    with pytest.raises(DataError, match="Row Number 1: Ground Truth"):
        MedCalcBench().load(bad)
    good = _write_one_row(tmp_path, src)
    assert [s.id for s in MedCalcBench().load(good)] == ["1"]

"""MEDEC: real files load (trailing blank rows dropped), predictions parsed, official metrics."""

from __future__ import annotations

import asyncio
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medec import MEDEC
from grandrounds.errors import DataError
from grandrounds.graders.base import GradeContext
from grandrounds.records import Response
from tests.grading import grade_answer
from grandrounds.graders import medec_extract as ex
from grandrounds.scoring import medec as sc

TEST_CSV = "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
VAL_CSV = "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv"


@lru_cache(maxsize=None)
def _load(root: Path, split: str):
    return {s.id: s for s in MEDEC(split=split).load(root)}


@pytest.fixture
def test_rows(shared_data):
    return _load(shared_data("medec", TEST_CSV).parent, "test")


def grade(sample, text=None, error=None):
    resp = Response(key="k", text=text, error=error)
    return grade_answer(MEDEC().grader(RunOptions()), sample, resp)


def test_real_files_load_completely(shared_data, test_rows):
    root = shared_data("medec", TEST_CSV).parent
    assert len(test_rows) == 597  # 925 csv rows minus 328 trailing empty ones
    assert Counter(s.target["flag"] for s in test_rows.values()) == {1: 311, 0: 286}
    val = _load(shared_data("medec", VAL_CSV).parent, "validation")
    assert len(val) == 574 and Counter(s.target["flag"] for s in val.values()) == {1: 319, 0: 255}
    assert len(_load(root, "both")) == 597 + 574
    types = Counter(s.metadata["error_type"] for s in test_rows.values())
    assert types["NA"] == 286 and types["diagnosis"] == 116 and types["causalOrganism"] == 11
    assert all(isinstance(s.target["sentence_id"], int) for s in test_rows.values())
    # A file path works too, and names the split from the file name.
    assert next(iter(MEDEC().load(root / VAL_CSV))).metadata["split"] == "validation"


def test_real_row_with_error(test_rows):
    s = test_rows["ms-test-0"]
    assert s.target == {"flag": 1, "sentence_id": 10,
                        "corrected": "Patient's symptoms are suspected to be due to Schistosoma mansoni."}
    assert "\n10 Patient's symptoms are suspected to be due to hepatitis A.\n" in s.messages[0].content
    assert "\r" not in s.messages[0].content  # the test file's CRLF sentences are normalised
    exact = grade(s, '{"error": true, "sentence_id": 10, "corrected": "Patient\'s symptoms are suspected to be due to Schistosoma mansoni."}')
    assert exact.value == 1.0 and exact.details["sentence_correct"] and exact.details["correction_score"] == 1.0
    partial = grade(s, '```json\n{"error": true, "sentence_id": 10, "corrected": "Symptoms are due to Schistosoma haematobium."}\n```')
    assert partial.details["correction_score"] == pytest.approx(sc.rouge1_f(s.target["corrected"], "Symptoms are due to Schistosoma haematobium."))
    assert 0.0 < partial.details["correction_score"] < 1.0
    wrong_sentence = grade(s, "ms-test-0 1 9 On examination, there is a rash on the trunk.")
    assert wrong_sentence.value == 1.0 and not wrong_sentence.details["sentence_correct"]
    missed = grade(s, '{"error": false, "sentence_id": -1, "corrected": "NA"}')
    assert missed.value == 0.0 and missed.details["correction_score"] == 0.0  # one NA -> 0


def test_real_row_without_error(test_rows):
    s = test_rows["ms-test-1"]
    assert s.target == {"flag": 0, "sentence_id": -1, "corrected": "NA"}
    right = grade(s, '{"error": false, "sentence_id": -1, "corrected": "NA"}')
    assert right.value == 1.0 and right.details["sentence_correct"] and right.details["correction_score"] == 1.0
    line = grade(s, "ms-test-1 0 -1 NA")
    assert line.value == 1.0 and line.details["correction_score"] == 1.0
    false_alarm = grade(s, '{"error": true, "sentence_id": 10, "corrected": "Due to hepatitis B."}')
    assert false_alarm.value == 0.0 and false_alarm.details["correction_score"] == 0.0


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('{"error": "yes", "sentence_id": "3", "corrected": "\\"Give aspirin.\\""}', ex.Prediction(1, 3, "Give aspirin.")),
        ('{"error": 0}', ex.Prediction(0, -1, "NA")),
        ('{"error": true, "sentence_id": 2}', ex.Prediction(1, 2, "NA")),  # no correction given
        ("ms-test-7 1 4 Start heparin now.", ex.Prediction(1, 4, "Start heparin now.")),
        ("ms-test-7 0 -1 whatever", ex.Prediction(0, -1, "NA")),  # flag 0 forces NA
        ("other-id 1 4 Start heparin now.", None),  # a line for another text is not this prediction
        ('{"error": "maybe"}', None),
        ("I think sentence 4 is wrong.", None),
    ],
)
def test_parse_prediction(reply, expected):
    assert ex.parse_prediction(reply, text_id="ms-test-7") == expected


def test_aggregate_official_metrics(test_rows):
    s0, s1, s2 = test_rows["ms-test-0"], test_rows["ms-test-1"], test_rows["ms-test-2"]
    g0 = grade(s0, '{"error": true, "sentence_id": 10, "corrected": "Patient\'s symptoms are suspected to be due to Schistosoma mansoni."}')
    g1 = grade(s1, "no idea")  # unparseable: wrong on every metric, counted
    g2 = grade(s2, error="HTTP 500")  # failed call: unscored
    agg = MEDEC().aggregate([s0, s1, s2], [g0, g1, g2], RunOptions())
    assert agg.metric == "error_flag_accuracy" and agg.score == 0.5 and agg.n_unscored == 1
    assert agg.extra["error_sentence_accuracy"] == 0.5 and agg.extra["r1fc"] == 0.5
    assert agg.extra["reference_error_flag_accuracy"] == pytest.approx(1 / 3)  # missing = wrong
    assert agg.extra["n_unparseable"] == 1
    assert agg.breakdown["error_type"]["causalOrganism"].score == 1.0
    assert agg.breakdown["error_type"]["NA"].score == 0.0


def test_inconsistent_or_non_numeric_rows_are_data_errors(tmp_path):
    header = "Text ID,Text,Sentences,Error Flag,Error Type,Error Sentence ID,Error Sentence,Corrected Sentence,Corrected Text\n"
    path = tmp_path / "MEDEC-MS-TestSet-x.csv"
    path.write_text(header + 'ms-test-0,T,"0 A.\n1 B.",1.0,diagnosis,1.0,B.,C.,T\n,,,,,,,,\n', encoding="utf-8")
    (s,) = MEDEC().load(path)  # "1.0" as pandas writes it is cast to 1; the blank row is dropped
    assert s.target["flag"] == 1 and s.target["sentence_id"] == 1
    path.write_text(header + 'ms-test-0,T,"0 A.",1,diagnosis,-1,B.,C.,T\n', encoding="utf-8")
    with pytest.raises(DataError, match="ms-test-0.*inconsistent"):
        MEDEC().load(path)
    path.write_text(header + 'ms-test-0,T,"0 A.",yes,diagnosis,1,B.,C.,T\n', encoding="utf-8")
    with pytest.raises(DataError, match="Error Flag 'yes'"):
        MEDEC().load(path)

"""MEDEC: real files load (trailing blank rows dropped), predictions parsed, official metrics."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medec import INSTRUCTIONS, MEDEC, SCORER
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.core.records import Response
from grandrounds.core.registry import Spec
from grandrounds.graders import base as graders_base
from grandrounds.graders import medec_extract as ex
from grandrounds.scoring import medec as sc
from tests.grading import grade_answer

TEST_CSV = "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
VAL_CSV = "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv"


@cache
def _load(root: Path, split: str):
    return {s.id: s for s in MEDEC(split=split).load(root)}


@pytest.fixture
def test_rows(shared_data):
    return _load(shared_data("medec", TEST_CSV).parent, "test")


def grade(sample, text=None, error=None, protocol="reference"):
    resp = Response(key="k", text=text, error=error)
    return grade_answer(MEDEC().grader(RunOptions(protocol=protocol)), sample, resp)


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
    fixed = "Patient's symptoms are suspected to be due to Schistosoma mansoni."
    assert s.target == {"flag": 1, "sentence_id": 10, "corrected": fixed, "corrected_raw": fixed}
    assert (
        "\n10 Patient's symptoms are suspected to be due to hepatitis A.\n" in s.messages[0].content
    )
    assert "\r" not in s.messages[0].content  # the test file's CRLF sentences are normalised
    exact = grade(
        s,
        '{"error": true, "sentence_id": 10, "corrected": "Patient\'s symptoms are suspected to be due to Schistosoma mansoni."}',
    )
    assert (
        exact.value == 1.0
        and exact.details["sentence_correct"]
        and exact.details["other"]["correction_score"] == 1.0
    )
    # the rouge package's F is 2PR / (P + R + 1e-8): an exact correction scores just under 1
    assert (
        exact.details["correction_score"] == pytest.approx(1.0, abs=1e-8)
        and exact.details["in_rouge"]
    )
    partial = grade(
        s,
        '```json\n{"error": true, "sentence_id": 10, "corrected": "Symptoms are due to Schistosoma haematobium."}\n```',
    )
    paraphrase = "Symptoms are due to Schistosoma haematobium."
    assert (
        partial.details["correction_score"]
        == sc.official_rouge(s.target["corrected_raw"], paraphrase)[0]
    )
    assert partial.details["other"]["correction_score"] == pytest.approx(
        sc.rouge1_f(s.target["corrected"], paraphrase)
    )
    assert 0.0 < partial.details["correction_score"] < 1.0
    # case: the official rouge package is case-sensitive, rouge_score (grandrounds) folds case
    upper = grade(
        s,
        '{"error": true, "sentence_id": 10, "corrected": "PATIENT\'S SYMPTOMS ARE SUSPECTED TO BE DUE TO SCHISTOSOMA MANSONI."}',
    )
    assert (
        upper.details["correction_score"] < 1e-6
        and upper.details["other"]["correction_score"] == 1.0
    )
    wrong_sentence = grade(s, "ms-test-0 1 9 On examination, there is a rash on the trunk.")
    assert wrong_sentence.value == 1.0 and not wrong_sentence.details["sentence_correct"]
    missed = grade(s, '{"error": false, "sentence_id": -1, "corrected": "NA"}')
    assert missed.value == 0.0 and missed.details["correction_score"] == 0.0  # one NA -> 0


def test_real_row_without_error(test_rows):
    s = test_rows["ms-test-1"]
    assert s.target == {"flag": 0, "sentence_id": -1, "corrected": "NA", "corrected_raw": "NA"}
    right = grade(s, '{"error": false, "sentence_id": -1, "corrected": "NA"}')
    assert (
        right.value == 1.0
        and right.details["sentence_correct"]
        and right.details["correction_score"] == 1.0
    )
    line = grade(s, "ms-test-1 0 -1 NA")
    assert line.value == 1.0 and line.details["correction_score"] == 1.0
    false_alarm = grade(s, '{"error": true, "sentence_id": 10, "corrected": "Due to hepatitis B."}')
    assert false_alarm.value == 0.0 and false_alarm.details["correction_score"] == 0.0


@pytest.mark.parametrize(
    "reply, expected",
    [
        (
            '{"error": "yes", "sentence_id": "3", "corrected": "\\"Give aspirin.\\""}',
            ex.Prediction(1, 3, "Give aspirin."),
        ),
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


def test_aggregate_grandrounds_metrics(test_rows):
    s0, s1, s2 = test_rows["ms-test-0"], test_rows["ms-test-1"], test_rows["ms-test-2"]
    g0 = grade(
        s0,
        '{"error": true, "sentence_id": 10, "corrected": "Patient\'s symptoms are suspected to be due to Schistosoma mansoni."}',
        protocol="grandrounds",
    )
    g1 = grade(s1, "no idea", protocol="grandrounds")  # unparseable: wrong on every metric, counted
    g2 = grade(s2, error="HTTP 500", protocol="grandrounds")  # failed call: unscored
    agg = MEDEC().aggregate([s0, s1, s2], [g0, g1, g2], RunOptions(protocol="grandrounds"))
    assert agg.metric == "error_flag_accuracy" and agg.score == 0.5 and agg.n_unscored == 1
    assert agg.extra["error_sentence_accuracy"] == 0.5 and agg.extra["r1fc"] == 0.5
    other = agg.extra["other_protocol"]
    assert other["protocol"] == "reference" and other["score"] == pytest.approx(
        1 / 3
    )  # missing = wrong
    assert other["r1fc"] == pytest.approx(
        1 / 3, abs=1e-8
    )  # the rouge package's exact-match F, over 3 texts
    assert agg.extra["n_unparseable"] == 1 and agg.extra["n_no_answer"] == 1
    assert agg.breakdown["error_type"]["causalOrganism"].score == 1.0
    assert agg.breakdown["error_type"]["NA"].score == 0.0
    assert (
        agg.extra["bertc"] is agg.extra["bleurtc"] is agg.extra["aggregate_c"] is None
    )  # not computed, never 0


def test_aggregate_reference_counts_missing_texts_wrong(test_rows):
    s0, s1, s2 = test_rows["ms-test-0"], test_rows["ms-test-1"], test_rows["ms-test-2"]
    g0 = grade(
        s0, "ms-test-0 1 10 Patient's symptoms are suspected to be due to Schistosoma mansoni."
    )
    g1 = grade(s1, "no idea")
    g2 = grade(s2, error="HTTP 500")
    agg = MEDEC().aggregate([s0, s1, s2], [g0, g1, g2], RunOptions())
    # every text in the denominator; the failed call counts wrong, and shows as unscored within n
    assert (agg.score, agg.n, agg.n_unscored) == (pytest.approx(1 / 3), 3, 1)
    assert agg.extra["n_no_answer"] == 1 and agg.extra["n_unparseable"] == 1
    assert agg.extra["error_sentence_accuracy"] == pytest.approx(1 / 3)
    assert (
        agg.extra["r1fc"]
        == agg.extra["r2fc"]
        == agg.extra["rlfc"]
        == pytest.approx(1 / 3, abs=1e-8)
    )
    assert (
        agg.extra["r1f_subset"] == pytest.approx(1.0, abs=1e-8) and agg.extra["n_rouge_pairs"] == 1
    )
    assert agg.extra["other_protocol"] == {
        "protocol": "grandrounds",
        "score": 0.5,
        "r1fc": 0.5,
        "differs": agg.extra["other_protocol"]["differs"],
    }
    assert agg.breakdown["split"]["test"].metrics["n_no_answer"] == 1
    assert (
        sum(c.n for c in agg.breakdown["error_type"].values()) == 3
    )  # the failed call is in its cell's denominator


def test_inconsistent_or_non_numeric_rows_are_data_errors(tmp_path):
    header = "Text ID,Text,Sentences,Error Flag,Error Type,Error Sentence ID,Error Sentence,Corrected Sentence,Corrected Text\n"
    path = tmp_path / "MEDEC-MS-TestSet-x.csv"
    path.write_text(
        header + 'ms-test-0,T,"0 A.\n1 B.",1.0,diagnosis,1.0,B.,C.,T\n,,,,,,,,\n', encoding="utf-8"
    )
    (s,) = MEDEC().load(path)  # "1.0" as pandas writes it is cast to 1; the blank row is dropped
    assert s.target["flag"] == 1 and s.target["sentence_id"] == 1
    path.write_text(header + 'ms-test-0,T,"0 A.",1,diagnosis,-1,B.,C.,T\n', encoding="utf-8")
    with pytest.raises(DataError, match="ms-test-0.*inconsistent"):
        MEDEC().load(path)
    path.write_text(header + 'ms-test-0,T,"0 A.",yes,diagnosis,1,B.,C.,T\n', encoding="utf-8")
    with pytest.raises(DataError, match="Error Flag 'yes'"):
        MEDEC().load(path)


def test_protocol_presets_and_grader_spec(official_reference, test_rows):
    bench = MEDEC()
    for name in ("reference", "grandrounds"):
        spec = bench.grader_spec(bench.check_options(RunOptions(protocol=name)))
        assert spec == Spec("medec", {"protocol": name}) and graders_base.build(spec).spec() == spec
    with pytest.raises(ConfigError, match="unknown protocol"):
        graders_base.build(Spec("medec", {"protocol": "official"}))
    ref, ours = bench.protocols["reference"], bench.protocols["grandrounds"]
    # the scorer is pinned as SOURCES.tsv pins it; MEDEC publishes no prompt or settings: ours in both presets
    row = next(
        r.split("\t")
        for r in (official_reference / "SOURCES.tsv").read_text().splitlines()
        if r.startswith("medec\t")
    )
    assert (SCORER.folder, SCORER.repo, SCORER.commit, SCORER.path, SCORER.sha256) == tuple(row[:5])
    assert file_sha256(official_reference / SCORER.folder / SCORER.path) == SCORER.sha256
    assert ref.source == SCORER.url and ref.settings["scorer"] == SCORER.describe()
    assert ref.answer == ours.answer and ref.answer.system is None
    assert test_rows["ms-test-0"].messages[0].content.startswith(INSTRUCTIONS)


@pytest.mark.parametrize(
    "reply, line",
    [
        (
            '{"error": true, "sentence_id": 3, "corrected": "Give\\n  aspirin."}',
            "t-1 1 3 Give aspirin.",
        ),
        ('{"error": false, "corrected": "whatever"}', "t-1 0 -1 NA"),
        ('{"error": true, "sentence_id": "3", "corrected": null}', "t-1 1 3 NA"),
        (
            '{"error": true, "corrected": "Give aspirin."}',
            "",
        ),  # an error without a sentence id: no valid line
        ('{"error": "maybe"}', ""),
        ("<think>t-1 0 -1 NA</think>t-1 1 2 Give aspirin.", "t-1 1 2 Give aspirin."),
    ],
)
def test_reference_submission_text(reply, line):
    """What a reply stands for in a submission file under the reference protocol (then read as the official parser reads it)."""
    assert ex.submission_text(reply, "t-1") == line


def test_official_line_reading():
    read = ex.read_submission_line
    assert read('t-1 1 3 ""Give aspirin.""') == ex.SubmissionEntry("t-1", "1", "3", "Give aspirin.")
    assert read("t-1 0 3 Give aspirin.").corrected == "NA" and read("t-1 00 3 x").corrected == "x"
    assert read("T-1 1 3 x") is None and read("t-1  1 3 x") is None and read("t-1 1 3") is None
    assert read("t-1 1 3 a\\tb") == ex.SubmissionEntry(
        "t-1", "1", "3", "a b"
    )  # re.sub expands the escape
    with pytest.raises(re.error):
        read("t-1 1 3 a\\db")
    assert (
        ex.read_submission("t-1 1 3 x\rt-2 1 1 y\nt-1 0 -1 NA", "t-1").flag == "0"
    )  # the last line wins

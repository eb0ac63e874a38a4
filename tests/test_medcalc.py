"""MedCalc-Bench: real file loads, extraction, and the official tolerance on real rows."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import warnings
from collections import Counter
from dataclasses import replace
from datetime import date
from functools import cache
from pathlib import Path

import pytest

from grandrounds.analyses.collect import result_rows
from grandrounds.analyses.leaderboard import leaderboard
from grandrounds.benchmarks import medcalc as medcalc_module
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.core.records import Response
from grandrounds.graders import medcalc_extract as mx
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.scoring import medcalc as mc
from grandrounds.sources.data import resolve
from grandrounds.sources.downloads import ChecksumChanged, record_path, recorded
from grandrounds.store import Store
from tests.grading import grade_answer


@cache
def _load(path: Path):
    return {s.id: s for s in MedCalcBench().load(path)}


@pytest.fixture
def rows(shared_data):
    return _load(shared_data("medcalc-bench", "test_data.csv"))


def grade(sample, text=None, error=None, protocol="reference"):
    resp = Response(key="k", text=text, error=error)
    return grade_answer(MedCalcBench().grader(RunOptions(protocol=protocol)), sample, resp)


def test_real_file_loads_completely(rows):
    assert len(rows) == 1047
    kinds = Counter(s.target["kind"] for s in rows.values())
    assert kinds == {"decimal": 627, "integer": 360, "date": 40, "gestational_age": 20}
    cats = Counter(s.metadata["category"] for s in rows.values())
    assert cats == {
        "lab": 327,
        "risk": 240,
        "physical": 240,
        "severity": 80,
        "diagnosis": 60,
        "date": 60,
        "dosage": 40,
    }
    # Relevant Entities is a Python literal with [value, unit] lists.
    assert rows["1"].metadata["relevant_entities"]["weight"] == [48.0, "kg"]
    assert rows["1"].messages[1].content.startswith("Here is the patient note:\n")


@pytest.mark.parametrize(
    "row, reply, reference, ours",
    [
        # integer (row 41, CHA2DS2-VASc, gt 4): round(answer) == gt
        ("41", '{"step_by_step_thinking": "...", "answer": "4"}', True, True),
        ("41", '{"answer": "4.4"}', True, True),
        (
            "41",
            '{"answer": "4.5"}',
            True,
            True,
        ),  # Python round: half to even, as the official script
        ("41", '{"answer": "4.6"}', False, False),
        ("41", "The total is 3 out of 9 criteria", False, False),
        (
            "41",
            '{"answer": "1, 2, 3, 4"}',
            True,
            False,
        ),  # the official counts a list; ours reads none
        # decimal (row 1, Cockcroft-Gault, gt 25.238, limits 23.9761..26.4999)
        ("1", '{"answer": "25.238"}', True, True),
        ("1", '{"answer": "26.4999 mL/min"}', True, True),
        ("1", '{"answer": "23.97"}', False, False),
        ("1", "Answer: CrCl is about 26.6 mL/min", False, False),
        (
            "1",
            '{"step_by_step_thinking": "CrCl = (140 - 87) * 48\n/ (72 * 1.4)\n", "answer": "25.238"}',
            True,
            True,
        ),
        ("1", '{"answer": "25.2 mL/min per 1.73 m²"}', False, True),  # the official reads 1.73
        ("81", '{"answer": "14.5 kg/m²"}', True, True),  # "m²" is no number 2
        (
            "507",
            '{"answer": "0.247%"}',
            False,
            True,
        ),  # FENa in percent: the official divides by 100
        # date (row 928, Naegele, gt 09/23/2014)
        ("928", '{"answer": "09/23/2014"}', True, True),
        ("928", '{"answer": "9/23/2014"}', True, True),
        ("928", '{"answer": "09/24/2014"}', False, False),
        ("928", '{"answer": "2014-09-23"}', False, True),
        # gestational age (row 1028, gt ('0 weeks', '6 days'))
        ("1028", '{"answer": "(0 weeks, 6 days)"}', True, True),
        (
            "1028",
            "Answer: ('0 weeks', '6 days')",
            False,
            True,
        ),  # no JSON field: the official call raises
        ("1028", '{"answer": "(0 weeks, 5 days)"}', False, False),
        ("1028", '{"answer": "6 days"}', False, True),  # one number: the official call raises
    ],
)
def test_tolerance_on_real_rows(rows, row, reply, reference, ours):
    for protocol, correct in (("reference", reference), ("grandrounds", ours)):
        g = grade(rows[row], reply, protocol=protocol)
        assert g.value == (1.0 if correct else 0.0), (protocol, row, reply, g.details)
        assert g.details["other_value"] == float(ours if protocol == "reference" else reference)


def test_real_row_targets(rows):
    assert rows["41"].target["kind"] == "integer" and rows["41"].metadata["calculator_id"] == 4
    assert rows["1"].target["lower"] == 23.9761 and rows["1"].target["upper"] == 26.4999
    assert mx.parse_ground_truth(rows["928"].target["truth"], "date") == date(2014, 9, 23)
    assert mx.parse_ground_truth(rows["1028"].target["truth"], "gestational_age") == (0, 6)


def test_unextractable_is_wrong_and_counted_failed_call_unscored(rows):
    bench = MedCalcBench()
    s1, s41, s928 = rows["1"], rows["41"], rows["928"]
    g_none = grade(
        s1, "I cannot compute this without more information about the patient's weight history."
    )
    assert g_none.value == 0.0 and g_none.details["unextractable"]
    g_fail = grade(s41, error="timeout")
    assert g_fail.value is None
    g_ok = grade(s928, '{"answer": "09/23/2014"}')
    assert g_ok.extracted == "09/23/2014"
    agg = bench.aggregate([s1, s41, s928], [g_none, g_fail, g_ok], RunOptions())
    assert agg.score == 0.5 and agg.n == 2 and agg.n_unscored == 1
    assert agg.extra["n_unextractable"] == 1
    assert (
        agg.breakdown["category"]["lab"].score == 0.0
        and agg.breakdown["category"]["date"].score == 1.0
    )
    assert agg.breakdown["kind"]["date"].n == 1
    assert agg.ci95[0] < 0.5 < agg.ci95[1]
    assert (
        agg.extra["other_protocol"]["protocol"] == "grandrounds"
        and agg.extra["other_protocol"]["score"] == 0.5
    )


def test_protocols_differ_in_reading_not_in_counting(rows):
    """A % answer and a list: each protocol's headline, the other's beside it; a failed call is
    unscored under both (the official harness has no rule for it)."""
    bench = MedCalcBench()
    s507, s41, s1 = rows["507"], rows["41"], rows["1"]
    replies = [(s507, '{"answer": "0.247%"}'), (s41, '{"answer": "1, 2, 3, 4"}'), (s1, None)]
    for protocol, want, other in (("reference", 0.5, 0.5), ("grandrounds", 0.5, 0.5)):
        grades = [
            grade(s, r, error=None if r else "timeout", protocol=protocol) for s, r in replies
        ]
        agg = bench.aggregate([s for s, _ in replies], grades, RunOptions(protocol=protocol))
        assert (agg.score, agg.n, agg.n_unscored) == (want, 2, 1)
        assert agg.extra["other_protocol"]["score"] == other
        assert [g.value for g in grades[:2]] == (
            [0.0, 1.0] if protocol == "reference" else [1.0, 0.0]
        )
        assert agg.extra["n_unextractable"] == (0 if protocol == "reference" else 1)


def test_grader_protocol_is_checked():
    from grandrounds.core.errors import ConfigError
    from grandrounds.core.registry import Spec
    from grandrounds.graders.base import build

    assert build(Spec("medcalc", {"protocol": "grandrounds"})).params.protocol == "grandrounds"
    assert build(Spec("medcalc", {})).params.protocol == "reference"
    with pytest.raises(
        ConfigError, match=r"unknown protocol .* \(protocols: reference, grandrounds\)"
    ):
        build(Spec("medcalc", {"protocol": "official"}))
    assert MedCalcBench().grader_spec(RunOptions(protocol="grandrounds")) == Spec(
        "medcalc", {"protocol": "grandrounds"}
    )


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


@pytest.mark.parametrize(
    "reply, text",
    [
        (
            '{"step_by_step_thinking": "line one\nline two", "answer": "25.2"}',
            "25.2",
        ),  # raw newline in a string
        ('{"step_by_step_thinking": "he said "no" twice", "answer": "4"}', "4"),  # unescaped quotes
        ('{"answer": "4", "step_by_step_thinking": "2 + 2"}', "4"),  # answer first
        ('{"answer": "1"} then, corrected: {"answer": "2"}', "2"),  # the last object wins
        ('```json\n{"Answer": 7}\n```', "7"),
        (
            '{"step_by_step_thinking": "x", "answer": str(round(25.238, 2))}',
            "str(round(25.238, 2))",
        ),
        ("The final answer is 25.2 mL/min.", "25.2 mL/min."),
        ('{"result": {"answer": [4, 3]}}', "4, 3"),
    ],
)
def test_answer_text_grandrounds_refinements(reply, text):
    assert mx.answer_text(reply) == text


@pytest.mark.parametrize(
    "text, kind, value",
    [
        ("38.3 mL/min/1.73 m²", "decimal", 38.3),
        ("38.3 mL/min per 1.73m2", "decimal", 38.3),
        ("14.5 kg/m^2", "decimal", 14.5),
        ("CHA2DS2-VASc score is 4", "integer", 4.0),
        ("0.247%", "decimal", 0.247),
        ("about 12 % (0.12)", "decimal", 12.0),
        ("3, 4, 5", "integer", None),  # which one?
        ("[1, 2]", "decimal", None),
        ("1,234.5 mL", "decimal", 1234.5),
        ("4 (CHF 1, HTN 1, age 2)", "integer", 4.0),
        ("3 out of 5 criteria", "integer", 3.0),
        ("str(round(140 * 0.5, 1))", "decimal", 70.0),
        ("−0.83 L", "decimal", -0.83),
        ("4.2 x 10^9/L", "decimal", 4.2),
        ("September 23, 2014", "date", date(2014, 9, 23)),
        ("2014-09-23", "date", date(2014, 9, 23)),
        ("LMP 01/01/2014, due 10/08/2014", "date", date(2014, 10, 8)),
        ("4 weeks and 3 days", "gestational_age", (4, 3)),
        ("4w 3d", "gestational_age", (4, 3)),
        ("6 days", "gestational_age", (0, 6)),
        ("34 weeks", "gestational_age", (34, 0)),
        ("25", "gestational_age", None),
    ],
)
def test_parse_value_grandrounds(text, kind, value):
    assert mx.parse_value(text, kind) == value


@pytest.mark.parametrize(
    "reply, calculator, answer",
    [
        ('{"answer": "25.2 mL/min/1.73 m²"}', 9, "25.2"),
        ('{"answer": "12.5%"}', 40, "0.125"),
        ('{"answer": "1, 2, 3"}', 4, "3"),  # the length of the list
        ('{"answer": "(4 weeks, 3 days)"}', 69, "(4, 3)"),
        ('{"answer": "9/3/2014"}', 13, "09/03/2014"),
        ('{"answer": "on 9/3/2014"}', 13, "N/A"),  # the date must open the field
        ('{"answer": "str(short_and_direct_answer_of_the_question)"}', 4, "N/A"),
        (
            '{"answer": "007"}',
            4,
            "007",
        ),  # read; check_correctness then fails on it (not a Python literal)
    ],
)
def test_official_reading(reply, calculator, answer):
    assert mx.official_reading(reply, calculator).answer == answer


def test_official_reading_raises_where_the_official_code_does():
    r = mx.official_reading('{"answer": "6 days"}', 69)
    assert r.answer is None and r.unextractable and "LookupError" in (r.error or "")
    assert not mc.official_correct(r.answer, "('0 weeks', '6 days')", 69, "", "")
    assert not mc.official_correct("007", "7", 4, "7", "7")  # eval("007") is a SyntaxError there
    assert mc.official_correct("00", "0", 4, "0", "0")


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
    bad = _write_one_row(
        tmp_path, src, **{"Relevant Entities": "{'sex': 'Male', 'age': [87, 'years'"}
    )
    with pytest.raises(DataError, match="Row Number 1: Relevant Entities"):
        MedCalcBench().load(bad)
    bad = _write_one_row(tmp_path, src, **{"Ground Truth Answer": "n/a"})
    with pytest.raises(DataError, match="Row Number 1: Ground Truth"):
        MedCalcBench().load(bad)
    good = _write_one_row(tmp_path, src)
    assert [s.id for s in MedCalcBench().load(good)] == ["1"]


# ---- dataset versions: v1.0, v1.2, Verified -----------------------------------------------------
# Only local files: a generated CSV in Verified's shape (the v1.0 columns, 1,100 rows), read through
# --data or "downloaded" from a file:// URL put in place of the version's public one.


def verified_rows(n: int = 1100) -> list[dict[str, str]]:
    """Rows in MedCalc-Bench-Verified's shape: a decimal, an integer and a date calculator in turn,
    multi-line quoted notes and explanations, Python-literal entities, Verified's category wording."""
    rows = []
    for i in range(1, n + 1):
        kind = ("decimal", "integer", "date")[i % 3]
        if kind == "decimal":
            calc, name, cat, truth = (
                "2",
                "Creatinine Clearance (Cockcroft-Gault Equation)",
                "lab test",
                f"{20 + i / 10:.4f}",
            )
            lower, upper = f"{float(truth) * 0.95:.5f}", f"{float(truth) * 1.05:.5f}"
        elif kind == "integer":
            calc, name, cat, truth = (
                "4",
                "CHA2DS2-VASc Score for Atrial Fibrillation Stroke Risk",
                "risk",
                str(i % 9),
            )
            lower = upper = truth
        else:
            calc, name, cat, truth = (
                "13",
                "Estimated Due Date",
                "date",
                f"{1 + i % 12:02d}/{1 + i % 28:02d}/2021",
            )
            lower = upper = truth
        rows.append(
            {
                "Row Number": str(i),
                "Calculator ID": calc,
                "Calculator Name": name,
                "Category": cat,
                "Output Type": "date" if kind == "date" else kind,
                "Note ID": f"pmc-{9000 + i}-1",
                "Note Type": "Extracted",
                "Patient Note": f'Case {i}: a 60-year-old man, "stable",\nweight 70 kg, creatinine 1.1 mg/dL.',
                "Question": "What is the patient's value?",
                "Relevant Entities": f"{{'age': [60, 'years'], 'case': {i}}}",
                "Ground Truth Answer": truth,
                "Lower Limit": lower,
                "Upper Limit": upper,
                "Ground Truth Explanation": f"Step one.\nStep two gives {truth}.",
            }
        )
    return rows


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def wrong_value(row: dict[str, str]) -> str:
    if row["Output Type"] == "date":
        return "12/31/1999"
    return str(float(row["Ground Truth Answer"]) * 2 + 7)


def answering(right: set[int], rows: list[dict[str, str]]):
    """A scripted model that gives the ground truth for the rows in ``right`` and a wrong value otherwise."""
    by_case = {int(r["Row Number"]): r for r in rows}

    def script(req) -> str:
        case = int(re.search(r"Case (\d+):", req.messages[-1].content).group(1))
        row = by_case[case]
        value = row["Ground Truth Answer"] if case in right else wrong_value(row)
        return json.dumps({"step_by_step_thinking": "Worked through the formula.", "answer": value})

    return script


def run_medcalc(store: Store, model: str, script, version: str | None, data: Path | None):
    params = {"version": version} if version else {}
    cfg = RunConfig(
        benchmark="medcalc-bench",
        model=f"scripted/{model}",
        bench_params=params,
        data=data,
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": script},
    )
    return asyncio.run(run(store, cfg))


def test_versions_are_named_with_their_public_files():
    v = medcalc_module.VERSIONS
    assert list(v) == ["v1.0", "v1.2", "verified"]
    assert (
        v["v1.0"].file.sha256 == "c2d23097f8bdb7ae4a77dbf4a5a767335df7303998d7c7664a73a29fd8e2b31a"
    )
    assert v["v1.0"].file.url.endswith(
        f"/ncbi-nlp/MedCalc-Bench/{medcalc_module.COMMIT}/dataset/test_data.csv"
    )
    assert (
        v["v1.2"].file.url
        == "https://raw.githubusercontent.com/ncbi-nlp/MedCalc-Bench/main/datasets/test_data.csv"
    )
    assert v["verified"].file.url.startswith(
        "https://raw.githubusercontent.com/nikhilk7153/MedCalc-Bench-Verified/"
    )
    assert v["verified"].file.url.endswith("/datasets/test_data.csv")
    assert (
        v["v1.2"].file.sha256 is None and v["verified"].file.sha256 is None
    )  # recorded at the first download
    assert len({x.file.filename for x in v.values()}) == 3  # never one cached copy for two versions
    assert (v["v1.0"].rows, v["v1.2"].rows, v["verified"].rows) == (1047, 1100, 1100)
    assert str(MedCalcBench().spec()) == "medcalc-bench" == str(MedCalcBench(version="v1.0").spec())
    assert str(MedCalcBench(version="verified").spec()) == 'medcalc-bench{"version":"verified"}'
    assert MedCalcBench(version="v1.2").remote_files == (v["v1.2"].file,)
    with pytest.raises(ConfigError, match="version"):
        MedCalcBench(version="v2.0")


def test_verified_shaped_file_through_the_local_path_override(tmp_path):
    rows = verified_rows()
    data = write_rows(tmp_path / "test_data.csv", rows)
    bench = MedCalcBench(version="verified")
    samples = bench.load(data)
    assert (
        len(samples) == 1100 and bench.load(tmp_path) == samples
    )  # the file, or a checkout's folder
    assert Counter(s.target["kind"] for s in samples) == {
        "decimal": 366,
        "integer": 367,
        "date": 367,
    }
    assert (
        samples[2].metadata["category"] == "lab test"
        and samples[2].metadata["relevant_entities"]["case"] == 3
    )

    right = {i for i in range(1, 1101) if i % 4}
    with Store(tmp_path / "s.db") as st:
        out = run_medcalc(st, "m", answering(right, rows), "verified", data)
    assert out.result.n == 1100 and out.result.score == pytest.approx(len(right) / 1100)
    assert (
        out.result.extra["version"]
        == "verified (1,100 rows, nikhilk7153/MedCalc-Bench-Verified@2df6974)"
    )
    fp = out.result.fingerprint
    assert fp["benchmark"] == 'medcalc-bench{"version":"verified"}' and fp[
        "dataset_sha256"
    ] == file_sha256(data)


def test_the_v1_0_file_is_refused_under_another_versions_name(shared_data):
    path = shared_data("medcalc-bench", "test_data.csv")
    with pytest.raises(DataError, match="this is the v1.0 file.*not v1.2"):
        MedCalcBench(version="v1.2").load(path)
    assert MedCalcBench().load(path)[0].id == "1"
    assert MedCalcBench().dataset_hash(path.parent) == medcalc_module.VERSIONS["v1.0"].file.sha256


@pytest.fixture
def served_verified(tmp_path, monkeypatch):
    """Verified's public file replaced by a file:// URL to a generated copy; a fresh cache."""
    served = write_rows(tmp_path / "served.csv", verified_rows(60))
    version = medcalc_module.VERSIONS["verified"]
    monkeypatch.setitem(
        medcalc_module.VERSIONS,
        "verified",
        replace(version, file=replace(version.file, url=served.as_uri())),
    )
    monkeypatch.setenv("GRANDROUNDS_CACHE", str(tmp_path / "cache"))
    return served


def test_first_download_records_the_checksum_and_a_later_change_warns(served_verified, tmp_path):
    served = served_verified
    first_sha = file_sha256(served)
    cached = tmp_path / "cache" / "medcalc-bench" / "test_data-verified.csv"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning on the first download or a cache hit
        root = resolve(MedCalcBench(version="verified"), None)
        assert root == cached.parent and cached.read_bytes() == served.read_bytes()
        record = recorded(cached)
        assert (
            record["sha256"] == first_sha
            and record["url"] == served.as_uri()
            and record["bytes"] == served.stat().st_size
        )
        assert record_path(cached).name == "test_data-verified.csv.download.json"
        resolve(MedCalcBench(version="verified"), None)

    # upstream changes (a relabelled row); the cached copy is gone, so it is downloaded again
    rows = verified_rows(60)
    rows[5]["Ground Truth Answer"] = "5"
    write_rows(served, rows)
    cached.unlink()
    with pytest.warns(ChecksumChanged, match=f"sha256 {first_sha} then, {file_sha256(served)} now"):
        resolve(MedCalcBench(version="verified"), None)
    assert cached.read_bytes() == served.read_bytes()
    assert recorded(cached)["sha256"] == first_sha  # the record is kept: every later use warns
    with pytest.warns(ChecksumChanged, match="Delete test_data-verified.csv.download.json"):
        resolve(MedCalcBench(version="verified"), None)

    # the cached copy edited in place warns too; deleting the record accepts the current file
    record_path(cached).unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve(MedCalcBench(version="verified"), None)
    assert recorded(cached)["sha256"] == file_sha256(served)
    cached.write_text(
        cached.read_text(encoding="utf-8").replace("Case 7:", "Case 7 (edited):"), encoding="utf-8"
    )
    with pytest.warns(ChecksumChanged):
        resolve(MedCalcBench(version="verified"), None)


def test_a_record_from_another_url_means_a_new_download(served_verified, tmp_path):
    cached = tmp_path / "cache" / "medcalc-bench" / "test_data-verified.csv"
    cached.parent.mkdir(parents=True)
    cached.write_text("stale copy from elsewhere\n", encoding="utf-8")
    record_path(cached).write_text(
        json.dumps({"url": "https://example.org/old.csv", "sha256": "0" * 64}), encoding="utf-8"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resolve(MedCalcBench(version="verified"), None)
    assert cached.read_bytes() == served_verified.read_bytes()
    assert recorded(cached)["url"] == served_verified.as_uri()
    record_path(cached).write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError, match=r"download.json: unreadable download record"):
        resolve(MedCalcBench(version="verified"), None)


def test_the_leaderboard_never_ranks_across_versions_or_changed_files(served_verified, tmp_path):
    rows = verified_rows(60)
    data = write_rows(tmp_path / "same_file.csv", rows)
    good, fair = {i for i in range(1, 61) if i % 4}, {i for i in range(1, 61) if i % 2}
    with Store(tmp_path / "s.db") as st:
        # The very same file under two version names: only the version tells the results apart.
        for model, right in (("good", good), ("fair", fair)):
            run_medcalc(st, model, answering(right, rows), None, data)
            run_medcalc(st, model, answering(right, rows), "verified", data)
        [board] = leaderboard(result_rows(st))
        assert board.benchmark == "medcalc-bench" and board.settings == 2
        by_setting: dict[int, list] = {}
        for e in board.entries:
            by_setting.setdefault(e.setting, []).append(e)
        for entries in by_setting.values():
            assert (
                len({e.row.fingerprint["benchmark"] for e in entries}) == 1
            )  # one version per setting
            assert [(e.row.model, e.rank) for e in entries] == [
                ("scripted/good", 1),
                ("scripted/fair", 2),
            ]
        assert {e.row.fingerprint["benchmark"] for e in board.entries} == {
            "medcalc-bench",
            'medcalc-bench{"version":"verified"}',
        }
        assert all(
            any("benchmark" in f for f in e.flags) for e in by_setting[2]
        )  # what differs is named

    with Store(tmp_path / "t.db") as st:
        # One version name, but the downloaded file changed between two runs: kept apart by its checksum.
        run_medcalc(st, "good", answering(good, rows), "verified", None)
        changed = verified_rows(60)
        changed[0]["Ground Truth Answer"] = changed[0]["Lower Limit"] = changed[0][
            "Upper Limit"
        ] = "8"  # relabelled
        write_rows(served_verified, changed)
        (tmp_path / "cache" / "medcalc-bench" / "test_data-verified.csv").unlink()
        with pytest.warns(ChecksumChanged):
            run_medcalc(st, "fair", answering(fair, changed), "verified", None)
        [board] = leaderboard(result_rows(st))
        assert board.settings == 2 and {e.rank for e in board.entries} == {1}
        shas = {e.row.fingerprint["dataset_sha256"] for e in board.entries}
        assert shas == {
            file_sha256(served_verified),
            recorded(tmp_path / "cache" / "medcalc-bench" / "test_data-verified.csv")["sha256"],
        }
        assert all("dataset_sha256" in " ".join(e.flags) for e in board.entries if e.setting == 2)

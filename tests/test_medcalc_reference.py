"""MedCalc-Bench under ``--protocol reference`` against the official code, on every real test row.

The official functions (run.py ``extract_answer`` and ``zero_shot``, evaluate.py
``check_correctness``, llm_inference.py ``LLMInference.answer``) are pulled out of
../shared/reference with ``tests.official.load_official`` and run as run.py's loop runs them: the
reply's whitespace collapsed, extract_answer, check_correctness, any exception "Incorrect". Every
one of the 1,047 rows is answered in each reply shape below and graded by our grader; under the
reference protocol its value must equal the official correctness in every case. The per-shape
table (cases, agreements, and how often our own ``grandrounds`` reading agrees) is printed (run
with ``-s``). No sampling: all 1,047 x 24 cases run in a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medcalc import OFFICIAL_SYSTEM, OFFICIAL_USER, RUN_PY, MedCalcBench
from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.graders.medcalc_extract import official_expression
from grandrounds.graders.medcalc_grader import MedCalcGrader, MedCalcParams
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from tests.conftest import reference_file, shared_file
from tests.official import load_official

Row = dict[str, str]

# ---- the official pipeline ------------------------------------------------------------------


@lru_cache(maxsize=1)
def official() -> SimpleNamespace:
    run_py = load_official("medcalc-bench/evaluation/run.py", ["extract_answer", "zero_shot"])
    evaluate = load_official("medcalc-bench/evaluation/evaluate.py", ["check_correctness"])
    llm = load_official("medcalc-bench/evaluation/llm_inference.py", ["LLMInference"])
    return SimpleNamespace(
        extract_answer=run_py.extract_answer,
        zero_shot=run_py.zero_shot,
        check_correctness=evaluate.check_correctness,
        LLMInference=llm.LLMInference,
    )


def official_value(reply: str, row: Row) -> float:
    """run.py's main loop for one row whose model said ``reply``: 1.0 for "Correct", else 0.0."""
    o = official()
    answer = o.LLMInference.answer(
        SimpleNamespace(generate=lambda messages: reply), []
    )  # the whitespace collapse
    calculator_id = str(row["Calculator ID"])
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # extract_answer prints failed evaluations
            value, _ = o.extract_answer(answer, int(calculator_id))
            ok = o.check_correctness(
                value,
                row["Ground Truth Answer"],
                calculator_id,
                row["Upper Limit"],
                row["Lower Limit"],
            )
    except Exception:  # noqa: BLE001  (run.py: any exception -> "Incorrect")
        return 0.0
    return 1.0 if ok else 0.0


# ---- reply shapes -----------------------------------------------------------------------------

UNITS = ("mL/min/1.73 m²", "mg/dL", "kg/m^2", "mEq/L", "points", "mL/min/1.73m2", "msec", "L")
THINKING = "The note gives the values needed. Applying the formula step by step gives the result."


def kind_of(row: Row) -> str:
    cid = int(row["Calculator ID"])
    return "date" if cid in (13, 68) else "gestational" if cid == 69 else "number"


def weeks_days(row: Row) -> tuple[int, int]:
    w, d = (
        int("".join(ch for ch in part if ch.isdigit()))
        for part in row["Ground Truth Answer"].strip("()").split(",")
    )
    return w, d


def shifted(row: Row, factor: float, days: int) -> str:
    """The truth moved a little: a number times ``factor``, a date or a gestational age by ``days``."""
    k = kind_of(row)
    if k == "date":
        return (
            datetime.strptime(row["Ground Truth Answer"], "%m/%d/%Y") + timedelta(days=days)
        ).strftime("%m/%d/%Y")
    if k == "gestational":
        w, d = weeks_days(row)
        total = max(0, w * 7 + d + days)
        return f"({total // 7} weeks, {total % 7} days)"
    return f"{float(row['Ground Truth Answer']) * factor:.3f}".rstrip("0").rstrip(".")


def js(answer: Any, thinking: str = THINKING) -> str:
    return json.dumps({"step_by_step_thinking": thinking, "answer": answer})


def gt(row: Row) -> str:
    return row["Ground Truth Answer"]


def with_unit(row: Row) -> str:
    if kind_of(row) == "number":
        return js(f"{gt(row)} {UNITS[int(row['Row Number']) % len(UNITS)]}")
    return js(f"{gt(row)} (estimated)")


def as_list(row: Row) -> str:
    if kind_of(row) == "gestational":
        w, d = weeks_days(row)
        return js(f"[{w}, {d}]")
    if kind_of(row) == "date":
        return js(f"{shifted(row, 1, -7)}, {gt(row)}")
    return js(f"1, 2, {gt(row)}")


def iso_date(row: Row) -> str:
    if kind_of(row) == "date":
        return js(datetime.strptime(gt(row), "%m/%d/%Y").strftime("%Y-%m-%d"))
    return js(f"{gt(row)} as of 2014-09-23")


def worded_date(row: Row) -> str:
    if kind_of(row) == "date":
        return js(datetime.strptime(gt(row), "%m/%d/%Y").strftime("%B %d, %Y"))
    return js(f"{gt(row)} on September 23, 2014")


def gestational_tuple(row: Row) -> str:
    if kind_of(row) == "gestational":
        w, d = weeks_days(row)
        return js(
            [f"{w} weeks and {d} days", f"({w}, {d})", f"{w} weeks, {d} days"][
                int(row["Row Number"]) % 3
            ]
        )
    return js(f"({gt(row)}, 0)")


def multi_line(row: Row) -> str:
    """The official JSON shape as models write it: raw newlines inside the thinking string."""
    return (
        '{"step_by_step_thinking": "Step 1: read the note.\nStep 2: apply the formula.\n", "answer": "'
        + gt(row)
        + '"}'
    )


def unescaped_quotes(row: Row) -> str:
    return (
        '{"step_by_step_thinking": "The note says "no history" and "afebrile" at 12.5 h.", "answer": "'
        + gt(row)
        + '"}'
    )


def answer_first(row: Row) -> str:
    return json.dumps(
        {"answer": gt(row), "step_by_step_thinking": "Points: 2 for age, 1 for sex, total 3.5"}
    )


def two_objects(row: Row) -> str:
    return js(shifted(row, 2.0, 40), "draft") + "\nOn reflection:\n" + js(gt(row))


def two_objects_first_right(row: Row) -> str:
    return js(gt(row)) + "\nA variant for comparison: " + js(shifted(row, 2.0, 40), "variant")


def expression(row: Row) -> str:
    value = gt(row) if kind_of(row) != "number" else f"round({gt(row)} * 1.0, 3)"
    return '{"step_by_step_thinking": "compute", "answer": str(' + value + ")}"


def leading_zeros(row: Row) -> str:
    if kind_of(row) == "gestational":
        w, d = weeks_days(row)
        return js(f"({w:02d} weeks, {d:02d} days)")
    return js(gt(row) if kind_of(row) == "date" else "0" + gt(row).lstrip("-"))


def full_width(row: Row) -> str:
    return js(gt(row).translate({c: c + 0xFEE0 for c in range(0x30, 0x3A)}))


def out_of(row: Row) -> str:
    return js(f"{gt(row)} out of 10 criteria")


SHAPES: dict[str, Callable[[Row], str]] = {
    "exact": lambda r: js(gt(r)),
    "+3%": lambda r: js(shifted(r, 1.03, 1)),
    "-3%": lambda r: js(shifted(r, 0.97, -1)),
    "+7%": lambda r: js(shifted(r, 1.07, 3)),
    "-7%": lambda r: js(shifted(r, 0.93, -3)),
    "with units": with_unit,
    "with %": lambda r: js(f"{gt(r)}%"),
    "list": as_list,
    "ISO date": iso_date,
    "worded date": worded_date,
    "gestational tuple": gestational_tuple,
    "multi-line JSON": multi_line,
    "unescaped quotes": unescaped_quotes,
    "answer-first keys": answer_first,
    "two JSON objects (last right)": two_objects,
    "two JSON objects (first right)": two_objects_first_right,
    "plain prose": lambda r: f"After working through the note, the patient's value is {gt(r)}.",
    "Answer: line": lambda r: f"Reasoning...\nAnswer: {gt(r)}",
    "fenced JSON": lambda r: "```json\n" + js(gt(r)) + "\n```",
    "str(expression)": expression,
    "leading zeros": leading_zeros,
    "full-width digits": full_width,
    "N out of M": out_of,
    "prompt placeholder": lambda r: js("str(short_and_direct_answer_of_the_question)"),
}


# ---- the comparison ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def table() -> list[tuple[str, Row, Sample, str, float, Grade]]:
    """(shape, row, sample, reply, official value, our grade) for every row x shape."""
    path = shared_file("medcalc-bench", "test_data.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    samples = {s.id: s for s in MedCalcBench().load(path)}
    grader = MedCalcGrader(MedCalcParams("reference"))
    cases = [
        (name, r, samples[r["Row Number"]], shape(r))
        for name, shape in SHAPES.items()
        for r in rows
    ]

    async def grade_all() -> list[Grade]:
        return [
            await grader.grade(s, Response(key="k", text=reply), GradeContext())
            for _, _, s, reply in cases
        ]

    grades = asyncio.run(grade_all())
    return [
        (name, r, s, reply, official_value(reply, r), g)
        for (name, r, s, reply), g in zip(cases, grades)
    ]


def test_reference_agrees_with_the_official_code_on_every_row_and_shape(capsys):
    per_shape: dict[str, list[int]] = {}
    disagreements = []
    for name, row, _, reply, want, g in table():
        counts = per_shape.setdefault(name, [0, 0, 0, 0, 0])
        counts[0] += 1
        counts[1] += g.value == want
        counts[2] += g.details["other_value"] == want
        counts[3] += int(want)
        counts[4] += int(g.details["other_value"])
        if g.value != want:
            disagreements.append((name, row["Row Number"], reply, want, g.details["reference"]))
    with capsys.disabled():
        print(
            f"\n{'shape':32} {'cases':>6} {'agree':>6} {'grandrounds=official':>21} {'official acc':>13} {'grandrounds acc':>16}"
        )
        for name, (n, agree, ours_agree, right, ours_right) in per_shape.items():
            print(
                f"{name:32} {n:6} {agree:6} {ours_agree:21} {right / n:13.3f} {ours_right / n:16.3f}"
            )
        total = [sum(c[i] for c in per_shape.values()) for i in range(3)]
        print(f"{'all':32} {total[0]:6} {total[1]:6} {total[2]:21}")
    assert len(per_shape) >= 15 and all(c[0] == 1047 for c in per_shape.values())
    assert disagreements == [], disagreements[:5]


def test_multi_line_json_replies_score_what_the_official_scorer_gives():
    """The issue's case: every row answered correctly in the official JSON shape with raw newlines
    in the thinking string. The official scorer gives 1.0; so do both protocols here."""
    cases = [(want, g) for name, _, _, _, want, g in table() if name == "multi-line JSON"]
    assert len(cases) == 1047
    assert sum(w for w, _ in cases) / 1047 == 1.0
    assert sum(g.value for _, g in cases) / 1047 == 1.0  # reference
    assert sum(g.details["other_value"] for _, g in cases) / 1047 == 1.0  # grandrounds
    assert not any(g.details["grandrounds"]["unextractable"] for _, g in cases)


def test_aggregate_headline_and_other_protocol_equal_the_official_mean():
    """The reference headline over all rows of one shape is the official accuracy (the mean of
    Correct over the output file); the grandrounds figure rides along in extra."""
    bench = MedCalcBench()
    for shape in ("with %", "answer-first keys", "multi-line JSON"):
        rows = [(s, want, g) for name, _, s, _, want, g in table() if name == shape]
        samples, grades = [s for s, _, _ in rows], [g for _, _, g in rows]
        agg = bench.aggregate(samples, grades, RunOptions())
        assert agg.score == sum(w for _, w, _ in rows) / len(rows) and agg.n == 1047
        other = agg.extra["other_protocol"]
        assert other["protocol"] == "grandrounds"
        assert other["score"] == sum(g.details["other_value"] for g in grades) / 1047
        mirrored = bench.aggregate(
            samples, [_as_grandrounds(g) for g in grades], RunOptions(protocol="grandrounds")
        )
        assert (
            mirrored.score == other["score"]
            and mirrored.extra["other_protocol"]["score"] == agg.score
        )


def _as_grandrounds(g: Grade) -> Grade:
    d = g.details
    return Grade(
        sample_id=g.sample_id,
        value=d["other_value"],
        details=d
        | {
            "protocol": "grandrounds",
            "other_value": g.value,
            "unextractable": d["other_unextractable"],
            "other_unextractable": d["unextractable"],
        },
    )


@pytest.mark.parametrize(
    "expression, value",
    [
        ("round(25.2384, 2)", 25.24),
        (
            "(140 - 87) * 48 / (72 * 1.4",
            (140 - 87) * 48 / (72 * 1.4),
        ),  # a missing ")" added, as run.py does
        ("sqrt(77.1 * 176.1 / 3600)", (77.1 * 176.1 / 3600) ** 0.5),
        ("2^3 + 1", 9),
        ("min(3, 4) + abs(-2)", 5),
        ("7 is odd", True),
        ("48 kg / 1.4 mg/dl", 48 / 1.4),  # unit words removed first
        ("math.log(4)", None),  # every "g" is removed: math.lo
        ("__import__('os')", None),
        ("10 ** 10 ** 10", None),  # the official eval would not finish
    ],
)
def test_expression_answers_match_the_official_eval(expression, value):
    ours = official_expression(expression)
    assert ours == value or (value is not None and ours == pytest.approx(value))
    if "10 ** 10" in expression:
        return
    with contextlib.redirect_stdout(io.StringIO()):
        got, _ = official().extract_answer('{"answer": str(' + expression + ")}", 2)
    assert got == ("N/A" if value is None else str(ours))


# ---- the official prompt, as sent ------------------------------------------------------------


def _sources_sha256(path: str) -> str:
    for line in reference_file("SOURCES.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        folder, _, _, p, sha = line.split("\t")
        if folder == "medcalc-bench" and p == path:
            return sha
    raise AssertionError(f"{path} not in SOURCES.tsv")


def test_templates_hash_to_sources_tsv_and_a_run_sends_the_official_messages(tmp_path):
    assert RUN_PY.sha256 == _sources_sha256("evaluation/run.py")
    hashes = MedCalcBench().template_hashes()
    assert (
        hashes["reference_system"]["sha256"] == hashes["reference_user"]["sha256"] == RUN_PY.sha256
    )
    assert set(OFFICIAL_USER.load().fields) == {"note", "question"}

    path = shared_file("medcalc-bench", "test_data.csv")
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))[:3]
    sent: list[Any] = []

    def script(req: Any) -> str:
        sent.append(req)
        return '{"step_by_step_thinking": "a\nb", "answer": "1"}'

    cfg = RunConfig(
        benchmark="medcalc-bench",
        model="scripted/m",
        data=path,
        limit=3,
        provider_options={"script": script},
    )
    out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    assert len(sent) == 3
    for req, row in zip(sent, rows):
        system, user = official().zero_shot(row["Patient Note"], row["Question"])
        assert [(m.role, m.content) for m in req.messages] == [("system", system), ("user", user)]
        assert req.params.temperature == 0.0 and req.params.max_tokens == 4096
    assert (
        out.result.fingerprint["prompt_templates"]["reference_user"]["text_sha256"]
        == OFFICIAL_USER.load().fingerprint()["text_sha256"]
    )
    assert OFFICIAL_SYSTEM.load().render() == official().zero_shot("n", "q")[0]


def test_grandrounds_run_sends_our_prompt(tmp_path):
    path = shared_file("medcalc-bench", "test_data.csv")
    sent: list[Any] = []

    def script(req: Any) -> str:
        sent.append(req)
        return '{"step_by_step_thinking": "a", "answer": "1"}'

    cfg = RunConfig(
        benchmark="medcalc-bench",
        model="scripted/m",
        data=path,
        limit=1,
        provider_options={"script": script},
        options=RunOptions(protocol="grandrounds"),
    )
    asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    sample = MedCalcBench().load(path)[0]
    assert [(m.role, m.content) for m in sent[0].messages] == [
        (m.role, m.content) for m in sample.messages
    ]

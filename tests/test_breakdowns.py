"""Typed breakdowns: cells built in one place, each benchmark's families, and every reader of them.

The leaderboard, the HTML report (radar and tables) and the exports read ``family -> key -> Cell``
directly. MEDEC and MedCalc-Bench are run on real rows through the real runner with scripted
models, and every cell shown is checked against a count made here from the per-sample grades.
"""

from __future__ import annotations

import asyncio
import csv
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.leaderboard import Board, Entry, ResultRow, breakdown_tables
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.gaps import GAPS
from grandrounds.benchmarks.healthbench import HealthBench
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.benchmarks.medcalc import MedCalcBench
from grandrounds.benchmarks.medec import MEDEC
from grandrounds.benchmarks.medeqbench import MedEQBench
from grandrounds.cli.main import app
from grandrounds.core.display import fmt
from grandrounds.core.hashing import to_jsonable
from grandrounds.core.records import (
    Breakdown,
    Cell,
    Criterion,
    Grade,
    Message,
    Request,
    Sample,
    Verdict,
    breakdown_from_json,
)
from grandrounds.reports import boards, build_report
from grandrounds.reports.radar import radar_svg
from grandrounds.run.config import RunConfig
from grandrounds.run.outcome import RunOutcome
from grandrounds.run.runner import run
from grandrounds.scoring.cells import accuracy_cell, group_cells, mean_cell
from grandrounds.scoring.stats import mean_ci, wilson_ci
from grandrounds.store import Store
from tests.conftest import shared_file

MEDEC_TEST = "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"
MEDEC_VAL = "MEDEC-MS-ValidationSet-with-GroundTruth-and-ErrorType.csv"
MODELS = ("scripted/alpha", "scripted/beta")


# ---- the shared cell helpers --------------------------------------------------------------


def test_accuracy_cell_counts_scored_and_unscored_with_wilson_ci() -> None:
    c = accuracy_cell([1.0, 0.0, None, 1.0, 1.0, None], {"n_x": 3})
    assert c == Cell(score=0.75, n=4, n_unscored=2, ci95=wilson_ci(3, 4), metrics={"n_x": 3})
    assert accuracy_cell([None, None]) == Cell(score=None, n=0, n_unscored=2)
    assert accuracy_cell([]) == Cell(score=None, n=0)


def test_accuracy_cell_percent_is_bit_identical_to_100k_over_n() -> None:
    c = accuracy_cell([1.0, 1.0, 0.0], scale=100.0)
    ci = wilson_ci(2, 3)
    assert ci is not None and c.score == 100.0 * 2 / 3 and c.ci95 == (100.0 * ci[0], 100.0 * ci[1])


def test_mean_cell_and_group_cells_order() -> None:
    c = mean_cell([0.25, None, 0.75, 0.5])
    assert (
        c.score == 0.5 and c.n == 3 and c.n_unscored == 1 and c.ci95 == mean_ci([0.25, 0.75, 0.5])
    )
    rows = [("b", 1.0), ("a", 0.0), ("b", None), ("c", 1.0)]
    assert list(group_cells(rows, accuracy_cell)) == ["a", "b", "c"]
    assert list(group_cells(rows, accuracy_cell, sort=False)) == ["b", "a", "c"]
    assert group_cells(rows, accuracy_cell)["b"] == Cell(
        score=1.0, n=1, n_unscored=1, ci95=wilson_ci(1, 1)
    )


def test_cells_survive_json_and_legacy_shapes_are_left_out_not_guessed() -> None:
    bd = {
        "kind": {
            "date": Cell(
                score=0.5, n=2, n_unscored=1, ci95=(0.1, 0.9), metrics={"n_unextractable": 1}
            )
        },
        "category": {"lab": Cell(score=None, n=0, n_unscored=3)},
    }
    assert breakdown_from_json(json.loads(json.dumps(to_jsonable(bd)))) == bd
    legacy = {
        "category:lab": {"accuracy": 0.5, "n": 2},
        "MK": {"usability_rate": 80.0, "n": 5},
        "misc": 0.5,
        "note": "x",
    }
    assert breakdown_from_json(legacy) == {}


def test_breakdown_tables_align_results_keys_and_metrics() -> None:
    def row(model: str, bd: dict) -> ResultRow:
        return ResultRow(
            run_id="r-" + model,
            grader_fp="fp",
            benchmark="b",
            model=model,
            metric="accuracy",
            score=0.5,
            ci95=None,
            n=2,
            n_unscored=0,
            coverage=None,
            breakdown=bd,
        )

    a = row(
        "a", {"kind": {"x": Cell(score=1.0, n=1), "y": Cell(score=0.0, n=1, metrics={"m1": 0.5})}}
    )
    b = row(
        "b",
        {
            "kind": {"z": Cell(score=0.5, n=2, metrics={"m2": 1})},
            "split": {"test": Cell(score=0.5, n=2)},
        },
    )
    board = Board(
        "b",
        "accuracy",
        1,
        (Entry(row=a, setting=1, rank=1, group=1), Entry(row=b, setting=1, rank=2, group=2)),
    )
    kind, split = breakdown_tables(board)
    assert (kind.family, kind.keys, kind.metrics) == ("kind", ("x", "y", "z"), ("m1", "m2"))
    assert [(k, e.row.model, c.score) for k, e, c in kind.rows()] == [
        ("x", "a", 1.0),
        ("y", "a", 0.0),
        ("z", "b", 0.5),
    ]
    assert split.cells[0] == {} and [k for k, _, _ in split.rows()] == ["test"]


# ---- each benchmark's families (hand-made samples and grades) ---------------------------


def _s(sid: str, bench: str, target: Any = None, rubric: tuple = (), **meta: Any) -> Sample:
    return Sample(
        id=sid,
        benchmark=bench,
        messages=(Message("user", sid),),
        target=target,
        rubric=rubric,
        metadata=meta,
    )


def test_medcalc_category_and_kind_are_two_families() -> None:
    samples = [
        _s(f"{i}", "medcalc-bench", {"kind": kind}, category=cat)
        for i, (cat, kind) in enumerate(
            [
                ("lab", "decimal"),
                ("lab", "integer"),
                ("date", "date"),
                ("date", "date"),
                ("risk", "integer"),
            ]
        )
    ]
    grades = [
        Grade(sample_id="0", value=1.0),
        Grade(sample_id="1", value=0.0, details={"unextractable": True}),
        Grade(sample_id="2", value=1.0),
        Grade(sample_id="3", value=None),
    ]
    agg = MedCalcBench().aggregate(samples, grades, RunOptions())
    assert set(agg.breakdown) == {"category", "kind"}
    assert agg.breakdown["category"] == {
        "date": Cell(
            score=1.0, n=1, n_unscored=1, ci95=wilson_ci(1, 1), metrics={"n_unextractable": 0}
        ),
        "lab": Cell(
            score=0.5, n=2, n_unscored=0, ci95=wilson_ci(1, 2), metrics={"n_unextractable": 1}
        ),
        "risk": Cell(
            score=None, n=0, n_unscored=1, metrics={"n_unextractable": 0}
        ),  # no grade at all: unscored
    }
    assert agg.breakdown["kind"]["date"] == Cell(
        score=1.0, n=1, n_unscored=1, ci95=wilson_ci(1, 1), metrics={"n_unextractable": 0}
    )
    assert agg.breakdown["kind"]["integer"] == Cell(
        score=0.0, n=1, n_unscored=1, ci95=wilson_ci(0, 1), metrics={"n_unextractable": 1}
    )
    for fam in agg.breakdown.values():  # every sample lands in exactly one cell of each family
        assert (
            sum(c.n for c in fam.values()) == agg.n
            and sum(c.n_unscored for c in fam.values()) == agg.n_unscored
        )


def test_medec_error_type_and_split_cells_carry_sentence_accuracy_and_r1fc() -> None:
    samples = [
        _s("a", "medec", error_type="diagnosis", split="test"),
        _s("b", "medec", error_type="NA", split="test"),
        _s("c", "medec", error_type="diagnosis", split="validation"),
        _s("d", "medec", error_type="NA", split="validation"),
    ]
    grades = [
        Grade(
            sample_id="a", value=1.0, details={"sentence_correct": True, "correction_score": 0.5}
        ),
        Grade(
            sample_id="b",
            value=0.0,
            details={"unparseable": True, "sentence_correct": False, "correction_score": 0.0},
        ),
        Grade(
            sample_id="c", value=1.0, details={"sentence_correct": False, "correction_score": 0.25}
        ),
        Grade(sample_id="d", value=None),
    ]
    agg = MEDEC().aggregate(
        samples, grades, RunOptions(protocol="grandrounds")
    )  # answered texts only
    assert list(agg.breakdown) == ["error_type", "split"]
    diag = agg.breakdown["error_type"]["diagnosis"]
    assert (diag.score, diag.n, diag.n_unscored, diag.ci95) == (1.0, 2, 0, wilson_ci(2, 2))
    assert diag.metrics == {
        "error_sentence_accuracy": 0.5,
        "r1fc": 0.375,
        "n_unparseable": 0,
        "n_no_answer": 0,
    }
    val = agg.breakdown["split"]["validation"]
    assert (val.score, val.n, val.n_unscored) == (1.0, 1, 1)
    assert agg.breakdown["split"]["test"].metrics["n_unparseable"] == 1
    ref = (
        MEDEC().aggregate(samples, grades, RunOptions()).breakdown["split"]["validation"]
    )  # reference: missing = wrong
    assert (
        (ref.score, ref.n, ref.n_unscored) == (0.5, 2, 1)
        and ref.metrics["r1fc"] == 0.125
        and ref.metrics["n_no_answer"] == 1
    )


def test_llmeval_gaps_and_medbench_families() -> None:
    cats = ["医疗知识", "医疗知识", "医疗推理"]
    ll = [_s(f"l{i}", "llmeval-med", category=c) for i, c in enumerate(cats)]
    lg = [
        Grade(
            sample_id="l0",
            value=1.0,
            details={"run_scores": [4.5], "mean_score": 4.5, "other_value": 1.0},
        ),
        Grade(sample_id="l1", value=None, details={"run_scores": [None], "other_value": None}),
        Grade(
            sample_id="l2",
            value=0.0,
            details={"run_scores": [2.0], "mean_score": 2.0, "other_value": 0.0},
        ),
    ]
    mk = (
        LLMEvalMed()
        .aggregate(ll, lg, RunOptions(protocol="grandrounds"))
        .breakdown["category"]["MK"]
    )
    assert (mk.score, mk.n, mk.n_unscored) == (100.0, 1, 1)
    assert mk.metrics == {"other_rate": 50.0, "mean_score": 4.5, "n_no_valid_score": 1}
    ref = (
        LLMEvalMed().aggregate(ll, lg, RunOptions()).breakdown["category"]["MK"]
    )  # reference: no valid score = unusable
    assert (ref.score, ref.n, ref.n_unscored) == (50.0, 2, 1) and ref.metrics["other_rate"] == 100.0

    gs = [
        _s("g0", "gaps", category="G1"),
        _s("g1", "gaps", category="G1"),
        _s("g2", "gaps", category="G2"),
    ]
    gg = [
        Grade(
            sample_id="g0",
            value=0.4,
            details={
                "reference_value": 0.3,
                "other_value": 0.3,
                "coverage": 1.0,
                "n_review_needed": 0,
            },
        ),
        Grade(
            sample_id="g1",
            value=0.8,
            details={
                "reference_value": 0.5,
                "other_value": 0.5,
                "coverage": 0.5,
                "n_review_needed": 2,
            },
        ),
    ]
    g1 = GAPS().aggregate(gs, gg, RunOptions(protocol="grandrounds")).breakdown["category"]["G1"]
    assert g1.score == pytest.approx(0.6) and (g1.n, g1.n_unscored, g1.ci95) == (
        2,
        0,
        mean_ci([0.4, 0.8]),
    )
    assert g1.metrics == {"other_score": 0.4, "mean_coverage": 0.75, "n_review_needed": 2}

    ms = [
        _s("m0", "medbench", "A", source="MedExam_V4"),
        _s("m1", "medbench", None, source="MedOpen"),
    ]
    mg = [
        Grade(sample_id="m0", value=1.0),
        Grade(sample_id="m1", value=None, error="answer withheld"),
    ]
    src = MedBench().aggregate(ms, mg, RunOptions()).breakdown["source"]
    assert src == {
        "MedExam_V4": Cell(
            score=1.0, n=1, n_unscored=0, ci95=wilson_ci(1, 1), metrics={"n_withheld": 0}
        ),
        "MedOpen": Cell(score=None, n=0, n_unscored=1, metrics={"n_withheld": 1}),
    }


def test_healthbench_tag_families_and_medeq_dimension_count_unscored() -> None:
    rub = (
        Criterion("0", "a", 5.0, ("axis:accuracy",)),
        Criterion("1", "b", 5.0, ("axis:completeness",)),
    )
    hs = [
        _s(f"h{i}", "healthbench", rubric=rub, example_tags=[f"theme:{t}"])
        for i, t in enumerate(["hedging", "hedging", "global"])
    ]
    met = (Verdict("0", "met"), Verdict("1", "unmet"))
    hg = [
        Grade(sample_id="h0", value=0.5, verdicts=met),
        Grade(sample_id="h1", value=None, error="x"),
        Grade(sample_id="h2", value=0.5, verdicts=met),
    ]
    bd = HealthBench().aggregate(hs, hg, RunOptions()).breakdown
    assert list(bd) == ["theme", "axis"]  # families with no tag (level, cluster) are left out
    assert (
        bd["theme"]["hedging"].score,
        bd["theme"]["hedging"].n,
        bd["theme"]["hedging"].n_unscored,
    ) == (0.5, 1, 1)
    assert (
        bd["axis"]["accuracy"].score,
        bd["axis"]["accuracy"].n,
        bd["axis"]["accuracy"].n_unscored,
    ) == (1.0, 2, 1)
    assert "bootstrap_std" in bd["axis"]["completeness"].metrics

    eq = (
        Criterion("加分项_1", "x", 2, ("混合情绪",)),
        Criterion("加分项_2", "y", 2, ("内容结构",)),
    )
    es = [_s("e0", "medeqbench", rubric=eq), _s("e1", "medeqbench", rubric=eq)]
    eg = [
        Grade(
            sample_id="e0",
            value=50.0,
            verdicts=(Verdict("加分项_1", "met"), Verdict("加分项_2", "unmet")),
        ),
        Grade(sample_id="e1", value=None),
    ]
    dims = MedEQBench().aggregate(es, eg, RunOptions()).breakdown["dimension"]
    assert (
        dims["混合情绪"] == Cell(score=100.0, n=1, n_unscored=1)
        and dims["内容结构"] == Cell(score=0.0, n=1, n_unscored=1)
        and dims["情绪转换"] == Cell(score=None, n=0, n_unscored=0)
    )


def test_exam_families_are_the_category_fields() -> None:
    bench = DemoExam()
    samples = bench.load()
    grades = [
        Grade(sample_id=s.id, value=None if i % 5 == 0 else float(i % 2))
        for i, s in enumerate(samples)
    ]
    agg = bench.aggregate(samples, grades, RunOptions())
    assert list(agg.breakdown) == list(DemoExam.category_fields)
    topics = agg.breakdown["meta_info"]
    assert (
        sum(c.n for c in topics.values()) == agg.n
        and sum(c.n_unscored for c in topics.values()) == agg.n_unscored
    )
    assert all(isinstance(c, Cell) for c in topics.values())


# ---- real rows through the real runner, read by the leaderboard and the report -----------


def _subset_csv(src: Path, dest: Path, keep: Callable[[int], bool]) -> Path:
    """A copy of a real CSV (in the test's temp dir) with the data rows whose index ``keep`` accepts."""
    with open(src, encoding="utf-8", newline="") as f:
        header, *rows = list(csv.reader(f))
    rows = [r for r in rows if any(c.strip() for c in r)]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([header] + [r for i, r in enumerate(rows) if keep(i)])
    return dest


def _medec_script(samples: dict[str, Sample], offset: int) -> Callable[[Request], Any]:
    """Replies by a fixed rule on the text's position: failed call, unparseable, right, half right, wrong."""
    order = {sid: i for i, sid in enumerate(samples)}

    def script(req: Request) -> Any:
        m = re.search(r"Text ID: (\S+)", req.messages[-1].content)
        assert m is not None
        tid = m.group(1)
        t, r = samples[tid].target, (order[tid] * 7 + offset) % 10
        if r == 0:
            return RuntimeError("scripted outage")
        if r == 1:
            return "no idea"
        sid = t["sentence_id"] if r < 7 else t["sentence_id"] + 1
        flag = bool(t["flag"]) if r < 9 else not t["flag"]
        return json.dumps(
            {
                "error": flag,
                "sentence_id": sid if flag else -1,
                "corrected": t["corrected"] if flag else "NA",
            }
        )

    return script


def _medcalc_script(samples: list[Sample], offset: int) -> Callable[[Request], Any]:
    """Right, wrong, unextractable or failed by a fixed rule on the row's position."""
    bench = (
        MedCalcBench()
    )  # the prompt as sent (the official user message under the default protocol)
    by_prompt = {
        bench.prompt(s, RunOptions()).messages[-1].content: i for i, s in enumerate(samples)
    }
    wrong = {
        "date": "01/01/1900",
        "gestational_age": "(99 weeks, 9 days)",
        "integer": "-12345",
        "decimal": "-12345",
    }

    def script(req: Request) -> Any:
        i = by_prompt[req.messages[-1].content]
        t, r = samples[i].target, (i * 3 + offset) % 10
        if r == 0:
            return RuntimeError("scripted outage")
        if r == 1:
            return "I cannot tell."
        return json.dumps(
            {"step_by_step_thinking": "...", "answer": t["truth"] if r < 6 else wrong[t["kind"]]}
        )

    return script


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[RunOutcome]]:
    """A store with MEDEC (both splits) and MedCalc-Bench, each answered by two scripted models."""
    tmp = tmp_path_factory.mktemp("breakdowns")
    medec_dir = tmp / "medec"
    for name in (MEDEC_TEST, MEDEC_VAL):
        _subset_csv(shared_file("medec", name), medec_dir / name, lambda i: i % 13 == 0)
    medcalc = _subset_csv(
        shared_file("medcalc-bench", "test_data.csv"),
        tmp / "medcalc" / "test_data.csv",
        lambda i: i % 13 == 0,
    )
    medec_samples = {s.id: s for s in MEDEC(split="both").load(medec_dir)}
    medcalc_samples = MedCalcBench().load(medcalc)
    store = Store(tmp / "s.db")
    outs = []
    for k, model in enumerate(MODELS):
        cfgs = [
            RunConfig(
                benchmark="medec",
                model=model,
                bench_params={"split": "both"},
                data=medec_dir,
                provider_options={"script": _medec_script(medec_samples, k)},
            ),
            RunConfig(
                benchmark="medcalc-bench",
                model=model,
                data=medcalc,
                provider_options={"script": _medcalc_script(medcalc_samples, k)},
            ),
        ]
        outs += [asyncio.run(run(store, cfg)) for cfg in cfgs]
    store.close()
    return tmp / "s.db", outs


def _expected(out: RunOutcome) -> dict[str, dict[str, Cell]]:
    """The breakdown counted here, independently, from the run's per-sample grades."""
    grades = {g.sample_id: g for g in out.grades}
    fams: dict[str, dict[str, list[tuple[Sample, Grade | None]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for s in out.samples:
        keys = (
            {"error_type": s.metadata["error_type"], "split": s.metadata["split"]}
            if out.run.benchmark == "medec"
            else {"category": s.metadata["category"], "kind": s.target["kind"]}
        )
        for fam, key in keys.items():
            fams[fam][key].append((s, grades.get(s.id)))
    make = _medec_cell if out.run.benchmark == "medec" else _medcalc_cell
    return {
        f: {k: make([g for _, g in rows]) for k, rows in sorted(d.items())} for f, d in fams.items()
    }


def _scored(gs: Iterable[Grade | None]) -> list[Grade]:
    return [g for g in gs if g is not None and g.value is not None]


def _medcalc_cell(gs: list[Grade | None]) -> Cell:
    ok = _scored(gs)
    right = len([g for g in ok if g.value == 1.0])
    return Cell(
        score=right / len(ok) if ok else None,
        n=len(ok),
        n_unscored=len(gs) - len(ok),
        ci95=wilson_ci(right, len(ok)),
        metrics={"n_unextractable": len([g for g in ok if g.details["unextractable"]])},
    )


def _medec_cell(gs: list[Grade | None]) -> Cell:
    """MEDEC's reference protocol (the runs' default): every text in n, a failed call wrong and counted unscored."""
    ok, total = _scored(gs), len(gs)
    right = len([g for g in ok if g.value == 1.0])
    sents = len([g for g in ok if g.details["sentence_correct"]])
    corr = sum(g.details["correction_score"] for g in ok)
    metrics = {
        "error_sentence_accuracy": sents / total,
        "r1fc": corr / total,
        "n_unparseable": len([g for g in ok if g.details.get("unparseable")]),
        "n_no_answer": total - len(ok),
    }
    return Cell(
        score=right / total,
        n=total,
        n_unscored=total - len(ok),
        ci95=wilson_ci(right, total),
        metrics=metrics,
    )


def _same(got: Breakdown, want: Breakdown) -> None:
    assert {f: list(d) for f, d in got.items()} == {f: list(d) for f, d in want.items()}
    for f, d in want.items():
        for k, c in d.items():
            g = got[f][k]
            assert (g.score, g.n, g.n_unscored, g.ci95) == (c.score, c.n, c.n_unscored, c.ci95), (
                f,
                k,
            )
            assert g.metrics == pytest.approx(c.metrics), (
                f,
                k,
            )  # sums of ROUGE scores: order may differ


def test_run_breakdowns_equal_a_count_from_the_grades(runs) -> None:
    db, outs = runs
    for out in outs:
        want = _expected(out)
        _same(out.result.breakdown, want)
        scores = [c.score for fam in want.values() for c in fam.values() if c.score is not None]
        assert any(0 < s < 1 for s in scores), "the scripted models must give mixed results"
        assert any(c.n_unscored for fam in want.values() for c in fam.values()), (
            "failed calls must show as unscored"
        )
    assert set(outs[0].result.breakdown) == {"error_type", "split"} and set(
        outs[0].result.breakdown["split"]
    ) == {"test", "validation"}
    assert (
        len(outs[0].result.breakdown["error_type"]) >= 5
    )  # NA and several error types: a radar, not a line
    assert set(outs[1].result.breakdown) == {"category", "kind"}
    assert set(outs[1].result.breakdown["kind"]) == {
        "date",
        "gestational_age",
        "integer",
        "decimal",
    }
    st = Store(db)
    try:  # the stored results read back (store JSON -> cells) hold the same cells
        stored = {
            (e.row.benchmark, e.row.model): e.row.breakdown for b in boards(st) for e in b.entries
        }
    finally:
        st.close()
    for out in outs:
        _same(stored[(out.run.benchmark, out.run.model)], _expected(out))


def _tables(output: str) -> dict[str, list[list[str]]]:
    """Rich tables of the leaderboard output: title -> body rows (cells stripped)."""
    out: dict[str, list[list[str]]] = {}
    title = None
    for line in output.splitlines():
        if line.startswith("│") and title:
            out[title].append([c.strip() for c in line.strip().strip("│").split("│")])
        elif line.strip() and line.strip()[0] not in "┏┃┡└":
            title = line.strip()
            out[title] = []
    return out


def test_leaderboard_prints_one_table_per_family_with_n_and_unscored(runs) -> None:
    db, outs = runs
    r = CliRunner().invoke(app, ["leaderboard", "--store", str(db)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    tables = _tables(r.output)
    for out in outs:
        for fam, cells in _expected(out).items():
            rows = {(row[0], row[1]): row for row in tables[f"{out.run.benchmark} by {fam}"]}
            for key, c in cells.items():
                row = rows[(key, out.run.model)]
                ci = f"[{c.ci95[0]:.3f}, {c.ci95[1]:.3f}]" if c.ci95 else "n/a"
                assert row[2:6] == [fmt(c.score), ci, str(c.n), str(c.n_unscored)], (fam, key)
                if (
                    out.run.benchmark == "medec"
                ):  # sentence accuracy and R1FC are shown beside the flag accuracy
                    assert (
                        f"{c.metrics['error_sentence_accuracy']:.3f}" in row[6:]
                        and f"{c.metrics['r1fc']:.3f}" in row[6:]
                    )
    assert "error sentence" in r.output and "r1fc" in r.output
    quiet = CliRunner().invoke(
        app, ["leaderboard", "--no-breakdowns", "--store", str(db)], env={"COLUMNS": "250"}
    )
    assert quiet.exit_code == 0 and " by " not in quiet.output


def test_html_report_draws_a_radar_per_family_from_the_cells(runs, tmp_path: Path) -> None:
    db, outs = runs
    st = Store(db)
    try:
        [path] = build_report(st, "html", tmp_path / "r.html")
    finally:
        st.close()
    html = path.read_text(encoding="utf-8")
    for bench, fam in (
        ("medec", "error_type"),
        ("medcalc-bench", "category"),
        ("medcalc-bench", "kind"),
    ):
        expected = {o.run.model: _expected(o)[fam] for o in outs if o.run.benchmark == bench}
        keys = list(next(iter(expected.values())))
        series = {m: {k: c.score for k, c in cells.items()} for m, cells in expected.items()}
        assert f"<figcaption>{bench}: {fam}</figcaption>" + radar_svg(keys, series) in html, (
            bench,
            fam,
        )
    assert (
        "<figcaption>medec: split</figcaption>" not in html
    )  # two keys: no radar, but its table is there
    assert "medec by split (2)</summary>" in html and "medcalc-bench by kind (4)</summary>" in html
    assert html.count("<details class='breakdown'>") == 4


def test_json_export_holds_every_cell(runs, tmp_path: Path) -> None:
    db, outs = runs
    st = Store(db)
    try:
        [path] = build_report(st, "json", tmp_path / "r.json")
    finally:
        st.close()
    rows = json.loads(path.read_text(encoding="utf-8"))["breakdowns"]
    got = {(r["benchmark"], r["model"], r["family"], r["key"]): r for r in rows}
    n_cells = 0
    for out in outs:
        for fam, cells in _expected(out).items():
            for key, c in cells.items():
                r = got[(out.run.benchmark, out.run.model, fam, key)]
                ci = (r["ci95_low"], r["ci95_high"]) if r["ci95_low"] is not None else None
                assert (r["score"], r["n"], r["n_unscored"], ci) == (
                    c.score,
                    c.n,
                    c.n_unscored,
                    c.ci95,
                )
                if out.run.benchmark == "medec":
                    assert r["r1fc"] == pytest.approx(c.metrics["r1fc"])
                n_cells += 1
    assert len(rows) == n_cells


def test_legacy_breakdowns_in_an_old_store_are_skipped_not_guessed(runs, tmp_path: Path) -> None:
    db, outs = runs
    legacy = tmp_path / "legacy.db"
    legacy.write_bytes(db.read_bytes())
    st = Store(legacy)
    try:
        for run_id, fp, rj in list(st.results()):
            cells = breakdown_from_json(rj["breakdown"])
            flat = {
                f"{fam}:{k}": {"accuracy": c.score, "n": c.n}
                for fam, d in cells.items()
                for k, c in d.items()
            }
            result = next(o.result for o in outs if o.run.id == run_id)
            st.put_result(run_id, fp, type(result)(**{**result.__dict__, "breakdown": flat}))
    finally:
        st.close()
    r = CliRunner().invoke(app, ["leaderboard", "--store", str(legacy)], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "medec" in r.output and " by " not in r.output

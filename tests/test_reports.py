"""Reports (html, md, csv, xlsx, json, parquet), compare on scripted models, reviews and the queue."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.leaderboard import agreement
from grandrounds.analyses.reviews import (
    ReviewError,
    ReviewInput,
    add_review,
    agreement_pairs,
    fill_queue,
    queue,
    reviewed_values,
)
from grandrounds.cli.main import app
from grandrounds.reports import boards, build_report
from grandrounds.reports.compare import compare_models
from grandrounds.store import Store
from tests.conftest import shared_file
from tests.synthetic import XSS, SynthSpec, build_store, scripted_mcq_runs


@pytest.fixture
def store(tmp_path: Path) -> Store:
    st = build_store(tmp_path / "s.db", SynthSpec(n_samples=40, n_models=3))
    yield st
    st.close()


def fp_of(st: Store, run_id: str) -> str:
    return st.db.execute("SELECT grader_fp FROM results WHERE run_id = ?", (run_id,)).fetchone()[0]


def test_html_report_is_self_contained_and_escapes_everything(store: Store, tmp_path: Path) -> None:
    [out] = build_report(store, "html", tmp_path / "r.html")
    text = out.read_text(encoding="utf-8")
    assert "window.__pwned" in text  # the payload is there, as text
    assert "<img" not in text and 'onerror="' not in text
    assert text.count("<script") == 1  # only the report's own script
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;&lt;img src=x onerror=&quot;" in text
    assert not re.search(
        r"""(src|href)\s*=\s*["']?(https?:)?//""", text
    )  # nothing fetched from the network
    assert text.count("<svg") >= 2  # radar charts for axis and theme
    assert "<polygon" in text and "scripted/model-02" in text
    assert "患者" in text  # Chinese questions kept as text
    assert (
        "Criterion 0 of sample 0" in text and "does not address" in text or "does address" in text
    )


def test_incomparable_results_are_flagged_in_report(store: Store, tmp_path: Path) -> None:
    rid = "run01"
    fp = fp_of(store, rid)
    rj = json.loads(
        store.db.execute("SELECT result_json FROM results WHERE run_id = ?", (rid,)).fetchone()[0]
    )
    rj["fingerprint"]["judges"] = [{"model": "openai/other-judge", "params": {"temperature": 0.7}}]
    store.db.execute(
        "UPDATE results SET result_json = ? WHERE run_id = ? AND grader_fp = ?",
        (json.dumps(rj), rid, fp),
    )
    [b] = boards(store)
    assert b.settings == 2
    text = build_report(store, "html", tmp_path / "r.html")[0].read_text(encoding="utf-8")
    assert "differs from setting 1 in judges" in text and "not comparable" in text


def test_report_500_by_3_under_25_mb(tmp_path: Path) -> None:
    st = build_store(tmp_path / "big.db", SynthSpec(n_samples=500, n_models=3, n_criteria=8))
    [out] = build_report(st, "html", tmp_path / "big.html")
    assert out.stat().st_size < 25e6
    assert out.read_text(encoding="utf-8").count("<details class='item'") == 500


@pytest.mark.parametrize("fmt", ["md", "csv", "xlsx", "json", "parquet"])
def test_tabular_formats_hold_leaderboard_and_samples(
    store: Store, tmp_path: Path, fmt: str
) -> None:
    paths = build_report(store, fmt, tmp_path / f"r.{fmt}")
    if fmt == "json":
        d = json.loads(paths[0].read_text(encoding="utf-8"))
        assert len(d["leaderboard"]) == 3 and len(d["samples"]) == 120
        assert any("患者" in s["question"] for s in d["samples"])
        assert any(s["answer"] and XSS in s["answer"] for s in d["samples"])
    elif fmt == "csv":
        import csv

        board = list(csv.DictReader(open(paths[0], encoding="utf-8")))
        samples = list(csv.DictReader(open(paths[1], encoding="utf-8")))
        assert [r["rank"] for r in board] == ["1", "2", "3"] and len(samples) == 120
    elif fmt == "xlsx":
        from openpyxl import load_workbook

        wb = load_workbook(paths[0])
        assert wb.sheetnames == ["leaderboard", "samples", "breakdowns"]
        assert wb["leaderboard"].max_row == 4 and wb["samples"].max_row == 121
        assert wb["breakdowns"].max_row == 1 + 3 * 10  # 3 models x (5 axes + 5 themes)
    elif fmt == "parquet":
        import pyarrow.parquet as pq

        assert pq.read_table(paths[0]).num_rows == 3 and pq.read_table(paths[1]).num_rows == 120
    else:
        text = paths[0].read_text(encoding="utf-8")
        assert (
            text.count("| healthbench |") == 3 + 120 + 3 * 10
        )  # leaderboard, samples, breakdown cells


def test_unknown_format_rejected(store: Store, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format"):
        build_report(store, "pdf", tmp_path / "r.pdf")


def test_compare_scripted_models_with_known_accuracy_gap(tmp_path: Path) -> None:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    st = Store(tmp_path / "mcq.db")
    exact = scripted_mcq_runs(st, data, {"good": 0.80, "worse": 0.70}, limit=600)
    [c] = compare_models(st, "good", "worse", seed=0)
    r = c.result
    assert r.n == 600 and r.diff == pytest.approx(exact["good"] - exact["worse"])
    assert r.ci95[0] < r.diff < r.ci95[1] and r.ci95[0] > 0 and not r.tied
    assert r.mcnemar[0] == 60 and r.mcnemar[1] == 0 and r.mcnemar[2] < 1e-10
    assert c.verdict() == "A better"
    res = CliRunner().invoke(app, ["compare", "good", "worse", "--store", str(tmp_path / "mcq.db")])
    assert res.exit_code == 0, res.output
    assert "+0.1000" in res.output and "60/0" in res.output


def test_cli_leaderboard_report_and_queue(store: Store, tmp_path: Path) -> None:
    db = str(store.path)
    r = CliRunner().invoke(app, ["leaderboard", "--store", db], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "scripted/model-02" in r.output and "healthbench" in r.output
    r = CliRunner().invoke(
        app, ["report", "--format", "html", "--out", str(tmp_path / "x.html"), "--store", db]
    )
    assert r.exit_code == 0 and (tmp_path / "x.html").exists()
    r = CliRunner().invoke(
        app,
        ["review-queue", "--share", "0.1", "--seed", "3", "--store", db],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0 and "unknown verdict" in r.output


def test_reviews_are_beside_judge_verdicts(store: Store) -> None:
    fp = fp_of(store, "run00")
    before = store.db.execute(
        "SELECT grade_json FROM grades WHERE run_id='run00' AND sample_id='s1'"
    ).fetchone()[0]
    g = json.loads(before)
    c0 = next(v for v in g["verdicts"] if v["criterion_id"] == "c0")
    flipped = "unmet" if c0["status"] == "met" else "met"
    add_review(
        store,
        ReviewInput(
            run_id="run00",
            grader_fp=fp,
            sample_id="s1",
            reviewer="Dr Li 李医生",
            reason="guideline says so",
            criterion_id="c0",
            verdict=flipped,
        ),
    )
    assert (
        store.db.execute(
            "SELECT grade_json FROM grades WHERE run_id='run00' AND sample_id='s1'"
        ).fetchone()[0]
        == before
    )
    row = store.db.execute("SELECT reviewer, verdict, created_at FROM reviews").fetchone()
    assert row[0] == "Dr Li 李医生" and row[1] == flipped and row[2]
    judge_only = dict(
        store.db.execute("SELECT sample_id, value FROM grades WHERE run_id='run00'").fetchall()
    )
    with_rev = reviewed_values(store, "run00", fp, "healthbench", store.runs()[0].dataset_sha256)
    assert with_rev["s2"] == judge_only["s2"] and with_rev["s1"] != judge_only["s1"]
    add_review(
        store,
        ReviewInput(
            run_id="run00",
            grader_fp=fp,
            sample_id="s2",
            reviewer="Dr A",
            reason="whole answer unsafe",
            score=0.0,
        ),
    )
    assert (
        reviewed_values(store, "run00", fp, "healthbench", store.runs()[0].dataset_sha256)["s2"]
        == 0.0
    )
    pairs = agreement_pairs(store)
    assert (
        len(pairs) == 1
        and pairs[0].reviewer == flipped
        and pairs[0].dimensions == ("axis:accuracy",)
    )
    assert agreement(pairs)["dimension"]["axis:accuracy"].agree == (
        0.0 if c0["status"] != "unknown" else None
    )


@pytest.mark.parametrize(
    "bad, msg",
    [
        (dict(reviewer=" "), "name"),
        (dict(reason=""), "reason"),
        (dict(verdict="maybe"), "met"),
        (dict(criterion_id="nope"), "no criterion"),
        (dict(sample_id="missing"), "no grade"),
        (dict(criterion_id="", verdict=None, score=float("nan")), "finite score"),
    ],
)
def test_bad_reviews_rejected(store: Store, bad: dict, msg: str) -> None:
    base = dict(
        run_id="run00",
        grader_fp=fp_of(store, "run00"),
        sample_id="s1",
        reviewer="Dr A",
        reason="r",
        criterion_id="c0",
        verdict="met",
    )
    with pytest.raises(ReviewError, match=msg):
        add_review(store, ReviewInput(**(base | bad)))
    assert store.db.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 0


def test_review_queue_unknown_disagreement_and_seeded_share(store: Store) -> None:
    n_unknown = store.db.execute("SELECT SUM(n_unknown) FROM grades").fetchone()[0]
    added = fill_queue(store, share=0.1, seed=7)
    assert added["unknown verdict"] == n_unknown > 0
    assert added["judges disagree"] > 0
    total_verdicts = 40 * 3 * 6
    assert 0.05 * total_verdicts < added["random share"] < 0.15 * total_verdicts
    assert fill_queue(store, share=0.1, seed=7) == {}  # nothing queued twice
    first = queue(store, 5)
    fp = first[0]["grader_fp"]
    add_review(
        store,
        ReviewInput(
            run_id=first[0]["run_id"],
            grader_fp=fp,
            sample_id=first[0]["sample_id"],
            reviewer="Dr A",
            reason="checked",
            criterion_id=first[0]["criterion_id"],
            verdict="met",
        ),
    )
    assert queue(store, 5)[0]["id"] != first[0]["id"]  # reviewed items leave the queue
    with pytest.raises(ReviewError):
        fill_queue(store, share=2.0)

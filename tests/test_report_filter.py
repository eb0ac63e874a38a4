"""``grandrounds report --run ID``: the report restricted to the runs named (ids or 6+ character
prefixes, repeatable) in every format; a run that is unknown, unfinished or of another benchmark
is a one-line error and nothing is written."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.store import Store
from tests.conftest import shared_file


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A store with three finished runs: MedQA by two models, the demo exam by a third."""
    db = tmp_path_factory.mktemp("report_filter") / "s.db"
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    for model in ("scripted/a", "scripted/b"):
        r = invoke(
            "run",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "5",
            "--model",
            model,
            "--store",
            str(db),
        )
        assert r.exit_code == 0, r.output
    r = invoke("run", "demo", "--model", "scripted/c", "--store", str(db))
    assert r.exit_code == 0, r.output
    with Store(db) as st:
        ids = {rec.model: rec.id for rec in st.runs()}
    assert set(ids) == {"scripted/a", "scripted/b", "scripted/c"}
    return db, ids


def report(db: Path, out: Path, fmt: str, *runs: str, extra: tuple[str, ...] = ()) -> Any:
    args = ["report", "--format", fmt, "--out", str(out), "--store", str(db), *extra]
    for r in runs:
        args += ["--run", r]
    return invoke(*args)


def test_json_report_holds_only_the_runs_named(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    a, b = ids["scripted/a"], ids["scripted/b"]
    r = report(
        db, tmp_path / "r.json", "json", a, b[:8], a[:6]
    )  # a full id, a prefix, a repeat as a prefix
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert {row["model"] for row in doc["leaderboard"]} == {"scripted/a", "scripted/b"}
    assert {row["run_id"] for row in doc["samples"]} == {a, b}
    assert len(doc["samples"]) == 10 and all(row["benchmark"] == "medqa" for row in doc["samples"])
    # without --run: every run
    r = report(db, tmp_path / "all.json", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "all.json").read_text(encoding="utf-8"))
    assert {row["run_id"] for row in doc["samples"]} == set(ids.values())


def test_html_csv_and_md_reports_hold_only_the_runs_named(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    r = report(db, tmp_path / "r.html", "html", ids["scripted/c"][:10])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "scripted/c" in page and "scripted/a" not in page and "scripted/b" not in page
    assert "Questions: demo" in page and "Questions: medqa" not in page

    r = report(db, tmp_path / "r.csv", "csv", ids["scripted/b"])
    assert r.exit_code == 0, r.output
    with open(tmp_path / "r.csv", newline="", encoding="utf-8") as f:
        board = list(csv.DictReader(f))
    with open(tmp_path / "r.samples.csv", newline="", encoding="utf-8") as f:
        samples = list(csv.DictReader(f))
    assert [row["model"] for row in board] == ["scripted/b"]
    assert len(samples) == 5 and {row["run_id"] for row in samples} == {ids["scripted/b"]}

    r = report(db, tmp_path / "r.md", "md", ids["scripted/a"], extra=("--benchmark", "medqa"))
    assert r.exit_code == 0, r.output
    md = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "scripted/a" in md and "scripted/b" not in md and "scripted/c" not in md


@pytest.mark.parametrize("given", ["ffffffffffffffff", "fffff0", "SHORT"])
def test_an_unknown_run_is_a_one_line_error_and_nothing_is_written(
    stored: tuple[Path, dict[str, str]], tmp_path: Path, given: str
) -> None:
    db, ids = stored
    r = report(db, tmp_path / "r.html", "html", ids["scripted/a"], given)
    assert r.exit_code == 2
    assert r.output.strip() == f"error: no run {given!r} in {db} (see `grandrounds runs`)"
    assert not (tmp_path / "r.html").exists()


def test_a_prefix_shorter_than_six_characters_is_not_a_prefix(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    short = ids["scripted/a"][:5]
    r = report(db, tmp_path / "r.json", "json", short)
    assert (
        r.exit_code == 2
        and r.output.strip() == f"error: no run {short!r} in {db} (see `grandrounds runs`)"
    )


def test_a_run_of_another_benchmark_is_refused(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    db, ids = stored
    r = report(db, tmp_path / "r.json", "json", ids["scripted/c"], extra=("--benchmark", "medqa"))
    assert r.exit_code == 2
    assert (
        r.output.strip()
        == f"error: run {ids['scripted/c']} in {db} is a demo run, not medqa (--benchmark)"
    )
    assert not (tmp_path / "r.json").exists()


def test_an_unfinished_run_is_named(tmp_path: Path) -> None:
    """A run interrupted before its result was stored: its answers are there, its result is not."""
    db = tmp_path / "s.db"
    r = invoke("run", "demo", "--model", "scripted/a", "--store", str(db))
    assert r.exit_code == 0, r.output
    with Store(db) as st:
        (rec,) = st.runs()
    with sqlite3.connect(db) as con:  # the state a run killed before its aggregation leaves
        con.execute("DELETE FROM results")
    r = report(db, tmp_path / "r.json", "json", rec.id)
    assert r.exit_code == 2
    assert r.output.strip() == (
        f"error: run {rec.id} in {db} has no result yet: it did not finish "
        "(run the same `grandrounds run` command again to finish it)"
    )
    assert not (tmp_path / "r.json").exists()

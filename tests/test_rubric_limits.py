"""A sample with a very large rubric is never planned silently: over 1,000 items the run and the
dry run say how many judge calls that one answer costs; over --max-rubric-items (10,000 by
default) the run is refused before any call, and asking for more lets it through."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.cli.main import app
from tests.conftest import shared_file


def _file_with_rubric(tmp_path: Path, n_items: int) -> Path:
    first = json.loads(
        shared_file("healthbench", "healthbench_500.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()[0]
    )
    first["rubrics"] = [
        {"criterion": f"Mentions point {i}.", "points": 1, "tags": ["axis:completeness"]}
        for i in range(n_items)
    ]
    path = tmp_path / f"hb_{n_items}.jsonl"
    path.write_text(json.dumps(first) + "\n", encoding="utf-8")
    return path


def _run(tmp_path: Path, data: Path, *extra: str):
    return CliRunner().invoke(
        app,
        [
            "run",
            "healthbench",
            "--data",
            str(data),
            "-m",
            "scripted/x",
            "--judge",
            "scripted/j",
            "--protocol",
            "grandrounds",
            "--store",
            str(tmp_path / "s.db"),
            *extra,
        ],
        env={"COLUMNS": "250"},
    )


def test_over_the_limit_is_refused_before_any_call(tmp_path):
    r = _run(tmp_path, _file_with_rubric(tmp_path, 10_001))
    assert r.exit_code == 2
    assert "10,001 rubric items" in r.output and "--max-rubric-items 10001" in r.output
    r = _run(tmp_path, _file_with_rubric(tmp_path, 120), "--max-rubric-items", "100")
    assert r.exit_code == 2 and "--max-rubric-items 120" in r.output


def test_a_large_rubric_is_noted_in_the_dry_run_and_the_run(tmp_path):
    data = _file_with_rubric(tmp_path, 1_500)
    r = _run(tmp_path, data, "--dry-run")
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "1,500 rubric items" in flat and "scripted/j: 1,500 calls to make" in flat
    r = _run(tmp_path, data, "--max-rubric-items", "2000")
    # the scripted judge answers "A", which no HealthBench reading accepts: every verdict is unknown (exit 3)
    assert r.exit_code == 3, r.output
    assert "note: large rubrics" in r.output and "1,500 judge calls per judge" in " ".join(
        r.output.split()
    )

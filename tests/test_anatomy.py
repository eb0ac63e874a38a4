"""A benchmark's map: the files that define it, on its generated page and from `grandrounds show`."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.anatomy import PKG, defining_files
from grandrounds.cli.main import app
from grandrounds.core.registry import BENCHMARKS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def test_healthbench_is_its_benchmark_grader_scoring_sources_and_two_templates() -> None:
    assert defining_files(BENCHMARKS.get("healthbench")) == [
        "benchmarks/healthbench.py",
        "scoring/healthbench.py",
        "sources/healthbench.py",
        "graders/healthbench_grader.py",
        "templates/healthbench_grader.txt",
        "templates/healthbench_batched.txt",
    ]


def test_a_format_spec_in_an_f_string_names_no_template() -> None:
    # medicationqa's grader writes f"{d} {score:g}": the "g" is no template prefix (gaps_*.txt)
    files = defining_files(BENCHMARKS.get("medicationqa"))
    assert "graders/medicationqa_grader.py" in files
    assert not [f for f in files if f.startswith("templates/")]
    assert [f for f in defining_files(BENCHMARKS.get("gaps")) if f.startswith("templates/gaps_")]


def test_an_agent_benchmark_names_its_environment_and_an_exam_its_grader() -> None:
    assert defining_files(BENCHMARKS.get("agentclinic")) == [
        "benchmarks/agentclinic.py",
        "benchmarks/agent_envs/agentclinic.py",
        "sources/agentclinic.py",
        "graders/agentclinic_grader.py",
    ]
    assert defining_files(BENCHMARKS.get("medqa")) == [
        "benchmarks/medqa.py",
        "graders/mcq_grader.py",
    ]


@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_every_benchmark_page_lists_files_that_exist(name: str) -> None:
    cls = BENCHMARKS.get(name)
    files = defining_files(cls)
    assert files[0] == f"{cls.__module__.removeprefix('grandrounds.').replace('.', '/')}.py"
    assert all((PKG / f).is_file() for f in files), files
    page = (DOCS / f"{cls.__module__.rsplit('.', 1)[-1]}.md").read_text(encoding="utf-8")
    line = "**Defined in:** " + ", ".join(f"`src/grandrounds/{f}`" for f in files) + "."
    assert line in page


def test_show_prints_the_files_and_refuses_an_unknown_name() -> None:
    r = CliRunner().invoke(app, ["show", "gaps"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    listed = [x.strip() for x in r.output.splitlines() if x.startswith("  src/grandrounds/")]
    assert listed == [f"src/grandrounds/{f}" for f in defining_files(BENCHMARKS.get("gaps"))]
    assert "templates/gaps_positive.txt" in r.output and "gaps --param" in r.output
    r = CliRunner().invoke(app, ["show", "healthbenc"])  # the command's entry prints it as one line
    assert r.exit_code != 0 and "did you mean healthbench" in str(r.exception)

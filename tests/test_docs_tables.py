"""The hand-written pages against the code: every registered benchmark has its row in the overview
and in the protocols table, ARCHITECTURE.md's tree and layer numbers are the package's, and no page
or docstring names a file the reader does not have. Each check is also shown failing on a planted
drift."""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from grandrounds.benchmarks.demo import DemoExam
from grandrounds.core.registry import BENCHMARKS
from tests.test_layers import LAYERS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PKG = ROOT / "src" / "grandrounds"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- one row per benchmark -----------------------------------------------------------------------


def test_overview_and_protocols_have_a_row_for_every_benchmark(gen) -> None:
    assert gen.table_problems(DOCS, BENCHMARKS.names()) == []


def test_a_benchmark_without_a_row_fails_the_check(gen) -> None:
    """A newly registered benchmark is missing from both tables until its rows are written."""
    with BENCHMARKS.registered("toy-exam", DemoExam):
        found = gen.table_problems(DOCS, BENCHMARKS.names())
    assert found == [
        "benchmarks-overview.md: no row for benchmark `toy-exam`",
        "protocols.md: no row for benchmark `toy-exam`",
    ]


def test_a_row_for_a_removed_benchmark_or_twice_fails_the_check(gen, tmp_path: Path) -> None:
    for page in gen.TABLE_PAGES:
        shutil.copy(DOCS / page, tmp_path / page)
    over = tmp_path / "benchmarks-overview.md"
    text = over.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `medqa`"))
    over.write_text(
        text.replace(row, row + "\n| `gone-bench` | x | y |\n" + row.replace("`medqa`, ", "")),
        encoding="utf-8",
    )
    found = gen.table_problems(tmp_path, BENCHMARKS.names())
    assert "benchmarks-overview.md: `gone-bench` is not a registered benchmark" in found
    assert "benchmarks-overview.md: `medmcqa` has two rows" in found
    assert all(line.startswith("benchmarks-overview.md") for line in found)


def test_table_names_read_only_the_first_column_of_rows(gen) -> None:
    page = "| name | what |\n|---|---|\n| `a`, `b-2` | uses `c` |\n\nprose `d`\n"
    assert gen.table_names(page) == ["a", "b-2"]


# ---- files named in prose ------------------------------------------------------------------------


def test_no_page_or_docstring_names_a_missing_file(gen) -> None:
    assert gen.missing_references(ROOT, gen.prose_files(ROOT)) == []


def test_a_reference_to_a_missing_file_fails_the_check(gen, tmp_path: Path) -> None:
    """A design note nobody has, cited by a docstring and by a page, is found; a page of the docs,
    a file the code reads (named in its strings) and a sibling file are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n", encoding="utf-8")
    (tmp_path / "docs" / "page.md").write_text(
        "See [home](index.md), the notes in NOTES.md, the table `data/table.tsv`.\n",
        encoding="utf-8",
    )
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "reader.py").write_text(
        '"""Reads table.tsv (format: PROTOCOLS.md section 6)."""\n\nNAME = "table.tsv"\n',
        encoding="utf-8",
    )
    (tmp_path / "pkg" / "LOCAL.md").write_text("beside the module\n", encoding="utf-8")
    (tmp_path / "pkg" / "other.py").write_text('"""As LOCAL.md says."""\n', encoding="utf-8")
    files = [tmp_path / "docs" / "page.md", *sorted((tmp_path / "pkg").glob("*.py"))]
    assert gen.missing_references(tmp_path, files) == [
        "docs/page.md:1: NOTES.md does not exist",
        "pkg/reader.py:1: PROTOCOLS.md does not exist",
    ]


# ---- ARCHITECTURE.md ------------------------------------------------------------------------------


def test_the_tree_is_the_package(gen) -> None:
    assert gen.tree_problems((DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")) == []


def test_tree_drift_fails_the_check(gen, tmp_path: Path) -> None:
    """A module added, one removed, and a folder grown past the tolerance are each named."""
    pkg = tmp_path / "grandrounds"
    for rel, lines in {"core/a.py": 100, "core/b.py": 100, "run/c.py": 50}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("x = 1\n" * lines, encoding="utf-8")
    page = f"intro\n{gen.TREE_START}\n{gen.tree_block(pkg)}\n{gen.TREE_END}\nrest\n"
    assert gen.tree_problems(page, pkg) == []
    (pkg / "core" / "b.py").unlink()
    (pkg / "core" / "d.py").write_text("x = 1\n" * 95, encoding="utf-8")
    (pkg / "run" / "c.py").write_text("x = 1\n" * 60, encoding="utf-8")
    assert sorted(gen.tree_problems(page, pkg)) == [
        "ARCHITECTURE.md: module core/b no longer exists",
        "ARCHITECTURE.md: module core/d is not in the tree",
        "ARCHITECTURE.md: run/ has 60 lines, the tree says 50",
    ]
    assert gen.tree_problems(gen.with_tree(page, pkg), pkg) == []
    assert gen.with_tree(page, pkg).startswith("intro\n") and page.endswith("rest\n")


def _layer_rows() -> dict[str, int]:
    page = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return {
        m.group(2): int(m.group(1)) for m in re.finditer(r"^\| (\d+) \| `(\w+)/` \|", page, re.M)
    }


def test_the_layer_table_gives_each_folder_its_layer() -> None:
    rows = _layer_rows()
    assert rows == {f: n for f, n in LAYERS.items() if f and f not in ("__main__", "testing")}


@pytest.mark.parametrize("init", sorted(PKG.glob("*/__init__.py")), ids=lambda p: p.parent.name)
def test_a_folder_docstring_that_names_its_layer_names_the_right_one(init: Path) -> None:
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    for said in re.findall(r"\b[Ll]ayer (\d+)", doc):
        assert int(said) == LAYERS[init.parent.name], f"{init.parent.name}: says layer {said}"


def test_check_mode_reports_drift(gen, capsys) -> None:
    """gen_docs.py --check runs the same checks (clean here) and says what drifted."""
    with BENCHMARKS.registered("toy-exam", DemoExam):
        assert gen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "drift: benchmarks-overview.md: no row for benchmark `toy-exam`" in err
    assert "drift: protocols.md: no row for benchmark `toy-exam`" in err

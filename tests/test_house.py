"""The registry is the mechanism only: each package keeps the table of its own built-ins, the core
names no component of a higher layer, and scripts/house.py's drawing counts the arrows, the names
imported at run time included. No module of the package grows past :data:`MAX_LINES` lines."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from grandrounds.core.registry import BENCHMARKS, GRADERS, PROVIDERS

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "grandrounds"

#: The most lines a module of the package may have: past it, it is split by what its parts do.
MAX_LINES = 800


@pytest.fixture(scope="module")
def house():
    spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def test_core_registry_names_no_component() -> None:
    """No ``module:Class`` path in core/registry.py; the only package modules it names are the
    three tables."""
    named = [s for s in _strings(PKG / "core" / "registry.py") if s.startswith("grandrounds.")]
    assert not [s for s in named if ":" in s]
    assert sorted(s for s in named if s.endswith(".table")) == [
        "grandrounds.benchmarks.table",
        "grandrounds.graders.table",
        "grandrounds.providers.table",
    ]


@pytest.mark.parametrize(
    "registry, package",
    [(BENCHMARKS, "benchmarks"), (GRADERS, "graders"), (PROVIDERS, "providers")],
    ids=["benchmarks", "graders", "providers"],
)
def test_each_table_lists_only_its_own_package(registry, package: str) -> None:
    table = importlib.import_module(f"grandrounds.{package}.table").BUILTINS
    assert table and all(p.startswith(f"grandrounds.{package}.") for p in table.values())
    for name in table:
        assert registry.get(name).__module__.startswith(f"grandrounds.{package}.")


def test_the_tables_are_read_only_when_a_name_is_asked_for() -> None:
    code = (
        "import sys\n"
        "from grandrounds.core.registry import BENCHMARKS, GRADERS, PROVIDERS\n"
        "tables = [m for m in sys.modules if m.endswith('.table')]\n"
        "assert tables == [], tables\n"
        "assert 'medqa' in BENCHMARKS.names()\n"
        "assert 'grandrounds.benchmarks.table' in sys.modules\n"
        "assert 'grandrounds.benchmarks.medqa' not in sys.modules\n"
        "assert 'grandrounds.graders.table' not in sys.modules\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(PKG.parent), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr


def test_the_drawing_has_no_arrow_up_but_the_registry_reading_its_tables(house) -> None:
    text, counts = house.drawing(PKG)
    assert counts["arrows up by import"] == 0
    assert counts["arrows up by name"] == 3
    assert counts["loops of modules by import"] == counts["loops of folders by import"] == 0
    assert "grandrounds.core.registry -> grandrounds.benchmarks.table (by name)" in text
    assert text.splitlines()[-4:] == [
        "arrows up:",
        "    grandrounds.core.registry -> grandrounds.benchmarks.table (by name)",
        "    grandrounds.core.registry -> grandrounds.graders.table (by name)",
        "    grandrounds.core.registry -> grandrounds.providers.table (by name)",
    ]


def test_the_drawing_counts_an_import_up_and_a_class_named_up(house, tmp_path: Path) -> None:
    """The drawing is not blind: an import from a lower floor up, and a ``module:Class`` string
    naming a higher floor's class, are both arrows up, and the pair is a loop once names count."""
    pkg = tmp_path / "grandrounds"
    for rel, body in {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/low.py": '"""Low."""\nPATH = "grandrounds.benchmarks.high:High"\n',
        "store/__init__.py": "",
        "store/up.py": "from grandrounds.run.config import X\n",
        "benchmarks/high.py": "from grandrounds.core.low import PATH\n\nclass High: ...\n",
        "run/__init__.py": "",
        "run/config.py": "X = 1\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(body, encoding="utf-8")
    text, counts = house.drawing(pkg)
    assert counts["arrows up by import"] == 1 and counts["arrows up by name"] == 1
    assert counts["loops of modules by import"] == 0
    assert counts["loops of modules, names counted"] == 1
    assert "grandrounds.store.up -> grandrounds.run.config (import)" in text
    assert "grandrounds.core.low -> grandrounds.benchmarks.high (by name)" in text


def long_modules(pkg: Path, limit: int = MAX_LINES) -> list[str]:
    """Each module under ``pkg`` with more than ``limit`` lines, as ``path: N lines``, longest
    first (the path from the package's parent folder)."""
    found = []
    for path in pkg.rglob("*.py"):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            found.append((n, path.relative_to(pkg.parent).as_posix()))
    return [f"{where}: {n} lines (at most {limit})" for n, where in sorted(found, reverse=True)]


def test_no_module_is_over_the_line_limit() -> None:
    assert long_modules(PKG) == []


def test_the_line_limit_names_each_long_module_and_its_count(tmp_path: Path) -> None:
    """801 lines fail, 800 pass; a module in a subfolder counts, and the longest is named first."""
    pkg = tmp_path / "grandrounds"
    for rel, n in {
        "run/at_limit.py": 800,
        "run/long.py": 801,
        "benchmarks/readers/longer.py": 950,
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text("x = 1\n" * n, encoding="utf-8")
    assert long_modules(pkg) == [
        "grandrounds/benchmarks/readers/longer.py: 950 lines (at most 800)",
        "grandrounds/run/long.py: 801 lines (at most 800)",
    ]


def _positional_fields(cls: type) -> list[str]:
    """The fields a dataclass takes by position when it is built."""
    return [f.name for f in dataclasses.fields(cls) if f.init and not f.kw_only]


def _wide_positional_records() -> list[str]:
    """Every dataclass of the package with more than four fields that takes any by position."""
    import grandrounds

    found = []
    for info in pkgutil.walk_packages(grandrounds.__path__, "grandrounds."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and dataclasses.is_dataclass(obj)
                and obj.__module__ == info.name
                and obj.__qualname__ == name
                and len([f for f in dataclasses.fields(obj) if f.init]) > WIDE
                and _positional_fields(obj)
            ):
                found.append(f"{info.name}.{name}: {', '.join(_positional_fields(obj))}")
    return found


#: A record with more fields than this is built by name only (``Grade(sample_id=..., value=...)``):
#: a call that names its fields cannot put a value in the wrong one when a field is added.
WIDE = 4


def test_records_with_more_than_four_fields_are_built_by_name() -> None:
    assert _wide_positional_records() == []


def test_the_record_check_sees_a_wide_positional_record() -> None:
    @dataclasses.dataclass(frozen=True)
    class Wide:
        a: int
        b: int
        c: int
        d: int
        e: int = 0

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WideByName:
        a: int
        b: int
        c: int
        d: int
        e: int = 0

    assert _positional_fields(Wide) == ["a", "b", "c", "d", "e"]
    assert _positional_fields(WideByName) == []
    from grandrounds.core.records import Grade, Sample

    assert _positional_fields(Grade) == _positional_fields(Sample) == []


#: Names under which the package holds a component (a benchmark, grader, provider or environment).
COMPONENT_NAMES = {"bench", "benchmark", "grader", "provider", "env", "environment", "cls"}


def _capabilities_read_by_string(tree: ast.AST) -> list[str]:
    """``getattr(bench, "episodic", ...)``-style reads of a component's attribute by its name."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            target = node.args[0]
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in COMPONENT_NAMES:
                found.append(f"{node.func.id}({name}, {node.args[1].value!r}) line {node.lineno}")
    return found


def test_components_declare_their_capabilities_and_are_read_by_attribute() -> None:
    """A capability (episodic, preflight, check_logprobs, default_path, ...) is declared on the
    component's base class with its default, so every reader writes ``bench.episodic``."""
    offenders = {
        str(p.relative_to(PKG)): got
        for p in sorted(PKG.rglob("*.py"))
        if (got := _capabilities_read_by_string(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert offenders == {}


def test_the_capability_check_sees_a_read_by_string() -> None:
    planted = ast.parse(
        "a = getattr(bench, 'episodic', False)\n"
        "b = hasattr(self.provider, 'check_logprobs')\n"
        "c = getattr(row, 'score', None)\n"  # not a component: allowed
    )
    assert _capabilities_read_by_string(planted) == [
        "getattr(bench, 'episodic') line 1",
        "hasattr(provider, 'check_logprobs') line 2",
    ]

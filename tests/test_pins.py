"""One way to pin an upstream file: its repository at one commit is declared once
(``UpstreamRepo(folder, repo, commit[, hub])``), and every file is ``REPO.file(path, sha256)``.

- no source file but ``sources/upstream.py`` builds an ``UpstreamFile`` itself;
- every ``UpstreamFile`` the package names (module attributes, class attributes, tables, the files
  each registered benchmark lists) is a ``.file()`` of a declared repository;
- no two declarations pin the same repository at the same commit, or share a reference folder;
- no string of the package repeats a pinned commit, whole or shortened: a data URL or a source line
  of the same repository is built from its declaration (``REPO.url(path)``, ``REPO.short``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grandrounds.sources.upstream import UpstreamFile, UpstreamRepo

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "grandrounds"
UPSTREAM_PY = PACKAGE / "sources" / "upstream.py"
#: The packages whose modules declare pins or name pinned files.
PINNING_PACKAGES = ("sources", "graders", "benchmarks", "analyses")
COMMIT = re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")


# ---- what the package declares, read at run time ------------------------------------------------
def _walk(value: Any, files: dict[UpstreamFile, None], depth: int = 0, seen: set | None = None):
    """Every UpstreamFile inside ``value``: itself, in a container, a dataclass field, a class attribute."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 4:
        return
    seen.add(id(value))
    if isinstance(value, UpstreamFile):
        files[value] = None
    elif isinstance(value, (tuple, list, set, frozenset)):
        for v in value:
            _walk(v, files, depth + 1, seen)
    elif isinstance(value, dict):
        for v in value.values():
            _walk(v, files, depth + 1, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _walk(getattr(value, f.name, None), files, depth + 1, seen)
    elif isinstance(value, type) and value.__module__.startswith("grandrounds."):
        for v in list(vars(value).values()):
            _walk(v, files, depth + 1, seen)


def _modules() -> Iterator[Any]:
    for name in PINNING_PACKAGES:
        package = importlib.import_module(f"grandrounds.{name}")
        for m in pkgutil.walk_packages(package.__path__, f"grandrounds.{name}."):
            yield importlib.import_module(m.name)


def declared_files() -> list[UpstreamFile]:
    """Every UpstreamFile the package names, and every file a registered benchmark lists or reads."""
    from grandrounds.cli.fetch import upstream_files_of
    from grandrounds.core.registry import BENCHMARKS

    files: dict[UpstreamFile, None] = {}
    for module in _modules():
        for value in list(vars(module).values()):
            _walk(value, files)
    for name in BENCHMARKS.names():
        _walk(upstream_files_of(BENCHMARKS.get(name)()), files)
    return list(files)


def declared_repos() -> list[UpstreamRepo]:
    """Every UpstreamRepo object the package's modules hold (one object per declaration)."""
    found: dict[int, UpstreamRepo] = {}
    for module in _modules():
        for value in list(vars(module).values()):
            if isinstance(value, UpstreamRepo):
                found.setdefault(id(value), value)
    return list(found.values())


# ---- what the source says, read with ast --------------------------------------------------------
def _python_files() -> list[Path]:
    return sorted(
        p for top in ("src", "tests", "bench", "scripts") for p in (ROOT / top).rglob("*.py")
    )


def _calls(source: str, name: str) -> list[ast.Call]:
    """Calls of ``name`` (``name(...)`` or ``module.name(...)``) in ``source``."""
    return [
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id == name)
            or (isinstance(n.func, ast.Attribute) and n.func.attr == name)
        )
    ]


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """String constants of a module that are not docstrings (f-string parts included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def repo_declarations() -> list[tuple[str, int, tuple[str, ...], str]]:
    """(file, line, (folder, repo, commit), hub) of every ``UpstreamRepo(...)`` call in the package."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for call in _calls(path.read_text(encoding="utf-8"), "UpstreamRepo"):
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            args = tuple(a.value for a in call.args if isinstance(a, ast.Constant))
            assert len(args) == len(call.args) == 3 and all(isinstance(a, str) for a in args), (
                f"{where}: a repository is declared with its folder, repository and commit written out"
            )
            hub = next((k.value for k in call.keywords if k.arg == "hub"), None)
            hub_value = hub.value if isinstance(hub, ast.Constant) else "github"
            out.append((where, call.lineno, args, hub_value))
    return out


# ---- the checks ---------------------------------------------------------------------------------
def test_a_repository_makes_its_files_and_urls() -> None:
    gh = UpstreamRepo("demo", "o/r", "c" * 40)
    hf = UpstreamRepo("demo-hf", "o/d", "main", hub="huggingface")
    f = gh.file("a/b.py", "0" * 64)
    assert dataclasses.astuple(f) == ("demo", "o/r", "c" * 40, "a/b.py", "0" * 64, "github")
    assert gh.url("a/b.py") == f.url == f"https://raw.githubusercontent.com/o/r/{'c' * 40}/a/b.py"
    g = hf.file("data/x.parquet", None)
    assert (g.hub, g.sha256, g.describe()["sha256"]) == ("huggingface", None, "")
    assert (
        hf.url("data/x.parquet") == g.url and "/datasets/o/d/resolve/main/data/x.parquet" in g.url
    )
    assert gh.short == "o/r@ccccccc"


def test_the_ast_check_sees_a_file_built_by_hand() -> None:
    source = (
        "from grandrounds.sources import upstream\n"
        "A = UpstreamFile('f', 'o/r', 'c', 'p', None)\n"
        "B = upstream.UpstreamFile('f', 'o/r', 'c', 'q', None)\n"
        "C = REPO.file('p', None)\n"
    )
    assert [c.lineno for c in _calls(source, "UpstreamFile")] == [2, 3]


def test_no_upstream_file_is_built_outside_upstream_py() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{c.lineno}"
        for p in _python_files()
        if p != UPSTREAM_PY
        for c in _calls(p.read_text(encoding="utf-8"), "UpstreamFile")
    ]
    assert found == [], f"pin these through an UpstreamRepo (REPO.file(path, sha256)): {found}"


@pytest.fixture(scope="module")
def files() -> list[UpstreamFile]:
    return declared_files()


@pytest.fixture(scope="module")
def repos() -> list[UpstreamRepo]:
    return declared_repos()


def test_every_upstream_file_is_a_file_of_a_declared_repository(files, repos) -> None:
    by_pin = {(r.folder, r.repo, r.commit, r.hub): r for r in repos}
    for f in files:
        repo = by_pin.get((f.folder, f.repo, f.commit, f.hub))
        assert repo is not None, f"{f.url}: no declared UpstreamRepo pins {f.repo}@{f.commit}"
        made = repo.file(f.path, f.sha256)
        assert made == f and made.url == f.url and made.describe() == f.describe()
    # the walk reaches every kind of place a pin sits: a module constant, a task table, a class
    # attribute, a Hugging Face file whose sha256 is not pinned, a benchmark's own list
    paths = {(f.folder, f.path) for f in files}
    assert {
        ("simple-evals", "healthbench_eval.py"),
        ("lm-eval", "lm_eval/tasks/medqa/medqa.yaml"),
        ("medmarks-envs", "environments/head_qa/head_qa.py"),
        ("mmlu-pro-hf", "data/validation-00000-of-00001.parquet"),
    } <= paths
    assert any(f.hub == "huggingface" and f.sha256 is None for f in files)
    assert len({(f.repo, f.commit) for f in files}) >= 20


def test_each_repository_at_a_commit_is_declared_once(repos) -> None:
    declared = repo_declarations()
    pins = Counter((repo, commit) for _, _, (_, repo, commit), _ in declared)
    folders = Counter(folder for _, _, (folder, _, _), _ in declared)
    assert [p for p, n in pins.items() if n > 1] == [], "a repository at one commit declared twice"
    assert [f for f, n in folders.items() if n > 1] == [], (
        "two repositories in one reference folder"
    )
    # every declaration is reachable as a module attribute (no pin hidden inside a function)
    assert sorted((r.folder, r.repo, r.commit, r.hub) for r in repos) == sorted(
        (*args, hub) for _, _, args, hub in declared
    )


def test_no_string_of_the_package_repeats_a_pinned_commit() -> None:
    """Every commit written in the package is written once: its declaration. A source line, a data
    URL or a fidelity note of the same repository is built from the declaration, never retyped
    (not even as the 7-character short form)."""
    strings = [
        (f"{p.relative_to(ROOT)}:{line}", text)
        for p in sorted(PACKAGE.rglob("*.py"))
        for line, text in _code_strings(p)
    ]
    written = Counter(h for _, text in strings for h in COMMIT.findall(text))
    assert [h for h, n in written.items() if n > 1] == [], "a commit written twice"
    pinned = {args[2] for _, _, args, _ in repo_declarations() if COMMIT.fullmatch(args[2])}
    assert pinned and pinned <= set(written)
    shortened = [
        (where, h[:7])
        for where, text in strings
        for h in written
        if h[:7] in text and h not in text
    ]
    assert shortened == [], f"write REPO.short or REPO.commit[:7] instead: {shortened}"

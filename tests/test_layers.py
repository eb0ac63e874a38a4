"""The package's folders are the layers of docs/ARCHITECTURE.md: every import (at the top of a module,
inside a function, or for type checking only) goes to the same folder or to a lower layer, and no
module imports itself back through others. Read with ``ast``, so nothing is imported to check."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "grandrounds"
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"

#: folder -> layer; a folder imports only from its own folder and from lower layers.
LAYERS = {
    "": 0,  # the package itself: its version
    "core": 1,
    "store": 2,
    "scoring": 2,
    "sources": 3,
    "providers": 4,
    "graders": 4,
    "benchmarks": 5,
    "run": 6,
    "analyses": 7,
    "reports": 8,
    "viewer": 8,
    "cli": 9,
    "__main__": 10,
    "testing": 10,  # loopback servers for tests and bench scripts: nothing in production imports them
}


def module_files() -> dict[str, Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = p
    return mods


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever in the file the import stands."""
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: relative import"
                targets = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                if not t.startswith("grandrounds"):
                    continue
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != name:
                    found.add(t)
        out[name] = found
    return out


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = imports(module_files())


def test_every_folder_has_a_layer() -> None:
    assert sorted({folder(m) for m in GRAPH} - set(LAYERS)) == []


def test_no_import_goes_up_or_sideways() -> None:
    bad = [
        f"{m} -> {t}"
        for m, ts in sorted(GRAPH.items())
        for t in sorted(ts)
        if folder(t) != folder(m) and LAYERS[folder(t)] >= LAYERS[folder(m)]
    ]
    assert bad == []


def test_no_import_loop_between_modules() -> None:
    assert cycles(GRAPH) == []


def test_no_import_loop_between_folders() -> None:
    folders: dict[str, set[str]] = {}
    for m, ts in GRAPH.items():
        folders.setdefault(folder(m), set()).update(folder(t) for t in ts if folder(t) != folder(m))
    assert cycles(folders) == []


def test_the_checks_catch_what_they_are_for() -> None:
    """The loop finder and the layer rule fail on a planted loop and a planted upward import."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    planted = {"grandrounds.core.records": {"grandrounds.run.runner"}}
    up = [
        f"{m} -> {t}"
        for m, ts in planted.items()
        for t in ts
        if LAYERS[folder(t)] >= LAYERS[folder(m)]
    ]
    assert up == ["grandrounds.core.records -> grandrounds.run.runner"]


def body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """A function's length in statements after its docstring: the lines on which a statement
    starts, so the formatter's wrapping of one long call over several lines counts once, and the
    signature, however many options a command declares, is a declaration, not code."""
    body = (
        fn.body[1:]
        if len(fn.body) > 1
        and isinstance(fn.body[0], ast.Expr)
        and isinstance(getattr(fn.body[0], "value", None), ast.Constant)
        else fn.body
    )
    return len({s.lineno for b in body for s in ast.walk(b) if isinstance(s, ast.stmt)})


def test_no_function_over_55_statements() -> None:
    long = []
    for name, path in sorted(module_files().items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > 55:
                long.append(f"{name}.{node.name}: {body_lines(node)}")
    assert long == []


@pytest.mark.parametrize("name", sorted(k for k in LAYERS if k and k not in ("__main__",)))
def test_the_architecture_page_names_every_folder(name: str) -> None:
    """docs/ARCHITECTURE.md's layer table lists every folder (the tree reads like the page)."""
    table = ARCHITECTURE.read_text(encoding="utf-8").split("## Layers", 1)[1].split("\n## ", 1)[0]
    assert re.search(rf"`{name}/`", table), f"{name}/ is not in the layer table"


#: The one module that defines the exam letters.
LETTERS_HOME = "grandrounds.core.choices"


def letters_elsewhere(sources: dict[str, str]) -> list[str]:
    """Modules (name -> source) other than :data:`LETTERS_HOME` that define a module-level
    ``LETTERS`` or take it from the MCQ grader (``from grandrounds.graders.mcq_grader import LETTERS``,
    or ``mcq_grader.LETTERS``)."""
    found = []
    for name, text in sorted(sources.items()):
        if name == LETTERS_HOME:
            continue
        tree = ast.parse(text)
        for node in tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "LETTERS" for t in targets):
                found.append(f"{name}:{node.lineno}: defines LETTERS")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "grandrounds.graders.mcq_grader"
                and any(a.name == "LETTERS" for a in node.names)
            ) or (
                isinstance(node, ast.Attribute)
                and node.attr == "LETTERS"
                and isinstance(node.value, ast.Name)
                and node.value.id == "mcq_grader"
            ):
                found.append(f"{name}:{node.lineno}: takes LETTERS from the MCQ grader")
    return found


def test_the_exam_letters_are_defined_once_below_their_users() -> None:
    """Graders, benchmarks and analyses read the option letters from core/choices.py; no other
    module of the package, the tests, the bench scripts or the scripts defines its own or takes them
    from the MCQ grader (a neighbour of the benchmarks, not a floor below them)."""
    root = PKG.parents[1]
    sources = {m: p.read_text(encoding="utf-8") for m, p in module_files().items()}
    for folder_name in ("tests", "bench", "scripts"):
        for p in sorted((root / folder_name).rglob("*.py")):
            sources[str(p.relative_to(root))] = p.read_text(encoding="utf-8")
    assert LETTERS_HOME in sources and "LETTERS = " in sources[LETTERS_HOME]
    assert letters_elsewhere(sources) == []


def test_the_letters_check_sees_a_second_definition_and_an_import_from_the_grader() -> None:
    planted = {
        LETTERS_HOME: 'LETTERS = "ABCDEFGHIJ"\n',
        "grandrounds.benchmarks.a": 'LETTERS: str = "ABCDE"\n',
        "grandrounds.benchmarks.b": "from grandrounds.graders.mcq_grader import LETTERS, permutation\n",
        "grandrounds.analyses.c": "from grandrounds.graders import mcq_grader\nX = mcq_grader.LETTERS\n",
        "grandrounds.benchmarks.d": "def f():\n    LETTERS = 'AB'\n    return LETTERS\n",
    }
    assert letters_elsewhere(planted) == [
        "grandrounds.analyses.c:2: takes LETTERS from the MCQ grader",
        "grandrounds.benchmarks.a:1: defines LETTERS",
        "grandrounds.benchmarks.b:1: takes LETTERS from the MCQ grader",
    ]

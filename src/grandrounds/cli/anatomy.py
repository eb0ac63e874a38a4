"""The files that define a benchmark: its module, its grader's module, the family modules of
``sources/`` and ``scoring/`` either one imports, and the judge templates the grader ships. Read
from their import statements and string constants; nothing runs but the class's own
``grader_spec`` under default options."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path
from typing import Any

import grandrounds
from grandrounds.core.registry import GRADERS

PKG = Path(grandrounds.__file__).resolve().parent
#: Modules of these folders that every family shares (machinery, not a family's own files).
SHARED = {
    "sources": {"upstream", "protocols", "downloads", "data", "mirrors"},
    "scoring": {"stats", "cells"},
}


def _file(module: str) -> Path:
    return Path(sys.modules[module].__file__ or "")


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _family_modules(path: Path) -> list[str]:
    """The ``sources/`` and ``scoring/`` modules of one family that the file at ``path`` imports."""
    found: list[str] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[:3] == ["grandrounds", "benchmarks", "agent_envs"] and len(parts) == 4:
                if (PKG / "benchmarks" / "agent_envs" / f"{parts[3]}.py").is_file():
                    found.append(f"benchmarks/agent_envs/{parts[3]}.py")
            if len(parts) == 3 and parts[0] == "grandrounds" and parts[1] in SHARED:
                if (
                    parts[2] not in SHARED[parts[1]]
                    and (PKG / parts[1] / f"{parts[2]}.py").is_file()
                ):
                    found.append(f"{parts[1]}/{parts[2]}.py")
    return found


def _templates(path: Path) -> list[str]:
    """Judge templates the module names (``grandrounds/templates/<name>.txt``)."""
    out = []
    tree = _tree(path)
    specs = {  # the ":g" of f"{x:g}" is an f-string too, but names no template
        id(n.format_spec) for n in ast.walk(tree) if isinstance(n, ast.FormattedValue)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for name in (node.value, node.value.removesuffix(".txt")):
                if name.isidentifier() and (PKG / "templates" / f"{name}.txt").is_file():
                    out.append(f"templates/{name}.txt")
        elif isinstance(node, ast.JoinedStr) and node.values and id(node) not in specs:
            # f"gaps_{n}": each template so named
            head = node.values[0]
            if isinstance(head, ast.Constant) and isinstance(head.value, str):
                prefix = head.value
                if prefix.isidentifier():
                    out += sorted(
                        f"templates/{p.name}" for p in (PKG / "templates").glob(f"{prefix}*.txt")
                    )
    return out


def defining_files(cls: type[Any]) -> list[str]:
    """The files (relative to the package) that define benchmark class ``cls``, its own module first."""
    from grandrounds.benchmarks.base import RunOptions

    bench = cls()
    spec = bench.grader_spec(bench.check_options(RunOptions()))
    modules = [_file(cls.__module__)]
    grader = GRADERS.get(spec.name)
    modules.append(_file(grader.__module__))
    out: list[str] = []
    for path in modules:
        out.append(path.resolve().relative_to(PKG).as_posix())
        out += _family_modules(path)
    for path in modules[1:]:
        out += _templates(path)
    return list(dict.fromkeys(out))

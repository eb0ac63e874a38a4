"""Load a benchmark's official functions out of ../shared/reference for differential tests.

The official files are scripts (argument parsing, file reading and API calls at import time), so
they are not imported: the named top-level functions, classes and constants are pulled out with
``ast`` and executed in a scratch namespace, after the file's own imports (those that fail to
import, such as API clients, are skipped; a function that needs one fails loudly when called).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from tests.conftest import reference_file


def load_official(
    relpath: str, names: Sequence[str], extra: Mapping[str, Any] | None = None
) -> SimpleNamespace:
    """``names`` from the official file ``relpath`` (under ../shared/reference), executed in a fresh namespace."""
    path = reference_file(*relpath.split("/"))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    ns: dict[str, Any] = {"__name__": f"official:{relpath}", **(extra or {})}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), str(path), "exec"), ns)  # noqa: S102
            except Exception:  # an API client or a sibling module not installed here
                continue
    wanted = set(names)
    found: set[str] = set()
    for node in tree.body:
        target = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            target = node.name
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            target = node.targets[0].id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target = node.target.id
        if target in wanted:
            exec(compile(ast.Module([node], []), str(path), "exec"), ns)  # noqa: S102
            found.add(target)
    missing = wanted - found
    if missing:
        raise AssertionError(f"{relpath} has no top-level {sorted(missing)}")
    return SimpleNamespace(**{n: ns[n] for n in names})

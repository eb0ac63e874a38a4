"""Draw the house: the package's floors (tests/test_layers.py's layers), the arrows between folders,
those that go up a floor and the loops, counting as arrows both import statements and modules named
by a string the code imports at run time (``"grandrounds.benchmarks.medqa:MedQA"`` in a registry
table, ``importlib.import_module("grandrounds....")``).

    .venv/bin/python scripts/house.py            # the drawing
    .venv/bin/python scripts/house.py --src DIR  # of another checkout's src/grandrounds
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_NAMED = re.compile(r"^(grandrounds(?:\.\w+)+)(?::\w+)?$")


def _layers() -> dict[str, int]:
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests" / "test_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.LAYERS)


def modules(pkg: Path) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = list(p.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def arrows(mods: dict[str, Path]) -> dict[tuple[str, str], str]:
    """(module, module it reaches) -> how: "import" or "by name" (a string it imports at run time)."""
    out: dict[tuple[str, str], str] = {}

    def resolve(target: str) -> str | None:
        while target not in mods and "." in target:
            target = target.rsplit(".", 1)[0]
        return target if target in mods else None

    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [(a.name, "import") for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found = [(node.module, "import")]
                found += [(f"{node.module}.{a.name}", "import") for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # a module named to be imported (an entry-point group names a package: not one)
                m = _NAMED.match(node.value)
                named = m.group(1) if m else ""
                found = (
                    [(named, "by name")] if named in mods and mods[named].stem != "__init__" else []
                )
            else:
                continue
            for target, how in found:
                if target.startswith("grandrounds") and (to := resolve(target)) and to != name:
                    out.setdefault((name, to), how)
    return out


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def loops(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan's strongly connected components)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def drawing(pkg: Path) -> tuple[str, dict[str, int]]:
    """The drawing as text, and its counts (arrows up by import and by name, loops)."""
    layers = _layers()
    mods = modules(pkg)
    edges = arrows(mods)
    by_floor: dict[int, list[str]] = {}
    for f in sorted({folder(m) for m in mods} - {""}):
        by_floor.setdefault(layers.get(f, 99), []).append(f)
    up = Counter()
    up_list: list[str] = []
    between: Counter[tuple[str, str]] = Counter()
    for (a, b), how in sorted(edges.items()):
        fa, fb = folder(a), folder(b)
        if fa != fb:
            between[(fa, fb)] += 1
        if layers.get(fb, 99) > layers.get(fa, 99):
            up[how] += 1
            up_list.append(f"    {a} -> {b} ({how})")

    def folder_edges(es: set[tuple[str, str]]) -> set[tuple[str, str]]:
        return {(folder(a), folder(b)) for a, b in es if folder(a) != folder(b)}

    imported = {e for e, how in edges.items() if how == "import"}
    lines = []
    for floor in sorted(by_floor, reverse=True):
        names = by_floor[floor]
        width = sum(sum(1 for m in mods if folder(m) == f) for f in names)
        lines.append(f"floor {floor:>2}  {'  '.join(f + '/' for f in names):<34}{width:>4} modules")
        for f in names:
            down = sorted(
                (b, n) for (a, b), n in between.items() if a == f and layers.get(b, 99) < floor
            )
            if down:
                lines.append(f"            {f}/ -> " + ", ".join(f"{b}/ ({n})" for b, n in down))
    counts = {
        "arrows up by import": up["import"],
        "arrows up by name": up["by name"],
        "loops of modules by import": len(loops(imported)),
        "loops of folders by import": len(loops(folder_edges(imported))),
        "loops of modules, names counted": len(loops(set(edges))),
        "loops of folders, names counted": len(loops(folder_edges(set(edges)))),
    }
    lines.append("")
    lines += [f"{k}: {v}" for k, v in counts.items()]
    if up_list:
        lines.append("arrows up:")
        lines += up_list[:12] + (
            [f"    ... and {len(up_list) - 12} more"] if len(up_list) > 12 else []
        )
    return "\n".join(lines), counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="a checkout's src folder")
    args = ap.parse_args(argv)
    print(drawing(args.src / "grandrounds")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start-up cost of the command: ``grandrounds --help`` and a cached run, as a user sees them.

Each figure is the median (and the range) of N runs of a fresh ``python -m grandrounds`` process:

- ``--help``: the command's whole start-up with nothing to do;
- a cached run: the bundled ``demo`` exam against a loopback OpenAI-compatible server, run once
  to fill a fresh store, then timed again with every answer stored (0 calls: the settled result
  is read back);
- the package modules each imports (``-X importtime``), to see what a change pulls in.

    python bench/startup.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from grandrounds.testing import LoopbackServer  # noqa: E402


def env() -> dict[str, str]:
    out = dict(os.environ) | {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    ref = (
        ROOT.parent / "shared" / "reference"
    )  # the official prompt files the default protocol reads
    if "GRANDROUNDS_REFERENCE" not in out and ref.is_dir():
        out["GRANDROUNDS_REFERENCE"] = str(ref)
    return out


def timed(args: list[str], repeat: int) -> list[float]:
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "grandrounds", *args], capture_output=True, text=True, env=env()
        )
        walls.append(time.perf_counter() - start)
        if r.returncode != 0:
            sys.exit(f"grandrounds {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return walls


def own_modules(args: list[str]) -> int:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env(),
    )
    return sum(
        1
        for line in r.stderr.splitlines()
        if line.rstrip().split("|")[-1].strip().startswith("grandrounds")
    )


def show(name: str, walls: list[float], modules: int) -> None:
    print(
        f"{name}: median {statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f}, n={len(walls)}); "
        f"{modules} grandrounds modules imported"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    show("grandrounds --help", timed(["--help"], a.repeat), own_modules(["--help"]))
    with tempfile.TemporaryDirectory() as tmp, LoopbackServer(lambda body: "Answer: A") as srv:
        args = [
            "run",
            "demo",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(Path(tmp) / "s.db"),
        ]
        timed(args, 1)
        made = srv.stats.requests
        walls = timed(args, a.repeat)
        if srv.stats.requests != made:
            sys.exit(f"the cached run made {srv.stats.requests - made} calls; expected 0")
        show(f"cached run (demo, {made} calls stored, 0 made)", walls, own_modules(args))


if __name__ == "__main__":
    main()

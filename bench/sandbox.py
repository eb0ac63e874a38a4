"""What the Python tool's sandbox costs and how its limits hold, in figures.

Prints, for bubblewrap and for the unsafe audit-hook-only mode: the wall time of one tool call
that prints a number (median and 90th percentile over ``--calls``), beside a plain ``python -c``;
how long after its stop a sandbox running an endless loop is gone; the harness's peak memory
while a program floods its output for ``--flood`` seconds; and how much a program can write
before the sandbox's disk is full.

    python bench/sandbox.py --calls 30
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from grandrounds.benchmarks.agent_envs import sandbox  # noqa: E402
from grandrounds.benchmarks.agent_envs.sandbox import Limits, run_python  # noqa: E402


def _times(fn, n: int) -> tuple[float, float]:
    got = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        got.append(time.perf_counter() - start)
    got.sort()
    return statistics.median(got), got[int(0.9 * (len(got) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--flood", type=float, default=4.0)
    args = ap.parse_args()
    print(f"bubblewrap: {sandbox.check()}")
    plain = _times(
        lambda: subprocess.run([sys.executable, "-S", "-c", "print(1)"], capture_output=True),
        args.calls,
    )
    print(
        f"plain python -c:         median {plain[0] * 1000:6.1f} ms, p90 {plain[1] * 1000:6.1f} ms"
    )
    for backend in sandbox.BACKENDS:
        med, p90 = _times(lambda b=backend: run_python("print(6 * 7)", Limits(), b), args.calls)
        print(f"{backend:24} median {med * 1000:6.1f} ms, p90 {p90 * 1000:6.1f} ms per call")
    for backend in sandbox.BACKENDS:
        stop = threading.Event()
        threading.Timer(1.0, stop.set).start()
        start = time.perf_counter()
        out = run_python("while True:\n    pass", Limits(seconds=30, cpu_seconds=30), backend, stop)
        gone = time.perf_counter() - start - 1.0
        print(
            f"{backend:24} endless loop stopped; gone {gone * 1000:.0f} ms after the stop ({out.exit_code})"
        )
    for backend in sandbox.BACKENDS:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        flood = "import sys\nwhile True:\n    sys.stdout.write('x' * 1000000)"
        start = time.perf_counter()
        out = run_python(flood, Limits(seconds=args.flood), backend)
        took = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(
            f"{backend:24} output flood: cut={out.output_cut} after {took * 1000:.0f} ms, "
            f"kept {len(out.stdout)} chars, harness peak RSS +{(after - before) / 1024:.1f} MB "
            f"(peak {after / 1024:.0f} MB)"
        )
    fill = (
        "import os\nn = 0\ntry:\n    for i in range(100000):\n"
        "        with open(f'f{i}', 'wb') as f:\n"
        "            for _ in range(8):\n"
        "                f.write(b'x' * 2**20); n += 2**20\n"
        "except OSError as e:\n    print(type(e).__name__, e.errno)\nprint('wrote', n)"
    )
    out = run_python(fill, Limits(seconds=20, disk_mb=64))
    print(f"bubblewrap disk fill (disk_mb=64): {' '.join(out.stdout.split())}")


if __name__ == "__main__":
    main()

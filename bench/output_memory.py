"""Memory of writing a run's outputs and of re-grading it, at 500 and at 5,000 HealthBench conversations.

For each size, with a fresh store: the cold ``grandrounds run healthbench ... --out DIR`` (every
answer and judge call made, then results.json and samples.jsonl written), then ``grandrounds
regrade --run ID --out DIR`` of that run with another judge name on the same loopback server (so
every judge call is made again and a second samples.jsonl is written). The data, the server and
the process measurement are bench/healthbench_scale.py's (the real HealthBench-500 file repeated
with new ids; one fixed-latency reply that is both an answer and a verdict; the real CLI in a
subprocess, peak RSS from ``wait4``). Printed per command and size: calls made, wall, CPU, peak
RSS and the lines written to samples.jsonl (checked against the size).

    python bench/output_memory.py                      # sizes 500 and 5000, 5 ms latency
    python bench/output_memory.py --sizes 200 --latency 0.001

Target (issue 11, flat memory): at 5,000 conversations each command peaks under 200 MB and
within 1.3x of its peak at 500.

Measured (2 cores shared with other work, load about 1, 5 ms latency, 64 connections), before
(the run's outputs built as one list, the re-grade holding every sample, answer and grade) and
after (both read back from the store 250 samples at a time and written line by line):

    size  criteria  command         calls   wall s   cpu s  peak MB
                                  before:
     500      5965  run --out        6462     5.13    5.31    126.7
     500      5965  regrade --out    5962     4.22    4.18    188.0
    5000     59650  run --out       64620    44.57   43.91    305.1   2.41x the peak at 500
    5000     59650  regrade --out   59620    54.80   51.86    792.9   4.22x
                                  after:
     500      5965  run --out        6462     4.30    4.53    115.2
     500      5965  regrade --out    5962     4.08    4.25    116.3
    5000     59650  run --out       64620    40.43   39.63    132.8   1.15x the peak at 500
    5000     59650  regrade --out   59620    42.62   40.22    138.1   1.19x

(The re-grade makes 3 calls fewer than there are criteria: identical judge prompts are one call.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import healthbench_scale as scale  # noqa: E402  (data, server and process measurement)

RUN_ID = re.compile(r": run ([0-9a-f]{16})\b")


def lines_in(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--latency", type=float, default=0.005)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--data", type=Path, default=scale.DATA)
    args = ap.parse_args()
    if not args.data.exists():
        raise SystemExit(
            f"{args.data}: not found (HealthBench-500 from ../shared/data, or pass --data)"
        )

    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=scale.serve, args=(args.latency, q), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    env = dict(
        os.environ,
        OPENAI_API_KEY="bench",
        GRANDROUNDS_CACHE=tempfile.mkdtemp(prefix="gr-bench-cache-"),
    )
    print(
        f"HealthBench per criterion, --out and regrade --out, latency {args.latency * 1000:.0f} ms, "
        f"{args.concurrency} connections, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'size':>6}{'criteria':>10}  {'command':<12}{'calls':>8}{'wall s':>9}{'cpu s':>8}{'peak MB':>9}{'lines':>7}"
    )
    peaks: dict[str, dict[int, float]] = {"run --out": {}, "regrade --out": {}}
    try:
        for n in args.sizes:
            with tempfile.TemporaryDirectory() as d:
                root = Path(d)
                data = root / f"healthbench_{n}.jsonl"
                criteria = scale.write_conversations(args.data, data, n)
                store = str(root / "store.db")
                run_cmd = [
                    "run",
                    "healthbench",
                    "--data",
                    str(data),
                    "--store",
                    store,
                    "--model",
                    "openai/bench-model",
                    "--base-url",
                    base_url,
                    "--judge",
                    "openai/bench-judge",
                    "--judge-base-url",
                    base_url,
                    "--protocol",
                    "grandrounds",
                    "--concurrency",
                    str(args.concurrency),
                    "--judge-concurrency",
                    str(args.concurrency),
                    "--out",
                    str(root / "run-out"),
                ]
                wall, cpu, peak, out = scale.run_cli(run_cmd, env)
                found = RUN_ID.search(out)
                if not found:
                    raise SystemExit(f"no run id in the run's output:\n{out[-2000:]}")
                rows = [
                    (
                        "run --out",
                        wall,
                        cpu,
                        peak,
                        scale.calls_made(out),
                        lines_in(root / "run-out" / "samples.jsonl"),
                    )
                ]
                regrade_cmd = [
                    "regrade",
                    "--run",
                    found.group(1),
                    "--store",
                    store,
                    "--judge",
                    "openai/bench-judge-2",
                    "--judge-base-url",
                    base_url,
                    "--judge-concurrency",
                    str(args.concurrency),
                    "--out",
                    str(root / "regrade-out"),
                ]
                wall, cpu, peak, out = scale.run_cli(regrade_cmd, env)
                rows.append(
                    (
                        "regrade --out",
                        wall,
                        cpu,
                        peak,
                        scale.calls_made(out),
                        lines_in(root / "regrade-out" / "samples.jsonl"),
                    )
                )
                for label, wall, cpu, peak, calls, lines in rows:
                    print(
                        f"{n:>6}{criteria:>10}  {label:<12}{calls:>8}{wall:>9.2f}{cpu:>8.2f}{peak:>9.1f}{lines:>7}",
                        flush=True,
                    )
                    if lines != n:
                        raise SystemExit(f"{label}: samples.jsonl has {lines} lines, expected {n}")
                    peaks[label][n] = peak
        for label, by_size in peaks.items():
            if len(by_size) >= 2:
                small, large = min(by_size), max(by_size)
                ratio = by_size[large] / by_size[small]
                ok = ratio <= 1.3 and by_size[large] < 200
                print(
                    f"{label}: peak at {large} / peak at {small}: {ratio:.2f}x, {by_size[large]:.1f} MB "
                    f"({'within' if ok else 'MISSES'} the target: <= 1.3x and < 200 MB)"
                )
    finally:
        server.kill()


if __name__ == "__main__":
    main()

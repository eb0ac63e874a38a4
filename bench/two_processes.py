"""Would a second process close the wall-time gap? HealthBench-500 judged per criterion in one
`grandrounds run` against the same work split over two runs at once.

`bench/healthbench_wall.py` shows the harness is CPU-bound on one core at 50 ms latency and 64
connections: about one core's worth of Python for 6,462 calls in about as many seconds. On a
2-core machine a second process could, in principle, take half of that work onto the other core.
This script measures what it would buy before any such design is built, on the same loopback
server (healthbench_wall's reply, in its own process):

- one process: ``grandrounds run healthbench`` over the whole file, ``--concurrency 64
  --judge-concurrency 64`` (64 in flight, as the default flags give);
- two processes at once, each over half the conversations (even and odd lines of the file,
  written to a temporary directory) with ``--concurrency 32 --judge-concurrency 32`` (64 in flight
  in all), first on two stores, then on one shared store (the in-flight leases and SQLite's
  locking between processes included).

For each: wall time until the last process exits, the processes' CPU (user + system, from
``getrusage(RUSAGE_CHILDREN)``) and the server's CPU over the same span. The split runs do the
same calls as the whole one (6,462), since each conversation's calls stay in one process.

    .venv/bin/python bench/two_processes.py --data ../shared/data/healthbench/healthbench_500.jsonl --repeat 3

Measured on the shared 2-core development machine (AMD EPYC, 2 CPUs), 3 rounds, medians: one
process 7.10 s (6.84-7.47 s), grandrounds CPU 6.86 s; two processes on two stores 6.66 s
(6.41-6.68 s), their CPU together 7.95 s (6.89-8.43 s); on one shared store 6.58 s (6.43-6.58 s),
7.74 s of CPU. The server took 0.6-0.8 s of CPU in each. Two processes save 6-7% of the wall,
not the quarter or more a second core would give a CPU-bound run: their CPU per call rises by
10-20% when both run (two CPUs of this machine do not add up to twice one), and each process
still pays its own start-up (imports, reading the data, the store) before its first call and its
aggregation after the last, so at 32 calls in flight each the pair is no longer CPU-bound (1.2
cores busy) yet is still 1.2x the bare client's loop. So sharding a run over processes was not
built: the gap is the harness's CPU per call and its fixed start-up and finish.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import healthbench_wall as hw  # noqa: E402  (its server, reply and paths)


def split(data: Path, into: Path) -> tuple[Path, Path]:
    """The file's even and odd lines (JSONL records, split on newlines only: a record may hold U+2028)."""
    with open(data, encoding="utf-8", newline="") as f:
        lines = [ln for ln in f.read().split("\n") if ln.strip()]
    halves = (into / "even.jsonl", into / "odd.jsonl")
    for path, part in zip(halves, (lines[0::2], lines[1::2])):
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(part) + "\n")
    return halves


def command(base_url: str, data: Path, store: Path, concurrency: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "grandrounds",
        "run",
        "healthbench",
        "--model",
        "openai/bench",
        "--base-url",
        base_url,
        "--judge",
        "openai/bench-judge",
        "--judge-base-url",
        base_url,
        "--data",
        str(data),
        "--store",
        str(store),
        "--concurrency",
        str(concurrency),
        "--judge-concurrency",
        str(concurrency),
    ]


def timed(srv: hw.Server, commands: list[list[str]], cwd: Path) -> tuple[float, float, float, int]:
    """Run ``commands`` at once: (wall until the last exits, their CPU, the server's CPU, requests)."""
    env = os.environ | {"COLUMNS": "200", "OPENAI_API_KEY": "EMPTY"}
    env.setdefault("GRANDROUNDS_REFERENCE", str(hw.DEFAULT_REFERENCE))
    srv.mark()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            c, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for c in commands
    ]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"error: a run exited {p.returncode}:\n{out[-2000:]}")
    got = srv.read()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, got["cpu_ms_per_req"] * got["requests"] / 1000, int(got["requests"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=hw.DEFAULT_DATA,
        help="HealthBench JSONL (default: the shared 500-row file)",
    )
    ap.add_argument("--latency", type=float, default=0.05, help="server latency, seconds")
    ap.add_argument("--repeat", type=int, default=3, help="rounds")
    args = ap.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such file")
    received = mp.Value("q", 0, lock=False)
    q: mp.Queue[str] = mp.Queue()
    proc = mp.Process(target=hw.serve, args=(args.latency, q, received), daemon=True)
    proc.start()
    srv = hw.Server(proc, q.get(timeout=30), received)
    print(
        f"HealthBench {args.data.name}; latency {args.latency * 1000:.0f} ms; 64 in flight in all; {os.cpu_count()} CPUs; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    figures: dict[str, list[tuple[float, float, float]]] = {
        "one process": [],
        "two processes, two stores": [],
        "two processes, one store": [],
    }
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            even, odd = split(args.data, tmp)
            for i in range(1, args.repeat + 1):
                r = tmp / f"round{i}"
                r.mkdir()
                runs = {
                    "one process": [command(srv.base_url, args.data, r / "one.db", 64)],
                    "two processes, two stores": [
                        command(srv.base_url, even, r / "even.db", 32),
                        command(srv.base_url, odd, r / "odd.db", 32),
                    ],
                    "two processes, one store": [
                        command(srv.base_url, even, r / "shared.db", 32),
                        command(srv.base_url, odd, r / "shared.db", 32),
                    ],
                }
                print(f"round {i}:")
                for name, cmds in runs.items():
                    wall, cpu, server_cpu, n = timed(srv, cmds, r)
                    figures[name].append((wall, cpu, server_cpu))
                    print(
                        f"  {name:<27} {n} requests, wall {wall:.2f} s, grandrounds cpu {cpu:.2f} s "
                        f"({1000 * cpu / max(n, 1):.3f} ms/call), server cpu {server_cpu:.2f} s",
                        flush=True,
                    )
    finally:
        proc.kill()
        proc.join()
    print(f"median of {args.repeat} round(s):")
    one = statistics.median(w for w, _, _ in figures["one process"])
    for name, rows in figures.items():
        wall = statistics.median(w for w, _, _ in rows)
        cpu = statistics.median(c for _, c, _ in rows)
        print(
            f"  {name:<27} wall {wall:.2f} s ({wall / one:.2f}x one process), grandrounds cpu {cpu:.2f} s"
        )


if __name__ == "__main__":
    main()

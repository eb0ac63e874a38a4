"""Instructions per judge call: the harness's work per call counted by valgrind, not timed.

On a shared machine the wall time and CPU time of one run move by 10-15 % from one minute to the
next (bench/healthbench_wall.py shows it), far more than most changes to the per-call path. The
number of machine instructions a run executes hardly moves: this script counts them with
valgrind's callgrind (``Collected``, every thread of the process) for judge-only HealthBench runs
of two sizes, and prints

- instructions per judge call: (I(large) - I(small)) / (calls(large) - calls(small)), the work of
  one more rubric item judged per criterion (prompt, store look-up, lease, HTTP exchange through
  aiohttp, verdict, grade and the store writes behind them), start-up and the final aggregate
  cancelling out;
- the fixed part: I(small) less its calls at that rate (interpreter start-up, imports, loading,
  aggregate).

Each code under test runs on a copy of one store that holds the candidate's answers (made once by
the working tree), with a judge name of its own, so every judge call is new and no answer call is
made. ``--rev REV`` adds a committed version of ``src/`` (``git archive``) to compare with. The
server is bench/throughput.py's fixed-latency one (as in bench/healthbench_wall.py), in its own
process, so its instructions are not counted.

Instruction counts are no CPU times: an instruction of a C library (sqlite, orjson, OpenSSL's
sha256, which valgrind runs without the CPU's SHA extensions) is not worth one of the interpreter,
and time spent waiting for the interpreter lock costs none. Use this script to compare two
versions of the code, and bench/healthbench_wall.py for what a run takes.

    .venv/bin/python bench/call_instructions.py --rev HEAD~3      # about 5 minutes on 2 cores

Measured (valgrind 3.19, 2-core machine, HealthBench-500, 20 and 80 conversations: 263 and 942
judge calls, ``--rev a860ffe``): the code before the store look-ups were batched 1.760 M
instructions per judge call, the code with the look-up batching, the request's plain-dict
canonical text, the reply parsing shortcuts and public_url remembered 1.662 M (-5.6 %); fixed part
2,483 M and 2,459 M. The same comparison on a store of 12,000 calls (a finished HealthBench-500
run's): 1.862 M and 1.778 M (-4.5 %), runs of one code within 0.3 % of each other. Leases between
processes (taking and releasing one per call) account for about 0.07 M of a call (measured there
by stubbing them out).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import healthbench_wall as hw  # noqa: E402  (the server process and the run's call summary)

REPO = Path(__file__).resolve().parents[1]
COLLECTED = re.compile(r"Collected : (\d+)")


@dataclass
class Count:
    instructions: int
    judge_calls: int
    answer_calls: int


def code_tree(rev: str, into: Path) -> Path:
    """``src/`` of commit ``rev`` unpacked (and byte-compiled) under ``into``; its path to put on PYTHONPATH."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "src")], check=True)
    return into / "src"


def cli(src: Path, base_url: str, data: Path, store: Path, judge: str, limit: int, valgrind: bool) -> tuple[str, int | None]:
    """One `grandrounds run healthbench` (under callgrind when ``valgrind``): its stderr and instructions."""
    cmd = [sys.executable, "-m", "grandrounds", "run", "healthbench", "--model", "openai/bench", "--base-url", base_url,
           "--judge", judge, "--judge-base-url", base_url, "--data", str(data), "--store", str(store), "--limit", str(limit)]
    if valgrind:
        cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd]
    env = os.environ | {"COLUMNS": "200", "OPENAI_API_KEY": "EMPTY", "PYTHONPATH": str(src)}
    env.setdefault("GRANDROUNDS_REFERENCE", str(hw.DEFAULT_REFERENCE))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=store.parent)
    if proc.returncode != 0:
        raise SystemExit(f"error: grandrounds run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    found = COLLECTED.findall(proc.stderr)
    return proc.stderr, int(found[-1]) if found else None


def count(src: Path, base_url: str, data: Path, base: Path, tmp: Path, tag: str, limit: int) -> Count:
    store = tmp / f"{tag}-{limit}.db"
    shutil.copyfile(base, store)
    err, n = cli(src, base_url, data, store, f"openai/judge-{tag}-{limit}", limit, valgrind=True)
    calls = {who: int(m) for who, m, _, _ in hw.CALLS.findall(err)}
    if n is None or not calls:
        raise SystemExit(f"error: no instruction count or call summary in the run's output:\n{err[-3000:]}")
    store.unlink()
    return Count(n, sum(m for who, m in calls.items() if who != "answers"), calls.get("answers", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=hw.DEFAULT_DATA, help="HealthBench JSONL (default: the shared 500-row file)")
    ap.add_argument("--small", type=int, default=20, help="conversations in the small run")
    ap.add_argument("--large", type=int, default=80, help="conversations in the large run")
    ap.add_argument("--rev", action="append", default=[], help="a commit whose src/ to measure too (repeatable)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind not found (Debian: apt-get install valgrind)")
    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such file")
    if args.large <= args.small:
        raise SystemExit("error: --large must be more conversations than --small")
    q: mp.Queue[str] = mp.Queue()
    received = mp.Value("q", 0)
    server = mp.Process(target=hw.serve, args=(0.05, q, received), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        codes = [("working tree", REPO / "src")]
        codes += [(rev, code_tree(rev, tmp / f"rev{i}")) for i, rev in enumerate(args.rev)]
        base = tmp / "answers.db"
        cli(REPO / "src", base_url, args.data, base, "openai/judge-base", args.large, valgrind=False)
        print(f"HealthBench {args.data.name}, judge-only runs of {args.small} and {args.large} conversations under callgrind")
        print(f"{'code':<16} {'judge calls':>12} {'instructions':>28} {'per judge call':>15} {'fixed':>10}")
        for i, (name, src) in enumerate(codes):
            small = count(src, base_url, args.data, base, tmp, f"c{i}", args.small)
            large = count(src, base_url, args.data, base, tmp, f"c{i}", args.large)
            if small.answer_calls or large.answer_calls:
                print(f"note: {name} made answer calls ({small.answer_calls}, {large.answer_calls}): its answer keys differ from the working tree's")
            per_call = (large.instructions - small.instructions) / max(large.judge_calls - small.judge_calls, 1)
            fixed = small.instructions - per_call * small.judge_calls
            print(f"{name:<16} {small.judge_calls:>5} {large.judge_calls:>6} {small.instructions / 1e6:>12,.1f}M {large.instructions / 1e6:>13,.1f}M "
                  f"{per_call / 1e6:>14.3f}M {fixed / 1e6:>9,.0f}M")
    server.terminate()


if __name__ == "__main__":
    main()

"""Instructions per judge call: the harness's work per call counted by valgrind, not timed.

On a shared machine the wall time and CPU time of one run move by 10-15 % from one minute to the
next (bench/healthbench_wall.py shows it), far more than most changes to the per-call path. The
number of machine instructions a run executes moves far less: this script counts them with
valgrind's callgrind (``Collected``, every thread of the process) for judge-only HealthBench runs
of two sizes, and prints

- instructions per judge call: (I(large) - I(small)) / (calls(large) - calls(small)), the work of
  one more rubric item judged per criterion (prompt, store look-up, lease, HTTP exchange through
  aiohttp, verdict, grade and the store writes behind them), start-up and the final aggregate
  cancelling out;
- the fixed part: I(small) less its calls at that rate (interpreter start-up, imports, loading,
  aggregate);
- the main thread's instructions per judge call alone (callgrind's profile per thread): the event
  loop's thread, whose work the wall time follows (bench/healthbench_wall.py says why); the rest
  is the store's writer and checkpoint threads.

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
judge calls, ``--rev a860ffe``, the code before the store look-ups were batched): a860ffe 1.760 M
instructions per judge call in both of two runs, 1.547 M of them on the main thread; the code
with the look-up batching, the request's plain-dict canonical text, the reply parsing shortcuts
and public_url remembered 1.662 M and 1.701 M in two runs (-3 to -6 %), 1.444 M on the main
thread (-6.7 %); fixed part about 2,460 M against 2,490 M. How many look-ups and leases share a
query depends on when replies land, so the batched code's count moves by a few per cent between
runs where the old code's does not. On a store of 12,000 calls (a finished HealthBench-500
run's): 1.862 M and 1.778 M (-4.5 %). Leases between processes (taking and releasing one per
call) account for about 0.07 M of a call (measured there by stubbing them out).

Later, ``--rev 59238f8 --repeat 3`` against the code that holds a small file's samples from the
check pass and finds the graded samples with one query: 1.690 M per judge call (1.437 M on the
main thread) against 1.731 M (1.479 M): no difference the counts resolve. Each of those changes
takes out work of the order of 10-20 M instructions in a run of 80 conversations, and a run's
total moves by about 1 % (15-30 M) from one run to the next even with one call in flight
(``--concurrency 1``: 3,377-3,406 M for both codes over 40 conversations), with the timing of the
store's writer and checkpoint threads.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import healthbench_wall as hw  # noqa: E402  (the server process and the run's call summary)

REPO = Path(__file__).resolve().parents[1]
COLLECTED = re.compile(r"Collected : (\d+)")
SUMMARY = re.compile(r"^summary: (\d+)", re.M)


@dataclass
class Count:
    instructions: int
    #: Those of the main thread alone (the event loop's, which the wall time follows).
    main_thread: int
    judge_calls: int
    answer_calls: int


def code_tree(rev: str, into: Path) -> Path:
    """``src/`` of commit ``rev`` unpacked (and byte-compiled) under ``into``; its path to put on PYTHONPATH."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(into / "src")], check=True)
    return into / "src"


def cli(
    src: Path, base_url: str, data: Path, store: Path, judge: str, limit: int, profile: Path | None
) -> str:
    """One `grandrounds run healthbench` (under callgrind, a profile per thread at ``profile``-NN, when given): its stderr."""
    cmd = [
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
        judge,
        "--judge-base-url",
        base_url,
        "--data",
        str(data),
        "--store",
        str(store),
        "--limit",
        str(limit),
    ]
    if profile is not None:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={profile}",
            *cmd,
        ]
    env = os.environ | {"COLUMNS": "200", "OPENAI_API_KEY": "EMPTY", "PYTHONPATH": str(src)}
    env.setdefault("GRANDROUNDS_REFERENCE", str(hw.DEFAULT_REFERENCE))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=store.parent)
    if proc.returncode != 0:
        raise SystemExit(
            f"error: grandrounds run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return proc.stderr


def count(
    src: Path, base_url: str, data: Path, base: Path, tmp: Path, tag: str, limit: int
) -> Count:
    store = tmp / f"{tag}-{limit}.db"
    shutil.copyfile(base, store)
    profile = tmp / f"{tag}-{limit}.callgrind"
    err = cli(src, base_url, data, store, f"openai/judge-{tag}-{limit}", limit, profile)
    calls = {who: int(m) for who, m, _, _ in hw.CALLS.findall(err)}
    found = COLLECTED.findall(err)
    # callgrind names each thread's profile <file>-NN, the main thread's -01; its "summary:" line
    # is that thread's instruction count.
    threads = {int(p.name.rsplit("-", 1)[1]): p for p in tmp.glob(f"{profile.name}-*")}
    main = SUMMARY.search(threads[1].read_text(errors="replace")) if 1 in threads else None
    if not found or not calls or main is None:
        raise SystemExit(
            f"error: no instruction count or call summary in the run's output:\n{err[-3000:]}"
        )
    store.unlink()
    for p in threads.values():
        p.unlink()
    return Count(
        int(found[-1]),
        int(main.group(1)),
        sum(m for who, m in calls.items() if who != "answers"),
        calls.get("answers", 0),
    )


def median_count(runs: list[Count]) -> Count:
    """The median of each figure over runs of one size (their calls are the same in every run)."""
    return Count(
        int(statistics.median(r.instructions for r in runs)),
        int(statistics.median(r.main_thread for r in runs)),
        runs[0].judge_calls,
        runs[0].answer_calls,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=hw.DEFAULT_DATA,
        help="HealthBench JSONL (default: the shared 500-row file)",
    )
    ap.add_argument("--small", type=int, default=20, help="conversations in the small run")
    ap.add_argument("--large", type=int, default=80, help="conversations in the large run")
    ap.add_argument(
        "--rev", action="append", default=[], help="a commit whose src/ to measure too (repeatable)"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each size per code, their instruction counts' medians used (the batched look-ups and leases "
        "move a code's count by a few per cent from run to run)",
    )
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind not found (Debian: apt-get install valgrind)")
    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such file")
    if args.repeat < 1:
        raise SystemExit("error: --repeat must be 1 or more")
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
        cli(REPO / "src", base_url, args.data, base, "openai/judge-base", args.large, None)
        print(
            f"HealthBench {args.data.name}, judge-only runs of {args.small} and {args.large} conversations under callgrind"
        )
        print(
            f"{'code':<16} {'judge calls':>12} {'instructions':>28} {'per judge call':>15} {'fixed':>10}  {'main thread per call':>20}"
        )
        for i, (name, src) in enumerate(codes):
            small = median_count(
                [
                    count(src, base_url, args.data, base, tmp, f"c{i}", args.small)
                    for _ in range(args.repeat)
                ]
            )
            large = median_count(
                [
                    count(src, base_url, args.data, base, tmp, f"c{i}", args.large)
                    for _ in range(args.repeat)
                ]
            )
            if small.answer_calls or large.answer_calls:
                print(
                    f"note: {name} made answer calls ({small.answer_calls}, {large.answer_calls}): its answer keys differ from the working tree's"
                )
            extra = max(large.judge_calls - small.judge_calls, 1)
            per_call = (large.instructions - small.instructions) / extra
            fixed = small.instructions - per_call * small.judge_calls
            main_per_call = (large.main_thread - small.main_thread) / extra
            print(
                f"{name:<16} {small.judge_calls:>5} {large.judge_calls:>6} {small.instructions / 1e6:>12,.1f}M {large.instructions / 1e6:>13,.1f}M "
                f"{per_call / 1e6:>14.3f}M {fixed / 1e6:>9,.0f}M  {main_per_call / 1e6:>19.3f}M"
            )
    server.terminate()


if __name__ == "__main__":
    main()

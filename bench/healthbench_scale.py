"""Memory and warm-run time of a HealthBench run judged per criterion, at 500 and at 5,000 conversations.

The 5,000 conversations are the real HealthBench-500 file repeated ten times, each copy with its
own prompt id and a distinct last user message (so every answer and judge call is a new call). The
server is bench/throughput.py's fixed-latency endpoint in its own process; its one reply is both a
usable answer and a HealthBench judge verdict (a JSON object with ``criteria_met``). Each run is the
real CLI in a subprocess with a fresh store; the script prints, for each size, the calls made, the
wall time and the peak resident memory of the cold run (every call made), then the same command
again (the warm re-run: the command finished before, so its result is read back), then once more
with the store's settled rows deleted ("grades": every stored grade read and aggregated again, as
the re-run of an interrupted run does; no call either).

    python bench/healthbench_scale.py                      # sizes 500 and 5000, 5 ms latency
    python bench/healthbench_scale.py --sizes 500 5000 --latency 0.05
    python bench/healthbench_scale.py --sizes 5000 --out     # each run also writes --out DIR

With ``--out`` every run writes ``results.json`` and ``samples.jsonl`` to a folder beside its store,
as users run it; the warm re-run then rewrites both files.

Targets (issue 11): the 5,000-conversation cold run peaks under 200 MB, within 1.3x of the peak at
500; its warm re-run makes 0 calls in under 3 s. With ``--out`` (issue 34) the same two targets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import throughput  # noqa: E402  (bench/throughput.py: the fixed-latency server)
from healthbench_wall import forget_settled  # noqa: E402  (the store's settled rows deleted)

DATA = HERE.parents[1] / "shared" / "data" / "healthbench" / "healthbench_500.jsonl"
VERDICT = json.dumps({"explanation": "The response meets the criterion.", "criteria_met": True})


def serve(latency: float, q: mp.Queue[str]) -> None:
    """The fixed-latency server whose one reply reads as an answer and as a judge verdict."""
    throughput.REPLY = throughput._http(
        json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 0,
                "model": "bench",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": VERDICT},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 400, "completion_tokens": 20, "total_tokens": 420},
            }
        ).encode()
    )
    throughput.serve(latency, "fixed", q)


def write_conversations(src: Path, dest: Path, n: int) -> int:
    """``n`` conversations from ``src`` (repeated with new ids and a marked last message); rubric items written."""
    records = [
        json.loads(line) for line in src.read_text(encoding="utf-8").split("\n") if line.strip()
    ]
    criteria = 0
    with open(dest, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = json.loads(json.dumps(records[i % len(records)]))
            copy = i // len(records)
            if copy:
                rec["prompt_id"] = f"{rec['prompt_id']}-copy{copy}"
                rec["prompt"][-1]["content"] += f" (case {copy})"
            criteria += len(rec["rubrics"])
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return criteria


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, output) of one ``python -m grandrounds`` process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "grandrounds", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"grandrounds exited {proc.returncode}:\n{out[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def calls_made(out: str) -> int:
    """Calls made, summed over the summary's "N calls made" lines."""
    total = 0
    for line in out.splitlines():
        if "calls made" in line:
            head = line.split("calls made")[0].split()[-1].replace(",", "")
            total += int(head) if head.isdigit() else 0
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--latency", type=float, default=0.005)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument(
        "--out",
        action="store_true",
        help="each run also writes its outputs (--out DIR beside its store)",
    )
    args = ap.parse_args()
    if not args.data.exists():
        raise SystemExit(
            f"{args.data}: not found (HealthBench-500 from ../shared/data, or pass --data)"
        )

    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=serve, args=(args.latency, q), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    env = dict(
        os.environ,
        OPENAI_API_KEY="bench",
        GRANDROUNDS_CACHE=tempfile.mkdtemp(prefix="gr-bench-cache-"),
    )
    outputs = ", writing --out" if args.out else ""
    print(
        f"HealthBench per criterion, latency {args.latency * 1000:.0f} ms, {args.concurrency} connections{outputs}, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'size':>6}{'criteria':>10}{'run':>7}{'calls':>8}{'wall s':>9}{'cpu s':>8}{'peak MB':>9}  score"
    )
    peaks: dict[int, float] = {}
    try:
        for n in args.sizes:
            with tempfile.TemporaryDirectory() as d:
                data = Path(d) / f"healthbench_{n}.jsonl"
                criteria = write_conversations(args.data, data, n)
                cmd = [
                    "run",
                    "healthbench",
                    "--data",
                    str(data),
                    "--store",
                    str(Path(d) / "store.db"),
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
                ]
                if args.out:
                    cmd += ["--out", str(Path(d) / "out")]
                for label in ("cold", "warm", "grades"):
                    if (
                        label == "grades"
                    ):  # the re-run of an unfinished run: every stored grade read
                        forget_settled(Path(d) / "store.db")
                    wall, cpu, peak, out = run_cli(cmd, env)
                    score = next(
                        (ln.strip() for ln in out.splitlines() if "overall_score" in ln), ""
                    )
                    print(
                        f"{n:>6}{criteria:>10}{label:>7}{calls_made(out):>8}{wall:>9.2f}{cpu:>8.2f}{peak:>9.1f}  {score[:60]}"
                    )
                    if label == "cold":
                        peaks[n] = peak
        if len(peaks) >= 2:
            small, large = min(peaks), max(peaks)
            print(f"peak at {large} / peak at {small}: {peaks[large] / peaks[small]:.2f}x")
    finally:
        server.kill()


if __name__ == "__main__":
    main()

"""Runner throughput against a loopback OpenAI-compatible server with a fixed latency.

Starts the server in a separate process (so its CPU is not the harness's), writes a synthetic
MedQA-format file, runs it through the real runner (store, cache, retries, grading) and prints:
calls, wall time, ideal wall time (calls x latency / concurrency), their ratio, and the
harness CPU time per call. Both HTTP transports of the OpenAI provider are measured: the SDK
(default) and the lean client (``--transport lean``).

    python bench/throughput.py --latency 0.05 --concurrency 64 --calls 3000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path


def serve(latency: float, q: "mp.Queue[str]") -> None:
    from grandrounds.testing import LoopbackServer

    with LoopbackServer(lambda body: "Answer: B", latency=latency) as srv:
        q.put(srv.base_url)
        time.sleep(3600)


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_questions(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {
                "question": f"Synthetic question {i}: which option is the second one?",
                "options": {"A": "first", "B": "second", "C": "third", "D": "fourth"},
                "answer_idx": "B",
                "meta_info": "synthetic",
            }
            f.write(json.dumps(rec) + "\n")


def measure(base_url: str, data: Path, transport: str, concurrency: int) -> tuple[int, float, float, float | None]:
    from grandrounds.runner import RunConfig, run
    from grandrounds.store import Store

    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "bench.db")
        cfg = RunConfig(
            "medqa",
            f"openai/bench-{transport}",
            data=data,
            base_url=base_url,
            concurrency=concurrency,
            provider_options={"transport": transport},
        )
        t0, c0 = time.perf_counter(), time.process_time()
        out = asyncio.run(run(store, cfg))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        store.close()
    return out.answer_stats.made, wall, cpu, out.result.score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--transport", choices=["sdk", "lean", "both"], default="both")
    args = ap.parse_args()

    q: mp.Queue[str] = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, q), daemon=True)
    proc.start()
    base_url = q.get(timeout=30)
    try:
        with tempfile.TemporaryDirectory() as d:
            data = Path(d) / "questions.jsonl"
            write_questions(data, args.calls)
            ideal = args.calls * args.latency / args.concurrency
            print(f"latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}, {args.calls} questions")
            print(f"{'transport':<10}{'calls':>7}{'wall s':>9}{'ideal s':>9}{'ratio':>7}{'cpu ms/call':>13}{'server ms/call':>16}{'accuracy':>10}")
            for transport in (["sdk", "lean"] if args.transport == "both" else [args.transport]):
                s0 = proc_cpu(proc.pid)
                calls, wall, cpu, score = measure(base_url, data, transport, args.concurrency)
                server = proc_cpu(proc.pid) - s0
                print(
                    f"{transport:<10}{calls:>7}{wall:>9.2f}{ideal:>9.2f}{wall / ideal:>7.2f}"
                    f"{cpu / max(calls, 1) * 1000:>13.3f}{server / max(calls, 1) * 1000:>16.3f}"
                    f"{score if score is not None else float('nan'):>10.3f}"
                )
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

"""Peak memory of ``grandrounds run medqa --limit 10`` on a MedQA-format file of a million records.

Writes the file (about 230 MB, into a temporary folder), starts bench/throughput.py's fixed-latency
server in its own process, runs the real CLI in a subprocess and prints its wall time and peak
resident memory; then the same for the whole file cut to 10 records, for comparison.

    python bench/loader_memory.py                 # 1,000,000 records
    python bench/loader_memory.py --records 200000

Target (issue 11): under 200 MB with a million records.
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

import throughput  # noqa: E402  (the fixed-latency server)


def write(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {
                "question": f"A {30 + i % 50}-year-old presents with chest pain after exertion (case {i}). Which is the next step?",
                "options": {"A": "Discharge", "B": "ECG", "C": "Antibiotics", "D": "Reassure"},
                "answer_idx": "B", "answer": "ECG", "meta_info": "step2&3",
            }
            f.write(json.dumps(rec) + "\n")


def run_cli(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "grandrounds", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.read().decode("utf-8", "replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"grandrounds failed:\n{out[-3000:]}")
    return time.perf_counter() - t0, usage.ru_maxrss / 1024, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=throughput.serve, args=(0.001, "fixed", q), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    env = dict(os.environ, OPENAI_API_KEY="bench", GRANDROUNDS_CACHE=tempfile.mkdtemp(prefix="gr-bench-cache-"))
    try:
        with tempfile.TemporaryDirectory() as d:
            big, small = Path(d) / "big.jsonl", Path(d) / "small.jsonl"
            write(big, args.records)
            write(small, 10)
            print(f"{args.records:,} records, {big.stat().st_size / 1e6:.0f} MB")
            print(f"{'file':<12}{'wall s':>8}{'peak MB':>9}")
            for label, path in (("1M --limit 10" if args.records == 1_000_000 else f"{args.records:,} --limit 10", big), ("10 records", small)):
                wall, peak, out = run_cli(["run", "medqa", "--data", str(path), "--limit", "10", "--store", str(Path(d) / f"{path.stem}.db"),
                                           "--model", "openai/bench", "--base-url", base_url, "--protocol", "grandrounds"], env)
                assert "n 10" in out, out
                print(f"{label:<12}{wall:>8.2f}{peak:>9.1f}")
    finally:
        server.kill()


if __name__ == "__main__":
    main()

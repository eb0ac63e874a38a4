"""The default local model's multiple-choice rate on MedQA (items per second) on this machine.

Runs the first N MedQA questions through the real runner with ``llamacpp/smollm2`` in the
log-probability answer modes (``letter``: next-token log-prob of each option letter; ``loglik``:
log-likelihood of each option's text) and, for comparison, ``generate``. Each mode starts from an
empty store, so every item is computed, not read from the cache.

    python bench/local_mcq.py --n 100 --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import GenParams
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[2]
        / "shared/data/medqa/phrases_no_exclude_test.jsonl",
    )
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default="letter,loglik,generate")
    ap.add_argument("--max-tokens", type=int, default=64, help="generation budget in generate mode")
    args = ap.parse_args()
    print(f"MedQA first {args.n} questions, llamacpp/smollm2, {args.threads} thread(s)")
    print(f"{'mode':<10}{'items':>7}{'wall s':>9}{'items/s':>9}{'accuracy':>10}{'unextracted':>13}")
    for mode in args.modes.split(","):
        with tempfile.TemporaryDirectory() as d:
            cfg = RunConfig(
                benchmark="medqa",
                model="llamacpp/smollm2",
                data=args.data,
                limit=args.n,
                options=RunOptions(answer_mode=mode),
                gen=GenParams(max_tokens=args.max_tokens),
                provider_options={"n_threads": args.threads},
            )
            t0 = time.perf_counter()
            out = asyncio.run(run(Store(Path(d) / "s.db"), cfg))
            wall = time.perf_counter() - t0
        r = out.result
        print(
            f"{mode:<10}{r.n:>7}{wall:>9.1f}{r.n / wall:>9.2f}{r.score:>10.3f}{r.extra.get('n_unextracted', 0):>13}"
        )


if __name__ == "__main__":
    main()

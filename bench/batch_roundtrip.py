"""A whole HealthBench run through batch APIs against the loopback batch server, with its figures.

Answers go through OpenAI's Batch API (``openai/cand``), judge calls (one per rubric criterion)
through Anthropic's Message Batches (``anthropic/judge``), both served by
``grandrounds.testing.batch.BatchServer`` in this process, each batch in progress for
``--polls`` looks. Prints, for the run and for the same command run again: answer and judge
calls, the batches each endpoint received and their sizes, polls, uploads and downloads, wall
time and peak RSS. The wall time is dominated by the poll interval (a real batch takes minutes to
hours); the figures that matter are the batch counts and sizes and the calls per batch.

    python bench/batch_roundtrip.py --limit 100 --data ../shared/data/healthbench/healthbench_500.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from grandrounds.benchmarks.base import RunOptions  # noqa: E402
from grandrounds.run.batches.settings import BatchSettings  # noqa: E402
from grandrounds.run.config import JudgeConfig, RunConfig  # noqa: E402
from grandrounds.run.runner import run  # noqa: E402
from grandrounds.store import Store  # noqa: E402
from grandrounds.testing import last_user_text  # noqa: E402
from grandrounds.testing.batch import BatchServer, Plan  # noqa: E402


def judge_rule(body: dict) -> str:
    met = len(last_user_text(body)) % 2 == 0
    return json.dumps({"explanation": "loopback", "criteria_met": met})


def once(
    store_path: Path,
    data: Path,
    limit: int,
    cand: BatchServer,
    judge: BatchServer,
    settings: BatchSettings,
) -> dict:
    cfg = RunConfig(
        benchmark="healthbench",
        model="openai/cand",
        data=data,
        base_url=cand.openai_url,
        limit=limit,
        options=RunOptions(protocol="reference"),
        judges=(JudgeConfig(spec="anthropic/judge", base_url=judge.anthropic_url),),
        batch=settings,
    )
    before = (
        len(cand.stats.submissions),
        len(judge.stats.submissions),
        cand.stats.polls + judge.stats.polls,
    )
    t0 = time.perf_counter()
    with Store(store_path) as st:
        out = asyncio.run(run(st, cfg))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "answers": out.answer_stats.made,
        "answers_cached": out.answer_stats.cached,
        "judge_calls": sum(s.made for s in out.judge_stats),
        "judge_cached": sum(s.cached for s in out.judge_stats),
        "failed": out.answer_stats.failed + sum(s.failed for s in out.judge_stats),
        "answer_batches": cand.batch_sizes()[before[0] :],
        "judge_batches": judge.batch_sizes()[before[1] :],
        "polls": cand.stats.polls + judge.stats.polls - before[2],
        "score": out.result.score,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "healthbench" / "healthbench_500.jsonl",
    )
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--polls", type=int, default=3, help="looks each batch stays in progress")
    ap.add_argument("--poll-interval", type=float, default=0.05)
    ap.add_argument("--window", type=float, default=0.2)
    args = ap.parse_args()
    settings = BatchSettings(
        answers=True, judges=True, window=args.window, poll_interval=args.poll_interval
    )
    plan = lambda n, ids: Plan(polls=args.polls)  # noqa: E731
    with (
        tempfile.TemporaryDirectory() as tmp,
        BatchServer(lambda b: "Rest, fluids, and see a doctor if it worsens.", plan) as cand,
        BatchServer(judge_rule, plan) as judge,
    ):
        db = Path(tmp) / "s.db"
        first = once(db, args.data, args.limit, cand, judge, settings)
        again = once(db, args.data, args.limit, cand, judge, settings)
        uploads, downloads = (
            cand.stats.uploads + judge.stats.uploads,
            cand.stats.downloads + judge.stats.downloads,
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"HealthBench {args.limit} conversations, --batch both, batches in progress for {args.polls} polls of {args.poll_interval:g} s, "
        f"window {args.window:g} s"
    )
    print(
        f"{'run':<6} {'wall s':>7} {'answers':>8} {'judge calls':>12} {'cached':>7} {'failed':>7} {'polls':>6}  batches (requests each)"
    )
    for name, r in (("first", first), ("again", again)):
        sizes = f"answers {r['answer_batches']}, judges {r['judge_batches']}"
        print(
            f"{name:<6} {r['wall_s']:>7.2f} {r['answers']:>8} {r['judge_calls']:>12} {r['answers_cached'] + r['judge_cached']:>7} "
            f"{r['failed']:>7} {r['polls']:>6}  {sizes}"
        )
    calls = first["answers"] + first["judge_calls"]
    n_batches = len(first["answer_batches"]) + len(first["judge_batches"])
    print(
        f"calls per batch {calls / max(1, n_batches):.0f}; uploads {uploads}, result downloads {downloads}; "
        f"score {first['score']:.4f} (again {again['score']:.4f}); peak RSS {rss:.0f} MB (server in the same process)"
    )


if __name__ == "__main__":
    main()

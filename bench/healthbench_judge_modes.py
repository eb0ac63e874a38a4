"""Batched versus per-criterion HealthBench judging on the same answers with one judge.

The answers are the physician-written ideal completions shipped in the HealthBench file (served
by a loopback OpenAI-compatible server, so they go through the real runner like any model's).
Both judge modes grade those same answers; the script prints the judge's prompt and completion
tokens for each mode and the share of criteria, known in both, on which their verdicts agree.

    python bench/healthbench_judge_modes.py --data ../shared/data/healthbench/healthbench_500.jsonl \
        --n 100 --judge llamacpp/smollm2
    python bench/healthbench_judge_modes.py --judge openai/gpt-4.1 --judge-base-url https://...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.records import GenParams
from grandrounds.graders.judging import compare_modes
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer


def _conv_key(messages: list[dict]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in messages], ensure_ascii=False)


def ideal_rows(data: Path, n: int) -> tuple[Path, dict[str, str]]:
    """The first ``n`` conversations that have an ideal completion, as a file in the original format."""
    rows, answers = [], {}
    for line in data.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        ideal = (rec.get("ideal_completions_data") or {}).get("ideal_completion")
        if ideal:
            rows.append(line)
            answers[_conv_key(rec["prompt"])] = ideal
        if len(rows) == n:
            break
    out = Path(tempfile.mkdtemp()) / "healthbench_ideal.jsonl"
    out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=Path(__file__).resolve().parents[2]
        / "shared/data/healthbench/healthbench_500.jsonl",
    )
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--judge", default="llamacpp/smollm2")
    ap.add_argument("--judge-base-url", default="")
    ap.add_argument("--judge-max-tokens", type=int, default=512)
    ap.add_argument(
        "--judge-json",
        action="store_true",
        help="ask the judge for a JSON object (grammar on llama.cpp)",
    )
    ap.add_argument(
        "--store",
        type=Path,
        default=None,
        help="keep the store (resumable) instead of a temporary one",
    )
    args = ap.parse_args()

    data, answers = ideal_rows(args.data, args.n)

    def answer(body: dict) -> str:
        return answers[_conv_key(body["messages"])]

    store = Store(args.store or Path(tempfile.mkdtemp()) / "modes.db")
    judge = JudgeConfig(
        spec=args.judge,
        base_url=args.judge_base_url,
        params=GenParams(
            temperature=0.0, max_tokens=args.judge_max_tokens, seed=0, json_object=args.judge_json
        ),
    )
    outcomes = {}
    with LoopbackServer(answer) as srv:
        for mode in ("per-criterion", "batched"):
            cfg = RunConfig(
                benchmark="healthbench",
                model="openai/ideal-completions",
                data=data,
                base_url=srv.base_url,
                options=RunOptions(judge_mode=mode, max_reask=1),
                judges=(judge,),
            )
            t0 = time.perf_counter()
            out = asyncio.run(run(store, cfg))
            outcomes[mode] = (out, time.perf_counter() - t0)

    n_crit = sum(len(s.rubric) for s in outcomes["per-criterion"][0].samples)
    print(
        f"{len(outcomes['per-criterion'][0].samples)} answers, {n_crit} criteria, judge {args.judge}"
    )
    print(
        f"{'mode':<15}{'judge calls':>12}{'prompt tok':>12}{'compl tok':>11}{'coverage':>10}{'score':>8}{'wall s':>9}"
    )
    for mode, (out, wall) in outcomes.items():
        s = out.judge_stats[0]
        cov = out.result.extra.get("coverage")
        score = out.result.score
        print(
            f"{mode:<15}{s.made + s.cached:>12}{s.prompt_tokens:>12}{s.completion_tokens:>11}"
            f"{cov if cov is not None else float('nan'):>10.3f}{score if score is not None else float('nan'):>8.3f}{wall:>9.1f}"
        )
    cmp = compare_modes(outcomes["per-criterion"][0].grades, outcomes["batched"][0].grades)
    agree = "n/a" if cmp.agreement is None else f"{cmp.agreement:.3f}"
    print(
        f"verdict agreement on criteria known in both: {agree} ({cmp.n_agree}/{cmp.n_compared}); "
        f"known only per-criterion {cmp.only_a_known}, only batched {cmp.only_b_known}"
    )
    print(
        "note: token figures count calls made in this process; calls answered from a kept store count 0"
    )


if __name__ == "__main__":
    main()

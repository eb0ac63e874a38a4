"""Re-judge stored answers with another judge or template, without generating again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Sequence

from grandrounds.benchmarks.base import RunOptions
from grandrounds.errors import ConfigError
from grandrounds.executor import Executor, RetryPolicy
from grandrounds.graders.base import GradeContext, unscored
from grandrounds.hashing import content_hash
from grandrounds.records import Grade, Result, Sample
from grandrounds.runner import JudgeConfig, Progress, RunJudge, build_benchmark, grader_fingerprint, make_provider, make_result
from grandrounds.store import RunRecord, Store


@dataclass
class RegradeOutcome:
    result: Result
    samples: list[Sample]
    grades: list[Grade]
    judge_stats: list[Any]


def last_grading(store: Store, run: RunRecord) -> dict[str, Any]:
    """The fingerprint of the newest grading of ``run`` (empty if never graded)."""
    row = store.db.execute(
        "SELECT grader_fp FROM results WHERE run_id = ? ORDER BY created_at DESC LIMIT 1", (run.id,)
    ).fetchone()
    return (store.grader_spec(row[0]) or {}) if row else {}


def options_of(run: RunRecord, **override: Any) -> RunOptions:
    o = run.options
    base = RunOptions(
        answer_mode=o.get("answer_mode", "generate"),
        shuffle_options=bool(o.get("shuffle_options", False)),
        seed=int(o.get("seed", 0)),
        extra=o.get("extra", {}) or {},
    )
    return replace(base, **override)


async def regrade(
    store: Store,
    run: RunRecord,
    judges: Sequence[JudgeConfig],
    options: RunOptions,
    only_unknown: bool = False,
    previous_fp: str | None = None,
    retry: RetryPolicy = RetryPolicy(),
    concurrency: int | None = None,
    progress: Progress | None = None,
) -> RegradeOutcome:
    """Grade every stored answer of ``run`` again.

    With ``only_unknown`` the grades stored under ``previous_fp`` (default: the same grader
    fingerprint) are the starting point: known verdicts are kept, only unknown ones re-asked.
    """
    bench = build_benchmark(run.benchmark, dict(run.options.get("bench_params") or {}))
    samples = store.samples(run.benchmark, run.dataset_sha256)
    answers = store.answers(run.id)
    samples = [s for s in samples if s.id in answers]
    if not samples:
        raise ConfigError(f"run {run.id} has no stored answers to grade")
    execs = [Executor(store, make_provider(j.spec, j.base_url), concurrency, retry, options.seed, progress) for j in judges]
    run_judges = tuple(RunJudge(e, j) for e, j in zip(execs, judges))
    grader = bench.grader(options)
    fp = grader_fingerprint(bench, grader, options, judges, run.dataset_sha256)
    fp_key = content_hash(fp)
    store.put_grader(fp_key, fp)
    previous = store.grades(run.id, previous_fp or fp_key) if only_unknown else {}
    if only_unknown and not previous:
        raise ConfigError(
            f"run {run.id} has no grades by this judge and grading setting to complete; "
            "--only-unknown needs the same judge(s), judge mode and runs as the grading it completes"
        )
    grades: dict[str, Grade] = {}
    if progress:
        progress.start(len(samples), f"regrade {run.benchmark} · {run.model}")

    async def one(sample: Any) -> None:
        _, resp = answers[sample.id]
        if resp is None or not resp.ok:
            g = unscored(sample, f"answer failed: {resp.error if resp else 'never answered'}")
        else:
            prev = previous.get(sample.id)
            if only_unknown and prev is not None and not _has_unknown(prev):
                g = prev
            else:
                ctx = GradeContext(judges=run_judges, previous=prev, only_unknown=only_unknown, max_reask=options.max_reask)
                g = await grader.grade(sample, resp, ctx)
        store.put_grade(run.id, fp_key, g)
        grades[sample.id] = g
        if progress:
            progress.advance(g)

    try:
        await asyncio.gather(*(one(s) for s in samples))
    finally:
        for e in execs:
            await e.provider.aclose()
    ordered = [grades[s.id] for s in samples]
    result = make_result(bench, options, samples, ordered, run, fp, [j.spec for j in judges])
    store.put_result(run.id, fp_key, result)
    return RegradeOutcome(result, samples, ordered, [e.stats for e in execs])


def _has_unknown(g: Grade) -> bool:
    return g.value is None or any(v.status == "unknown" for v in g.verdicts)

"""The runner: one event loop that answers, grades and aggregates, storing every stage.

Each sample is one task: ask (through the cached executor), grade, store the grade. Turns
of a multi-turn group run in order inside one task, each with the model's own earlier
answers. Judges are injected into graders as callables over their own executors, so judge
calls are cached and retried like answers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, Sequence

import grandrounds
from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.errors import ConfigError
from grandrounds.executor import Executor, RetryPolicy
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.hashing import content_hash, to_jsonable
from grandrounds.providers.base import ModelSpec, Provider
from grandrounds.records import GenParams, Grade, Message, Request, Response, Result, Sample
from grandrounds.registry import BENCHMARKS, PROVIDERS
from grandrounds.store import RunRecord, Store


class Progress(Protocol):
    def start(self, total: int, label: str) -> None: ...
    def advance(self, grade: Grade) -> None: ...
    def on_call(self, response: Response, *, retries: int) -> None: ...


@dataclass(frozen=True)
class JudgeConfig:
    spec: str
    base_url: str = ""
    params: GenParams = GenParams(temperature=0.0, max_tokens=2048, seed=0)


@dataclass
class RunConfig:
    """Everything a run needs; the parts that change outputs go into run id and fingerprint."""

    benchmark: str
    model: str
    bench_params: dict[str, Any] = field(default_factory=dict)
    data: Path | None = None
    base_url: str = ""
    options: RunOptions = RunOptions()
    gen: GenParams = GenParams()
    judges: tuple[JudgeConfig, ...] = ()
    concurrency: int | None = None
    judge_concurrency: int | None = None
    limit: int | None = None
    retry: RetryPolicy = RetryPolicy()
    provider_options: dict[str, Any] = field(default_factory=dict)


def make_provider(spec_text: str, base_url: str = "", **options: Any) -> Provider:
    if "@" in spec_text:  # provider/model@http://host/v1
        spec_text, base_url = spec_text.split("@", 1)
    spec = ModelSpec.parse(spec_text, base_url)
    return PROVIDERS.get(spec.provider)(spec, **options)


class RunJudge:
    """A judge handed to graders: messages in, cached judge Response out."""

    def __init__(self, executor: Executor, config: JudgeConfig) -> None:
        self.executor = executor
        self.config = config
        self.name = config.spec

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response:
        p = self.executor.provider
        req = Request(
            provider=p.spec.provider,
            model=p.spec.model,
            messages=tuple(messages),
            params=self.config.params,
            purpose="judge",
            base_url=p.request_base_url(),
            attempt=attempt,
        )
        return await self.executor(req)


def grader_fingerprint(bench: Benchmark, grader: Grader, options: RunOptions, judges: Sequence[JudgeConfig], dataset: str) -> dict[str, Any]:
    """What decides a grade besides the answer: shown on every result, hashed into its key."""
    return {
        "grader": str(grader.spec()),
        "templates": grader.template_hashes(),
        "judges": [{"model": j.spec, "params": to_jsonable(j.params)} for j in judges],
        "judge_mode": options.judge_mode,
        "judge_runs": options.judge_runs,
        "scoring": to_jsonable(options.extra),
        "benchmark": str(bench.spec()),
        "dataset_sha256": dataset,
    }


@dataclass(repr=False)
class RunOutcome:
    run: RunRecord
    samples: list[Sample]
    grades: list[Grade]
    responses: dict[str, Response]
    result: Result
    answer_stats: Any
    judge_stats: list[Any]

    def __repr__(self) -> str:
        # Short on purpose: asyncio.run reprs its main task (and so this result) when it restores
        # the SIGINT handler on Python 3.11, and a full repr of thousands of samples costs ~0.1 s.
        return f"RunOutcome(run={self.run.id!r}, samples={len(self.samples)}, score={self.result.score!r})"


def build_benchmark(name: str, params: dict[str, Any]) -> Benchmark:
    return BENCHMARKS.get(name)(**params)


async def run(store: Store, cfg: RunConfig, progress: Progress | None = None) -> RunOutcome:
    """Answer, grade and aggregate ``cfg.benchmark`` with ``cfg.model``; resumable from the store."""
    from grandrounds.datasource import resolve

    bench = build_benchmark(cfg.benchmark, cfg.bench_params)
    if cfg.options.answer_mode not in bench.answer_modes:
        raise ConfigError(f"{bench.name} supports answer modes {', '.join(bench.answer_modes)}, not {cfg.options.answer_mode!r}")
    if bench.needs_judge and not cfg.judges:
        raise ConfigError(f"{bench.name} is graded by an LLM judge: pass --judge PROVIDER/MODEL")
    root = resolve(bench, cfg.data)
    samples = bench.load(root)  # raises DataError before the store is touched
    if cfg.limit is not None:
        samples = samples[: cfg.limit]
    dataset = bench.dataset_hash(root)
    provider = make_provider(cfg.model, cfg.base_url, **cfg.provider_options)
    run_rec = _run_record(bench, cfg, provider, dataset, root)
    run_rec = store.ensure_run(run_rec)
    # Each sample is stored with its answer (below), not all before the first call: on a large
    # benchmark that is a noticeable pause before anything is asked.
    stored_samples = store.sample_ids(bench.name, dataset)
    position = {s.id: i for i, s in enumerate(samples)}
    answers = Executor(store, provider, cfg.concurrency, cfg.retry, cfg.options.seed, progress)
    judge_execs = [
        Executor(store, make_provider(j.spec, j.base_url), cfg.judge_concurrency, cfg.retry, cfg.options.seed, progress)
        for j in cfg.judges
    ]
    judges = tuple(RunJudge(e, j) for e, j in zip(judge_execs, cfg.judges))
    grader = bench.grader(cfg.options)
    fp = grader_fingerprint(bench, grader, cfg.options, cfg.judges, dataset)
    fp_key = content_hash(fp)
    store.put_grader(fp_key, fp)
    stored_grades = store.grades(run_rec.id, fp_key)
    ctx = GradeContext(judges=judges, max_reask=cfg.options.max_reask)
    responses: dict[str, Response] = {}
    grades: dict[str, Grade] = {}
    if progress:
        progress.start(len(samples), f"{bench.name} · {cfg.model}")

    async def grade_one(sample: Sample, resp: Response, link: tuple[str, Any] | None) -> None:
        g = stored_grades.get(sample.id)
        fresh = False
        if not resp.ok:
            g, fresh = unscored(sample, f"answer failed: {resp.error}"), True
        elif g is None or _stale(g):
            try:
                g = await grader.grade(sample, resp, ctx)
            except Exception as e:  # a grader bug on one answer is counted and shown, not fatal to the run
                g = unscored(sample, f"grading failed: {type(e).__name__}: {e}")
            fresh = True
        with store.batch():  # the sample, the answer's link and its grade land together
            if sample.id not in stored_samples:
                store.put_sample(bench.name, dataset, position[sample.id], sample)
            if link is not None:
                store.put_answer(run_rec.id, sample.id, link[0], link[1])
            if fresh:
                store.put_grade(run_rec.id, fp_key, g)
        grades[sample.id] = g
        if progress:
            progress.advance(g)

    async def do_group(group: list[Sample]) -> None:
        history: list[tuple[Sample, str]] = []
        failed: str | None = None
        for sample in group:
            link = None
            if failed is not None:
                resp = Response(key="", error=f"not asked: earlier turn failed ({failed})")
            else:
                prompt = bench.prompt(sample, cfg.options, history)
                req = Request(
                    provider=provider.spec.provider,
                    model=provider.spec.model,
                    messages=prompt.messages,
                    params=cfg.gen,
                    purpose="answer",
                    kind=prompt.kind,
                    continuations=prompt.continuations,
                    base_url=provider.request_base_url(),
                )
                resp = await answers(req)
                link = (req.key(), prompt)
                if resp.ok:
                    history.append((sample, resp.text or ""))
                else:
                    failed = resp.error
            responses[sample.id] = resp
            await grade_one(sample, resp, link)

    pending = iter(group_samples(samples))

    async def worker() -> None:
        # A bounded pool of workers, not one task per sample: prompts are built just before
        # they are sent, the first requests go out at once, and memory stays flat.
        for group in pending:
            await do_group(group)

    async def flusher() -> None:
        while True:  # so that buffered results land even while every worker waits on a slow call
            await asyncio.sleep(0.05)
            store.flush_if_due()

    tick = asyncio.create_task(flusher())
    try:
        with store.write_behind():
            await asyncio.gather(*(worker() for _ in range(max(4, 2 * answers.concurrency))))
    finally:
        tick.cancel()
        await provider.aclose()
        for e in judge_execs:
            await e.provider.aclose()
    ordered = [grades[s.id] for s in samples]
    result = make_result(bench, cfg.options, samples, ordered, run_rec, fp, judges=[j.spec for j in cfg.judges])
    store.put_result(run_rec.id, fp_key, result)
    return RunOutcome(run_rec, samples, ordered, responses, result, answers.stats, [e.stats for e in judge_execs])


def _stale(grade: Grade) -> bool:
    """A stored grade made from a failed answer, or by a grader that crashed, is redone."""
    return grade.value is None and grade.error is not None and grade.error.startswith(("answer failed", "grading failed"))


def group_samples(samples: Sequence[Sample]) -> list[list[Sample]]:
    """Single samples alone; turns of one group together, ordered by turn."""
    groups: dict[str, list[Sample]] = {}
    out: list[list[Sample]] = []
    for s in samples:
        if s.group is None:
            out.append([s])
        elif s.group in groups:
            groups[s.group].append(s)
        else:
            groups[s.group] = [s]
            out.append(groups[s.group])
    for g in out:
        g.sort(key=lambda s: s.turn)
    return out


def _run_record(bench: Benchmark, cfg: RunConfig, provider: Provider, dataset: str, root: Path) -> RunRecord:
    options = to_jsonable(replace(cfg.options, judge_mode="", judge_runs=None, max_reask=0))
    ident = {
        "benchmark": str(bench.spec()),
        "model": str(provider.spec),
        "base_url": provider.request_base_url(),
        "options": options,
        "gen": to_jsonable(cfg.gen),
        "dataset": dataset,
        "limit": cfg.limit,
    }
    return RunRecord(
        id=content_hash(ident)[:16],
        benchmark=bench.name,
        benchmark_spec=str(bench.spec()),
        model=str(provider.spec),
        options=options | {"bench_params": cfg.bench_params, "limit": cfg.limit},
        dataset_sha256=dataset,
        package_version=grandrounds.__version__,
        gen_params=to_jsonable(cfg.gen),
        data_source=str(root),
    )


def make_result(
    bench: Benchmark,
    options: RunOptions,
    samples: Sequence[Sample],
    grades: Sequence[Grade],
    run_rec: RunRecord,
    grader_fp: dict[str, Any],
    judges: Sequence[str],
) -> Result:
    agg = bench.aggregate(samples, grades, options)
    fingerprint = dict(grader_fp) | {
        "model": run_rec.model,
        "gen_params": run_rec.gen_params,
        "answer_mode": options.answer_mode,
        "shuffle_options": options.shuffle_options,
        "seed": options.seed,
        "package_version": run_rec.package_version,
        "run_id": run_rec.id,
    }
    return Result(
        benchmark=bench.name,
        model=run_rec.model,
        judge=",".join(judges) or None,
        metric=agg.metric,
        score=agg.score,
        ci95=agg.ci95,
        n=agg.n,
        n_unscored=agg.n_unscored,
        breakdown=agg.breakdown,
        fingerprint=fingerprint,
        extra=agg.extra,
    )

"""The runner: one event loop that answers, grades and aggregates, storing every stage.

``run`` and ``regrade`` share one pipeline: a bounded pool of workers over the samples (turns of
a multi-turn group in order inside one worker), a :class:`Grading` stage that grades each answer
and stores the grade with write-behind commits, and one aggregation. They differ only in where
answers come from: ``run`` asks the model through the cached executor, ``regrade`` reads the
stored answers. Judges are injected into graders as callables over their own executors, so judge
calls are cached and retried like answers.

Here: :func:`run` and what a worker of its pool does with one group (:class:`AskGroup`). Beside it:
the run's parts resolved before the first call (:mod:`grandrounds.run.prepare`), the stages ``run``
and ``regrade`` share (:mod:`grandrounds.run.pipeline`), the aggregate and its fingerprint
(:mod:`grandrounds.run.aggregate`) and what a run gives back (:mod:`grandrounds.run.outcome`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import grandrounds
from grandrounds.benchmarks.agents import AgentBenchmark
from grandrounds.benchmarks.base import RunOptions
from grandrounds.core.hashing import canonical_json, content_hash
from grandrounds.core.records import (
    GenParams,
    Message,
    Request,
    Response,
    Result,
    Sample,
    needs_redo,
    result_from_json,
)
from grandrounds.graders.base import GradeContext
from grandrounds.providers.base import Provider
from grandrounds.run.aggregate import Collected, make_result, result_fingerprint
from grandrounds.run.batches.executor import executor_for, pool_width
from grandrounds.run.config import RunConfig, check_run, make_provider
from grandrounds.run.episodes import EpisodeRunner
from grandrounds.run.executor import DEFER_HELD, Executor
from grandrounds.run.limits import EndpointLimits
from grandrounds.run.outcome import RunOutcome
from grandrounds.run.pipeline import Caller, Grading, Progress, RunJudge, make_judges, run_pool
from grandrounds.run.prepare import Setup, prepare
from grandrounds.store import Store


async def run(
    store: Store,
    cfg: RunConfig,
    progress: Progress | None = None,
    endpoints: EndpointLimits | None = None,
) -> RunOutcome:
    """Answer, grade and aggregate ``cfg.benchmark`` with ``cfg.model``; resumable from the store.

    ``endpoints``: connection and rate limits shared with other work of one command (the
    robustness probes and their attacker); by default the run's own."""
    cfg = check_run(
        cfg
    )  # --param, --scoring, run and model options: declared, typed, used, before anything is loaded
    s = prepare(store, cfg)
    await check_logprobs(s, cfg.options)
    fp_key = content_hash(s.fingerprint)
    store.put_grader(fp_key, s.fingerprint)
    # Each sample is stored with its answer, not all before the first call: on a large benchmark
    # that is a noticeable pause before anything is asked.
    stored_samples = store.sample_ids(s.bench.name, s.dataset)
    endpoints = endpoints or EndpointLimits()
    answers, judge_execs, judges = _executors(store, cfg, s.provider, progress, endpoints)
    ctx = GradeContext(judges=judges, max_reask=cfg.options.max_reask, options=cfg.options)
    episodes = episode_runner(store, s, cfg, answers, progress, endpoints)
    sim_stats = None
    if episodes is not None and episodes.simulator is not None:
        judge_execs = [*judge_execs, episodes.simulator]  # closed with the judges
        sim_stats = (
            str(episodes.simulator.provider.spec),
            episodes.simulator.stats,
        )  # its own line in the call summary
    guard = None
    if cfg.guard is not None:  # its calls are judge calls: cached, counted, closed with the judges
        guard_execs, (guard,) = make_judges(
            store,
            (cfg.guard,),
            cfg.judge_concurrency,
            cfg.retry,
            cfg.options.seed,
            progress,
            endpoints,
        )
        judge_execs = [*judge_execs, *guard_execs]
    if episodes is not None:
        episodes.guard = guard
    grading = Grading(store, s.run.id, fp_key, s.grader, progress, cfg.flagged, guard)
    collected = Collected(
        store,
        s.run.id,
        s.bench,
        cfg.options,
        [j.spec for j in (*cfg.judges, *([cfg.guard] if cfg.guard else []))],
    )
    groups, n_asked = s.groups, s.n
    if cfg.shard is not None:  # a part of the run: its groups only, recorded, never settled
        from grandrounds.run.shards import shard_groups

        groups, n_asked = shard_groups(
            s.groups,
            s.dataset,
            cfg.shard,
            len(cfg.judges),
            int(s.bench.params.get("epochs", 1) or 1),
        )
        shard_row(store, s, fp_key, cfg.shard, n_asked, 0, "running")
    if progress:
        progress.start(n_asked, f"{s.bench.name} · {cfg.model}")
    if cfg.shard is None and (done := settled_result(store, s, cfg.options, fp_key)) is not None:
        # This very command finished before and nothing it graded has changed since: its result
        # is read back instead of every grade (the answers all come from the store, no judge call).
        result, tally = done
        answers.stats.cached += s.n
        if progress:
            progress.stored(s.n, tally["n"] - tally["status"].get("scored", 0))
        await _close(s.provider, judge_execs)
        return RunOutcome(
            s,
            store,
            fp_key,
            result,
            answers.stats,
            [e.stats for e in judge_execs],
            [j.spec for j in cfg.judges],
            tally["status"],
            collected.usage(s.run.id, fp_key),
            sim_stats,
        )

    # The samples this grading graded before (one query, not one per sample: on a first run none).
    graded = set(store.grade_values(s.run.id, fp_key))
    ask = AskGroup(
        store=store,
        s=s,
        cfg=cfg,
        fp_key=fp_key,
        answers=answers,
        ctx=ctx,
        grading=grading,
        collected=collected,
        graded=graded,
        stored_samples=stored_samples,
        episodes=episodes,
    )
    try:
        await run_pool(store, groups(), ask, pool_width(answers, judge_execs))
    finally:
        await _close(s.provider, judge_execs)
    result = make_result(
        s.bench, cfg.options, collected, s.run, s.fingerprint, [j.spec for j in cfg.judges]
    )
    if cfg.shard is not None:  # a part is not a result: the merged store's run settles the whole
        tally = collected.tally()
        shard_row(
            store,
            s,
            fp_key,
            cfg.shard,
            n_asked,
            tally["n"],
            "done" if not tally["redo"] else "running",
        )
        result = replace(
            result,
            extra={**result.extra, "shard": str(cfg.shard), "n_run": s.n, "n_shard": n_asked},
        )
    else:
        store.put_result(s.run.id, fp_key, result)
        store.settle(s.run.id, fp_key, collected.tally() | {"version": grandrounds.__version__})
    usage = collected.usage(s.run.id, fp_key)
    return RunOutcome(
        s,
        store,
        fp_key,
        result,
        answers.stats,
        [e.stats for e in judge_execs],
        [j.spec for j in cfg.judges],
        collected.status,
        usage,
        sim_stats,
    )


def shard_row(
    store: Store, s: Setup, fp_key: str, shard: Any, n: int, graded: int, state: str
) -> None:
    """Record this worker's shard of the run (``shards``): its samples, how many are graded, its state."""
    store.put_shard(
        s.run.id,
        fp_key,
        shard.index,
        shard.count,
        shard.assign,
        n,
        graded,
        state,
        grandrounds.__version__,
    )


async def check_logprobs(s: Setup, options: RunOptions) -> None:
    """Before a log-probability run on a server, its log-probabilities are probed
    (:mod:`grandrounds.providers.logprob_probe`); a server that fails is refused before any answer."""
    kind = s.bench.request_kind(options)
    if kind not in ("loglikelihood", "next_token"):
        return
    try:
        await s.provider.check_logprobs(kind)
    except BaseException:
        await _close(s.provider, [])
        raise


def episode_runner(
    store: Store,
    s: Setup,
    cfg: RunConfig,
    answers: Executor,
    progress: Progress | None,
    endpoints: EndpointLimits,
) -> EpisodeRunner | None:
    """The episode runner of an agent benchmark (with its simulator's executor), None for others."""
    if not s.bench.episodic:
        return None
    simulator = None
    if cfg.simulator and s.bench.needs_simulator:
        provider = make_provider(cfg.simulator, **cfg.simulator_options)
        simulator = executor_for(None, "answers")(
            store, provider, cfg.concurrency, cfg.retry, cfg.options.seed, progress, endpoints
        )
    bench = s.bench
    assert isinstance(bench, AgentBenchmark)  # the episodic benchmarks
    gen = cfg.gen or bench.answer_params(cfg.options)
    return EpisodeRunner(
        store=store,
        run_id=s.run.id,
        bench=bench,
        provider=s.provider,
        answers=answers,
        gen=gen,
        simulator=simulator,
        flagged=cfg.flagged,
    )


def _executors(
    store: Store,
    cfg: RunConfig,
    provider: Provider,
    progress: Progress | None,
    endpoints: EndpointLimits,
) -> tuple[Executor, list[Executor], tuple[RunJudge, ...]]:
    """The run's executors under ``endpoints``: the answers', each judge's (with the judge callables
    graders are handed), and the request and token rates of their models set there."""
    answers = executor_for(cfg.batch, "answers")(
        store, provider, cfg.concurrency, cfg.retry, cfg.options.seed, progress, endpoints
    )
    judge_execs, judges = make_judges(
        store,
        cfg.judges,
        cfg.judge_concurrency,
        cfg.retry,
        cfg.options.seed,
        progress,
        endpoints,
        cfg.batch,
    )
    endpoints.limit_model(provider, cfg.rpm, cfg.tpm)
    for e in judge_execs:
        endpoints.limit_model(e.provider, cfg.judge_rpm, cfg.judge_tpm, "--judge-")
    return answers, judge_execs, judges


async def _close(provider: Provider, judge_execs: Sequence[Executor]) -> None:
    """Close the candidate's provider, then each judge's."""
    await provider.aclose()
    for e in judge_execs:
        await e.provider.aclose()


@dataclass(kw_only=True)
class AskGroup:
    """What a worker of the run's pool does with one group (a sample alone, or the turns of one
    dialogue in order): each sample asked (a turn after a failed one is not), graded, and stored
    with its answer's link and its grade; a sample graded before under this very run and grading
    keeps its grade."""

    store: Store
    s: Setup
    cfg: RunConfig
    fp_key: str
    answers: Executor
    ctx: GradeContext
    grading: Grading
    collected: Collected
    #: The samples this grading graded before.
    graded: set[str]
    #: The samples of the run's dataset already stored.
    stored_samples: set[str]
    #: Plays each sample's episodes where the benchmark is an agent benchmark.
    episodes: EpisodeRunner | None = None

    async def __call__(self, group: list[tuple[int, Sample]]) -> None:
        store, s, grading, collected = self.store, self.s, self.grading, self.collected
        history: list[tuple[Sample, str]] = []
        failed: str | None = None
        for position, sample in group:
            stored = (
                store.grade(s.run.id, self.fp_key, sample.id) if sample.id in self.graded else None
            )
            if stored is not None and needs_redo(
                stored
            ):  # failed answers and calls are asked again
                stored = None
            if stored is not None and len(group) == 1:
                # Graded before under this very run and grading, so its answer is stored and
                # linked: nothing to ask or look up (counted as an answer from the store).
                self.answers.stats.cached += 1
                grading.record(stored, False)
                collected.add(position, sample, stored)
                continue
            if self.episodes is not None or position != group[0][0]:
                DEFER_HELD.set(False)  # only a group's first answer is left for later
            if (
                self.episodes is not None
            ):  # an agent benchmark: the sample's episodes, played and graded
                resp, grade = await self.episodes.episodes(sample, s.grader, self.ctx)
                link, fresh = ((resp.key, {"episodes": True}) if resp.key else None), True
            else:
                if failed is not None:
                    resp, link = (
                        Response(key="", error=f"not asked: earlier turn failed ({failed})"),
                        None,
                    )
                else:
                    resp, link = await _ask(s, self.cfg, self.answers, sample, history)
                    DEFER_HELD.set(False)  # its judges wait on another process, never defer
                    if resp.ok:
                        history.append((sample, resp.text or ""))
                    else:
                        failed = resp.error
                grade, fresh = await grading.grade(
                    sample, resp, self.ctx, stored if resp.ok else None
                )
            with store.batch():  # the sample, the answer's link and its grade land together
                if sample.id not in self.stored_samples:
                    store.put_sample(s.bench.name, s.dataset, position, sample)
                if link is not None:
                    store.put_answer(s.run.id, sample.id, link[0], link[1])
                grading.record(grade, fresh)
                collected.add(position, sample, grade)


def settled_result(
    store: Store, s: Setup, options: RunOptions, fp_key: str
) -> tuple[Result, dict[str, Any]] | None:
    """The stored result of this run under this grading, with its tally, where a re-run would
    only read it back: the grading settled (its result stored, no grade written since), every
    sample of the run graded, none that a re-run redoes (a failed answer, grader or judge call),
    settled by this version of the package, and the result made with these options (its
    fingerprint, which names the seed and the templates, equal to the one a new aggregate
    would carry; the judges are in the grading's part of it).
    None otherwise: the run goes sample by sample."""
    tally = store.settled(s.run.id, fp_key)
    if (
        tally is None
        or tally.get("redo") != 0
        or tally.get("n") != s.n
        or tally.get("version") != grandrounds.__version__
    ):
        return None  # (the run's record keeps the version that first made it: a later one aggregates anew)
    stored = store.result(s.run.id, fp_key)
    if stored is None:
        return None
    fingerprint = result_fingerprint(s.bench, options, s.run, s.fingerprint)
    if canonical_json(stored.get("fingerprint")) != canonical_json(fingerprint):
        return None
    result = result_from_json(stored)
    # as the run stored it: the usage block is added after (costs.with_usage), from the store's counts
    return replace(result, extra={k: v for k, v in result.extra.items() if k != "usage"}), tally


async def _ask(
    s: Setup,
    cfg: RunConfig,
    answers: Caller,
    sample: Sample,
    history: Sequence[tuple[Sample, str]],
) -> tuple[Response, tuple[str, Any]]:
    """Ask the model for one sample; returns the response and the (request key, prompt) link to store."""
    prompt = s.bench.prompt(sample, cfg.options, history)
    messages = prompt.messages
    system = s.system
    if (
        system is not None
        and prompt.kind == "chat"
        and (not messages or messages[0].role != "system")
    ):
        messages = (Message("system", system), *messages)  # the protocol's system message
    params = cfg.gen or GenParams()
    sampled = prompt.kind == "chat" and (params.temperature or 0) > 0
    req = Request(
        provider=s.provider.spec.provider,
        model=s.provider.spec.model,
        messages=messages,
        params=params,
        purpose="answer",
        kind=prompt.kind,
        continuations=prompt.continuations,
        base_url=s.provider.request_base_url(),
        # sampled: an item whose prompt an earlier item has is a draw of its own (greedy
        # requests of the same prompt share one reply)
        item=sample.id if sampled and sample.id in s.repeats(cfg) else "",
    )
    resp = await answers(req)
    return resp, (req.key(), prompt)

"""The runner: one event loop that answers, grades and aggregates, storing every stage.

``run`` and ``regrade`` share one pipeline: a bounded pool of workers over the samples (turns of
a multi-turn group in order inside one worker), a :class:`Grading` stage that grades each answer
and stores the grade with write-behind commits, and one aggregation. They differ only in where
answers come from: ``run`` asks the model through the cached executor, ``regrade`` reads the
stored answers. Judges are injected into graders as callables over their own executors, so judge
calls are cached and retried like answers.
"""

from __future__ import annotations

import asyncio
import codecs
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import grandrounds
from grandrounds.benchmarks.agents import AgentBenchmark
from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.benchmarks.readers.decoding import DATA_ENCODING
from grandrounds.core.hashing import (
    canonical_json,
    content_hash,
    dataclass_dict,
    text_hash,
    to_jsonable,
)
from grandrounds.core.records import (
    GenParams,
    Grade,
    Message,
    Request,
    Response,
    Result,
    Sample,
    judge_call_failed,
    needs_redo,
    result_from_json,
)
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.flags import flag_outcome
from grandrounds.graders.guard import checked
from grandrounds.graders.guard import fingerprint as guard_fingerprint
from grandrounds.providers.base import Provider
from grandrounds.run.batches.executor import BatchSettings, executor_for, pool_width
from grandrounds.run.config import (
    JudgeConfig,
    RunConfig,
    build_benchmark,
    check_judges,
    check_run,
    make_provider,
    protocol_record,
)
from grandrounds.run.costs import judge_of
from grandrounds.run.episodes import EpisodeRunner
from grandrounds.run.executor import DEFER_HELD, Executor, HeldElsewhere, RetryPolicy
from grandrounds.run.limits import EndpointLimits
from grandrounds.run.samples import (
    DataWatch,
    consecutive_groups,
    group_samples,
    limited,
    read_samples,
    store_images,
)
from grandrounds.sources.protocols import system_text
from grandrounds.store import RunRecord, Store
from grandrounds.store.rows import CallUsage


class Progress(Protocol):
    def start(self, total: int, label: str) -> None: ...
    def advance(self, grade: Grade, fresh: bool = True) -> None: ...
    def stored(self, n: int, unscored: int) -> None: ...
    def on_call(self, response: Response, *, retries: int) -> None: ...


class Caller(Protocol):
    """What a judge asks through: the run's executor, or the dry run's stand-in."""

    provider: Provider

    async def __call__(self, request: Request, /) -> Response: ...


C = TypeVar("C", bound=Caller)


class RunJudge(Generic[C]):
    """A judge handed to graders: messages in, cached judge Response out."""

    def __init__(self, executor: C, config: JudgeConfig) -> None:
        self.executor = executor
        self.config = config
        self.name = config.spec

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response:
        p = self.executor.provider
        req = Request(
            provider=p.spec.provider,
            model=p.spec.model,
            messages=tuple(messages),
            params=self.config.params
            or GenParams(
                temperature=0.0, max_tokens=2048, seed=0, json_object=self.config.json_object
            ),
            purpose="judge",
            base_url=p.request_base_url(),
            attempt=attempt,
        )
        return await self.executor(req)


def grader_fingerprint(
    bench: Benchmark,
    grader: Grader,
    options: RunOptions,
    judges: Sequence[JudgeConfig],
    dataset: str,
    protocol: Mapping[str, Any] | None = None,
    flagged: str = "keep",
    guard: JudgeConfig | None = None,
) -> dict[str, Any]:
    """What decides a grade besides the answer: shown on every result, hashed into its key.

    ``grader`` is the grader's spec (name and typed parameters), from which re-grading and
    clinician rescoring rebuild it. ``--flagged`` is in it when not ``keep`` (so the keys of
    gradings made before it existed stay).
    """
    spec = grader.spec()
    return (
        ({"flagged": flagged} if flagged != "keep" else {})
        | ({"guard": guard_fingerprint(guard.spec)} if guard is not None else {})
    ) | {
        "grader": {"name": spec.name, "args": to_jsonable(spec.args)},
        "templates": grader.template_hashes(),
        "judges": [{"model": j.spec, "params": to_jsonable(j.params)} for j in judges],
        "scoring": to_jsonable(options.extra),
        "benchmark": str(bench.spec()),
        "dataset_sha256": dataset,
        "protocol": dict(protocol)
        if protocol
        else protocol_record(bench.protocol(options), {}, {}),
    }


class ReadBack:
    """What a finished run or re-grade holds of its samples: nothing, until asked. ``samples`` and
    ``grades`` are read back from the store on first use (:meth:`_read_all`, in the run's order);
    :meth:`_reading` gives the store to read, or its file opened read-only once it is closed."""

    store: Store
    _samples: list[Sample] | None = None
    _grades: list[Grade] | None = None

    @contextmanager
    def _reading(self, store: Store | None = None) -> Iterator[Store]:
        if store is not None or not self.store.closed:
            yield store or self.store
            return
        with Store(self.store.path, readonly=True) as st:
            yield st

    def _read_all(self) -> None:
        raise NotImplementedError

    @property
    def samples(self) -> list[Sample]:
        if self._samples is None:
            self._read_all()
        assert self._samples is not None
        return self._samples

    @property
    def grades(self) -> list[Grade]:
        if self._grades is None:
            self._read_all()
        assert self._grades is not None
        return self._grades


class RunOutcome(ReadBack):
    """What a run gives back: its record, result and call statistics.

    A run keeps no sample, grade or answer in memory beyond what its aggregate needs (so memory
    stays flat however large the benchmark); ``samples``, ``grades`` and ``responses`` are read
    back (from the data and the store) when asked for, in the run's order, and :meth:`read_back`
    hands them out a chunk at a time for those (``--out``) that need not hold the whole run.
    """

    #: Samples read back per chunk by :meth:`read_back`.
    READ_CHUNK = 250

    def __init__(
        self,
        setup: Setup,
        store: Store,
        fp_key: str,
        result: Result,
        answer_stats: Any,
        judge_stats: list[Any],
        judge_names: list[str],
        counts: Mapping[str, int],
        usage: tuple[Any, list[Any]] | None = None,
        simulator: tuple[str, Any] | None = None,
    ) -> None:
        self.setup, self.store, self.fp_key = setup, store, fp_key
        self.run: RunRecord = setup.run
        self.result = result
        self.answer_stats, self.judge_stats = answer_stats, judge_stats
        #: The judges' specs, in the order of ``judge_stats``.
        self.judge_names = judge_names
        #: Grades by status (``scored``, ``answer_failed``, ...), over every sample of the run.
        self.counts = dict(counts)
        #: The calls behind the result as the store counted them: (answers, [one per judge]).
        self.usage = usage
        #: (the simulator model, its executor's stats) for a run whose episodes ask one, else None.
        self.simulator = simulator
        self._responses: dict[str, Response] | None = None

    def read_back(
        self, store: Store | None = None
    ) -> Iterator[list[tuple[Sample, Response, Grade]]]:
        """The run's samples, each with its answer's response (as :attr:`responses` gives it) and
        its grade, in the run's order, :attr:`READ_CHUNK` samples at a time: the samples read again
        as the run read them, their grades and answers fetched by id from ``store`` (else the run's
        store, or its file opened read-only once that is closed). Nothing of a chunk is kept."""
        with self._reading(store) as st:
            samples = self.setup.samples()
            while part := list(islice(samples, self.READ_CHUNK)):
                ids = [smp.id for smp in part]
                grades = st.grades_for(self.run.id, self.fp_key, ids)
                answers = st.answers_for(self.run.id, ids)
                yield [
                    (smp, self._response(answers.get(smp.id), grades[smp.id]), grades[smp.id])
                    for smp in part
                ]

    @staticmethod
    def _response(answer: tuple[str, Response | None] | None, grade: Grade) -> Response:
        """The stored response of an answer; for one never stored, a failed response with the grade's reason."""
        key, resp = answer or ("", None)
        return (
            resp
            if resp is not None
            else Response(
                key="" if grade.status == "not_asked" else key, error=grade.error or "not answered"
            )
        )

    def _read_all(self) -> None:
        samples: list[Sample] = []
        grades: list[Grade] = []
        responses: dict[str, Response] = {}
        for part in self.read_back():
            for smp, resp, grade in part:
                samples.append(smp)
                grades.append(grade)
                responses[smp.id] = resp
        self._samples, self._grades, self._responses = samples, grades, responses

    @property
    def responses(self) -> dict[str, Response]:
        """sample id -> the answer's response (a failed one with its error; a turn never asked has key "")."""
        if self._responses is None:
            self._read_all()
        assert self._responses is not None
        return self._responses

    def __repr__(self) -> str:
        # Short on purpose: asyncio.run reprs its main task (and so this result) when it restores
        # the SIGINT handler on Python 3.11.
        return (
            f"RunOutcome(run={self.run.id!r}, samples={self.setup.n}, score={self.result.score!r})"
        )


class Grading:
    """The grading stage shared by ``run`` and ``regrade``: grade one answer, store it, count it.

    A failed answer gets an unscored grade with its reason (never graded); a grader that crashes
    on one answer gives an unscored ``grader_error`` grade, redone on the next run; a stored grade
    that ``reuse`` accepts is kept without grading again.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        fp_key: str,
        grader: Grader,
        progress: Progress | None,
        flagged: str = "keep",
        guard: RunJudge | None = None,
    ) -> None:
        #: The model asked whether each answer addresses its grader (``--guard``), or None.
        self.guard = guard
        self.store, self.run_id, self.fp_key, self.grader, self.progress = (
            store,
            run_id,
            fp_key,
            grader,
            progress,
        )
        #: What an answer that addresses the grader counts for (``--flagged``, :mod:`grandrounds.graders.flags`).
        self.flagged = flagged

    async def grade(
        self, sample: Sample, resp: Response, ctx: GradeContext, stored: Grade | None = None
    ) -> tuple[Grade, bool]:
        """The grade of one answer and whether it is new (to be stored); every answer is checked
        for words to the grader (:func:`~grandrounds.graders.flags.answer_flags`)."""
        if not resp.ok:
            return failed_answer(sample, resp), True
        if stored is not None:
            return stored, False
        try:
            grade = await self.grader.grade(sample, resp, ctx)
        except (
            Exception
        ) as e:  # a grader bug on one answer is counted and shown, not fatal to the run
            return unscored(
                sample, "grader_error", f"grading failed: {type(e).__name__}: {e}"
            ), True
        return await checked(grade, resp.text, self.flagged, self.guard, ctx.max_reask), True

    def record(self, grade: Grade, fresh: bool) -> None:
        """Store a new grade (buffered) and count it."""
        if fresh:
            self.store.put_grade(self.run_id, self.fp_key, grade)
        if self.progress:
            self.progress.advance(grade, fresh)


def failed_answer(sample: Sample, resp: Response) -> Grade:
    """The unscored grade of an answer that could not be obtained (a failed call, or a turn never asked)."""
    if resp.key == "":
        return unscored(sample, "not_asked", resp.error or "not asked")
    return unscored(sample, "answer_failed", f"answer failed: {resp.error}")


async def run_pool(
    store: Store, groups: Iterable[Any], do_group: Callable[[Any], Awaitable[None]], workers: int
) -> None:
    """Run ``do_group`` over ``groups`` with a bounded pool of workers and write-behind commits.

    A pool, not one task per sample: prompts are built just before they are sent, the first
    requests go out at once, and memory stays flat. A timer flushes buffered rows so results land
    even while every worker waits on a slow call.
    """
    pending = iter(groups)
    # Groups whose first call another process on the store holds: asked after the rest (by then
    # that process has mostly answered them), so processes sharing a store share the work.
    deferred: deque[Any] = deque()

    async def worker() -> None:
        for group in pending:
            DEFER_HELD.set(True)
            try:
                await do_group(group)
            except HeldElsewhere:
                deferred.append(group)
        DEFER_HELD.set(False)
        while deferred:
            await do_group(deferred.popleft())

    async def flusher() -> None:
        while True:
            await asyncio.sleep(0.05)
            store.flush_if_due()

    tick = asyncio.create_task(flusher())
    try:
        with store.write_behind():
            await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    finally:
        tick.cancel()


@dataclass
class Setup:
    """A run's parts, resolved and checked before the first call."""

    bench: Benchmark
    root: Path
    limit: int | None
    #: How many samples the run asks.
    n: int
    #: Every sample, where they are held (benchmarks read whole, and dialogues whose turns are
    #: apart in the stream); None where they are read again one at a time as the run goes
    #: (:meth:`Benchmark.iter_samples`), a dialogue's turns coming together.
    kept: list[Sample] | None
    dataset: str
    provider: Provider
    grader: Grader
    fingerprint: dict[str, Any]
    run: RunRecord
    #: The protocol's system message for answers, read once (it goes with every sample).
    system: str | None = None
    #: The data files as they were hashed: samples read again are checked against them.
    watch: DataWatch | None = None
    #: What the run says before it starts (a very large rubric), printed with its summary.
    notes: list[str] = field(default_factory=list)
    _repeats: frozenset[str] | None = field(default=None, repr=False)

    def samples(self) -> Iterator[Sample]:
        """The run's samples in order, read again from the data where they are not held (each
        handed on only while the files are as they were hashed)."""
        if self.kept is not None:
            return iter(self.kept)
        read = limited(self.bench.iter_samples(self.root), self.limit)
        return self.watch.watch(read) if self.watch is not None else read

    @property
    def ids(self) -> list[str]:
        """The run's sample ids, in order."""
        return [smp.id for smp in self.samples()]

    def repeats(self, cfg: RunConfig) -> frozenset[str]:
        """The ids of the single-turn items whose prompt an earlier item in data order already has
        (read once, on the first sampled ask). Under sampling each of them is asked apart (its id in
        its request's key, as the authors' loops ask every item); the first item of each prompt
        keeps the key it always had, so a sampled run's stored answers keep theirs."""
        if self._repeats is None:
            first: dict[str, str] = {}
            out = set()
            for smp in self.samples():
                if smp.group is not None:
                    continue  # a dialogue's turns differ by what was answered before
                prompt = self.bench.prompt(smp, cfg.options, ())
                text = text_hash(canonical_json([dataclass_dict(m) for m in prompt.messages]))
                if first.setdefault(text, smp.id) != smp.id:
                    out.add(smp.id)
            self._repeats = frozenset(out)
        return self._repeats

    def groups(self) -> Iterator[list[tuple[int, Sample]]]:
        """What one worker asks in order, each sample with its position: a sample alone, or the
        turns of one dialogue."""
        if self.kept is not None:
            at = {smp.id: i for i, smp in enumerate(self.kept)}
            return ([(at[smp.id], smp) for smp in group] for group in group_samples(self.kept))
        return consecutive_groups(self.samples(), self.root)


def prepare(store: Store, cfg: RunConfig) -> Setup:
    """Build and check everything; read the data (bad data fails here, before the store is touched)."""
    from grandrounds.sources.data import resolve

    bench = build_benchmark(cfg.benchmark, cfg.bench_params)
    grader = bench.grader(cfg.options, judged=bool(cfg.judges))
    check_judges(bench, grader, cfg.judges)
    root = resolve(bench, cfg.data)
    watch = DataWatch(
        bench.data_files(root)
    )  # before hashing: a rewrite while hashing or checking is seen
    dataset = bench.dataset_hash(root)
    notes: list[str] = []
    n, kept = read_samples(store, bench, root, cfg.limit, dataset, cfg.max_rubric_items, notes)
    watch.check()
    provider = make_provider(cfg.model, cfg.base_url, **cfg.provider_options)
    if (
        bench.has_images or bench.images_in_data
    ):  # every image checked against what the provider takes, and kept beside the store, before any call
        store_images(
            store,
            kept if kept is not None else limited(bench.iter_samples(root), cfg.limit),
            provider,
        )
    fp = grader_fingerprint(
        bench, grader, cfg.options, cfg.judges, dataset, cfg.protocol, cfg.flagged, cfg.guard
    )  # reads the official templates: fails before the run is recorded
    system = system_text(
        bench.protocol(cfg.options).answer
    )  # read before the run is recorded, like the templates
    run_rec = store.ensure_run(_run_record(bench, cfg, provider, dataset, root))
    return Setup(
        bench,
        root,
        cfg.limit,
        n,
        kept,
        dataset,
        provider,
        grader,
        fp,
        run_rec,
        system,
        watch,
        notes,
    )


def make_judges(
    store: Store,
    configs: Sequence[JudgeConfig],
    concurrency: int | None,
    retry: RetryPolicy,
    seed: int,
    progress: Progress | None,
    endpoints: EndpointLimits | None = None,
    batch: BatchSettings | None = None,
) -> tuple[list[Executor], tuple[RunJudge, ...]]:
    """One cached executor per judge, and the judge callables graders are handed.

    ``endpoints`` is shared with the answering executor, so judges on the candidate's server share
    its capacity.
    """
    endpoints = endpoints or EndpointLimits()
    make = executor_for(batch, "judges")
    execs = [
        make(
            store,
            make_provider(j.spec, j.base_url, **j.options),
            concurrency,
            retry,
            seed,
            progress,
            endpoints,
        )
        for j in configs
    ]
    return execs, tuple(RunJudge(e, j) for e, j in zip(execs, configs))


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
        store, s, cfg, fp_key, answers, ctx, grading, collected, graded, stored_samples, episodes
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
    check = getattr(s.provider, "check_logprobs", None)
    if kind not in ("loglikelihood", "next_token") or check is None:
        return
    try:
        await check(kind)
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
        store, s.run.id, bench, s.provider, answers, gen, simulator, flagged=cfg.flagged
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


@dataclass
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


def _run_record(
    bench: Benchmark, cfg: RunConfig, provider: Provider, dataset: str, root: Path
) -> RunRecord:
    options = to_jsonable(replace(cfg.options, judge_mode="", judge_runs=None, max_reask=0))
    ident = {
        "benchmark": str(bench.spec()),
        "model": str(provider.spec),
        "base_url": provider.request_base_url(),
        "options": options,
        "gen": to_jsonable(cfg.gen or GenParams()),
        "dataset": dataset,
        "limit": cfg.limit,
    }
    # ``--encoding`` changes the text read from the same bytes: it names a run of its own, but only
    # when given, so the ids of runs that never set it stay what they were.
    encoding = (
        {"encoding": codecs.lookup(name).name} if (name := DATA_ENCODING.get()) else {}
    )  # cp1252 = CP1252 = windows-1252
    ident |= encoding
    # An agent benchmark's simulated patient is part of what the candidate met: a run with another
    # simulator model (or other simulator prompts) is another run. Only where one is used.
    simulator = simulator_identity(bench, cfg)
    ident |= simulator
    from grandrounds.providers.engines import engine_record

    return RunRecord(
        id=content_hash(ident)[:16],
        benchmark=bench.name,
        benchmark_spec=str(bench.spec()),
        model=str(provider.spec),
        options=options
        | {"bench_params": to_jsonable(bench.params), "limit": cfg.limit}
        | encoding
        | simulator
        | engine_record(provider),
        dataset_sha256=dataset,
        package_version=grandrounds.__version__,
        gen_params=to_jsonable(cfg.gen or GenParams()),
        data_source=str(root),
    )


def simulator_identity(bench: Benchmark, cfg: RunConfig) -> dict[str, Any]:
    """``{"simulator": {model, endpoint, prompts}}`` for a run whose environment asks a simulator model, else {}."""
    if not cfg.simulator or not bench.needs_simulator:
        return {}
    sim = make_provider(cfg.simulator, **cfg.simulator_options)
    return {
        "simulator": {
            "model": str(sim.spec),
            "base_url": sim.request_base_url(),
            "prompts": bench.simulator_templates(),
        }
    }


class Collected:
    """What a grading keeps of each sample until it aggregates: the benchmark's summary of it
    (:meth:`Benchmark.summarize`, small) and counts beside the headline. The calls behind the
    result are counted by the store (the answers a run links, the judge calls each grade names)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        bench: Benchmark,
        options: RunOptions,
        judges: Sequence[str],
    ) -> None:
        self.store, self.run_id, self.bench, self.options, self.judges = (
            store,
            run_id,
            bench,
            options,
            list(judges),
        )
        self.summaries: dict[int, Any] = {}
        self.status: Counter[str] = Counter()
        self.judge_failed = 0
        self.truncated_votes = 0
        self.redo = 0  # grades a re-run would do again
        self.flagged = 0  # answers that address the grader (graders.flags)
        self.flag_outcomes: Counter[str] = Counter()  # what --flagged made of them
        self.values: dict[int, float | None] = {}  # each sample's value, for the headline's bounds

    def add(self, position: int, sample: Sample, grade: Grade) -> None:
        self.summaries[position] = self.bench.summarize(sample, grade, self.options)
        self.status[grade.status] += 1
        self.flagged += bool(grade.details.get("flags"))
        if (outcome := flag_outcome(grade)) is not None:
            self.flag_outcomes[outcome] += 1
        self.values[position] = grade.value if grade.status == "scored" else None
        self.redo += needs_redo(grade)
        self.judge_failed += judge_call_failed(grade)
        self.truncated_votes += sum(
            1
            for v in (*grade.votes, *(v for verdict in grade.verdicts for v in verdict.votes))
            if v.truncated
        )

    def aggregate(self) -> Any:
        return self.bench.aggregate_summaries(
            [self.summaries[i] for i in sorted(self.summaries)], self.options
        )

    def counts(self) -> dict[str, Any]:
        """Truncated replies, then what kept answers from a score, beside every headline: answers
        whose call failed (or turns never asked), answers that could not be read (no option
        extracted, no log-probabilities), grader errors, and answers with a failed judge call
        (re-running the command retries them)."""
        return {
            "n_truncated": self.store.truncated_answers(self.run_id),
            "n_truncated_judge": self.truncated_votes,
            "n_items": sum(self.status.values()),
            "n_answer_failed": self.status["answer_failed"] + self.status["not_asked"],
            "n_unreadable": self.status["unreadable"],
            "n_grader_error": self.status["grader_error"],
            "n_judge_failed": self.judge_failed,
            "n_flagged": self.flagged,
            "flag_outcomes": dict(sorted(self.flag_outcomes.items())),
        }

    def tally(self) -> dict[str, Any]:
        """What the grades hold, stored when the grading settles (:func:`settled_result`): how
        many, how many a re-run would redo, how many by status."""
        return {"n": sum(self.status.values()), "redo": self.redo, "status": dict(self.status)}

    def usage(self, run_id: str, grader_fp: str) -> tuple[CallUsage, list[CallUsage]]:
        """(the run's answer calls, the grading's judge calls by judge) as the store counts them;
        calls no vote names go to the only judge, or to ``unattributed`` on a panel."""
        by_judge: dict[str, CallUsage] = {}
        for u in self.store.judge_usage(run_id, grader_fp):
            who = judge_of(u.who, self.judges)
            was = by_judge.get(who)
            by_judge[who] = (
                u
                if was is None
                else CallUsage(
                    who,
                    was.calls + u.calls,
                    was.prompt_tokens + u.prompt_tokens,
                    was.completion_tokens + u.completion_tokens,
                    was.no_usage + u.no_usage,
                )
            )
        answers = (
            self.store.episode_usage(run_id) if self.bench.episodic else None
        )  # every step of every episode
        return answers or self.store.answer_usage(run_id), [
            replace(u, who=w) for w, u in by_judge.items()
        ]


def make_result(
    bench: Benchmark,
    options: RunOptions,
    collected: Collected,
    run_rec: RunRecord,
    grader_fp: Mapping[str, Any],
    judges: Sequence[str],
) -> Result:
    """The Result of one grading: the benchmark's aggregate plus the full fingerprint.

    Truncated replies (cut off by the token limit) are counted beside every headline:
    ``n_truncated`` answers and ``n_truncated_judge`` judge votes.
    """
    agg = collected.aggregate()
    extra = dict(agg.extra) | collected.counts()
    bounds = headline_bounds(agg.score, agg.metric, agg.n, agg.n_unscored, collected.values)
    if bounds is not None:
        extra["bounds"] = bounds
    served = collected.store.system_fingerprints(collected.run_id)
    if served:  # what the server said answered the run's calls (system_fingerprint, model version): value -> calls
        extra["system_fingerprints"] = served
    if judges:  # the judge sees the answer between markers (ours), or unmarked as the official prompt shows it
        extra["answer_markers"] = grader_fp.get("templates", {}).get("answer_markers", "off")
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
        fingerprint=result_fingerprint(bench, options, run_rec, grader_fp),
        extra=extra,
    )


def headline_bounds(
    score: float | None,
    metric: str,
    n: int,
    n_unscored: int,
    values: Mapping[int, float | None],
) -> dict[str, Any] | None:
    """How far the unscored answers could move the headline: the score with every unscored answer
    wrong (0) and with every one right (the scale's top: 100 for a 0-100 metric, else 1), over
    scored and unscored answers together; the leaderboard can rank by the lower bound.

    Given only where the headline is the mean of the per-answer values (clipped to the scale, as
    HealthBench clips it) over the same answers; None where nothing is unscored, or the headline
    is another statistic (an F1, a mean per dialogue)."""
    known = [v for v in values.values() if v is not None]
    unscored = len(values) - len(known)
    if score is None or not n_unscored or not known or len(known) != n or unscored != n_unscored:
        return None
    top = 100.0 if "0-100" in metric else 1.0

    def clip(x: float) -> float:
        return min(top, max(0.0, x))

    total = sum(known)
    if abs(clip(total / len(known)) - score) > 1e-9 * max(1.0, top):
        return None
    everyone = len(known) + unscored
    return {
        "lower": clip(total / everyone),
        "upper": clip((total + unscored * top) / everyone),
        "n_unscored": unscored,
        "meaning": "every unscored answer wrong / every one right",
    }


def result_fingerprint(
    bench: Benchmark, options: RunOptions, run_rec: RunRecord, grader_fp: Mapping[str, Any]
) -> dict[str, Any]:
    """What a result was made from: the grading's fingerprint, the model, its generation and
    answer settings, the templates, the seed and the package version."""
    return (
        dict(grader_fp)
        | {
            "model": run_rec.model,
            "gen_params": run_rec.gen_params,
            "prompt_templates": bench.template_hashes(options),
            "answer_mode": options.answer_mode,
            "shuffle_options": options.shuffle_options,
            "seed": options.seed,
            "package_version": run_rec.package_version,
            "run_id": run_rec.id,
            "limit": run_rec.options.get("limit"),
        }
        | {
            k: run_rec.options[k]
            for k in ("engine", "encoding", "simulator")
            if run_rec.options.get(k)
        }
    )  # vLLM/SGLang name and version; --encoding, --simulator when given

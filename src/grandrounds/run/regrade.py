"""Re-judge stored answers with another judge or setting, without generating again.

The grader is rebuilt from the spec stored with the run's last grading (so a re-grade with a new
judge grades exactly as before), or from the benchmark with the judge mode or runs the user
overrides. Grading goes through the runner's pipeline: bounded pool, a crashing grader becomes an
unscored grade with its reason, write-behind commits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import content_hash
from grandrounds.core.records import Grade, Response, Result, Sample
from grandrounds.graders import stored_spec
from grandrounds.graders.base import GradeContext, Grader, build
from grandrounds.graders.flags import check_mode
from grandrounds.run.aggregate import Collected, make_result
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.config import (
    JudgeConfig,
    build_benchmark,
    check_judges,
    protocol_record,
    resolve_judges,
    with_timeout,
)
from grandrounds.run.executor import RetryPolicy
from grandrounds.run.limits import EndpointLimits, TokenLimits, check_rpm, check_tpm
from grandrounds.run.outcome import ReadBack
from grandrounds.run.pipeline import Grading, Progress, make_judges, run_pool
from grandrounds.run.prepare import grader_fingerprint
from grandrounds.store import RunRecord, Store

#: Samples of a run read from the store at a time (their answers and previous grades with them).
READ_CHUNK = 250


class RegradeOutcome(ReadBack):
    """What a re-grade gives back: the result and call statistics.

    Like :class:`~grandrounds.run.outcome.RunOutcome` it holds no sample or grade: ``samples`` and
    ``grades`` are read back from the store when asked for, in the run's order, and
    :meth:`read_back` hands them out a chunk at a time.
    """

    def __init__(
        self,
        result: Result,
        judge_stats: list[Any],
        usage: tuple[Any, list[Any]] | None,
        store: Store,
        run: RunRecord,
        grader_fp: str,
        members_fp: str | None,
    ) -> None:
        self.result = result
        self.judge_stats = judge_stats
        #: The calls behind the result as the store counted them: (answers, [one per judge]).
        self.usage = usage
        self.store, self.run = store, run
        #: The grading this re-grade stored, and the one that decided which samples are the run's.
        self.grader_fp, self.members_fp = grader_fp, members_fp

    def read_back(
        self, store: Store | None = None
    ) -> Iterator[list[tuple[Sample, Response | None, Grade]]]:
        """The re-graded samples, each with its stored answer (None when it has none) and its new
        grade, in the run's order, :data:`READ_CHUNK` at a time."""
        with self._reading(store) as st:
            ids = st.run_sample_ids(
                self.run.id, self.run.benchmark, self.run.dataset_sha256, self.members_fp
            )
            for part, samples, answers in run_chunks(st, self.run, ids):
                grades = st.grades_for(self.run.id, self.grader_fp, part)
                yield [(samples[sid], answers.get(sid, ("", None))[1], grades[sid]) for sid in part]

    def _read_all(self) -> None:
        chunks = list(self.read_back())
        self._samples = [smp for part in chunks for smp, _, _ in part]
        self._grades = [g for part in chunks for _, _, g in part]


def run_chunks(
    store: Store,
    run: RunRecord,
    ids: list[str],
) -> Iterator[tuple[list[str], dict[str, Sample], dict[str, tuple[str, Response | None]]]]:
    """The samples ``ids`` of ``run`` (:meth:`Store.run_sample_ids`) :data:`READ_CHUNK` at a time:
    (their ids, id -> sample, id -> stored answer), read from the store as each chunk is reached."""
    for i in range(0, len(ids), READ_CHUNK):
        part = ids[i : i + READ_CHUNK]
        yield (
            part,
            store.samples_by_id(run.benchmark, run.dataset_sha256, part),
            store.answers_for(run.id, part),
        )


def last_grading(store: Store, run: RunRecord) -> dict[str, Any]:
    """The fingerprint of the newest grading of ``run`` (empty if never graded)."""
    fp = store.latest_grader_fp(run.id)
    return (store.grader_spec(fp) or {}) if fp else {}


def options_of(run: RunRecord, **override: Any) -> RunOptions:
    o = run.options
    base = RunOptions(
        answer_mode=o.get("answer_mode", "generate"),
        # Runs stored before protocols existed were asked and graded our way.
        protocol=o.get("protocol", "grandrounds"),
        shuffle_options=bool(o.get("shuffle_options", False)),
        seed=int(o.get("seed", 0)),
        extra=o.get("extra", {}) or {},
    )
    return replace(base, **override)


@dataclass(frozen=True, kw_only=True)
class RegradeRequest:
    """What to re-grade and how: the run, the judges, and what to override of the last grading."""

    run: RunRecord
    judges: tuple[JudgeConfig, ...]
    judge_mode: str | None = None
    judge_runs: int | None = None
    max_reask: int = 2
    seed: int = 0
    only_unknown: bool = False
    concurrency: int | None = None
    #: Seconds a judge call may take once sent (judges whose provider takes a timeout).
    timeout: float | None = None
    retry: RetryPolicy = RetryPolicy()
    #: Explicit judge flags over the protocol's judge settings (None = not given).
    judge_overrides: Mapping[str, Any] = field(default_factory=dict)
    #: What an answer that addresses the grader counts for (``--flagged``: keep, exclude, score-zero).
    flagged: str = "keep"
    #: Judge calls sent through batch APIs (``--batch``); None = live.
    batch: BatchSettings | None = None
    #: Judge call starts per minute on each judge endpoint (``--judge-rpm``); None = no limit.
    rpm: int | None = None
    #: Tokens of judge call starts per minute on each judge endpoint (``--judge-tpm``); None = no limit.
    tpm: int | str | TokenLimits | None = None


def rebuild_grader(
    bench: Benchmark, req: RegradeRequest, last: dict[str, Any]
) -> tuple[Grader, RunOptions]:
    """The grader of the last grading, rebuilt from its stored spec, unless the request overrides it.
    Where the judge is optional (``takes_judge``), the request's judges say whether it asks one."""
    stored = last.get("grader")
    opts = options_of(req.run, max_reask=req.max_reask, extra=last.get("scoring") or {})
    if bench.takes_judge:
        opts = bench.check_options(
            replace(opts, judge_mode=req.judge_mode or "default", judge_runs=req.judge_runs)
        )
        return bench.grader(opts, judged=bool(req.judges)), opts
    if isinstance(stored, dict) and req.judge_mode is None and req.judge_runs is None:
        spec = stored_spec(last)
        opts = bench.check_options(
            replace(
                opts, judge_mode=spec.args.get("mode", "default"), judge_runs=spec.args.get("runs")
            )
        )
        return build(spec), opts
    opts = bench.check_options(
        replace(opts, judge_mode=req.judge_mode or "default", judge_runs=req.judge_runs)
    )
    return bench.grader(opts), opts


def regradable(bench: Any) -> Any:
    """``bench``, or a one-line error for an agent benchmark (graded as its episodes replay)."""
    if bench.episodic:
        raise ConfigError(
            f"{bench.name} is an agent benchmark: its episodes are graded as they are replayed; run the same "
            "`grandrounds run` command again (every stored step is read back, no call is made)"
        )
    return bench


async def regrade(
    store: Store, req: RegradeRequest, progress: Progress | None = None
) -> RegradeOutcome:
    """Grade every stored answer of ``req.run`` again.

    With ``only_unknown`` the grades stored under the same grader fingerprint are the starting
    point: grades with nothing unknown are kept, and only unknown votes are asked again.
    """
    run = req.run
    check_rpm(req.rpm, "--judge-rpm")
    check_tpm(req.tpm, "--judge-tpm")
    bench = regradable(build_benchmark(run.benchmark, dict(run.options.get("bench_params") or {})))
    grader, options = rebuild_grader(bench, req, last_grading(store, run))
    proto = bench.protocol(options)
    judge_cfgs, judge_deviations = resolve_judges(
        proto, with_timeout(req.judges, req.timeout), req.judge_overrides, req.seed
    )
    req = replace(req, judges=judge_cfgs)
    check_judges(bench, grader, req.judges)
    # The run's samples: those it answered, and those it graded without asking (a later turn of a
    # dialogue whose first turn failed), so a re-grade counts exactly what the run counted. They
    # are read from the store a chunk at a time (with their answers and previous grades), never whole.
    latest = store.latest_grader_fp(run.id)
    ids = store.run_sample_ids(run.id, run.benchmark, run.dataset_sha256, latest)
    if not ids:
        raise ConfigError(f"run {run.id} has no stored answers to grade")
    fp = grader_fingerprint(
        bench,
        grader,
        options,
        req.judges,
        run.dataset_sha256,
        protocol_record(proto, {}, judge_deviations),
        check_mode(req.flagged),
    )
    fp_key = content_hash(fp)
    store.put_grader(fp_key, fp)
    if req.only_unknown and not store.has_grades(run.id, fp_key):
        raise ConfigError(
            f"run {run.id} has no grades by this judge and grading setting to complete; "
            "--only-unknown needs the same judge(s), judge mode and runs as the grading it completes"
        )
    endpoints = EndpointLimits()
    execs, judges = make_judges(
        store, req.judges, req.concurrency, req.retry, req.seed, progress, endpoints, req.batch
    )
    for e in execs:
        endpoints.limit_model(e.provider, req.rpm, req.tpm, "--judge-")
    grading = Grading(store, run.id, fp_key, grader, progress, req.flagged)
    collected = Collected(store, run.id, bench, options, [j.spec for j in req.judges])
    if progress:
        progress.start(len(ids), f"regrade {run.benchmark} · {run.model}")

    def items() -> Iterator[list[tuple[int, Sample, Response | None, Grade | None]]]:
        """One item per sample, read a chunk ahead of the workers: its position, the sample, its
        stored answer, and its grade by this grading where ``only_unknown`` completes it. A
        chunk's previous grades are read before any of its samples is graded here."""
        position = 0
        for part, samples, answers in run_chunks(store, run, ids):
            previous = store.grades_for(run.id, fp_key, part) if req.only_unknown else {}
            for sid in part:
                yield [(position, samples[sid], answers.get(sid, ("", None))[1], previous.get(sid))]
                position += 1

    async def do_group(group: list[tuple[int, Sample, Response | None, Grade | None]]) -> None:
        for position, sample, resp, prev in group:
            keep = prev if prev is not None and not _has_unknown(prev) else None
            ctx = GradeContext(
                judges=judges, previous=prev, only_unknown=req.only_unknown, max_reask=req.max_reask
            )
            grade, fresh = await grading.grade(
                sample, resp or Response(key="", error="never answered"), ctx, keep
            )
            grading.record(grade, fresh)
            collected.add(position, sample, grade)

    try:
        await run_pool(store, items(), do_group, 2 * max((e.concurrency for e in execs), default=4))
    finally:
        for e in execs:
            await e.provider.aclose()
    result = make_result(bench, options, collected, run, fp, [j.spec for j in req.judges])
    store.put_result(run.id, fp_key, result)
    return RegradeOutcome(
        result,
        [e.stats for e in execs],
        collected.usage(run.id, fp_key),
        store,
        run,
        fp_key,
        latest,
    )


def _has_unknown(g: Grade) -> bool:
    return (
        g.value is None
        or any(v.status == "unknown" for v in g.verdicts)
        or any(v.status == "unknown" for v in g.votes)
    )

"""What ``run`` and ``regrade`` share to grade: the progress a command shows (:class:`Progress`),
judges handed to graders as callables over their own cached executors (:class:`RunJudge`,
:func:`make_judges`), the grading stage that grades, stores and counts each answer
(:class:`Grading`), and the bounded pool of workers with write-behind commits (:func:`run_pool`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from grandrounds.core.records import GenParams, Grade, Message, Request, Response, Sample
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.guard import checked
from grandrounds.providers.base import Provider
from grandrounds.run.batches.executor import BatchSettings, executor_for
from grandrounds.run.config import JudgeConfig, make_provider
from grandrounds.run.executor import DEFER_HELD, Executor, HeldElsewhere, RetryPolicy
from grandrounds.run.limits import EndpointLimits
from grandrounds.store import Store


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

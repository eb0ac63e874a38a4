"""The hub of one endpoint's batches (:class:`BatchHub`, one per store, endpoint and event loop):
it gathers the waiting requests into batches, submits them, records each batch in the store,
polls the open ones, and lands their results in the calls cache, resolving the waiting calls
or sending their requests again (see :mod:`grandrounds.run.batches.executor`)."""

from __future__ import annotations

import asyncio
import json
import random
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from secrets import token_hex
from typing import Any, Protocol, cast

from grandrounds.core.records import Request, Response
from grandrounds.providers.base import Provider, ProviderError
from grandrounds.run.batches.calls import MarkedRequest, context_reason, marked_request
from grandrounds.run.batches.events import RESENT, BatchEvent, BatchStats, HubStats
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.batches.wire import Remote, Submission, Wire
from grandrounds.run.executor import (
    FINAL_OVERFLOW,
    CallObserver,
    Executor,
    RetryPolicy,
    prompt_over_context,
)
from grandrounds.store import Store
from grandrounds.store.batches import BatchItem, StoredBatch

#: Consecutive failed polls (or result downloads) of one batch before this run stops waiting on it.
MAX_POLL_FAILURES = 8


class BatchOwner(Protocol):
    """What the hub uses of the executor whose requests it carries (a
    :class:`~grandrounds.run.batches.executor.BatchExecutor`): its provider, its stats, its count of a call."""

    provider: Provider
    stats: BatchStats

    def count(self, response: Response, retries: int) -> None: ...


@dataclass(kw_only=True)
class _Waiter:
    request: Request
    future: asyncio.Future[Response]
    owner: BatchOwner
    #: the submission this request is in (1 = first); resubmissions so far
    attempt: int = 0
    retries: int = 0
    #: what is sent in its place once it was shrunk to fit the context (None: the request itself)
    fitted: Request | None = None
    #: the next submission is the shrunk one: not an attempt (as for a live call)
    refit: bool = False


@dataclass(kw_only=True)
class _Open:
    """A batch being watched: its stored row, the attempt number of each of its keys, its state,
    the keys whose results landed, and failed looks in a row."""

    stored: StoredBatch
    attempts: dict[str, int]
    state: str
    counts: Mapping[str, Any] = field(default_factory=dict)
    landed: set[str] = field(default_factory=set)
    failures: int = 0
    #: submitted by an earlier run (or another process)
    resumed: bool = False
    #: the executors whose requests it carries (each counts it once)
    owners: list[BatchOwner] = field(default_factory=list)

    def join(self, owner: BatchOwner) -> bool:
        """Count ``owner`` among the batch's executors; False if it was already."""
        if any(o is owner for o in self.owners):
            return False
        self.owners.append(owner)
        if self.resumed:
            owner.stats.resumed_batches += 1
        return True


_HUBS: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[int, str, str], BatchHub]
] = weakref.WeakKeyDictionary()


def hub_for(
    store: Store,
    wire: Wire,
    settings: BatchSettings,
    retry: RetryPolicy,
    observer: CallObserver | None,
    rng: random.Random,
) -> BatchHub:
    """The hub of ``wire``'s endpoint on ``store`` in this event loop (shared by the answers' and
    the judges' executors, so a batch is watched once)."""
    loop = asyncio.get_running_loop()
    hubs = _HUBS.setdefault(loop, {})
    ident = (id(store), wire.name, wire.endpoint)
    hub = hubs.get(ident)
    if hub is None or hub.store is not store:
        hub = hubs[ident] = BatchHub(store, wire, settings, retry, observer, rng)
    return hub


class BatchHub:
    """Collects, submits, watches and collects the batches of one endpoint (see :mod:`grandrounds.run.batches.executor`)."""

    def __init__(
        self,
        store: Store,
        wire: Wire,
        settings: BatchSettings,
        retry: RetryPolicy,
        observer: CallObserver | None,
        rng: random.Random,
    ) -> None:
        self.store, self.wire, self.settings, self.retry, self.observer, self.rng = (
            store,
            wire,
            settings,
            retry,
            observer,
            rng,
        )
        self.stats = HubStats()
        self.waiting: dict[str, _Waiter] = {}
        self.open: dict[int, _Open] = {}
        self.in_batch: dict[str, int] = {}  # key -> row of the open batch carrying it
        self.queue: dict[str, dict[str, None]] = {}  # model -> keys to submit
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._adopt(self.store.open_batches(wire.name, wire.endpoint), resumed=True)

    # -- asking -----------------------------------------------------------------------------
    def ask(self, owner: BatchOwner, request: Request) -> asyncio.Future[Response]:
        """The future of ``request``'s response: from the open batch carrying it, else from a new one."""
        key = request.key()
        have = self.waiting.get(key)
        if have is not None:
            return have.future
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        waiter = self.waiting[key] = _Waiter(request=request, future=fut, owner=owner)
        row = self.in_batch.get(key)
        if row is not None:
            waiter.attempt = self.open[row].attempts.get(key, 1)
            owner.stats.resumed += 1
            self.open[row].join(owner)
            self._watch()
        else:
            self._enqueue(key, request.model)
        return fut

    def _enqueue(self, key: str, model: str) -> None:
        q = self.queue.setdefault(model, {})
        q[key] = None
        if len(q) >= self.settings.max_requests:
            self._flush(model)
        elif model not in self._timers:
            self._timers[model] = asyncio.get_running_loop().call_later(
                self.settings.window, self._flush, model
            )

    def _flush(self, model: str) -> None:
        timer = self._timers.pop(model, None)
        if timer is not None:
            timer.cancel()
        q = self.queue.pop(model, {})
        if q:
            self._spawn(self._submit(list(q)))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- submitting -------------------------------------------------------------------------
    async def _submit(self, keys: list[str]) -> None:
        try:
            # Another process may have submitted some of these since this hub looked.
            self._adopt(self.store.open_batches(self.wire.name, self.wire.endpoint), resumed=True)
            lines: list[tuple[str, bytes]] = []
            for key in keys:
                w = self.waiting.get(key)
                if w is None or w.future.done():
                    continue
                if key in self.in_batch:
                    w.owner.stats.resumed += 1
                    self.open[self.in_batch[key]].join(w.owner)
                    continue
                lines.append(
                    (
                        key,
                        self.wire.line(
                            key, self.wire.body(w.owner.provider, w.fitted or w.request)
                        ),
                    )
                )
            for chunk in _chunks(lines, self.settings.max_requests, self.settings.max_bytes):
                await self._submit_one(chunk)
            self._watch()
        except Exception as e:  # a bug must not leave requests waiting forever
            self._fail_all(keys, e)

    async def _submit_one(self, lines: list[tuple[str, bytes]]) -> None:
        # one submission across its tries: a try after a lost reply looks for the batch it may have created
        tries = Submission(
            marker=token_hex(16),
            started=time.time(),
            known=frozenset(b.batch_id for b in self.store.batches(self.wire.name)),
        )
        for attempt in range(self.retry.max_attempts):
            try:
                remote = await self.wire.submit([line for _, line in lines], tries)
                break
            except ProviderError as err:
                if not err.retryable or attempt == self.retry.max_attempts - 1:
                    for key, _ in lines:
                        self._final(key, None, f"batch not submitted: {err}")
                    return
                self.stats.submit_failures += 1
                await asyncio.sleep(self.retry.delay(attempt, self.rng, err.retry_after))
        items = []
        for key, _ in lines:
            w = self.waiting[key]
            if w.refit:
                w.refit = False  # the shrunk request: the same attempt, with room to answer
            else:
                w.attempt += 1
                if w.attempt > 1:
                    w.retries += 1  # counted in the executor's stats when the call resolves
            w.owner.stats.submitted += 1
            items.append(BatchItem(key, w.attempt, marked_request(w.request)))
        stored = self.store.add_batch(
            self.wire.name, self.wire.endpoint, remote.batch_id, remote.state, items
        )
        self.stats.batches += 1
        self.stats.found_again += tries.found
        self.stats.requests += len(items)
        self.stats.largest = max(self.stats.largest, len(items))
        self._track(stored, {i.key: i.attempt for i in items}, remote.state)
        batch = self.open[stored.row]
        for key, _ in lines:
            owner = self.waiting[key].owner
            if batch.join(owner):
                owner.stats.batches += 1
        self._event(
            BatchEvent(
                provider=self.wire.name,
                batch_id=remote.batch_id,
                what="submitted",
                size=len(items),
                counts=remote.counts,
                state=remote.state,
            )
        )

    # -- watching ---------------------------------------------------------------------------
    def _adopt(self, batches: Iterable[StoredBatch], resumed: bool) -> None:
        for b in batches:
            if b.row in self.open:
                continue
            self._track(b, self.store.batch_attempts(b.row), b.state, b.counts)
            if resumed:
                self.open[b.row].resumed = True
                self.stats.resumed_batches += 1
                self._event(
                    BatchEvent(
                        provider=self.wire.name,
                        batch_id=b.batch_id,
                        what=f"resumed ({b.state})",
                        size=len(b.keys),
                        counts=b.counts,
                        state=b.state,
                    )
                )

    def _track(
        self,
        stored: StoredBatch,
        attempts: dict[str, int],
        state: str,
        counts: Mapping[str, Any] | None = None,
    ) -> None:
        self.open[stored.row] = _Open(
            stored=stored, attempts=attempts, state=state, counts=dict(counts or {})
        )
        for key in stored.keys:
            self.in_batch[key] = stored.row

    def _watch(self) -> None:
        if self.open and self.waiting and (self._poller is None or self._poller.done()):
            self._poller = asyncio.get_running_loop().create_task(self._poll_loop())

    async def _poll_loop(self) -> None:
        try:
            while self.open and self.waiting:
                await asyncio.sleep(self.settings.poll_interval)
                for row in list(self.open):
                    if row in self.open:
                        await self._poll(self.open[row])
        except Exception as e:  # a bug must not leave requests waiting forever
            self._fail_all(list(self.waiting), e)

    async def _poll(self, b: _Open) -> None:
        try:
            remote = await self.wire.status(b.stored.batch_id)
        except ProviderError as err:
            self._poll_failed(
                b, f"could not look at batch {b.stored.batch_id}: {err}", err.retryable
            )
            return
        self.stats.polls += 1
        b.failures = 0
        if remote.state != b.state or dict(remote.counts) != dict(b.counts):
            b.state, b.counts = remote.state, dict(remote.counts)
            self.store.update_batch(b.stored.row, remote.state, remote.counts, remote.detail)
            self._event(
                BatchEvent(
                    provider=self.wire.name,
                    batch_id=b.stored.batch_id,
                    what=remote.state,
                    size=len(b.stored.keys),
                    counts=remote.counts,
                    state=remote.state,
                )
            )
        if remote.done:
            await self._collect(b, remote)

    def _poll_failed(self, b: _Open, reason: str, retryable: bool) -> None:
        """A failed look or download: tried again at the next poll, until it fails for good; then the
        batch's waiting calls fail for this run and the batch stays open in the store for the next."""
        self.stats.poll_failures += 1
        b.failures += 1
        if retryable and b.failures < MAX_POLL_FAILURES:
            return
        del self.open[b.stored.row]
        for key in b.stored.keys:
            self.in_batch.pop(key, None)
            if key in self.waiting and key not in b.landed:
                self._final(
                    key,
                    b,
                    f"{reason}; the batch stays recorded: run the same command again to pick it up",
                )
        for owner in b.owners:
            owner.stats.ended["not reachable"] = owner.stats.ended.get("not reachable", 0) + 1
        self._event(
            BatchEvent(
                provider=self.wire.name,
                batch_id=b.stored.batch_id,
                what="not reachable",
                size=len(b.stored.keys),
                counts=b.counts,
                state=b.state,
                closed=True,
            )
        )

    async def _collect(self, b: _Open, remote: Remote) -> None:
        try:
            async for key, result in self.wire.results(remote):
                if key in b.attempts and key not in b.landed:
                    b.landed.add(key)
                    self._land(b, key, result)
        except ProviderError as err:
            self._poll_failed(
                b, f"could not read the results of batch {b.stored.batch_id}: {err}", err.retryable
            )
            return
        outcome = self.wire.outcome(remote)
        missing = f"batch {remote.state}{': ' + remote.detail if remote.detail else ''} before this request was answered"
        cause = {"expired": "batch_expired", "cancelled": "batch_cancelled"}.get(outcome)
        for key in b.stored.keys:
            if key not in b.landed and key in b.attempts:
                b.landed.add(key)
                self._land(b, key, ProviderError(missing, retryable=True, kind=cause))
        self.store.close_batch(b.stored.row, remote.state, remote.counts, remote.detail)
        del self.open[b.stored.row]
        for key in b.stored.keys:
            if self.in_batch.get(key) == b.stored.row:
                del self.in_batch[key]
        self.stats.ended[outcome] = self.stats.ended.get(outcome, 0) + 1
        for owner in b.owners:
            owner.stats.ended[outcome] = owner.stats.ended.get(outcome, 0) + 1
        self._event(
            BatchEvent(
                provider=self.wire.name,
                batch_id=b.stored.batch_id,
                what=f"collected ({remote.state})",
                size=len(b.stored.keys),
                counts=remote.counts,
                summary=self.stats.line(self.wire.endpoint),
                state=remote.state,
                closed=True,
            )
        )

    def _land(self, b: _Open, key: str, outcome: Response | ProviderError) -> None:
        """One result of a batch: stored and resolved, or queued for the next batch."""
        attempt = b.attempts[key]
        if isinstance(outcome, Response):
            stored = self._request_of(b, key)
            response = replace(outcome, key=key)
            if stored is not None:
                self.store.put_call(cast(Request, stored), response, attempts=attempt)
            if key in self.waiting:
                self._resolve(key, response)
            return
        waiter = self.waiting.get(key)
        carrier = self.in_batch.get(key)
        if (
            carrier is not None
            and carrier != b.stored.row
            and (outcome.retryable or outcome.kind == "context_length")
        ):
            return  # a newer open batch carries it already
        if waiter is not None and waiter.fitted is None and outcome.kind == "context_length":
            fitted = Executor._fit_context(
                waiter.request, outcome
            )  # the live executor's rule, once per call
            if fitted is not None:
                waiter.fitted, waiter.refit = fitted, True
                waiter.owner.stats.shrunk += 1
                self.in_batch.pop(key, None)
                self._enqueue(key, waiter.request.model)
                return
        if outcome.retryable and attempt < self.settings.max_attempts:
            self.in_batch.pop(key, None)
            if waiter is not None:  # one nobody asked for in this process is not sent again
                cause = outcome.kind if outcome.kind in RESENT else "error"
                waiter.owner.stats.resent[cause] = waiter.owner.stats.resent.get(cause, 0) + 1
                self._enqueue(key, waiter.request.model)
            return
        reason, final = str(outcome), None
        if outcome.kind == "context_length":
            stored = self._request_of(b, key)
            sent = waiter.fitted if waiter is not None else None
            request_json = stored.json_text if stored is not None else "{}"
            reason = context_reason(
                outcome, request_json, sent.params.max_tokens if sent is not None else None
            )
            if prompt_over_context(str(json.loads(request_json).get("kind", "chat")), outcome):
                final = (
                    FINAL_OVERFLOW  # asking again cannot help: later runs take it from the store
                )
        if outcome.retryable:
            reason += f" (gave up after {attempt} attempts)"
        self._final(key, b, reason, final)

    def _request_of(self, b: _Open | None, key: str) -> MarkedRequest | None:
        """What is stored as the call's request: the waiting request, else the one kept with the batch."""
        waiter = self.waiting.get(key)
        if waiter is not None:
            return MarkedRequest.from_request(waiter.request)
        text = self.store.batch_request_json(b.stored.row, key) if b is not None else None
        return MarkedRequest.of(key, text) if text is not None else None

    def _final(
        self, key: str, b: _Open | None, reason: str, finish_reason: str | None = None
    ) -> None:
        """A failed call: stored like a live failure (retried by the next run unless ``finish_reason``
        marks it final), and resolved."""
        response = Response(key=key, error=reason, finish_reason=finish_reason)
        stored = self._request_of(b, key)
        if stored is not None:
            self.store.put_call(
                cast(Request, stored),
                response,
                attempts=b.attempts.get(key, 1) if b is not None else 1,
            )
        waiter = self.waiting.get(key)
        if waiter is not None:
            self._resolve(key, response)

    def _resolve(self, key: str, response: Response) -> None:
        waiter = self.waiting.pop(key)
        if not waiter.future.done():
            waiter.owner.count(response, retries=waiter.retries)
            waiter.future.set_result(response)

    def _fail_all(self, keys: Iterable[str], err: BaseException) -> None:
        for key in keys:
            waiter = self.waiting.pop(key, None)
            if waiter is not None and not waiter.future.done():
                waiter.future.set_exception(err)
                waiter.future.exception()  # marked retrieved: the caller re-raises it

    def _event(self, event: BatchEvent) -> None:
        on_batch = getattr(self.observer, "on_batch", None)
        if callable(on_batch):
            on_batch(event)
            return
        console = getattr(self.observer, "console", None)
        if console is not None:
            from grandrounds.core.display import styled

            console.print(
                styled(event.line(), "dim")
            )  # the server's text: never markup, no escape sequence
            if event.summary:
                console.print(styled(f"  {event.summary}", "dim"))


def _chunks(
    lines: list[tuple[str, bytes]], max_requests: int, max_bytes: int
) -> Iterable[list[tuple[str, bytes]]]:
    chunk: list[tuple[str, bytes]] = []
    size = 0
    for key, line in lines:
        if chunk and (len(chunk) >= max_requests or size + len(line) > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append((key, line))
        size += len(line)
    if chunk:
        yield chunk

"""Batch APIs: calls sent through OpenAI's Batch API or Anthropic's Message Batches instead of one by one.

``--batch answers|judges|both`` swaps the :class:`~grandrounds.executor.Executor` of those calls
for a :class:`BatchExecutor`, which has the same interface (``await executor(request) ->
Response``; the store first, identical requests in flight shared) and differs only in how a
call is made:

1. requests are collected for a short window (``window`` seconds after the first, or until
   ``max_requests`` wait, or ``max_bytes`` of request lines) and submitted as one batch, one
   batch per model. OpenAI: the requests are uploaded as a JSONL file (``POST /files``,
   ``purpose=batch``, one line ``{custom_id, method, url, body}`` each), then ``POST /batches``
   with ``endpoint=/v1/chat/completions`` and ``completion_window=24h``. Anthropic:
   ``POST /v1/messages/batches`` with ``requests: [{custom_id, params}]``. The ``custom_id`` is
   the request's key (the cache key), the body exactly what a live call would send;
2. the batch id, its request keys and the requests themselves are committed to the store (the
   ``batches`` table) before anything waits on it;
3. every open batch of the endpoint is polled every ``poll_interval`` seconds (``GET
   /batches/{id}``; ``GET /v1/messages/batches/{id}``) while a request of this process waits;
4. when a batch ends, its results are read line by line as they download (OpenAI: the output
   and error files, ``GET /files/{id}/content``; Anthropic: ``results_url``) and each lands in
   the same calls cache as a live call (``Store.put_call``), so a later live run reuses it; the
   waiting request is resolved; the batch is closed only after those rows are committed.

Resume: a hub looks up the endpoint's open batches in the store before it submits anything, and
again before each submission (another process may have submitted since). A request whose key is
in an open batch waits for that batch; it is never submitted a second time. Results that land
for keys nobody in this process asked for yet are stored all the same, from the requests kept
with the batch.

Failures: a line that failed for a reason worth retrying (rate limited, server error, the batch
expired or was cancelled before the request ran, a batch that failed validation) is sent again
in a new batch, up to ``max_attempts`` submissions; a line that failed for good (a 400) or ran
out of attempts is a failed call, stored and counted like a live one, never a zero. A judge
line that overflowed the model's context is sent once more, in a new batch, with ``max_tokens``
shrunk by the live executor's rule (:meth:`Executor._fit_context`; counted in ``shrunk``, not an
attempt); an overflow that cannot be fitted, or that overflows again, is a failed call naming
the context, the prompt's size and the ``max_tokens`` sent. Submitting, polling and downloading are retried on transient HTTP failures with
the run's retry policy; a batch that cannot be polled or read any more fails its waiting calls
for this run and stays open in the store for the next.

Cost: batch calls are billed at half price by both providers. Every call stored from a batch
has ``"batch": true`` in its stored request JSON (``calls.request_json``; never part of the key,
so a live run of the same request is a cache hit), and the ``batches`` table lists the keys each
batch carried.

Progress: each batch's state changes (submitted, in_progress, completed, expired, ...) and its
request counts are reported to the run's progress (``on_batch`` when it has one, else a line on
its console), with a running total per endpoint. Each executor counts the batches that carried
its requests (submitted, picked up from an earlier run, and how each ended) and the requests it
sent again by cause, for the run's closing summary (:meth:`BatchStats.batch_line`).

Log-probability requests (``next_token``, ``loglikelihood``) are not batched: they go through a
live executor inside the batch executor.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable, Iterable, Literal, Mapping, cast

import aiohttp

from grandrounds.errors import ConfigError
from grandrounds.executor import CallObserver, CallStats, EndpointLimits, Executor, RetryPolicy, StoreFirst
from grandrounds.providers.anthropic import AnthropicProvider, error_from_body, message_body, read_message
from grandrounds.providers.base import Provider, ProviderError, error_reason, public_url, redact
from grandrounds.providers.http import HttpClient, HttpReply
from grandrounds.providers.openai_compat import OpenAIProvider, context_message, context_overflow
from grandrounds.records import Request, Response, Usage
from grandrounds.store import Store
from grandrounds.store.batches import BatchItem, StoredBatch

Role = Literal["answers", "judges"]

#: Consecutive failed polls (or result downloads) of one batch before this run stops waiting on it.
MAX_POLL_FAILURES = 8


@dataclass(frozen=True)
class BatchSettings:
    """Which calls go through batch APIs, and how batches are formed and watched.

    ``window``, ``poll_interval`` default to ``$GRANDROUNDS_BATCH_WINDOW`` and
    ``$GRANDROUNDS_BATCH_POLL`` when :meth:`parse` builds the settings (tests poll a loopback
    server every few hundredths of a second; a real batch takes minutes to hours).
    """

    answers: bool = False
    judges: bool = False
    #: Seconds requests are collected after the first one before they are submitted together.
    window: float = 1.0
    #: Most requests in one batch (OpenAI accepts 50,000, Anthropic 100,000).
    max_requests: int = 10_000
    #: Most bytes of request lines in one batch (OpenAI's input file may be 200 MB, Anthropic's request 256 MB).
    max_bytes: int = 100 * 2**20
    #: Seconds between looks at each open batch.
    poll_interval: float = 30.0
    #: Submissions of one request (the first and the retries after an expiry, a cancellation or a retryable error).
    max_attempts: int = 3
    #: Requests that may wait in batches at once, per executor (the width of the runner's pool).
    concurrency: int = 5_000
    #: Seconds an upload, a status look or a results download may take.
    transfer_timeout: float = 600.0

    def covers(self, role: Role) -> bool:
        return self.answers if role == "answers" else self.judges

    @classmethod
    def parse(cls, what: str | None, **overrides: Any) -> "BatchSettings | None":
        """``answers`` | ``judges`` | ``both`` (None or "" = no batching) -> settings."""
        if not what:
            return None
        if what not in ("answers", "judges", "both"):
            raise ConfigError(f"--batch {what!r}: expected answers, judges or both")
        env: dict[str, Any] = {}
        for name, var in (("window", "GRANDROUNDS_BATCH_WINDOW"), ("poll_interval", "GRANDROUNDS_BATCH_POLL")):
            raw = os.environ.get(var)
            if raw:
                try:
                    env[name] = float(raw)
                except ValueError:
                    raise ConfigError(f"${var}={raw!r}: expected a number of seconds") from None
                if env[name] <= 0:
                    raise ConfigError(f"${var}={raw!r}: expected a positive number of seconds")
        return cls(answers=what in ("answers", "both"), judges=what in ("judges", "both"), **(env | overrides))


def executor_for(settings: BatchSettings | None, role: Role) -> Callable[..., Any]:
    """The executor class for ``role``'s calls: :class:`BatchExecutor` when ``settings`` batches
    them, else :class:`Executor`. Both take ``(store, provider, concurrency, retry, seed, observer,
    endpoints)``."""
    if settings is None or not settings.covers(role):
        return Executor

    def make(store: Store, provider: Provider, *args: Any, **kwargs: Any) -> BatchExecutor:
        return BatchExecutor(store, provider, settings, *args, **kwargs)

    return make


def pool_width(answers: Any, judges: Iterable[Any]) -> int:
    """Workers of the runner's pool: twice the answers' concurrency (as for live calls), or wide
    enough for batched judges to fill their batches when answers are live."""
    width = 2 * answers.concurrency
    for e in judges:
        if isinstance(e, BatchExecutor):
            width = max(width, 2 * e.concurrency)
    return max(4, width)


# ---- what the run sees ----------------------------------------------------------------------


#: How a batch ended, as counted in summaries (Anthropic's ``ended`` is told apart by its request counts).
OUTCOMES = ("completed", "expired", "cancelled", "failed")
#: Why a request was sent again in a new batch -> the words of the summary.
RESENT = {"batch_expired": "after an expiry", "batch_cancelled": "after a cancellation", "error": "after a failed line"}


@dataclass
class BatchStats(CallStats):
    """CallStats of a batch executor, plus what went through batches: requests submitted (a
    request sent again after an expiry counts again), requests picked up from batches an earlier
    run submitted, and those resolved from a batch; the batches that carried this executor's
    requests (``batches`` submitted, ``resumed_batches`` picked up, ``ended`` by outcome: completed,
    expired, cancelled, failed, or "not reachable" for one left open for the next run), and the
    requests sent again in a new batch by cause (``resent``: batch_expired, batch_cancelled, error)."""

    submitted: int = 0
    resumed: int = 0
    batched: int = 0
    batches: int = 0
    resumed_batches: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    resent: dict[str, int] = field(default_factory=dict)

    def batch_line(self) -> str:
        """The batches of this executor's calls, for the run's summary, e.g. "batches: 2 submitted,
        0 picked up from an earlier run; ended: 1 completed, 1 expired, 0 cancelled, 0 failed;
        calls retried: 4 after an expiry, 0 after a cancellation, 1 after a failed line"."""
        if not self.batches and not self.resumed_batches:
            return "batches: none submitted or picked up (every call came from the store)"
        ended = [f"{self.ended.get(o, 0)} {o}" for o in OUTCOMES]
        ended += [f"{n} {o}" for o, n in sorted(self.ended.items()) if o not in OUTCOMES]
        still = self.batches + self.resumed_batches - sum(self.ended.values())
        if still > 0:
            ended.append(f"{still} still open")
        resent = ", ".join(f"{self.resent.get(cause, 0)} {words}" for cause, words in RESENT.items())
        return (f"batches: {self.batches} submitted, {self.resumed_batches} picked up from an earlier run; "
                f"ended: {', '.join(ended)}; calls retried: {resent}")


@dataclass
class HubStats:
    """Per endpoint: batches submitted and picked up, polls, failed looks and submissions (each
    tried again), how each batch ended (completed, expired, cancelled, failed), the largest batch."""

    batches: int = 0
    resumed_batches: int = 0
    requests: int = 0
    polls: int = 0
    poll_failures: int = 0
    submit_failures: int = 0
    largest: int = 0
    ended: dict[str, int] = field(default_factory=dict)

    def line(self, where: str) -> str:
        ended = ", ".join(f"{n} {state}" for state, n in sorted(self.ended.items())) or "none ended yet"
        resumed = f", {self.resumed_batches} picked up from an earlier run" if self.resumed_batches else ""
        return (f"batches at {where}: {self.batches} submitted ({self.requests} requests, largest {self.largest}){resumed}; "
                f"{ended}; {self.polls} polls")


@dataclass(frozen=True)
class BatchEvent:
    """One change seen on a batch: ``what`` is submitted, resumed, a provider state (validating,
    in_progress, finalizing, completed, expired, cancelling, cancelled, failed; in_progress,
    canceling, ended), collected or not reachable; ``counts`` the provider's request counts;
    ``state`` the provider's state after it; ``closed`` True once this run no longer watches the
    batch (collected, or not reachable)."""

    provider: str
    batch_id: str
    what: str
    size: int
    counts: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    state: str = ""
    closed: bool = False

    @property
    def back(self) -> int:
        """Requests of the batch the provider has processed (answered or failed) so far, from its
        counts: OpenAI's completed + failed, Anthropic's all but processing."""
        c = self.counts
        keys = [k for k in c if k != "processing"] if "processing" in c else ["completed", "failed"]
        n = sum(v for k in keys if isinstance(v := c.get(k), int) and not isinstance(v, bool))
        return max(0, min(self.size, n))

    @property
    def milestone(self) -> bool:
        """Worth a line of its own (submitted, picked up, closed); other events only move the bar."""
        return self.closed or self.what == "submitted" or self.what.startswith("resumed")

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items() if isinstance(v, int)) if self.counts else ""
        tail = f" ({counts})" if counts else ""
        return f"batch {self.provider} {self.batch_id}: {self.what}, {self.size} requests{tail}"


class BatchExecutor(StoreFirst):
    """The run's executor for batched calls (answers or one judge): store first, identical
    requests shared, then the endpoint's :class:`BatchHub`."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        settings: BatchSettings,
        concurrency: int | None = None,
        retry: RetryPolicy = RetryPolicy(),
        seed: int = 0,
        observer: CallObserver | None = None,
        endpoints: EndpointLimits | None = None,
    ) -> None:
        super().__init__(store, provider, concurrency or settings.concurrency, retry, seed, observer)
        self.settings = settings
        self.stats = BatchStats()
        self.wire = wire_for(provider, settings)  # a provider without a batch API is refused here
        # Log-probability requests are asked live, counted in the same stats.
        self.live = Executor(store, provider, concurrency or provider.default_concurrency, retry, seed, observer, endpoints)
        self.live.stats = self.stats
        self._hub: BatchHub | None = None

    @property
    def hub(self) -> "BatchHub":
        if self._hub is None:
            self._hub = hub_for(self.store, self.wire, self.settings, self.retry, self.observer, self.rng)
        return self._hub

    async def __call__(self, request: Request) -> Response:
        if request.kind != "chat":
            return await self.live(request)
        key = request.key()
        known = await self._known(key)
        if known is not None:
            return known
        fut = self.hub.ask(self, request)
        self._inflight[key] = fut
        try:
            return await asyncio.shield(fut)
        finally:
            if fut.done():
                self._inflight.pop(key, None)

    def count(self, response: Response, retries: int) -> None:
        """One call resolved from a batch: counted as the live executor counts a call."""
        self.stats.batched += 1
        self.live._count(response, retries)


# ---- one endpoint's batches -------------------------------------------------------------------


@dataclass
class _Waiter:
    request: Request
    future: asyncio.Future[Response]
    owner: BatchExecutor
    #: the submission this request is in (1 = first); resubmissions so far
    attempt: int = 0
    retries: int = 0
    #: what is sent in its place once it was shrunk to fit the context (None: the request itself)
    fitted: Request | None = None
    #: the next submission is the shrunk one: not an attempt (as for a live call)
    refit: bool = False


@dataclass
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
    owners: list[BatchExecutor] = field(default_factory=list)

    def join(self, owner: BatchExecutor) -> bool:
        """Count ``owner`` among the batch's executors; False if it was already."""
        if any(o is owner for o in self.owners):
            return False
        self.owners.append(owner)
        if self.resumed:
            owner.stats.resumed_batches += 1
        return True


_HUBS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[int, str, str], BatchHub]]" = weakref.WeakKeyDictionary()


def hub_for(store: Store, wire: "Wire", settings: BatchSettings, retry: RetryPolicy, observer: CallObserver | None, rng: random.Random) -> "BatchHub":
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
    """Collects, submits, watches and collects the batches of one endpoint (see the module docstring)."""

    def __init__(self, store: Store, wire: "Wire", settings: BatchSettings, retry: RetryPolicy,
                 observer: CallObserver | None, rng: random.Random) -> None:
        self.store, self.wire, self.settings, self.retry, self.observer, self.rng = store, wire, settings, retry, observer, rng
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
    def ask(self, owner: BatchExecutor, request: Request) -> asyncio.Future[Response]:
        """The future of ``request``'s response: from the open batch carrying it, else from a new one."""
        key = request.key()
        have = self.waiting.get(key)
        if have is not None:
            return have.future
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        waiter = self.waiting[key] = _Waiter(request, fut, owner)
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
            self._timers[model] = asyncio.get_running_loop().call_later(self.settings.window, self._flush, model)

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
                lines.append((key, self.wire.line(key, self.wire.body(w.owner.provider, w.fitted or w.request))))
            for chunk in _chunks(lines, self.settings.max_requests, self.settings.max_bytes):
                await self._submit_one(chunk)
            self._watch()
        except Exception as e:  # a bug must not leave requests waiting forever
            self._fail_all(keys, e)

    async def _submit_one(self, lines: list[tuple[str, bytes]]) -> None:
        for attempt in range(self.retry.max_attempts):
            try:
                remote = await self.wire.submit([line for _, line in lines])
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
        stored = self.store.add_batch(self.wire.name, self.wire.endpoint, remote.batch_id, remote.state, items)
        self.stats.batches += 1
        self.stats.requests += len(items)
        self.stats.largest = max(self.stats.largest, len(items))
        self._track(stored, {i.key: i.attempt for i in items}, remote.state)
        batch = self.open[stored.row]
        for key, _ in lines:
            owner = self.waiting[key].owner
            if batch.join(owner):
                owner.stats.batches += 1
        self._event(BatchEvent(self.wire.name, remote.batch_id, "submitted", len(items), remote.counts, state=remote.state))

    # -- watching ---------------------------------------------------------------------------
    def _adopt(self, batches: Iterable[StoredBatch], resumed: bool) -> None:
        for b in batches:
            if b.row in self.open:
                continue
            self._track(b, self.store.batch_attempts(b.row), b.state, b.counts)
            if resumed:
                self.open[b.row].resumed = True
                self.stats.resumed_batches += 1
                self._event(BatchEvent(self.wire.name, b.batch_id, f"resumed ({b.state})", len(b.keys), b.counts, state=b.state))

    def _track(self, stored: StoredBatch, attempts: dict[str, int], state: str, counts: Mapping[str, Any] | None = None) -> None:
        self.open[stored.row] = _Open(stored, attempts, state, dict(counts or {}))
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
            self._poll_failed(b, f"could not look at batch {b.stored.batch_id}: {err}", err.retryable)
            return
        self.stats.polls += 1
        b.failures = 0
        if remote.state != b.state or dict(remote.counts) != dict(b.counts):
            b.state, b.counts = remote.state, dict(remote.counts)
            self.store.update_batch(b.stored.row, remote.state, remote.counts, remote.detail)
            self._event(BatchEvent(self.wire.name, b.stored.batch_id, remote.state, len(b.stored.keys), remote.counts, state=remote.state))
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
                self._final(key, b, f"{reason}; the batch stays recorded: run the same command again to pick it up")
        for owner in b.owners:
            owner.stats.ended["not reachable"] = owner.stats.ended.get("not reachable", 0) + 1
        self._event(BatchEvent(self.wire.name, b.stored.batch_id, "not reachable", len(b.stored.keys), b.counts, state=b.state, closed=True))

    async def _collect(self, b: _Open, remote: "Remote") -> None:
        try:
            async for key, outcome in self.wire.results(remote):
                if key in b.attempts and key not in b.landed:
                    b.landed.add(key)
                    self._land(b, key, outcome)
        except ProviderError as err:
            self._poll_failed(b, f"could not read the results of batch {b.stored.batch_id}: {err}", err.retryable)
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
        self._event(BatchEvent(self.wire.name, b.stored.batch_id, f"collected ({remote.state})", len(b.stored.keys), remote.counts,
                               summary=self.stats.line(self.wire.endpoint), state=remote.state, closed=True))

    def _land(self, b: _Open, key: str, outcome: "Response | ProviderError") -> None:
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
        if carrier is not None and carrier != b.stored.row and (outcome.retryable or outcome.kind == "context_length"):
            return  # a newer open batch carries it already
        if waiter is not None and waiter.fitted is None and outcome.kind == "context_length":
            fitted = Executor._fit_context(waiter.request, outcome)  # the live executor's rule, once per call
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
        reason = str(outcome)
        if outcome.kind == "context_length":
            stored = self._request_of(b, key)
            sent = waiter.fitted if waiter is not None else None
            reason = context_reason(outcome, stored.json_text if stored is not None else "{}",
                                    sent.params.max_tokens if sent is not None else None)
        if outcome.retryable:
            reason += f" (gave up after {attempt} attempts)"
        self._final(key, b, reason)

    def _request_of(self, b: "_Open | None", key: str) -> "_Marked | None":
        """What is stored as the call's request: the waiting request, else the one kept with the batch."""
        waiter = self.waiting.get(key)
        if waiter is not None:
            return _Marked.from_request(waiter.request)
        text = self.store.batch_request_json(b.stored.row, key) if b is not None else None
        return _Marked.of(key, text) if text is not None else None

    def _final(self, key: str, b: "_Open | None", reason: str) -> None:
        """A failed call: stored like a live failure (retried by the next run), and resolved."""
        response = Response(key=key, error=reason)
        stored = self._request_of(b, key)
        if stored is not None:
            self.store.put_call(cast(Request, stored), response, attempts=b.attempts.get(key, 1) if b is not None else 1)
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
            from rich.markup import escape

            console.print(f"[dim]{escape(event.line())}")
            if event.summary:
                console.print(f"[dim]  {escape(event.summary)}")


def _chunks(lines: list[tuple[str, bytes]], max_requests: int, max_bytes: int) -> Iterable[list[tuple[str, bytes]]]:
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


def context_reason(err: ProviderError, request_json: str, max_tokens: int | None = None) -> str:
    """A context overflow's stored reason, with the max_tokens sent (``max_tokens``, else the
    request's) and the flag to lower, as the live executor says it."""
    params = json.loads(request_json)
    if max_tokens is None:
        max_tokens = (params.get("params") or {}).get("max_tokens")
    flag = "--judge-max-tokens" if params.get("purpose") == "judge" else "--max-tokens"
    return f"{context_message(err.context_limit, err.prompt_tokens, max_tokens)}: lower {flag} or serve the model with a larger context"


# ---- what is stored for a batched call ----------------------------------------------------------


def marked_request(request: Request) -> str:
    """The request's canonical JSON with ``"batch": true`` added (stored with the call: billed at
    batch prices). The key is still the request's own."""
    data = json.loads(request.canonical())
    data["batch"] = True
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class _Marked:
    """What ``Store.put_call`` reads of a request, from the JSON kept with a batch."""

    provider: str
    model: str
    purpose: str
    json_text: str
    key_text: str

    def canonical(self) -> str:
        return self.json_text

    def key(self) -> str:
        return self.key_text

    @classmethod
    def of(cls, key: str, request_json: str) -> "_Marked":
        data = json.loads(request_json)
        return cls(str(data.get("provider", "")), str(data.get("model", "")), str(data.get("purpose", "answer")), request_json, key)

    @classmethod
    def from_request(cls, request: Request) -> "_Marked":
        return cls(request.provider, request.model, request.purpose, marked_request(request), request.key())


# ---- HTTP beyond JSON POSTs ---------------------------------------------------------------------


class BatchHttp(HttpClient):
    """The provider's HTTP client (same pool, proxy, credentials and error mapping) with what batch
    APIs need besides JSON POSTs: GETs, a multipart file upload, a body already encoded, and JSONL
    downloads read line by line (memory bounded by the longest line, itself capped at
    ``max_response_bytes``)."""

    def _url(self, where: str) -> str:
        return where if "://" in where else self.base_url + where

    def _via(self) -> dict[str, Any]:
        """The proxy settings HttpClient read from the environment, as aiohttp takes them."""
        out: dict[str, Any] = {"proxy": getattr(self, "_proxy", None)}
        for name in ("proxy_headers", "proxy_auth"):
            value = getattr(self, f"_{name}", None)
            if value:
                out[name] = value
        return out

    def _headers_for(self, content_type: str | None) -> dict[str, str]:
        out = {k: v for k, v in self.headers.items() if k.lower() != "content-type"}
        if content_type:
            out["Content-Type"] = content_type
        return out

    async def _send(self, method: str, where: str, data: Any = None, content_type: str | None = None) -> HttpReply:
        session = self._session()
        try:
            async with asyncio.timeout(self.timeout):
                async with session.request(method, self._url(where), data=data, headers=self._headers_for(content_type),
                                           allow_redirects=False, **self._via()) as resp:
                    return HttpReply(resp.status, resp.headers, await self._read(resp))
        except TimeoutError:
            raise ProviderError(f"timeout: no complete reply within {self.timeout:g} s", retryable=True, kind="timeout") from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:
            raise ProviderError(self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True) from None

    async def get(self, where: str) -> HttpReply:
        return await self._send("GET", where)

    async def post_bytes(self, where: str, data: bytes) -> HttpReply:
        """POST a body that is already JSON."""
        return await self._send("POST", where, data, "application/json")

    async def post_file(self, where: str, fields: Mapping[str, str], filename: str, data: bytes) -> HttpReply:
        """POST a multipart form: ``fields`` and one file."""
        form = aiohttp.FormData()
        for name, value in fields.items():
            form.add_field(name, value)
        form.add_field("file", data, filename=filename, content_type="application/jsonl")
        return await self._send("POST", where, form)

    async def lines(self, where: str) -> AsyncIterator[bytes]:
        """The non-empty lines of a JSONL body as they arrive; ProviderError for a non-2xx status,
        a transport failure, a line over the cap, or ``timeout`` seconds without data."""
        session = self._session()
        cap = self.max_response_bytes
        try:
            async with session.get(self._url(where), headers=self._headers_for(None), allow_redirects=False, **self._via()) as resp:
                if resp.status >= 300:
                    raise status_failure(HttpReply(resp.status, resp.headers, await self._read(resp)), self.secrets)
                parts: list[bytes] = []  # the line being read, in pieces (no quadratic re-joining)
                size = 0
                while True:
                    async with asyncio.timeout(self.timeout):
                        chunk = await resp.content.readany()
                    if not chunk:
                        break
                    *ends, rest = chunk.split(b"\n")
                    for i, piece in enumerate(ends):
                        line = b"".join((*parts, piece)) if i == 0 and parts else piece
                        if i == 0:
                            parts, size = [], 0
                        if len(line) > cap:
                            raise _line_too_large(cap)
                        if line.strip():
                            yield line
                    parts.append(rest)
                    size += len(rest)
                    if size > cap:
                        resp.close()
                        raise _line_too_large(cap)
                tail = b"".join(parts)
                if tail.strip():
                    yield tail
        except TimeoutError:
            raise ProviderError(f"timeout: no data for {self.timeout:g} s while reading results", retryable=True, kind="timeout") from None
        except aiohttp.ClientError as err:
            raise self._failure(err) from None
        except OSError as err:
            raise ProviderError(self._redact(f"connection error: {type(err).__name__}: {err}"), retryable=True) from None


def _line_too_large(cap: int) -> ProviderError:
    return ProviderError(f"response too large: a result line over {cap / 2**20:g} MB (raise max_response_mb to accept more)",
                         retryable=False, kind="too_large")


def status_failure(reply: HttpReply, secrets: Iterable[str]) -> ProviderError:
    """A non-2xx reply of a batch endpoint (submit, status, download) as a ProviderError."""
    try:
        parsed = json.loads(reply.body)
    except ValueError:
        parsed = None
    text = error_reason(parsed) or reply.body[:2000].decode("utf-8", "replace")
    reason = " ".join(redact(text, secrets).split())[:300]
    retry_after = reply.headers.get("retry-after")
    try:
        after = float(retry_after) if retry_after is not None else None
    except ValueError:
        after = None
    retryable = reply.status >= 500 or reply.status in (408, 409, 429)
    return ProviderError(f"HTTP {reply.status}: {reason}", retryable=retryable, retry_after=after)


def _json_object(reply: HttpReply, secrets: Iterable[str]) -> dict[str, Any]:
    if reply.status >= 300:
        raise status_failure(reply, secrets)
    try:
        out = json.loads(reply.body)
    except ValueError:
        raise ProviderError("malformed response body: invalid JSON", retryable=True) from None
    if not isinstance(out, dict):
        raise ProviderError("malformed response body: not a JSON object", retryable=True)
    return out


# ---- the two wire formats -----------------------------------------------------------------------


@dataclass(frozen=True)
class Remote:
    """A batch as its provider last described it."""

    batch_id: str
    state: str
    done: bool
    counts: Mapping[str, Any] = field(default_factory=dict)
    #: why a batch failed as a whole (OpenAI's validation errors), else ""
    detail: str = ""
    #: where its results are: OpenAI (output file id, error file id); Anthropic (results URL,)
    results: tuple[str | None, ...] = ()


class Wire:
    """One provider's batch API: request lines, submission, status and results.

    Each operation uses a client of its own, closed when it ends (the connection pool is the
    endpoint's, kept while the provider or another operation uses it): nothing is left open
    when the run closes its providers.
    """

    name: str = ""
    endpoint: str = ""
    base_url: str = ""
    secrets: tuple[str, ...] = ()

    def client(self) -> BatchHttp:
        raise NotImplementedError

    async def _call(self, op: Callable[[BatchHttp], Any]) -> dict[str, Any]:
        """One request through a fresh client: its reply as a JSON object (ProviderError otherwise)."""
        http = self.client()
        try:
            return _json_object(await op(http), self.secrets)
        finally:
            await http.aclose()

    async def _lines(self, where: str) -> AsyncIterator[bytes]:
        http = self.client()
        try:
            async for line in http.lines(where):
                yield line
        finally:
            await http.aclose()

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        raise NotImplementedError

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        raise NotImplementedError

    async def submit(self, lines: list[bytes]) -> Remote:
        raise NotImplementedError

    async def status(self, batch_id: str) -> Remote:
        raise NotImplementedError

    def results(self, remote: Remote) -> AsyncIterator[tuple[str, "Response | ProviderError"]]:
        raise NotImplementedError

    def outcome(self, remote: Remote) -> str:
        """How an ended batch ended: completed, expired, cancelled or failed."""
        return remote.state


def wire_for(provider: Provider, settings: BatchSettings) -> Wire:
    """The batch API of ``provider``'s endpoint; ConfigError for a provider without one."""
    if isinstance(provider, OpenAIProvider):
        return OpenAIWire(provider, settings)
    if isinstance(provider, AnthropicProvider):
        return AnthropicWire(provider, settings)
    raise ConfigError(
        f"--batch: provider {provider.spec.provider} has no batch API (batches go through openai/ and anthropic/ models)"
    )


#: OpenAI batch statuses after which nothing more happens to a batch.
_OPENAI_DONE = frozenset({"completed", "expired", "cancelled", "failed"})


class OpenAIWire(Wire):
    """OpenAI's Batch API (files + batches), for Chat Completions."""

    name = "openai"
    PATH = "/v1/chat/completions"

    def __init__(self, provider: OpenAIProvider, settings: BatchSettings) -> None:
        http = provider._http  # the provider's client: its base URL, credentials and secrets to redact
        headers = {k: v for k, v in http.headers.items() if k.lower() not in ("content-type", "accept")}
        timeout = max(settings.transfer_timeout, http.timeout)
        self.client = lambda: BatchHttp(http.base_url, headers, timeout, http.max_response_bytes, http.secrets)  # type: ignore[method-assign]
        self.base_url, self.secrets = http.base_url, tuple(http.secrets)
        self.endpoint = f"{public_url(http.base_url)}/chat/completions"

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        kwargs = cast(OpenAIProvider, provider)._gen_kwargs(request)
        return {"messages": [{"role": m.role, "content": m.content} for m in request.messages], **kwargs, "model": request.model}

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return json.dumps({"custom_id": key, "method": "POST", "url": self.PATH, "body": body}, ensure_ascii=False).encode("utf-8") + b"\n"

    async def submit(self, lines: list[bytes]) -> Remote:
        up = await self._call(lambda http: http.post_file("/files", {"purpose": "batch"}, "batch.jsonl", b"".join(lines)))
        file_id = up.get("id")
        if not isinstance(file_id, str):
            raise ProviderError("malformed response body: the uploaded file has no id", retryable=True)
        created = {"input_file_id": file_id, "endpoint": self.PATH, "completion_window": "24h"}
        return self._remote(await self._call(lambda http: http.post("/batches", created)))

    async def status(self, batch_id: str) -> Remote:
        return self._remote(await self._call(lambda http: http.get(f"/batches/{batch_id}")))

    def _remote(self, out: dict[str, Any]) -> Remote:
        batch_id, state = out.get("id"), out.get("status")
        if not isinstance(batch_id, str) or not isinstance(state, str):
            raise ProviderError("malformed response body: a batch without id or status", retryable=True)
        errors = (out.get("errors") or {}).get("data") if isinstance(out.get("errors"), dict) else None
        detail = "; ".join(
            f"{e.get('code') or 'error'}: {e.get('message') or ''}".strip() + (f" (line {e['line']})" if e.get("line") else "")
            for e in (errors or []) if isinstance(e, dict)
        )
        detail = " ".join(redact(detail, self.secrets).split())[:300]
        counts = out.get("request_counts") if isinstance(out.get("request_counts"), dict) else {}
        return Remote(batch_id, state, state in _OPENAI_DONE, counts, detail, (out.get("output_file_id"), out.get("error_file_id")))

    async def results(self, remote: Remote) -> AsyncIterator[tuple[str, Response | ProviderError]]:
        for file_id in remote.results:
            if not file_id:
                continue
            async for raw in self._lines(f"/files/{file_id}/content"):
                got = self._line(raw)
                if got is not None:
                    yield got

    def _line(self, raw: bytes) -> tuple[str, Response | ProviderError] | None:
        try:
            line = json.loads(raw)
            key = line["custom_id"]
        except (ValueError, KeyError, TypeError):
            return None  # not a result line: nothing to attribute it to
        if not isinstance(key, str):
            return None
        resp, err = line.get("response"), line.get("error")
        if isinstance(resp, dict) and resp.get("status_code") == 200:
            try:
                return key, _chat_response(resp.get("body"), key)
            except ProviderError as e:
                return key, e
        if isinstance(resp, dict) and isinstance(resp.get("status_code"), int):
            body = resp.get("body")
            reason = " ".join(redact(error_reason(body) or json.dumps(body)[:300], self.secrets).split())[:500]
            status = resp["status_code"]
            overflow = context_overflow(reason, body)
            if overflow is not None:
                limit, prompt = overflow
                return key, ProviderError(context_message(limit, prompt, None), retryable=False, kind="context_length",
                                          context_limit=limit, prompt_tokens=prompt)
            label = "429 rate limited" if status == 429 else f"HTTP {status}"
            return key, ProviderError(f"{label}: {reason}", retryable=status >= 500 or status in (408, 409, 429))
        if isinstance(err, dict):
            code, message = str(err.get("code") or "error"), str(err.get("message") or "")
            reason = " ".join(redact(f"{code}: {message}", self.secrets).split())[:500]
            kind = code if code in ("batch_expired", "batch_cancelled") else None
            return key, ProviderError(f"batch line failed: {reason}", retryable=True, kind=kind)
        return key, ProviderError("malformed batch result line: neither response nor error", retryable=True)


def _chat_response(body: Any, key: str) -> Response:
    """A Chat Completions body (from a batch's output file) as a Response."""
    try:
        choice = body["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ProviderError("malformed response body: no choices[0].message.content", retryable=True) from None
    if not isinstance(text, str):
        raise ProviderError("malformed response body: empty message content", retryable=True)
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    usage = body.get("usage") or {}
    try:
        tokens = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    except (TypeError, ValueError, AttributeError):
        tokens = Usage()
    return Response(key=key, text=text, usage=tokens, finish_reason=finish if isinstance(finish, str) else None)


#: Anthropic error types -> the HTTP status a live call would have had.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
}


class AnthropicWire(Wire):
    """Anthropic's Message Batches."""

    name = "anthropic"

    def __init__(self, provider: AnthropicProvider, settings: BatchSettings) -> None:
        timeout = max(settings.transfer_timeout, provider.timeout)
        self.client = lambda: cast(BatchHttp, provider.client(timeout, BatchHttp))  # type: ignore[method-assign]
        self.base_url, self.secrets = provider.spec.base_url, provider.secrets
        self.endpoint = f"{provider.spec.base_url}/v1/messages"

    def body(self, provider: Provider, request: Request) -> dict[str, Any]:
        return message_body(request.model, request)

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return json.dumps({"custom_id": key, "params": body}, ensure_ascii=False).encode("utf-8")

    async def submit(self, lines: list[bytes]) -> Remote:
        # The requests are already JSON: joined into the body as they are, not parsed again.
        data = b'{"requests":[' + b",".join(lines) + b"]}"
        return self._remote(await self._call(lambda http: http.post_bytes("/v1/messages/batches", data)))

    async def status(self, batch_id: str) -> Remote:
        return self._remote(await self._call(lambda http: http.get(f"/v1/messages/batches/{batch_id}")))

    def _remote(self, out: dict[str, Any]) -> Remote:
        batch_id, state = out.get("id"), out.get("processing_status")
        if not isinstance(batch_id, str) or not isinstance(state, str):
            raise ProviderError("malformed response body: a message batch without id or processing_status", retryable=True)
        counts = out.get("request_counts") if isinstance(out.get("request_counts"), dict) else {}
        return Remote(batch_id, state, state == "ended", counts, "", (out.get("results_url"),))

    def outcome(self, remote: Remote) -> str:
        """A message batch only "ends": it was cancelled or expired when some of its requests were."""
        for count, outcome in (("canceled", "cancelled"), ("expired", "expired")):
            n = remote.counts.get(count)
            if isinstance(n, int) and n > 0:
                return outcome
        return "completed"

    async def results(self, remote: Remote) -> AsyncIterator[tuple[str, Response | ProviderError]]:
        url = remote.results[0] if remote.results else None
        own = f"/v1/messages/batches/{remote.batch_id}/results"
        # The key goes only to the endpoint's own host: a results URL elsewhere is read at the documented path.
        where = url if isinstance(url, str) and url.startswith(self.base_url + "/") else own
        async for raw in self._lines(where):
            got = self._line(raw)
            if got is not None:
                yield got

    def _line(self, raw: bytes) -> tuple[str, Response | ProviderError] | None:
        try:
            line = json.loads(raw)
            key, result = line["custom_id"], line["result"]
            kind = result["type"]
        except (ValueError, KeyError, TypeError):
            return None
        if not isinstance(key, str):
            return None
        if kind == "succeeded":
            try:
                return key, read_message(result.get("message"), key)
            except ProviderError as e:
                return key, e
        if kind == "errored":
            parsed = result.get("error")
            inner = parsed.get("error") if isinstance(parsed, dict) else None
            etype = inner.get("type") if isinstance(inner, dict) else None
            status = _ANTHROPIC_STATUS.get(str(etype), 500)
            reason = " ".join(redact(error_reason(parsed) or str(etype or "error"), self.secrets).split())[:500]
            return key, error_from_body(status, parsed, reason, None)
        if kind in ("canceled", "expired"):
            cause = "batch_cancelled" if kind == "canceled" else "batch_expired"
            return key, ProviderError(f"batch request {kind} before it was processed", retryable=True, kind=cause)
        return key, ProviderError(f"batch result of unknown type {kind!r}", retryable=True)


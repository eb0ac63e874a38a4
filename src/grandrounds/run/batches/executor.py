"""Batch APIs: calls sent through OpenAI's Batch API or Anthropic's Message Batches instead of one by one.

``--batch answers|judges|both`` swaps the :class:`~grandrounds.run.executor.Executor` of those calls
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

This module holds what the run calls: :func:`executor_for`, :func:`pool_width`, :func:`wire_for`
and :class:`BatchExecutor`. The parts live beside it: the settings in
:mod:`~grandrounds.run.batches.settings`, the events and counts in
:mod:`~grandrounds.run.batches.events`, the hub that gathers, submits, polls and collects in
:mod:`~grandrounds.run.batches.hub`, what the store keeps of a batched call in
:mod:`~grandrounds.run.batches.calls`, the HTTP in :mod:`~grandrounds.run.batches.http`, and each
vendor's wire format in :mod:`~grandrounds.run.batches.wire`, :mod:`~grandrounds.run.batches.openai_wire`
and :mod:`~grandrounds.run.batches.anthropic_wire`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Request, Response
from grandrounds.providers.anthropic import AnthropicProvider
from grandrounds.providers.base import Provider
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.run.batches.anthropic_wire import AnthropicWire
from grandrounds.run.batches.events import BatchStats
from grandrounds.run.batches.hub import BatchHub, hub_for
from grandrounds.run.batches.openai_wire import OpenAIWire
from grandrounds.run.batches.settings import BatchSettings, Role
from grandrounds.run.batches.wire import Wire
from grandrounds.run.executor import CallObserver, Executor, RetryPolicy, StoreFirst
from grandrounds.run.limits import EndpointLimits
from grandrounds.store import Store


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


def wire_for(provider: Provider, settings: BatchSettings) -> Wire:
    """The batch API of ``provider``'s endpoint; ConfigError for a provider without one."""
    if isinstance(provider, OpenAIProvider):
        return OpenAIWire(provider, settings)
    if isinstance(provider, AnthropicProvider):
        return AnthropicWire(provider, settings)
    raise ConfigError(
        f"--batch: provider {provider.spec.provider} has no batch API (batches go through openai/ and anthropic/ models)"
    )


class BatchExecutor(StoreFirst):
    """The run's executor for batched calls (answers or one judge): store first, identical
    requests shared, then the endpoint's :class:`BatchHub`."""

    stats: BatchStats

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
        super().__init__(
            store, provider, concurrency or settings.concurrency, retry, seed, observer
        )
        self.settings = settings
        self.stats = BatchStats()
        self.wire = wire_for(provider, settings)  # a provider without a batch API is refused here
        # Log-probability requests are asked live, counted in the same stats.
        self.live = Executor(
            store,
            provider,
            concurrency or provider.default_concurrency,
            retry,
            seed,
            observer,
            endpoints,
        )
        self.live.stats = self.stats
        self._hub: BatchHub | None = None

    @property
    def hub(self) -> BatchHub:
        if self._hub is None:
            self._hub = hub_for(
                self.store, self.wire, self.settings, self.retry, self.observer, self.rng
            )
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

"""Cached, bounded, retrying calls to one provider: the only path any model call takes.

Order of business for a request: the store (a stored success is returned, no call made);
an identical request already in flight (shared); otherwise a slot under the endpoint's
connection limit, then up to ``max_attempts`` tries with full-jitter exponential backoff on
retryable failures only, honouring Retry-After. The outcome, success or final failure, is
written to the store before it is returned.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Protocol

from grandrounds.providers.base import Provider, ProviderError
from grandrounds.records import Request, Response
from grandrounds.store import Store


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None) -> float:
        """Full jitter (AWS architecture blog, 'Exponential Backoff and Jitter'): U(0, min(cap, base*2^k))."""
        if retry_after is not None:
            return min(self.max_delay, max(0.0, retry_after))
        return rng.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


class CallObserver(Protocol):
    def on_call(self, response: Response, *, retries: int) -> None: ...


@dataclass
class CallStats:
    made: int = 0
    cached: int = 0
    failed: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class Executor:
    """Wraps one provider with the store cache, a semaphore and bounded retries."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        concurrency: int | None = None,
        retry: RetryPolicy = RetryPolicy(),
        seed: int = 0,
        observer: CallObserver | None = None,
    ) -> None:
        self.store = store
        self.provider = provider
        self.concurrency = concurrency or provider.default_concurrency
        self.limit = asyncio.Semaphore(self.concurrency)
        self.retry = retry
        self.rng = random.Random(seed)
        self.observer = observer
        self.stats = CallStats()
        self._inflight: dict[str, asyncio.Future[Response]] = {}

    async def __call__(self, request: Request) -> Response:
        key = request.key()
        stored = self.store.get_call(key)
        if stored is not None:
            self.stats.cached += 1
            return stored
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            response = await self._call_with_retries(request, key)
            fut.set_result(response)
            return response
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]

    async def _call_with_retries(self, request: Request, key: str) -> Response:
        retries = 0
        async with self.limit:
            for attempt in range(self.retry.max_attempts):
                try:
                    response = await self.provider.call(request)
                    break
                except ProviderError as err:
                    last = attempt == self.retry.max_attempts - 1
                    if not err.retryable or last:
                        why = str(err) if err.retryable is False else f"{err} (gave up after {attempt + 1} attempts)"
                        response = Response(key=key, error=why)
                        break
                    retries += 1
                    await asyncio.sleep(self.retry.delay(attempt, self.rng, err.retry_after))
        self.store.put_call(request, response, attempts=retries + 1)
        self._count(response, retries)
        # Let the request waiting for the slot just freed go out before this answer is graded:
        # otherwise, when many replies land together, every next request waits for all of
        # their grading and bookkeeping.
        await asyncio.sleep(0)
        return response

    def _count(self, response: Response, retries: int) -> None:
        self.stats.made += 1
        self.stats.retries += retries
        self.stats.prompt_tokens += response.usage.prompt_tokens
        self.stats.completion_tokens += response.usage.completion_tokens
        if not response.ok:
            self.stats.failed += 1
            kind = (response.error or "").split(":")[0][:40]
            self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
        if self.observer is not None:
            self.observer.on_call(response, retries=retries)

"""Cached, bounded, retrying calls to one provider: the only path any model call takes.

Order of business for a request: the store (a stored success is returned, no call made);
an identical request already in flight (shared); otherwise a slot under this executor's limit
and a slot under its endpoint's limit (shared by every executor that talks to the same server,
so a candidate and a judge on one server share its capacity), then up to ``max_attempts`` tries
with full-jitter exponential backoff on retryable failures only, honouring Retry-After. The
provider's timeout starts when the request is sent: time spent queued for a slot never counts.
The outcome, success or final failure, is written to the store before it is returned.
Before a live call the executor takes the store's lease on its key, so another process running
on the same store waits for this answer instead of paying for it again.

Under a request or token rate (:mod:`grandrounds.run.limits`) every attempt waits for its start
time and reserves its tokens just before it is sent.

A judge request that overflows the server's context (the server names its context and the
prompt's size) is sent once more with ``max_tokens`` shrunk to what fits; the shrink is counted.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, field, replace
from typing import Protocol

from grandrounds.run.costs import TokenCounter, token_counter
from grandrounds.providers.base import Provider, ProviderError
from grandrounds.core.records import Request, Response
from grandrounds.run.limits import EndpointLimits, request_tokens
from grandrounds.run.per_turn import LeaseQueue, StoreLookups
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


#: Tokens kept free when a judge's max_tokens is shrunk to fit the context (chat template overhead).
CONTEXT_MARGIN = 16
#: The flag that sets a request's max_tokens, by its purpose (named when a request is over the token rate).
MAX_TOKENS_FLAG = {"answer": "--max-tokens", "judge": "--judge-max-tokens", "attack": "--attacker-max-tokens"}


class CallObserver(Protocol):
    def on_call(self, response: Response, *, retries: int) -> None: ...


@dataclass
class CallStats:
    made: int = 0
    cached: int = 0
    failed: int = 0
    retries: int = 0
    #: Judge requests re-sent with max_tokens shrunk to fit the server's context.
    shrunk: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class StoreFirst:
    """What every executor does before a new call: the store first, then an identical request in flight."""

    def __init__(self, store: Store, provider: Provider, concurrency: int, retry: RetryPolicy, seed: int, observer: CallObserver | None) -> None:
        self.store = store
        self.provider = provider
        self.concurrency = concurrency
        self.retry = retry
        self.rng = random.Random(seed)
        self.observer = observer
        self.stats: CallStats = CallStats()
        self._inflight: dict[str, asyncio.Future[Response]] = {}

    async def _known(self, key: str) -> Response | None:
        """The outcome for ``key`` without a new call: stored (counted as from the store), or that of the
        identical request already in flight; None when it has to be asked."""
        stored = await StoreLookups.of(self.store).ask(key)
        if stored is not None:
            self.stats.cached += 1
            return stored
        if key in self._inflight:
            return await asyncio.shield(self._inflight[key])
        return None


class Executor(StoreFirst):
    """Wraps one provider with the store cache, a semaphore and bounded retries."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        concurrency: int | None = None,
        retry: RetryPolicy = RetryPolicy(),
        seed: int = 0,
        observer: CallObserver | None = None,
        endpoints: EndpointLimits | None = None,
    ) -> None:
        super().__init__(store, provider, concurrency or provider.default_concurrency, retry, seed, observer)
        self.limit = asyncio.Semaphore(self.concurrency)
        self.endpoints = endpoints or EndpointLimits()
        self.endpoint_limit = self.endpoints.slot(provider.endpoint, self.concurrency)
        #: Seconds between looks at the store while another process holds a call's lease.
        self.lease_poll = 0.2
        #: The token counter of this provider's model, made on the first call under a token rate.
        self._counter: asyncio.Task[TokenCounter] | None = None

    async def __call__(self, request: Request) -> Response:
        key = request.key()
        known = await self._known(key)
        if known is not None:
            return known
        fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            response = await self._leased_call(request, key)
            fut.set_result(response)
            return response
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._inflight[key]

    async def _leased_call(self, request: Request, key: str) -> Response:
        """The call, made only under this process's lease on its key: while another process holds
        it, wait and take that process's answer from the store when it lands."""
        leases = LeaseQueue.of(self.store)
        while True:
            state = await leases.ask(key)
            if state == "ours":
                return await self._call_with_retries(request, key)
            if state == "held":
                await asyncio.sleep(self.lease_poll)
            stored = self.store.get_call(key)
            if stored is not None:
                self.stats.cached += 1
                return stored

    async def _call_with_retries(self, request: Request, key: str) -> Response:
        retries = 0
        async with self.limit, self.endpoint_limit:
            sent = request
            for attempt in range(self.retry.max_attempts):
                try:
                    response = await self._send(sent)
                    break
                except ProviderError as err:
                    fitted = self._fit_context(sent, err)
                    if fitted is not None:
                        sent = fitted  # not an attempt: the same question with room to answer
                        self.stats.shrunk += 1
                        try:
                            response = await self._send(sent)
                            break
                        except ProviderError as again:
                            err = again
                    last = attempt == self.retry.max_attempts - 1
                    if not err.retryable or last:
                        response = Response(key=key, error=self._why(request, err, attempt))
                        break
                    retries += 1
                    await asyncio.sleep(self.retry.delay(attempt, self.rng, err.retry_after))
        if sent is not request and response.ok:
            response = replace(response, key=key)
        self.store.put_call(request, response, attempts=retries + 1)
        self.store.release_lease(key)  # in the same transaction as the outcome
        self._count(response, retries)
        # Let the request waiting for the slot just freed go out before this answer is graded:
        # otherwise, when many replies land together, every next request waits for all of
        # their grading and bookkeeping.
        await asyncio.sleep(0)
        return response

    async def _send(self, request: Request) -> Response:
        """One attempt, started when the endpoint's request rate and token rate allow.

        Under a token rate the attempt reserves its estimated tokens first (a request that could
        never fit is refused, not retried, and nothing is sent); the server's reported usage then
        replaces the estimate."""
        rate = self.endpoints.rate(self.provider.rate_key)
        budget = self.endpoints.tokens(self.provider.rate_key)
        if budget is None:
            if rate is not None:
                await rate.wait()
            return await self.provider.call(request)
        prompt, most = request_tokens(await self._token_counter(), request)
        why = budget.refusal(prompt, most, MAX_TOKENS_FLAG.get(request.purpose, "--max-tokens"))
        if why is not None:
            raise ProviderError(why, retryable=False, kind="over_tpm")
        held = await budget.reserve(prompt, most, rate)
        response = await self.provider.call(request)
        budget.settle(held, response.usage)
        return response

    async def _token_counter(self) -> TokenCounter:
        """The model's token counter (tiktoken may fetch its file once: that runs in a thread)."""
        if self._counter is None:
            self._counter = asyncio.ensure_future(asyncio.to_thread(token_counter, str(self.provider.spec)))
        return await asyncio.shield(self._counter)

    @staticmethod
    def _fit_context(request: Request, err: ProviderError) -> Request | None:
        """The judge request with ``max_tokens`` shrunk to what the server's context leaves, or None.

        Only judge requests adapt (a candidate's settings are the protocol's and stay as asked),
        only when the server named both its context and the prompt's size, and only once.
        """
        if getattr(err, "kind", None) != "context_length" or request.purpose != "judge":
            return None
        limit, prompt = getattr(err, "context_limit", None), getattr(err, "prompt_tokens", None)
        if not limit or not prompt:
            return None
        room = limit - prompt - CONTEXT_MARGIN
        if room < 1 or room >= request.params.max_tokens:
            return None
        return replace(request, params=replace(request.params, max_tokens=room))

    @staticmethod
    def _why(request: Request, err: ProviderError, attempt: int) -> str:
        """The stored reason of a final failure; a context overflow says what to change."""
        if getattr(err, "kind", None) == "context_length":
            flag = "--judge-max-tokens" if request.purpose == "judge" else "--max-tokens"
            return f"{err}: lower {flag} or serve the model with a larger context"
        if err.retryable is False:
            return str(err)
        return f"{err} (gave up after {attempt + 1} attempts)"

    def _count(self, response: Response, retries: int) -> None:
        self.stats.made += 1
        self.stats.retries += retries
        self.stats.prompt_tokens += response.usage.prompt_tokens
        self.stats.completion_tokens += response.usage.completion_tokens
        if not response.ok:
            self.stats.failed += 1
            kind = _reason(response.error or "")
            self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
        if self.observer is not None:
            self.observer.on_call(response, retries=retries)


_GAVE_UP = re.compile(r" \(gave up after \d+ attempts\)$")


def _reason(error: str) -> str:
    """A failure's reason as counted in summaries: its first line without the attempt count
    (so one reason is one count however many tries it took), at most 80 characters."""
    line = _GAVE_UP.sub("", error.splitlines()[0]) if error.strip() else "no reason given"
    return line if len(line) <= 80 else line[:79] + "…"

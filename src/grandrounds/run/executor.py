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
A request whose prompt alone is over the context can never fit: its failure is stored as final
(``finish_reason`` ``context_length``) and later runs take it from the store instead of asking again.

Without ``--concurrency`` the calls to an endpoint go out under its adaptive window
(:class:`~grandrounds.run.limits.AdaptiveSlots`): as many at once as the server says it has slots
(asked once, :meth:`Provider.server_slots`), or, for a local or unknown server that says
nothing, a few at first and twice as many each round (slow start, hosted APIs excepted); fewer
after timeouts, 429s and 503s (Anthropic's 529), more again after successes. A call that timed out while more calls were at the server than it has slots
waited in the server's queue: it is sent again without using one of its attempts, and its
failure, if it comes to that, says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import re
from dataclasses import dataclass, field, replace
from typing import Protocol

from grandrounds.core.records import Request, Response
from grandrounds.providers.base import Provider, ProviderError
from grandrounds.run.costs import TokenCounter, token_counter
from grandrounds.run.limits import AdaptiveSlots, EndpointLimits, Sending, request_tokens
from grandrounds.run.per_turn import FinalFailures, LeaseQueue, StoreLookups
from grandrounds.store import Store

#: Set where a held call's caller has other work to do first (the run's pool, for a group's first
#: call): the executor then raises :class:`HeldElsewhere` instead of waiting on another process.
DEFER_HELD: contextvars.ContextVar[bool] = contextvars.ContextVar("defer_held", default=False)


class HeldElsewhere(Exception):
    """Another process on the store holds the lease on this call: come back to it later."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


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
#: The finish reason stored with a failure that asking again cannot mend: the prompt alone is over the context.
FINAL_OVERFLOW = FinalFailures.final
#: The flag that sets a request's max_tokens, by its purpose (named when a request is over the token rate).
MAX_TOKENS_FLAG = {
    "answer": "--max-tokens",
    "judge": "--judge-max-tokens",
    "attack": "--attacker-max-tokens",
}


class CallObserver(Protocol):
    """Told of every call's outcome (``on_call``); an observer that also has ``on_send(request)``
    is told when each call goes out, to count the calls in flight (the run's progress does)."""

    def on_call(self, response: Response, *, retries: int) -> None: ...


@dataclass(kw_only=True)
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
    #: Failures taken from the store that asking again cannot mend (the prompt alone over the context).
    final: int = 0
    #: Timeouts of calls that waited in the server's queue (sent again without using an attempt),
    #: the server's slots then and the most calls that were at it at once.
    queued: int = 0
    queued_slots: int = 0
    queued_most: int = 0
    #: The server's own number of slots and where it said so ("" when it did not, or --concurrency was given).
    server_slots: str = ""
    #: Times the adaptive window was halved (timeouts, 429, 503), and the smallest it became.
    backoffs: int = 0
    smallest_window: int = 0


class StoreFirst:
    """What every executor does before a new call: the store first, then an identical request in flight."""

    def __init__(
        self,
        store: Store,
        provider: Provider,
        concurrency: int,
        retry: RetryPolicy,
        seed: int,
        observer: CallObserver | None,
    ) -> None:
        self.store = store
        self.provider = provider
        self.concurrency = concurrency
        self.retry = retry
        self.rng = random.Random(seed)
        self.observer = observer
        self._on_send = getattr(observer, "on_send", None)  # optional (CallObserver)
        self.stats: CallStats = CallStats()
        self._inflight: dict[str, asyncio.Future[Response]] = {}

    async def _known(self, key: str) -> Response | None:
        """The outcome for ``key`` without a new call: stored (counted as from the store), or that of the
        identical request already in flight; None when it has to be asked."""
        # Both look-ups are asked in the same turn, so each is one query for all the turn's keys.
        stored_f, final_f = (
            StoreLookups.of(self.store).ask(key),
            FinalFailures.of(self.store).ask(key),
        )
        stored, final = await asyncio.gather(stored_f, final_f)
        if stored is not None:
            self.stats.cached += 1
            return stored
        if final is not None:  # the prompt alone is over the context: asking again cannot help
            self.stats.cached += 1
            self.stats.final += 1
            return final
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
        super().__init__(
            store, provider, concurrency or provider.default_concurrency, retry, seed, observer
        )
        self.limit = asyncio.Semaphore(self.concurrency)
        #: The calls of this executor holding a lease: in flight, or the few next in line for a slot.
        self.lease_window = asyncio.Semaphore(self.concurrency + max(2, self.concurrency // 4))
        self.endpoints = endpoints or EndpointLimits()
        #: An explicit --concurrency wins: a fixed semaphore shared per endpoint, held for the whole
        #: call; otherwise the endpoint's adaptive window, taken for each attempt (so a window halved
        #: after timeouts holds back the retries too). Either way the window counts this executor's
        #: requests at the server.
        self.adaptive = concurrency is None
        self.window: AdaptiveSlots = self.endpoints.adaptive(
            provider.endpoint, self.concurrency if self.adaptive else 0
        )
        self.endpoint_limit: asyncio.Semaphore | contextlib.nullcontext[None] = (
            contextlib.nullcontext()
            if self.adaptive
            else self.endpoints.slot(provider.endpoint, self.concurrency)
        )
        #: Seconds between looks at the store while another process holds a call's lease.
        self.lease_poll = 0.2
        #: The token counter of this provider's model, made on the first call under a token rate.
        self._counter: asyncio.Task[TokenCounter] | None = None

    async def __call__(self, request: Request) -> Response:
        key = request.key()
        while True:
            try:
                known = await self._known(key)
                break
            except HeldElsewhere:  # the identical request this one waited on was left for later
                if DEFER_HELD.get():
                    raise
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
        """The call, made only under this process's lease on its key. The lease is taken in a
        window a quarter wider than the concurrency (at least 2 more), held until the call is
        done: a process holds no more leases than its calls in flight and the few next in line
        (another process on the store finds the rest free), and those few leases are taken while
        the calls in flight are at the server (a lease taken in the slot itself would add its
        transaction to every call's time in the slot). While another process holds the lease: raise :class:`HeldElsewhere` where the
        caller moves on to other work (:data:`DEFER_HELD`), else wait, out of the window, and take
        that process's answer from the store when it lands."""
        leases = LeaseQueue.of(self.store)
        while True:
            async with self.lease_window:
                state = await leases.ask(key)
                if state == "ours":
                    await self._probe()
                    async with self.limit, self.endpoint_limit:
                        response = await self._call_with_retries(request, key)
            if state == "ours":
                # Let the request waiting for the slot just freed go out before this answer is
                # graded: otherwise, when many replies land together, every next request waits
                # for all of their grading and bookkeeping.
                await asyncio.sleep(0)
                return response
            if state == "held":
                if DEFER_HELD.get():
                    raise HeldElsewhere(key)
                await asyncio.sleep(self.lease_poll)
            stored = self.store.get_call(key)
            if stored is not None:
                self.stats.cached += 1
                return stored

    async def _call_with_retries(self, request: Request, key: str) -> Response:
        """The call and its retries, in the slot and under the lease :meth:`_leased_call` took."""
        retries = requeued = 0
        if self._on_send is not None:
            self._on_send(request)
        sent, attempt = request, 0
        while True:
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
                if getattr(err, "queued", None) is not None and requeued < self.retry.max_attempts:
                    requeued += (
                        1  # it waited in the server's queue: not one of the model's attempts
                    )
                    retries += 1
                    await asyncio.sleep(self.retry.delay(0, self.rng, None))
                    continue
                last = attempt >= self.retry.max_attempts - 1
                if not err.retryable or last:
                    response = self._failure(request, key, err, attempt)
                    break
                retries += 1
                await asyncio.sleep(self.retry.delay(attempt, self.rng, err.retry_after))
                attempt += 1
        if sent is not request and response.ok:
            response = replace(response, key=key)
        self.store.put_call(request, response, attempts=retries + 1)
        self.store.release_lease(key)  # in the same transaction as the outcome
        self._count(response, retries)
        return response

    async def _probe(self) -> None:
        """Ask the server its own number of slots (once per endpoint) and note it in this executor's
        stats; a local or unknown server that reports none slow-starts (:func:`slots.slow_start`)."""
        from grandrounds.providers.slots import slow_start

        await self.window.probe(
            self.provider.server_slots, slow_start=slow_start(self.provider.spec.base_url)
        )
        if self.window.slots is not None and not self.stats.server_slots:
            self.stats.server_slots = f"{self.window.slots} ({self.window.source})"

    async def _at_server(self, request: Request) -> Response:
        """The provider's call, counted at the server in the endpoint's window: a success may widen
        it, a timeout, 429 or 503 may halve it, and a timeout that waited in the server's queue is
        marked ``queued`` (the server's slots and the calls at it then)."""
        sending = self.window.sent()
        try:
            response = await self.provider.call(request)
        except ProviderError as err:
            self._congestion(sending, err)
            raise
        finally:
            self.window.returned()
        self.window.succeeded()
        return response

    def _congestion(self, sending: Sending, err: ProviderError) -> None:
        kind = getattr(err, "kind", None)
        # read back with getattr: absent from errors that did not pass through a window
        err.at_server = sending.at_server  # type: ignore[attr-defined]
        if kind == "timeout" and self.window.queued(sending):
            err.queued = (self.window.slots, sending.at_server)  # type: ignore[attr-defined]  # as at_server
            self.stats.queued += 1
            self.stats.queued_slots = self.window.slots or 0
            self.stats.queued_most = max(self.stats.queued_most, sending.at_server)
        if self.window.congested(sending, kind):
            self.stats.backoffs += 1
            self.stats.smallest_window = self.window.room

    async def _send(self, request: Request) -> Response:
        """One attempt: without --concurrency, under a place in the endpoint's adaptive window."""
        if not self.adaptive:
            return await self._send_now(request)
        async with self.window:
            return await self._send_now(request)

    async def _send_now(self, request: Request) -> Response:
        """One attempt, started when the endpoint's request rate and token rate allow.

        Under a token rate the attempt reserves its estimated tokens first (a request that could
        never fit is refused, not retried, and nothing is sent); the server's reported usage then
        replaces the estimate."""
        rate = self.endpoints.rate(self.provider.rate_key)
        budget = self.endpoints.tokens(self.provider.rate_key)
        if budget is None:
            if rate is not None:
                await rate.wait()
            return await self._at_server(request)
        prompt, most = request_tokens(await self._token_counter(), request)
        why = budget.refusal(prompt, most, MAX_TOKENS_FLAG.get(request.purpose, "--max-tokens"))
        if why is not None:
            raise ProviderError(why, retryable=False, kind="over_tpm")
        held = await budget.reserve(prompt, most, rate)
        response = await self._at_server(request)
        budget.settle(held, response.usage)
        return response

    async def _token_counter(self) -> TokenCounter:
        """The model's token counter (tiktoken may fetch its file once: that runs in a thread)."""
        if self._counter is None:
            self._counter = asyncio.ensure_future(
                asyncio.to_thread(token_counter, str(self.provider.spec))
            )
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

    @classmethod
    def _failure(cls, request: Request, key: str, err: ProviderError, attempt: int) -> Response:
        """The failed response stored for ``request``; one that no setting of max_tokens can mend
        carries :data:`FINAL_OVERFLOW` as its finish reason, so later runs do not ask it again."""
        final = getattr(err, "kind", None) == "context_length" and prompt_over_context(
            request.kind, err
        )
        return Response(
            key=key,
            error=cls._why(request, err, attempt),
            finish_reason=FINAL_OVERFLOW if final else None,
        )

    @staticmethod
    def _why(request: Request, err: ProviderError, attempt: int) -> str:
        """The stored reason of a final failure; a context overflow says what can help, and only that."""
        if getattr(err, "kind", None) == "context_length":
            return f"{err}: {overflow_advice(request.kind, request.purpose, err)}"
        queued = getattr(err, "queued", None)
        if queued is not None:
            slots, most = queued
            return (
                f"timed out waiting in the server's queue: it serves {slots} at a time; lower --concurrency to {slots}\n"
                f"{err}; {most} calls were at the server, and a call's wait in its queue counts toward the timeout"
            )
        if err.retryable is False:
            return str(err)
        crowd = getattr(err, "at_server", 1)
        if getattr(err, "kind", None) == "timeout" and crowd > 1:
            return (
                f"{err} (gave up after {attempt + 1} attempts)\n{crowd} calls were at the server at once: a server that "
                "answers fewer at a time keeps the rest waiting, and the wait counts toward the timeout (try --concurrency 1)"
            )
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


def prompt_over_context(kind: str, err: ProviderError) -> bool:
    """Whether a context overflow is the prompt's own: the server's numbers put the prompt at or
    over the context, or the request generates at most one token (a log-likelihood or next-token
    request), so that no max_tokens could make it fit."""
    if kind in ("loglikelihood", "next_token"):
        return True
    limit, prompt = getattr(err, "context_limit", None), getattr(err, "prompt_tokens", None)
    return bool(limit and prompt and prompt >= limit)


def overflow_advice(kind: str, purpose: str, err: ProviderError) -> str:
    """What can make an overflowing request fit, and only that: a smaller max_tokens where the
    prompt leaves room (or the server did not say), else only a larger context."""
    if prompt_over_context(kind, err):
        limit, prompt = getattr(err, "context_limit", None), getattr(err, "prompt_tokens", None)
        size = f" ({prompt} tokens, context {limit})" if prompt and limit else ""
        return (
            f"the prompt alone is over the model's context{size}, so no max tokens can fit it: "
            "serve the model with a larger context (not asked again with the same model and options)"
        )
    return f"lower {MAX_TOKENS_FLAG.get(purpose, '--max-tokens')} or serve the model with a larger context"


_GAVE_UP = re.compile(r" \(gave up after \d+ attempts\)$")


def _reason(error: str) -> str:
    """A failure's reason as counted in summaries: its first line without the attempt count
    (so one reason is one count however many tries it took), at most 80 characters."""
    line = _GAVE_UP.sub("", error.splitlines()[0]) if error.strip() else "no reason given"
    return line if len(line) <= 80 else line[:79] + "…"

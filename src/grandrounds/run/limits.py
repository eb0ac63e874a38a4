"""Limits on the calls the executors start: request rates, token rates and each endpoint's capacity.

With ``--rpm`` / ``--judge-rpm`` a model at an endpoint has a :class:`RateLimit`: every attempt
(retries too: they are requests) waits for its start time under that limit just before it is sent.
With ``--tpm`` / ``--judge-tpm`` it has a :class:`TokenRate`: every attempt reserves its estimated
tokens (prompt and max_tokens) before it is sent, and the reservation is corrected to the usage
the server reports; the limit counts prompt plus output (``N``), or prompts and outputs apart
(``input=N,output=M``, Anthropic's limits), or both. :class:`EndpointLimits` holds them for one
run, with one semaphore per endpoint that every executor talking to that server shares, and,
where no ``--concurrency`` was given, an :class:`AdaptiveSlots` window per endpoint that starts
from the server's own number of slots and follows its timeouts, 429s and 503s.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Request, Usage
from grandrounds.providers.base import Provider
from grandrounds.run.costs import TokenCounter

#: Seconds of the window a requests-per-minute limit counts call starts in.
RATE_WINDOW = 60.0

#: Per model at an endpoint (the rate's key), the start time (``time.monotonic``) last handed out by any :class:`RateLimit` of
#: this process, and the times the latest calls actually started (as many as the limit), so the
#: runs one command makes in turn (probe runs, several configs) keep the limit across their
#: boundaries.
_LAST_START: dict[str, float] = {}
_BEGUN: dict[str, deque[float]] = {}


class RateLimit:
    """Call starts of one model at one endpoint spaced ``per / limit`` seconds apart, so that no window of
    ``per`` seconds (any window, not only aligned ones) holds more than ``limit`` starts.

    Even spacing rather than ``limit`` calls at once and then a pause: a vendor may enforce a
    per-minute limit over shorter periods (OpenAI's rate-limit guide: 60,000 requests a minute
    may be enforced as 1,000 a second), and a bucket refilled continuously (aiolimiter's leaky
    bucket, for one) lets almost twice ``limit`` starts into one window. Each caller takes the next free start time and sleeps until it: first come,
    first served, nothing polls. A sleep can end a little late (the event loop was busy), so a
    caller also starts no sooner than ``per`` after the start ``limit`` calls before it as it
    happened: the bound holds for the starts as they happen, not only as planned, and a late
    wake-up costs the next one at most that lateness. A caller cancelled while it waits leaves
    its start time unused, which only slows the others.
    """

    def __init__(self, endpoint: str, limit: int, per: float) -> None:
        self.endpoint = endpoint
        self.per = per
        self.limit = limit

    @property
    def spacing(self) -> float:
        return self.per / self.limit

    def lower(self, limit: int) -> None:
        """The lowest limit asked for wins."""
        self.limit = min(self.limit, limit)

    async def wait(self) -> None:
        """Return at this caller's start time."""
        begun = _BEGUN.setdefault(self.endpoint, deque())
        now = time.monotonic()
        start = max(now, _LAST_START.get(self.endpoint, -math.inf) + self.spacing)
        _LAST_START[self.endpoint] = start
        while True:
            if len(begun) >= self.limit:
                start = max(start, begun[-self.limit] + self.per)
            if start <= now:
                break
            await asyncio.sleep(start - now)
            now = time.monotonic()
        begun.append(now)
        while len(begun) > self.limit:
            begun.popleft()


def check_rpm(rpm: object, flag: str = "--rpm") -> None:
    """A requests-per-minute limit is a whole number, at least 1 (None: no limit)."""
    if rpm is not None and (isinstance(rpm, bool) or not isinstance(rpm, int) or rpm < 1):
        raise ConfigError(
            f"{flag} {rpm!r}: expected a whole number of requests per minute, at least 1"
        )


#: What a token limit counts of a request: its prompt and output together (OpenAI's one limit per
#: model), its prompt alone or its output alone (Anthropic's input and output limits).
TOKEN_KINDS = ("total", "input", "output")


@dataclass(frozen=True)
class TokenLimits:
    """Tokens per minute on one endpoint, by what they count (None: no such limit)."""

    total: int | None = None
    input: int | None = None
    output: int | None = None

    def items(self) -> list[tuple[str, int]]:
        return [(kind, n) for kind in TOKEN_KINDS if (n := getattr(self, kind)) is not None]

    def __str__(self) -> str:
        """As the flag takes it: ``90000``, ``input=400000,output=80000``."""
        return ",".join(str(n) if kind == "total" else f"{kind}={n}" for kind, n in self.items())


_TPM_FORMS = (
    "expected tokens per minute as N (prompt + output), or input=N and/or output=N for separate limits "
    "(Anthropic's), comma-separated, each a whole number at least 1"
)


def token_limits(tpm: object, flag: str = "--tpm") -> TokenLimits | None:
    """``tpm`` as the limits it sets: a whole number (prompt + output), ``TokenLimits``, or the text
    a flag takes (``90000``; ``input=400000,output=80000``; ``100000,output=20000``). None: no limit.
    Anything else is a one-line ConfigError naming the flag."""
    if tpm is None:
        return None
    limits, why = _parse_tpm(tpm)
    if limits is None:
        raise ConfigError(f"{flag} {tpm!r}: {why}")
    return limits


def tpm_problem(tpm: object) -> str | None:
    """What is wrong with ``tpm`` as a token limit (None: nothing)."""
    return None if tpm is None else _parse_tpm(tpm)[1]


def _parse_tpm(tpm: object) -> tuple[TokenLimits | None, str | None]:
    whole = "expected a whole number of tokens per minute, at least 1"
    if isinstance(tpm, TokenLimits):
        ok = tpm.items() and all(
            not isinstance(n, bool) and isinstance(n, int) and n >= 1 for _, n in tpm.items()
        )
        return (tpm, None) if ok else (None, _TPM_FORMS)
    if not isinstance(tpm, str):
        if isinstance(tpm, bool) or not isinstance(tpm, int) or tpm < 1:
            return None, whole
        return TokenLimits(total=tpm), None
    found: dict[str, int] = {}
    for part in tpm.split(","):
        kind, sep, number = part.strip().rpartition("=")
        kind, number = (kind.strip().lower() if sep else "total"), number.strip()
        if kind not in TOKEN_KINDS or kind in found or not re.fullmatch(r"[+-]?[0-9]+", number):
            return None, _TPM_FORMS
        if int(number) < 1:
            return None, whole
        found[kind] = int(number)
    return TokenLimits(**found), None


def limit_text(kind: str, limit: int, flag: str) -> str:
    """A limit as the user set it: ``--tpm 90,000``, ``--tpm input=400,000``."""
    return f"{flag} {limit:,}" if kind == "total" else f"{flag} {kind}={limit:,}"


#: What each kind of limit counts, in words.
KIND_WORDS = {"total": "tokens", "input": "input tokens", "output": "output tokens"}


def check_tpm(tpm: object, flag: str = "--tpm") -> None:
    """A tokens-per-minute limit is one :func:`token_limits` takes (None: no limit)."""
    token_limits(tpm, flag)


def request_tokens(counter: TokenCounter, request: Request) -> tuple[int, int]:
    """(prompt tokens, most output tokens) of ``request`` as its provider sends it, by ``counter``:
    a chat prompt with its message overhead and ``max_tokens``; a next-token request generates one
    token; a log-likelihood request sends the context with each continuation and generates none."""
    if request.kind == "loglikelihood":
        context = counter.text("\n\n".join(m.text for m in request.messages))
        return sum(context + counter.text(c) for c in request.continuations), 0
    return counter.messages(
        request.messages
    ), 1 if request.kind == "next_token" else request.params.max_tokens


@dataclass(eq=False)
class Reserved:
    """Tokens reserved by one call started at ``start`` (``time.monotonic``): its prompt and its
    output, estimates until the server's reported usage replaces them."""

    start: float
    prompt: int
    output: int = 0
    #: Left the window (the ledger no longer counts it).
    expired: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt + self.output


class _Ledger:
    """The reservations of one endpoint still inside the window, oldest first, and their sums."""

    def __init__(self) -> None:
        self.held: deque[Reserved] = deque()
        self.prompt = 0
        self.output = 0
        #: Callers waiting for room, woken early when a correction frees some.
        self.waiting: list[asyncio.Future[None]] = []

    @property
    def used(self) -> int:
        return self.prompt + self.output

    def add(self, r: Reserved) -> None:
        self.held.append(r)
        self.prompt += r.prompt
        self.output += r.output

    def expire(self, now: float, per: float) -> None:
        while self.held and self.held[0].start <= now - per:
            gone = self.held.popleft()
            gone.expired = True
            self.prompt -= gone.prompt
            self.output -= gone.output

    def ready_at(
        self, prompt: int, output: int, now: float, limits: dict[str, tuple[int, str]], per: float
    ) -> float:
        """The earliest time from ``now`` at which ``prompt`` and ``output`` more fit under every one
        of ``limits`` in the window, as the reservations stand (each leaves the window ``per``
        after its start)."""
        self.expire(now, per)
        used_p, used_o, at = self.prompt, self.output, now
        for r in self.held:
            if _fits(limits, used_p + prompt, used_o + output):
                break
            used_p -= r.prompt
            used_o -= r.output
            at = r.start + per
        return at

    def correct(self, r: Reserved, prompt: int, output: int) -> None:
        if not r.expired:
            self.prompt += prompt - r.prompt
            self.output += output - r.output
        freed = prompt < r.prompt or output < r.output
        r.prompt, r.output = prompt, output
        if freed:
            for fut in self.waiting:
                if not fut.done():
                    fut.set_result(None)


def counted_by_kind(prompt: int, output: int) -> dict[str, int]:
    """What each kind of token limit counts of ``prompt`` and ``output`` tokens."""
    return {"total": prompt + output, "input": prompt, "output": output}


def _fits(limits: dict[str, tuple[int, str]], prompt: int, output: int) -> bool:
    counted = counted_by_kind(prompt, output)
    return all(counted[kind] <= n for kind, (n, _) in limits.items())


#: Per model at an endpoint (the rate's key), the tokens reserved by the calls of this process started within the window, so
#: the runs one command makes in turn keep the limit across their boundaries (as ``_BEGUN``).
_LEDGERS: dict[str, _Ledger] = {}


class TokenRate:
    """Tokens of call starts of one model at one endpoint limited so that no window of ``per`` seconds (any
    window, not only aligned ones) holds more than the limits allow: prompt plus output under
    ``total``, prompt under ``input``, output under ``output`` (each where set).

    How vendors count a request against their token limits, which this follows:

    - OpenAI has one limit per model and counts a request when it is accepted, by its prompt
      (estimated from its characters) and its ``max_tokens``: "usage needs are estimated from this
      value [max_tokens]" and "contexts (prompts+max_tokens)" count (OpenAI Help Center, "Rate
      Limit Advice", help.openai.com/en/articles/6891753; its rate-limit guide,
      platform.openai.com/docs/guides/rate-limits, says the limit is "calculated as the maximum
      of max_tokens and the estimated number of tokens based on the character count of your
      request"). Reserving the prompt plus ``max_tokens`` under ``total`` covers either reading.
    - Anthropic limits input tokens per minute and output tokens per minute apart: the prompt
      counts against the input limit, and output tokens are "estimated based on max_tokens at the
      beginning of each request, and the estimate is adjusted at the end of the request to reflect
      the actual number of output tokens used" (docs.anthropic.com/en/api/rate-limits). Its
      limits refill continuously (a token bucket of the limit's size); a window holding at most
      the limit never empties such a bucket, so the window bound is the safe side of it.

    So each attempt reserves its estimate (:func:`request_tokens`: prompt tokens by the project's
    token counter, and max_tokens as its output) before it is sent; when the reply reports its
    usage the reservation becomes that (prompt and completion tokens), freeing what max_tokens
    held but the reply did not use; a reply without usage, or a failure, leaves the estimate. A
    reservation leaves the window ``per`` seconds after its start.

    First come, first served: callers queue in one line, and the one at its head waits until its
    tokens fit under every limit (woken early when a correction frees room), so a large request
    is never starved by small ones behind it, nor small ones held back longer than the large one
    ahead of them needs. A request over a limit on its own could never start: :meth:`refusal`
    says so and the executor does not send it. The start recorded is the time the caller
    actually goes on (a wake-up may come late), so the bound holds for starts as they happen.
    With a :class:`RateLimit` on the endpoint too, the head of the line takes its start time
    there after its tokens fit, and its tokens are recorded at that start, so all the limits
    hold for the same moment.
    """

    def __init__(
        self, endpoint: str, limit: int | TokenLimits, per: float, flag: str = "--tpm"
    ) -> None:
        self.endpoint = endpoint
        self.per = per
        #: Per kind of limit, (tokens per window, the flag that set it: the lowest asked for wins).
        self.limits: dict[str, tuple[int, str]] = {}
        self.lower(limit, flag)
        self._line: asyncio.Lock | None = None
        self._line_loop: asyncio.AbstractEventLoop | None = None

    def lower(self, limit: int | TokenLimits, flag: str) -> None:
        """The lowest limit asked for wins, kind by kind."""
        for kind, n in (token_limits(limit, flag) or TokenLimits()).items():
            if kind not in self.limits or n < self.limits[kind][0]:
                self.limits[kind] = (n, flag)

    @property
    def limit(self) -> int | None:
        """The limit on prompt plus output (None: only separate input or output limits)."""
        return self.limits["total"][0] if "total" in self.limits else None

    @property
    def flag(self) -> str | None:
        """The flag that set :attr:`limit`."""
        return self.limits["total"][1] if "total" in self.limits else None

    @property
    def ledger(self) -> _Ledger:
        return _LEDGERS.setdefault(self.endpoint, _Ledger())

    def _queue(self) -> asyncio.Lock:
        """The line of this event loop (asyncio's lock is fair: waiters acquire in arrival order)."""
        loop = asyncio.get_running_loop()
        if self._line is None or self._line_loop is not loop:
            self._line, self._line_loop = asyncio.Lock(), loop
        return self._line

    def refusal(self, prompt: int, most: int, max_tokens_flag: str = "--max-tokens") -> str | None:
        """Why a request of ``prompt`` tokens with ``most`` output tokens can never start (None when it can).

        Its first line is the same for every such request under one limit (a run's summary counts
        failures by their first line), its second gives this request's estimate."""
        counted = counted_by_kind(prompt, most)
        for kind, (limit, flag) in self.limits.items():
            if counted[kind] <= limit:
                continue
            over = f"over {limit_text(kind, limit, flag)}"
            if kind == "total":
                return (
                    f"{over}: a request larger than a minute allows was not sent; raise {flag} or lower {max_tokens_flag}\n"
                    f"estimated {prompt + most:,} tokens (prompt {prompt:,} + max_tokens {most:,})"
                )
            if kind == "input":
                return (
                    f"{over}: a prompt larger than a minute allows was not sent; raise {flag}'s input limit\n"
                    f"the prompt is an estimated {prompt:,} tokens"
                )
            return (
                f"{over}: max_tokens larger than a minute allows, so the request was not sent; "
                f"raise {flag}'s output limit or lower {max_tokens_flag}\nmax_tokens {most:,}"
            )
        return None

    async def reserve(
        self, prompt: int, output: int = 0, rate: RateLimit | None = None
    ) -> Reserved:
        """Wait until ``prompt`` and ``output`` tokens fit (and, with ``rate``, for the start time it
        gives), then record them."""
        async with self._queue():
            ledger, paced = self.ledger, False
            while True:
                now = time.monotonic()
                at = ledger.ready_at(prompt, output, now, self.limits, self.per)
                if at <= now:
                    if rate is not None and not paced:
                        await (
                            rate.wait()
                        )  # no one else reserves meanwhile: the tokens still fit after it
                        paced = True
                        continue
                    held = Reserved(now, prompt, output)
                    ledger.add(held)
                    return held
                await self._sleep(ledger, at - now)

    @staticmethod
    async def _sleep(ledger: _Ledger, delay: float) -> None:
        """Sleep ``delay`` seconds, or less if a correction frees room meanwhile."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not fut.done():
                fut.set_result(None)

        timer = loop.call_later(delay, wake)
        ledger.waiting.append(fut)
        try:
            await fut
        finally:
            timer.cancel()
            ledger.waiting.remove(fut)

    def settle(self, held: Reserved, usage: Usage) -> None:
        """Replace the estimate by the usage the server reported (none reported: the estimate stands)."""
        if usage.prompt_tokens + usage.completion_tokens > 0:
            self.ledger.correct(held, usage.prompt_tokens, usage.completion_tokens)


#: Calls a slow-starting window lets out at first (:meth:`AdaptiveSlots.start_slow`).
SLOW_START = 4

#: Congestion signals: failures that say the server has more than it can take (a timeout, 429, 503).
CONGESTION_KINDS = frozenset({"timeout", "rate_limited", "overloaded"})


@dataclass(frozen=True)
class Sending:
    """One request at the server: the window's epoch when it went out and how many were at the
    server then, itself included."""

    epoch: int
    at_server: int


class AdaptiveSlots:
    """How many calls an endpoint is sent at once when ``--concurrency`` was not given: a window
    that starts at the server's own number of slots where it reports one (else at the provider's
    default), shrinks on congestion and grows back on success.

    Additive increase, multiplicative decrease (Chiu and Jain, "Analysis of the Increase and
    Decrease Algorithms for Congestion Avoidance in Computer Networks", 1989; TCP's congestion
    avoidance, RFC 5681 section 3.1): every success adds ``1 / window`` (about one more call per
    window of successes), a congestion signal halves the window (never below one call). Only a
    call sent after the last decrease can halve it again, so the calls that were already out when
    the server choked count as one signal, as TCP halves once per round trip. A timeout counts
    only where it may be queueing: with the server's slots known, a call that timed out with no
    more calls at the server than it has slots was the model being slow, not congestion.

    The window never goes over the server's slots (more would only wait in its queue, where the
    client's timeout runs) nor over ``ceiling`` where the server says nothing.

    A local or unknown server that says nothing of its slots (:meth:`start_slow`) may take one
    request at a time: the window starts at :data:`SLOW_START` and doubles each round (once a
    window's worth of calls came back) up to ``ceiling``: TCP's slow start (RFC 5681 section 3.1,
    cwnd doubling each round trip while below ssthresh), the doubling taken per round rather than
    one call per reply, since a server working through a queue sends its replies one by one and
    one more call per reply would keep its queue growing until the first timeout. The first
    congestion signal ends it, and the window is additive-increase, multiplicative-decrease from
    then on. Without it, the whole default (64) goes out at once and queues until the timeouts
    shrink it.

    Every executor on
    the endpoint counts its requests at the server here (:meth:`sent`), those with a fixed
    ``--concurrency`` too; only the adaptive ones wait for room (:meth:`acquire`).
    """

    def __init__(self, endpoint: str, ceiling: int) -> None:
        self.endpoint = endpoint
        self.ceiling = max(1, ceiling)
        #: The server's own number of slots and where it said so (None: not reported).
        self.slots: int | None = None
        self.source = ""
        self.window = float(self.ceiling)
        #: Places held by adaptive executors' calls (retries' waits included); requests at the server.
        self.held = 0
        self.at_server = 0
        self.epoch = 0
        self.decreases = 0
        self.smallest = self.window
        #: Where slow start ends (TCP's ssthresh): None when the window is not slow-starting.
        self.threshold: float | None = None
        #: Successes in the current slow-start round.
        self.round = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._probe: asyncio.Task[None] | None = None

    def widen(self, ceiling: int) -> None:
        """Another executor on the endpoint allows more (the largest default wins, as for the semaphore)."""
        if ceiling > self.ceiling:
            self.ceiling = ceiling
            if self.threshold is not None:
                self.threshold = float(ceiling)  # slow start goes on, up to the wider ceiling
            elif self.slots is None and self.decreases == 0:
                self.window = float(ceiling)
            self._wake()

    def reported(self, slots: int, source: str) -> None:
        """The server's own number of slots: the window starts there and never goes over it."""
        self.slots, self.source = max(1, slots), source
        self.window = self.smallest = float(self.slots)
        self.threshold = None
        self._wake()

    def start_slow(self) -> None:
        """Slow start: the window begins at :data:`SLOW_START` calls and grows by one per success
        up to ``ceiling`` (unless it has already backed off or the server reported its slots)."""
        if self.slots is not None or self.decreases:
            return
        self.threshold = float(self.ceiling)
        self.window = float(min(SLOW_START, self.ceiling))

    async def probe(
        self, ask: Callable[[], Awaitable[tuple[int, str] | None]], slow_start: bool = False
    ) -> None:
        """Ask the server once (the first caller asks; the others wait for its answer); where it
        reports no slots and ``slow_start`` (a local or unknown server), start slow."""
        if self._probe is None:
            self._probe = asyncio.ensure_future(self._ask(ask, slow_start))
        await asyncio.shield(self._probe)

    async def _ask(
        self, ask: Callable[[], Awaitable[tuple[int, str] | None]], slow_start: bool
    ) -> None:
        found = await ask()
        if found is not None:
            self.reported(*found)
        elif slow_start:
            self.start_slow()

    @property
    def room(self) -> int:
        """Calls the window lets out at once."""
        top = self.slots if self.slots is not None else self.ceiling
        return max(1, min(top, math.floor(self.window)))

    async def acquire(self) -> None:
        """Wait until the window has room for one more call (first come, first served)."""
        if self.held < self.room and not self._waiting:
            self.held += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a place, then cancelled: give it on
            else:
                self._waiting.remove(fut)
            raise

    def release(self) -> None:
        self.held -= 1
        self._wake()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def _wake(self) -> None:
        while self._waiting and self.held < self.room:
            fut = self._waiting.popleft()
            if not fut.done():
                self.held += 1
                fut.set_result(None)

    def sent(self) -> Sending:
        """A request goes to the server now."""
        self.at_server += 1
        return Sending(self.epoch, self.at_server)

    def returned(self) -> None:
        self.at_server -= 1

    def queued(self, sending: Sending) -> bool:
        """The request waited in the server's queue: more were at the server than it has slots."""
        return self.slots is not None and sending.at_server > self.slots

    def succeeded(self) -> None:
        top = self.slots if self.slots is not None else self.ceiling
        if self.threshold is not None and self.window < self.threshold:
            self.round += 1
            if (
                self.round >= self.room
            ):  # a window's worth came back: the next round sends twice as many
                self.round = 0
                self.window = min(self.threshold, self.window * 2)
                self._wake()
        elif self.window < top:
            self.window = min(float(top), self.window + 1.0 / self.window)
            self._wake()

    def congested(self, sending: Sending, kind: str | None) -> bool:
        """A failure of ``kind`` for the request ``sending``; True when it halved the window."""
        if kind not in CONGESTION_KINDS or sending.epoch != self.epoch:
            return False
        if kind == "timeout" and self.slots is not None and not self.queued(sending):
            return False  # as many at the server as it has slots: the model was slow, not the queue
        self.window = max(1.0, self.window / 2)
        self.threshold = None  # slow start is over: additive increase from here
        self.smallest = min(self.smallest, self.window)
        self.epoch += 1
        self.decreases += 1
        return True


class EndpointLimits:
    """One semaphore per endpoint, shared by the executors of one run (answers and judges), and
    request and token rates per model at an endpoint (``Provider.rate_key``) where they were set.

    An endpoint's capacity is the largest limit any executor on it asked for: with
    ``--concurrency 1 --judge-concurrency 1`` against one server, one request is in flight in all.
    Rates are the vendors' and count each model apart: a candidate and a judge that are the same
    model at one endpoint share the lowest asked for (``--rpm 60 --judge-rpm 30`` starts at most
    30 of their calls a minute, answers and judge calls together; ``--tpm`` and ``--judge-tpm``
    likewise), while two models there each keep their own. Rates are keyed by whatever the
    caller passes (the methods below name it ``endpoint``).
    """

    def __init__(self, per: float | None = None) -> None:
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._size: dict[str, int] = {}
        self._rates: dict[str, RateLimit] = {}
        self._tokens: dict[str, TokenRate] = {}
        self._adaptive: dict[str, AdaptiveSlots] = {}
        #: The rate window in seconds (:data:`RATE_WINDOW`, a minute).
        self.per = RATE_WINDOW if per is None else per

    def limit_rate(self, endpoint: str, rpm: int | None, flag: str = "--rpm") -> None:
        """At most ``rpm`` call starts per window on ``endpoint`` (None: no limit asked for)."""
        if rpm is None:
            return
        check_rpm(rpm, flag)
        if endpoint in self._rates:
            self._rates[endpoint].lower(rpm)
        else:
            self._rates[endpoint] = RateLimit(endpoint, rpm, self.per)

    def rate(self, endpoint: str) -> RateLimit | None:
        return self._rates.get(endpoint)

    def limit_tokens(self, endpoint: str, tpm: object, flag: str = "--tpm") -> None:
        """At most ``tpm`` tokens of call starts per window on ``endpoint`` (:func:`token_limits`:
        a number for prompt plus output, or separate input and output limits; None: no limit asked for)."""
        limits = token_limits(tpm, flag)
        if limits is None:
            return
        if endpoint in self._tokens:
            self._tokens[endpoint].lower(limits, flag)
        else:
            self._tokens[endpoint] = TokenRate(endpoint, limits, self.per, flag)

    def tokens(self, endpoint: str) -> TokenRate | None:
        return self._tokens.get(endpoint)

    def limit_model(
        self, provider: Provider, rpm: int | None, tpm: object, prefix: str = "--"
    ) -> None:
        """The request and token rates asked for ``provider``'s model at its endpoint
        (:attr:`Provider.rate_key`), set by the flags ``{prefix}rpm`` and ``{prefix}tpm``."""
        self.limit_rate(provider.rate_key, rpm, f"{prefix}rpm")
        self.limit_tokens(provider.rate_key, tpm, f"{prefix}tpm")

    def slot(self, endpoint: str, capacity: int) -> asyncio.Semaphore:
        sem = self._slots.get(endpoint)
        if sem is None:
            sem = self._slots[endpoint] = asyncio.Semaphore(capacity)
            self._size[endpoint] = capacity
        elif capacity > self._size[endpoint]:
            for _ in range(capacity - self._size[endpoint]):
                sem.release()  # widen: release() adds one unit of capacity
            self._size[endpoint] = capacity
        return sem

    def capacity(self, endpoint: str) -> int:
        return self._size.get(endpoint, 0)

    def adaptive(self, endpoint: str, ceiling: int) -> AdaptiveSlots:
        """The endpoint's adaptive window (one per endpoint, shared by every executor on it);
        ``ceiling`` is the most an executor sends there at once where the server says nothing."""
        slots = self._adaptive.get(endpoint)
        if slots is None:
            slots = self._adaptive[endpoint] = AdaptiveSlots(endpoint, ceiling)
        else:
            slots.widen(ceiling)
        return slots

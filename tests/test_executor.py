"""The executor: cache, in-flight sharing, the connection limit, bounded retries, and its counters.

A small in-test provider records every call (when, how many at once) and answers from a
per-request script, so each behaviour is observed directly rather than inferred.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from grandrounds.core.records import GenParams, Message, Request, Response, Usage
from grandrounds.providers.base import ModelSpec, Provider, ProviderError
from grandrounds.run.executor import CallStats, Executor, RetryPolicy
from grandrounds.store import Store

FAST = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)

Behaviour = Callable[[Request, int], "str | BaseException"]


class RecordingProvider(Provider):
    """Answers ``behaviour(request, n)`` where n counts this request's calls (0-based)."""

    default_concurrency = 5

    def __init__(self, behaviour: Behaviour | None = None, delay: float = 0.0) -> None:
        super().__init__(ModelSpec("fake", "m"))
        self.behaviour = behaviour or (lambda req, n: f"answer to {req.messages[-1].content}")
        self.delay = delay
        self.calls: list[str] = []
        self.call_times: list[float] = []
        self.active = 0
        self.max_active = 0

    def count(self, request: Request) -> int:
        return self.calls.count(request.key())

    async def call(self, request: Request) -> Response:
        n = self.count(request)
        self.calls.append(request.key())
        self.call_times.append(time.monotonic())
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            out = self.behaviour(request, n)
            if isinstance(out, BaseException):
                raise out
            return Response(
                key=request.key(),
                text=out,
                usage=Usage(len(request.messages[-1].content.split()), len(out.split())),
            )
        finally:
            self.active -= 1


@dataclass
class Observer:
    seen: list[tuple[bool, int]] = field(default_factory=list)

    def on_call(self, response: Response, *, retries: int) -> None:
        self.seen.append((response.ok, retries))


def req(text: str = "Which organ pumps blood?", **kw) -> Request:
    return Request(provider="fake", model="m", messages=(Message("user", text),), **kw)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "store.db")
    yield s
    s.close()


def run(coro):
    return asyncio.run(coro)


def stored(store: Store, key: str) -> Response | None:
    """The stored row for ``key``, failed or not (``get_call`` returns successes only)."""
    return store.calls_by_key([key]).get(key)


# ---- cache -------------------------------------------------------------------------------------


def test_stored_success_is_returned_without_a_call(store):
    r = req()
    store.put_call(r, Response(key=r.key(), text="stored answer", usage=Usage(7, 2)))
    provider = RecordingProvider()
    ex = Executor(store, provider, retry=FAST)
    out = run(ex(r))
    assert out.text == "stored answer" and out.cached is True
    assert provider.calls == []
    assert (ex.stats.cached, ex.stats.made) == (1, 0)
    assert ex.stats.prompt_tokens == 0, "cache hits cost no tokens"


def test_first_call_is_live_second_is_a_cache_hit(store):
    provider = RecordingProvider()
    ex = Executor(store, provider, retry=FAST)
    first = run(ex(req()))
    second = run(ex(req()))
    assert first.text == second.text == "answer to Which organ pumps blood?"
    assert first.cached is False and second.cached is True
    assert len(provider.calls) == 1
    assert (ex.stats.made, ex.stats.cached) == (1, 1)


def test_cache_is_shared_through_the_store_between_executors(store):
    run(Executor(store, RecordingProvider(), retry=FAST)(req()))
    other = RecordingProvider(lambda r, n: "different")
    out = run(Executor(store, other, retry=FAST)(req()))
    assert out.text == "answer to Which organ pumps blood?"
    assert other.calls == []


def test_requests_differing_in_any_key_field_are_separate_calls(store):
    provider = RecordingProvider()
    ex = Executor(store, provider, retry=FAST)

    async def go():
        return await asyncio.gather(
            ex(req()),
            ex(req(attempt=1)),
            ex(req(params=GenParams(temperature=0.5))),
            ex(req(purpose="judge")),
        )

    run(go())
    assert len(provider.calls) == 4 and len(set(provider.calls)) == 4


# ---- in-flight sharing -----------------------------------------------------------------------


def test_identical_requests_in_flight_share_one_call(store):
    provider = RecordingProvider(delay=0.05)
    ex = Executor(store, provider, retry=FAST)

    async def go():
        return await asyncio.gather(*(ex(req()) for _ in range(8)))

    outs = run(go())
    assert len(provider.calls) == 1
    assert {o.text for o in outs} == {"answer to Which organ pumps blood?"}
    assert ex.stats.made == 1 and ex.stats.cached == 0
    assert ex._inflight == {}


def test_shared_failure_reaches_every_waiter_and_is_tried_only_once(store):
    provider = RecordingProvider(
        lambda r, n: ProviderError("HTTP 400: bad", retryable=False), delay=0.02
    )
    ex = Executor(store, provider, retry=FAST)

    async def go():
        return await asyncio.gather(*(ex(req()) for _ in range(5)))

    outs = run(go())
    assert len(provider.calls) == 1
    assert all(not o.ok and o.error == "HTTP 400: bad" for o in outs)
    assert ex.stats.failed == 1


def test_unexpected_exception_reaches_every_waiter_and_is_not_stored(store):
    provider = RecordingProvider(lambda r, n: RuntimeError("provider bug"), delay=0.02)
    ex = Executor(store, provider, retry=FAST)

    async def go():
        return await asyncio.gather(*(ex(req()) for _ in range(4)), return_exceptions=True)

    outs = run(go())
    assert len(outs) == 4 and all(
        isinstance(o, RuntimeError) and str(o) == "provider bug" for o in outs
    )
    assert len(provider.calls) == 1, "not retried: only ProviderError is classified"
    assert stored(store, req().key()) is None
    assert ex._inflight == {}
    assert ex.stats.made == 0


def test_after_an_exception_the_next_call_tries_again(store):
    provider = RecordingProvider(lambda r, n: RuntimeError("once") if n == 0 else "recovered")
    ex = Executor(store, provider, retry=FAST)
    with pytest.raises(RuntimeError):
        run(ex(req()))
    assert run(ex(req())).text == "recovered"
    assert len(provider.calls) == 2


def test_lookups_started_together_are_one_store_query(store, monkeypatch):
    """Calls started in one turn of the event loop look in the store with one query: stored
    successes come back from it, a stored failure and new requests are asked (a request twice in
    the batch once), buffered writes count as stored."""
    hits = [req(f"stored {i}") for i in range(3)]
    for r in hits:
        store.put_call(r, Response(key=r.key(), text=f"kept {r.messages[0].content}"))
    failed = req("failed before")
    store.put_call(failed, Response(key=failed.key(), error="HTTP 500: down"))
    new = [req("new 0"), req("new 1"), req("new 0")]
    queries: list[list[str]] = []
    real = store.get_calls

    def counted(keys):
        queries.append(list(keys))
        return real(keys)

    monkeypatch.setattr(store, "get_calls", counted)
    provider = RecordingProvider()
    ex = Executor(store, provider, retry=FAST)

    async def go():
        with store.write_behind():
            buffered = req("buffered")
            store.put_call(buffered, Response(key=buffered.key(), text="from the buffer"))
            return await asyncio.gather(*(ex(r) for r in [*hits, failed, *new, buffered]))

    outs = run(go())
    assert len(queries) == 1 and len(queries[0]) == 7, "one query for the 7 distinct keys"
    assert [o.text for o in outs[:3]] == ["kept stored 0", "kept stored 1", "kept stored 2"]
    assert (
        all(o.cached for o in outs[:3]) and outs[-1].text == "from the buffer" and outs[-1].cached
    )
    assert sorted(provider.calls) == sorted([failed.key(), new[0].key(), new[1].key()])
    assert outs[4].text == outs[6].text == "answer to new 0"
    assert (ex.stats.cached, ex.stats.made) == (4, 3)


def test_a_failed_store_lookup_reaches_every_caller_and_nothing_is_sent(store, monkeypatch):
    from grandrounds.core.errors import StoreError

    def broken(keys):
        raise StoreError(store.path, "the file is damaged")

    monkeypatch.setattr(store, "get_calls", broken)
    provider = RecordingProvider()
    ex = Executor(store, provider, retry=FAST)

    async def go():
        return await asyncio.gather(*(ex(req(f"q {i}")) for i in range(4)), return_exceptions=True)

    outs = run(go())
    assert all(isinstance(o, StoreError) and "damaged" in str(o) for o in outs), outs
    assert provider.calls == [] and ex._inflight == {}


# ---- the connection limit --------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 3, 7])
def test_concurrency_limit_is_enforced_and_reached(store, limit):
    provider = RecordingProvider(delay=0.01)
    ex = Executor(store, provider, concurrency=limit, retry=FAST)

    async def go():
        return await asyncio.gather(*(ex(req(f"question {i}")) for i in range(20)))

    outs = run(go())
    assert len(outs) == 20 and all(o.ok for o in outs)
    assert provider.max_active == limit
    assert len(provider.calls) == 20


def test_default_concurrency_comes_from_the_provider(store):
    provider = RecordingProvider(delay=0.01)
    provider.default_concurrency = 2
    ex = Executor(store, provider, retry=FAST)
    assert ex.concurrency == 2

    async def go():
        await asyncio.gather(*(ex(req(f"q{i}")) for i in range(9)))

    run(go())
    assert provider.max_active == 2


def test_slot_is_held_through_retry_backoff(store):
    """One slot: a request sleeping on Retry-After keeps it, so the other waits for its turn."""
    first = req("first")

    def behaviour(r, n):
        if r.key() == first.key() and n == 0:
            return ProviderError("429 rate limited: slow down", retryable=True, retry_after=0.1)
        return "ok"

    provider = RecordingProvider(behaviour)
    ex = Executor(store, provider, concurrency=1, retry=RetryPolicy(3, 0.0, 1.0))

    async def go():
        return await asyncio.gather(ex(first), ex(req("second")))

    run(go())
    order = list(provider.calls)
    assert order == [first.key(), first.key(), req("second").key()]


# ---- retries -----------------------------------------------------------------------------------


def test_non_retryable_error_is_not_retried(store):
    provider = RecordingProvider(
        lambda r, n: ProviderError("HTTP 401: invalid api key", retryable=False)
    )
    obs = Observer()
    ex = Executor(store, provider, retry=FAST, observer=obs)
    out = run(ex(req()))
    assert len(provider.calls) == 1
    assert out.error == "HTTP 401: invalid api key" and "gave up" not in out.error
    assert out.text is None
    assert (ex.stats.made, ex.stats.failed, ex.stats.retries) == (1, 1, 0)
    assert ex.stats.errors == {"HTTP 401: invalid api key": 1}
    assert obs.seen == [(False, 0)]


def test_retryable_errors_are_retried_until_success(store):
    provider = RecordingProvider(
        lambda r, n: ProviderError("HTTP 503: overloaded", retryable=True) if n < 2 else "B"
    )
    obs = Observer()
    ex = Executor(store, provider, retry=FAST, observer=obs)
    out = run(ex(req()))
    assert out.ok and out.text == "B"
    assert len(provider.calls) == 3
    assert (ex.stats.made, ex.stats.failed, ex.stats.retries) == (1, 0, 2)
    assert ex.stats.errors == {}
    assert obs.seen == [(True, 2)]
    assert store.get_call(req().key()).text == "B"


@pytest.mark.parametrize("attempts", [1, 2, 5])
def test_gives_up_after_max_attempts_and_stores_the_failure(store, attempts):
    provider = RecordingProvider(lambda r, n: ProviderError("HTTP 503: overloaded", retryable=True))
    ex = Executor(store, provider, retry=RetryPolicy(attempts, 0.001, 0.002))
    out = run(ex(req()))
    assert len(provider.calls) == attempts
    assert out.error == f"HTTP 503: overloaded (gave up after {attempts} attempts)"
    assert (ex.stats.made, ex.stats.failed, ex.stats.retries) == (1, 1, attempts - 1)
    assert ex.stats.errors == {"HTTP 503: overloaded": 1}
    row = stored(store, req().key())
    assert row is not None and row.error == out.error and row.text is None
    assert store.get_call(req().key()) is None, "a failure is never a cache hit"


def test_retryable_then_final_error_stops_at_the_final_one(store):
    def behaviour(r, n):
        if n == 0:
            return ProviderError("connection error: reset", retryable=True)
        return ProviderError("HTTP 404: no such model", retryable=False)

    provider = RecordingProvider(behaviour)
    ex = Executor(store, provider, retry=FAST)
    out = run(ex(req()))
    assert len(provider.calls) == 2
    assert out.error == "HTTP 404: no such model"
    assert ex.stats.retries == 1 and ex.stats.errors == {"HTTP 404: no such model": 1}


def test_stored_failure_is_retried_next_time_and_replaced_by_success(store):
    down = RecordingProvider(lambda r, n: ProviderError("HTTP 500: boom", retryable=True))
    out1 = run(Executor(store, down, retry=RetryPolicy(2, 0.001, 0.001))(req()))
    assert not out1.ok and stored(store, req().key()).error.startswith("HTTP 500")

    up = RecordingProvider(lambda r, n: "Answer: B")
    ex2 = Executor(store, up, retry=FAST)
    out2 = run(ex2(req()))
    assert len(up.calls) == 1, "the stored failure did not count as a cache hit"
    assert out2.ok and out2.text == "Answer: B"
    assert ex2.stats.cached == 0 and ex2.stats.made == 1
    replaced = stored(store, req().key())
    assert replaced.error is None and replaced.text == "Answer: B"
    # and from now on it is a cache hit
    third = RecordingProvider()
    assert run(Executor(store, third, retry=FAST)(req())).text == "Answer: B" and third.calls == []


def test_retry_after_is_honoured(store):
    wait = 0.25

    def behaviour(r, n):
        return (
            ProviderError("429 rate limited: wait", retryable=True, retry_after=wait)
            if n == 0
            else "ok"
        )

    provider = RecordingProvider(behaviour)
    # base_delay 0: without Retry-After the jittered backoff would be 0 s.
    ex = Executor(store, provider, retry=RetryPolicy(3, 0.0, 5.0))
    out = run(ex(req()))
    assert out.ok
    gap = provider.call_times[1] - provider.call_times[0]
    assert wait * 0.9 <= gap < wait + 1.0


def test_retry_after_is_capped_by_max_delay(store):
    def behaviour(r, n):
        return (
            ProviderError("429 rate limited", retryable=True, retry_after=60.0) if n == 0 else "ok"
        )

    provider = RecordingProvider(behaviour)
    ex = Executor(store, provider, retry=RetryPolicy(3, 0.0, 0.05))
    t0 = time.monotonic()
    assert run(ex(req())).ok
    assert time.monotonic() - t0 < 2.0


def test_backoff_without_retry_after_is_capped_by_max_delay(store):
    # base_delay 10 s: uncapped full jitter would wait U(0, 10 * 2^k) s; the 0.03 s cap must bound every wait.
    provider = RecordingProvider(
        lambda r, n: ProviderError("HTTP 502", retryable=True) if n < 3 else "ok"
    )
    ex = Executor(
        store, provider, retry=RetryPolicy(max_attempts=6, base_delay=10.0, max_delay=0.03)
    )
    assert run(ex(req())).ok
    gaps = [b - a for a, b in zip(provider.call_times, provider.call_times[1:])]
    assert len(gaps) == 3
    assert all(g < 0.5 for g in gaps)  # the cap plus generous scheduling slack


# ---- RetryPolicy.delay (pure) -------------------------------------------------------------------


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 6, 10])
def test_delay_is_full_jitter_below_min_of_cap_and_exponential(attempt):
    policy = RetryPolicy(max_attempts=12, base_delay=0.5, max_delay=4.0)
    bound = min(4.0, 0.5 * 2**attempt)
    rng = random.Random(attempt)
    draws = [policy.delay(attempt, rng, None) for _ in range(2000)]
    assert all(0.0 <= d <= bound for d in draws)
    # Uniform on [0, bound]: mean near bound / 2 and the range nearly covered.
    assert sum(draws) / len(draws) == pytest.approx(bound / 2, rel=0.08)
    assert max(draws) > 0.95 * bound and min(draws) < 0.05 * bound


def test_delay_is_reproducible_from_the_seed():
    policy = RetryPolicy()
    a = [policy.delay(k, random.Random(42), None) for k in range(6)]
    b = [policy.delay(k, random.Random(42), None) for k in range(6)]
    assert a == b


@pytest.mark.parametrize(
    "retry_after,want",
    [(0.0, 0.0), (1.5, 1.5), (30.0, 30.0), (31.0, 30.0), (1e9, 30.0), (-5.0, 0.0)],
)
def test_delay_uses_retry_after_clamped_to_zero_and_cap(retry_after, want):
    assert RetryPolicy(max_delay=30.0).delay(0, random.Random(0), retry_after) == want


def test_delay_with_retry_after_does_not_consume_randomness():
    rng1, rng2 = random.Random(7), random.Random(7)
    RetryPolicy().delay(2, rng1, 1.0)
    assert rng1.random() == rng2.random()


def test_default_policy_values():
    p = RetryPolicy()
    assert (p.max_attempts, p.base_delay, p.max_delay) == (6, 0.5, 30.0)


# ---- counters ----------------------------------------------------------------------------------


def test_token_counts_add_up_over_live_calls_only(store):
    provider = RecordingProvider(lambda r, n: "one two three")
    ex = Executor(store, provider, retry=FAST)

    async def go():
        await asyncio.gather(ex(req("a b")), ex(req("c d e f")))
        await ex(req("a b"))  # cache hit: no tokens

    run(go())
    assert ex.stats.prompt_tokens == 2 + 4
    assert ex.stats.completion_tokens == 3 + 3
    assert (ex.stats.made, ex.stats.cached) == (2, 1)


def test_failures_are_counted_by_reason_without_the_attempt_count(store):
    errors = {
        "q1": ProviderError("HTTP 400: bad request", retryable=False),
        "q2": ProviderError("HTTP 400: other reason", retryable=False),
        "q3": ProviderError("connection error: ConnectError", retryable=True),
        "q4": ProviderError("x" * 100, retryable=False),
        "q5": ProviderError("HTTP 400: bad request\n<html>details</html>", retryable=False),
    }
    provider = RecordingProvider(lambda r, n: errors[r.messages[-1].content])
    ex = Executor(store, provider, retry=RetryPolicy(2, 0.001, 0.001))

    async def go():
        return await asyncio.gather(*(ex(req(k)) for k in errors))

    run(go())
    assert ex.stats.errors == {
        "HTTP 400: bad request": 2,
        "HTTP 400: other reason": 1,
        "connection error: ConnectError": 1,
        "x" * 79 + "…": 1,
    }
    assert ex.stats.failed == 5 and ex.stats.made == 5 and ex.stats.retries == 1


def test_observer_sees_each_live_call_once(store):
    flaky = req("flaky")

    def behaviour(r, n):
        if r.key() == flaky.key() and n == 0:
            return ProviderError("HTTP 500", retryable=True)
        return "fine"

    obs = Observer()
    ex = Executor(store, RecordingProvider(behaviour, delay=0.01), retry=FAST, observer=obs)

    async def go():
        await asyncio.gather(ex(flaky), ex(flaky), ex(req("steady")))
        await ex(req("steady"))  # cached: no observation

    run(go())
    assert sorted(obs.seen) == [(True, 0), (True, 1)]


def test_fresh_executor_starts_with_zero_stats(store):
    ex = Executor(store, RecordingProvider())
    assert ex.stats == CallStats()
    assert ex.stats.errors == {} and ex.stats.errors is not CallStats().errors


def test_many_requests_mixed_outcomes_accounting(store):
    """60 requests, 20 of them duplicates in flight, 10 permanently failing: counters agree with the provider."""

    def behaviour(r, n):
        i = int(r.messages[-1].content.split()[-1])
        if i % 4 == 0:
            return ProviderError("HTTP 422: unprocessable", retryable=False)
        if i % 4 == 1 and n == 0:
            return ProviderError("timeout", retryable=True)
        return f"ok {i}"

    provider = RecordingProvider(behaviour, delay=0.002)
    ex = Executor(store, provider, concurrency=6, retry=FAST)
    items = [req(f"item {i}") for i in range(40)] + [req(f"item {i}") for i in range(20)]

    async def go():
        return await asyncio.gather(*(ex(r) for r in items))

    outs = run(go())
    failing = {i for i in range(40) if i % 4 == 0}
    retried = {i for i in range(40) if i % 4 == 1}
    assert ex.stats.made == 40
    assert ex.stats.failed == len(failing)
    assert ex.stats.retries == len(retried)
    assert len(provider.calls) == 40 + len(retried)
    assert provider.max_active <= 6
    for r, o in zip(items, outs):
        i = int(r.messages[-1].content.split()[-1])
        assert o.ok == (i not in failing)
        if o.ok:
            assert o.text == f"ok {i}"

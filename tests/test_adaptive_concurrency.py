"""Concurrency that fits the server: the server's own slots where it reports them, a window that
halves on timeouts, 429s and 503s and grows back on success, an explicit --concurrency that still
wins, and timeouts of calls that waited in the server's queue reported as such.

The server is the loopback one answering one request at a time (``serial=True``: a lock, a fixed
service time per request), with or without llama.cpp's ``/props``.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from grandrounds.cli.common import call_summary
from grandrounds.core.records import GenParams, Message, Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.base import ModelSpec
from grandrounds.providers.slots import (
    llama_cpp_python_slots,
    llama_cpp_slots,
    server_root,
    sglang_slots,
)
from grandrounds.run.executor import CallStats, Executor, RetryPolicy
from grandrounds.run.limits import AdaptiveSlots, EndpointLimits
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer

ONE_SLOT = {"total_slots": 1, "default_generation_settings": {"n_ctx": 4096}}
RETRY = RetryPolicy(max_attempts=6, base_delay=0.05, max_delay=0.4)


def ask(
    srv: LoopbackServer,
    db: Path,
    n: int,
    concurrency: int | None,
    timeout: float,
    retry: RetryPolicy = RETRY,
) -> tuple[float, list[Any], CallStats]:
    """``n`` distinct questions through one executor: (wall s, responses, its stats)."""

    async def go() -> tuple[float, list[Any], CallStats]:
        provider = PROVIDERS.get("openai")(
            ModelSpec("openai", "local", srv.base_url), timeout=timeout
        )
        with Store(db) as st:
            ex = Executor(st, provider, concurrency, retry, endpoints=EndpointLimits())
            reqs = [
                Request(
                    provider="openai",
                    model="local",
                    messages=(Message("user", f"question {i}"),),
                    params=GenParams(max_tokens=8),
                    base_url=srv.base_url,
                )
                for i in range(n)
            ]
            t0 = time.perf_counter()
            out = await asyncio.gather(*(ex(r) for r in reqs))
            wall = time.perf_counter() - t0
            await provider.aclose()
            return wall, out, ex.stats

    return asyncio.run(go())


# ---- the window --------------------------------------------------------------------------------


def test_window_halves_once_per_round_and_grows_back_by_one_per_window() -> None:
    w = AdaptiveSlots("http://x/v1", 16)
    first, second = w.sent(), w.sent()
    assert w.congested(first, "rate_limited") and w.window == 8
    # the other call out in the same round is the same signal: no second halving
    assert not w.congested(second, "overloaded") and w.window == 8
    later = w.sent()
    assert w.congested(later, "timeout") and w.window == 4
    for _ in range(5):  # a window's worth of successes adds about one call
        w.succeeded()
    assert 5.0 < w.window < 5.2 and w.room == 5
    assert not w.congested(w.sent(), None) and not w.congested(w.sent(), "context_length"), (
        "only congestion halves"
    )
    for _ in range(1000):
        w.succeeded()
    assert w.window == 16, "never over the ceiling"


def test_reported_slots_are_the_start_and_the_top_and_a_slow_model_is_not_congestion() -> None:
    w = AdaptiveSlots("http://x/v1", 64)
    w.reported(2, "llama.cpp /props")
    assert w.room == 2
    for _ in range(50):
        w.succeeded()
    assert w.room == 2, "more than the server's slots would only wait in its queue"
    alone = w.sent()  # one of two slots busy: a timeout is the model being slow
    assert not w.queued(alone) and not w.congested(alone, "timeout") and w.room == 2
    w.sent()
    crowded = w.sent()  # three at a two-slot server: this one waited
    assert w.queued(crowded) and w.congested(crowded, "timeout") and w.room == 1


def test_waiters_get_room_in_arrival_order_when_the_window_allows() -> None:
    async def go() -> list[int]:
        w = AdaptiveSlots("http://x/v1", 1)
        order: list[int] = []

        async def one(i: int) -> None:
            await w.acquire()
            order.append(i)
            await asyncio.sleep(0.01)
            w.release()

        await asyncio.gather(*(one(i) for i in range(5)))
        assert w.held == 0
        return order

    assert asyncio.run(go()) == [0, 1, 2, 3, 4]


# ---- what servers report -----------------------------------------------------------------------


def test_slots_are_read_from_each_servers_own_report() -> None:
    assert llama_cpp_slots({"total_slots": 4}) == 4
    assert llama_cpp_slots({"default_generation_settings": {"n_parallel": 2}}) == 2
    assert (
        llama_cpp_slots({"total_slots": 0}) is None
        and llama_cpp_slots({"total_slots": True}) is None
    )
    assert llama_cpp_slots(["total_slots"]) is None
    assert (
        sglang_slots({"max_running_requests": 48}) == 48
        and sglang_slots({"max_running_requests": None}) is None
    )
    assert (
        llama_cpp_python_slots({"info": {"title": "🦙 llama.cpp Python API", "version": "0.3"}})
        == 1
    )
    assert llama_cpp_python_slots({"info": {"title": "FastAPI"}}) is None
    assert (
        server_root("http://h:8080/v1/") == "http://h:8080"
        and server_root("http://h/api") == "http://h/api"
    )


# ---- a one-slot server, 20 questions -----------------------------------------------------------


def test_a_one_slot_server_that_says_so_gets_one_call_at_a_time_and_none_fails(
    tmp_path: Path,
) -> None:
    """Service 0.1 s a request, timeout 0.5 s. The old default (64 at once, here given as an explicit
    --concurrency) fails and retries; without --concurrency the server's /props is read and every
    call goes through first time."""
    with LoopbackServer(lambda body: "B", latency=0.1, serial=True, props=ONE_SLOT) as srv:
        wall_64, out_64, st_64 = ask(srv, tmp_path / "a.db", 20, 64, timeout=0.5)
        assert srv.stats.max_waiting > 1 and st_64.retries > 0, (
            "the contrast: 64 at once queue and time out"
        )
    with LoopbackServer(lambda body: "B", latency=0.1, serial=True, props=ONE_SLOT) as srv:
        wall, out, st = ask(srv, tmp_path / "b.db", 20, None, timeout=0.5)
        assert srv.gets.get("/props") == 1, "asked once"
        assert srv.stats.max_waiting == 0 and srv.stats.requests == 20
    assert all(r.ok for r in out) and st.failed == 0 and st.retries == 0 and st.queued == 0
    assert st.server_slots == "1 (llama.cpp /props)"
    assert wall < wall_64 and wall < 20 * 0.1 + 1.5
    assert "the server reports 1 (llama.cpp /props) slot(s)" in call_summary(st, [])[0]


def test_a_one_slot_server_that_says_nothing_is_backed_off_until_calls_go_through(
    tmp_path: Path,
) -> None:
    with LoopbackServer(lambda body: "B", latency=0.1, serial=True) as srv:
        _, out, st = ask(srv, tmp_path / "s.db", 20, None, timeout=0.5)
        assert srv.gets.get("/props") == 1 and srv.gets.get("/openapi.json") == 1
    assert all(r.ok for r in out) and st.failed == 0
    assert st.backoffs >= 1 and st.smallest_window < 20, (
        "timeouts with many at the server halved the window"
    )
    assert st.server_slots == "" and st.queued == 0, (
        "slots unknown: a timeout is not known to be a queued one"
    )


def test_an_explicit_concurrency_still_wins_and_queued_timeouts_say_so(tmp_path: Path) -> None:
    with LoopbackServer(lambda body: "B", latency=0.1, serial=True, props=ONE_SLOT) as srv:
        _, out, st = ask(
            srv,
            tmp_path / "s.db",
            8,
            8,
            timeout=0.25,
            retry=RetryPolicy(max_attempts=1, base_delay=0.01, max_delay=0.01),
        )
        assert srv.stats.max_waiting >= 4, "8 sent at once, as asked"
    failed = [r for r in out if not r.ok]
    assert failed and st.queued > 0 and st.queued_slots == 1 and st.queued_most == 8
    first, second = failed[0].error.splitlines()[:2]
    assert (
        first
        == "timed out waiting in the server's queue: it serves 1 at a time; lower --concurrency to 1"
    )
    assert (
        re.search(r"; [2-8] calls were at the server", second)
        and "timeout: no complete reply within 0.25 s" in second
    )
    # waiting used none of the model's attempts (one here): each timeout in the queue was sent
    # again once, and only the second timeout in the queue ended the call
    assert st.queued == st.retries + st.failed and st.retries >= st.failed
    assert "lower --concurrency to 1" in call_summary(st, [])[0]


def test_429_and_503_halve_the_window_of_calls_without_concurrency(tmp_path: Path) -> None:
    from grandrounds.testing import Fault

    seen: dict[str, int] = {}

    def rule(body: dict[str, Any]) -> Any:
        q = body["messages"][-1]["content"]
        seen[q] = seen.get(q, 0) + 1
        return Fault("429", retry_after=0.01) if seen[q] == 1 else "B"

    with LoopbackServer(rule, latency=0.01) as srv:
        _, out, st = ask(srv, tmp_path / "s.db", 10, None, timeout=5)
    assert all(r.ok for r in out) and st.backoffs >= 1 and st.smallest_window <= 32


@pytest.mark.parametrize("concurrency", [None, 3])
def test_every_executor_on_an_endpoint_counts_its_calls_at_the_server(
    tmp_path: Path, concurrency: int | None
) -> None:
    async def go() -> int:
        # eight slots reported: the window starts wide enough for all six (no slow start)
        with LoopbackServer(lambda body: "B", latency=0.05, props={"total_slots": 8}) as srv:
            provider = PROVIDERS.get("openai")(ModelSpec("openai", "m", srv.base_url))
            limits = EndpointLimits()
            with Store(tmp_path / "s.db") as st:
                ex = Executor(st, provider, concurrency, RETRY, endpoints=limits)
                reqs = [
                    Request(
                        provider="openai",
                        model="m",
                        messages=(Message("user", f"q{i}"),),
                        params=GenParams(),
                        base_url=srv.base_url,
                    )
                    for i in range(6)
                ]
                most = 0

                async def watch() -> None:
                    nonlocal most
                    while True:
                        most = max(most, ex.window.at_server)
                        await asyncio.sleep(0.005)

                w = asyncio.ensure_future(watch())
                await asyncio.gather(*(ex(r) for r in reqs))
                w.cancel()
                await provider.aclose()
                assert ex.window.at_server == 0 and ex.window.held == 0
                return most

    most = asyncio.run(go())
    assert most == (3 if concurrency == 3 else 6)


# ---- slow start for servers that say nothing ---------------------------------------------------


def test_slow_start_doubles_each_round_up_to_the_default_and_is_aimd_after_a_back_off() -> None:
    w = AdaptiveSlots("http://x/v1", 64)
    w.start_slow()
    rooms = [w.room]
    while w.room < 64:
        for _ in range(w.room):  # a round: a window's worth of calls come back
            w.succeeded()
        rooms.append(w.room)
    assert rooms == [4, 8, 16, 32, 64], "RFC 5681 3.1: doubling each round, up to the default"
    w.succeeded()
    assert w.room == 64, "never over the default"
    w2 = AdaptiveSlots("http://x/v1", 64)
    w2.start_slow()
    for _ in range(4):
        w2.succeeded()
    assert w2.room == 8 and w2.congested(w2.sent(), "timeout") and w2.room == 4
    for _ in range(
        5
    ):  # after a back-off: about one more call per window of successes, not doubling
        w2.succeeded()
    assert 5.0 < w2.window < 5.2 and w2.room == 5 and w2.threshold is None


def test_slow_start_follows_a_wider_default_and_never_overrides_reported_slots() -> None:
    w = AdaptiveSlots("http://x/v1", 16)
    w.start_slow()
    w.widen(64)
    assert w.room == 4 and w.threshold == 64, (
        "another executor's wider default raises where slow start ends"
    )
    reported = AdaptiveSlots("http://x/v1", 64)
    reported.reported(2, "llama.cpp /props")
    reported.start_slow()
    assert reported.room == 2 and reported.threshold is None


def test_slow_start_is_for_local_and_unknown_servers_not_hosted_apis() -> None:
    from grandrounds.providers.slots import slow_start

    assert slow_start("http://127.0.0.1:8080/v1") and slow_start("http://gpu-box.lan:8000/v1")
    assert slow_start("https://gateway.example/anthropic")
    for hosted in (
        "https://api.openai.com/v1",
        "https://api.anthropic.com",
        "https://openrouter.ai/api/v1",
        "https://myorg.openai.azure.com/openai",
        "https://API.OpenAI.com/v1",
    ):
        assert not slow_start(hosted), hosted
    assert not slow_start(""), "a provider without a URL runs in this process"

    async def go(slow: bool) -> int:
        w = AdaptiveSlots("e", 64)

        async def nothing() -> None:
            return None

        await w.probe(nothing, slow_start=slow)
        return w.room

    assert asyncio.run(go(False)) == 64 and asyncio.run(go(True)) == 4


def test_a_one_slot_server_that_says_nothing_slow_starts_and_no_call_waits_out_its_timeout(
    tmp_path: Path,
) -> None:
    """40 questions of 0.02 s at a one-at-a-time server with no /props, timeout 0.6 s (30 fit in
    the queue). All at once, the last ten wait out their timeout and are retried; slow-starting
    (4, 8, 16, ...) none waits that long."""
    with LoopbackServer(lambda body: "B", latency=0.02, serial=True) as srv:
        _, out, st = ask(srv, tmp_path / "s.db", 40, None, timeout=0.6)
        most = srv.stats.max_waiting
    assert all(r.ok for r in out) and st.retries == 0 and st.backoffs == 0
    assert most < 30, most
    # an explicit --concurrency still wins: all 40 go out at once
    with LoopbackServer(lambda body: "B", latency=0.02, serial=True) as srv:
        _, out, st = ask(srv, tmp_path / "c.db", 40, 40, timeout=0.6)
        assert srv.stats.max_waiting >= 30 and st.retries > 0


def test_anthropic_429_and_529_are_congestion_for_the_window() -> None:
    from grandrounds.providers.anthropic import error_from_body

    limited = error_from_body(
        429, {"error": {"type": "rate_limit_error", "message": "slow down"}}, "slow down", 100
    )
    overloaded = error_from_body(
        529, {"error": {"type": "overloaded_error", "message": "Overloaded"}}, "Overloaded", 100
    )
    assert (
        (limited.kind, overloaded.kind) == ("rate_limited", "overloaded")
        and limited.retryable
        and overloaded.retryable
    )
    assert (
        error_from_body(400, {"error": {"type": "invalid_request_error"}}, "bad", 100).kind is None
    )
    assert error_from_body(500, {"error": {"type": "api_error"}}, "oops", 100).kind is None
    w = AdaptiveSlots("https://api.anthropic.com", 16)
    assert w.congested(w.sent(), limited.kind) and w.room == 8
    assert w.congested(w.sent(), overloaded.kind) and w.room == 4

"""The event loop every command runs its calls on.

uvloop (libuv under asyncio's interface) where it is installed, which it is by default on Linux
and macOS; asyncio's own loop otherwise (Windows) or when ``$GRANDROUNDS_EVENT_LOOP`` is
``asyncio``. On HealthBench-500 judged per criterion (6,462 calls, 64 connections, 50 ms
latency) uvloop took the run from 6.63 s to 6.23 s and its CPU from 4.34 s to 4.00 s (medians
of 4 alternating runs, ``bench/healthbench_wall.py``): less of every call's time goes to the
loop's own bookkeeping and socket writes.

While a command's loop runs, the cyclic garbage collector is tuned for a process that keeps few
objects for long and makes many short-lived ones (:func:`batch_gc`): the objects made before the
loop started (imported modules, the command's setup) are frozen out of every collection, and a
collection of the youngest generation waits for 5,000 new container objects instead of 700. On
the same HealthBench-500 run, collections took 0.45-0.50 s of the main thread's time (372
young-generation, 34 middle and 3 full collections, each full one walking every object the
imports made); tuned, 0.07-0.10 s, and the run 6.7-6.9 s instead of 7.0-7.5 s (3 alternating
runs on a 2-core machine). Garbage that forms reference cycles still goes, a little later;
memory is what reference counting frees, as before.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from grandrounds.core.errors import ConfigError

T = TypeVar("T")

#: ``auto`` (uvloop if installed), ``uvloop`` (required) or ``asyncio``.
ENV = "GRANDROUNDS_EVENT_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")
#: Collection thresholds while a command's loop runs (youngest, middle, oldest generation).
BATCH_GC_THRESHOLDS = (5000, 20, 100)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop to run on, or None for asyncio's default."""
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise ConfigError(f"${ENV} is {choice!r}; expected one of: {', '.join(CHOICES)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError(
                f"${ENV}=uvloop but uvloop is not installed (pip install uvloop; not available on Windows)"
            ) from None
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what :func:`run` runs on under the current environment."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new loop (as :func:`asyncio.run` does: Ctrl-C cancels it,
    async generators and the default executor are shut down before the loop closes)."""
    try:
        factory = loop_factory()
    except BaseException:
        coro.close()  # never started: close it so Python does not warn that it was never awaited
        raise
    with batch_gc(), asyncio.Runner(loop_factory=factory) as runner:
        return _run_interruptible(runner, coro)


def _run_interruptible(runner: asyncio.Runner, coro: Coroutine[Any, Any, T]) -> T:
    """``runner.run(coro)`` where Ctrl-C (and SIGTERM, which the command takes as Ctrl-C) cancels
    the run from the loop, never from inside the signal handler: asyncio's own handler cancels the
    task right where the signal landed, which can be between a lock's check of a waiter and its
    wake-up (``InvalidStateError`` out of ``Semaphore.release``). Here the handler only schedules the
    cancel; a second Ctrl-C stops at once, as asyncio's does. KeyboardInterrupt is raised after a
    cancelled run, as :func:`asyncio.run` raises it."""
    import signal
    import threading

    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        return runner.run(coro)
    loop = runner.get_loop()
    state: dict[str, Any] = {"task": None, "stops": 0}

    async def main() -> T:
        state["task"] = asyncio.current_task()
        return await coro

    def on_sigint(signum: int, frame: Any) -> None:
        state["stops"] += 1
        if state["stops"] > 1 or state["task"] is None:
            raise KeyboardInterrupt
        loop.call_soon_threadsafe(state["task"].cancel)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return runner.run(main())
    except asyncio.CancelledError:
        if state["stops"]:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def batch_gc() -> Iterator[None]:
    """The garbage collector tuned for a batch of calls (see the module's docstring), as it was
    again afterwards: the frozen objects are collectable again and the thresholds restored."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*BATCH_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()

"""A server that answers one request at a time and says nothing of its slots, asked without
``--concurrency``: wall time, failed calls, retries and back-offs of the adaptive window.

The server is the loopback one with ``serial=True`` (one lock, a fixed service time per request,
a request whose client has gone skipped when its turn comes, as llama.cpp's server does) and no
``/props``. The questions go through one executor as a run sends them: all at once, under the
endpoint's window. Issue 34's case (20 letter-loglik questions, ~3 s each through
llama-cpp-python's server, 120 s timeout) is scaled down by default: 20 questions of 0.3 s with a
2 s timeout, so the calls beyond the queue's first few time out while they wait.

    python bench/one_slot.py
    python bench/one_slot.py --questions 20 --service 3 --timeout 20
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

from grandrounds.core.records import GenParams, Message, Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.base import ModelSpec
from grandrounds.run.executor import Executor, RetryPolicy
from grandrounds.run.limits import EndpointLimits
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer


def cpu_seconds() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


async def ask(base_url: str, db: Path, n: int, timeout: float) -> tuple[float, int, int, int, int]:
    """(wall s, failed calls, retries, back-offs, smallest window) of ``n`` questions sent at once."""
    provider = PROVIDERS.get("openai")(ModelSpec("openai", "local", base_url), timeout=timeout)
    with Store(db) as st:
        ex = Executor(st, provider, None, RetryPolicy(), endpoints=EndpointLimits())
        reqs = [
            Request(
                provider="openai",
                model="local",
                messages=(Message("user", f"question {i}"),),
                params=GenParams(max_tokens=8),
                base_url=base_url,
            )
            for i in range(n)
        ]
        t0 = time.perf_counter()
        out = await asyncio.gather(*(ex(r) for r in reqs))
        wall = time.perf_counter() - t0
        await provider.aclose()
    s = ex.stats
    return wall, sum(not r.ok for r in out), s.retries, s.backoffs, s.smallest_window


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument(
        "--service", type=float, default=0.3, help="seconds the server takes per request"
    )
    ap.add_argument("--timeout", type=float, default=2.0, help="the provider's timeout, seconds")
    args = ap.parse_args()
    cpu0 = cpu_seconds()
    with (
        LoopbackServer(lambda body: "B", latency=args.service, serial=True) as srv,
        tempfile.TemporaryDirectory() as d,
    ):
        wall, failed, retries, backoffs, smallest = asyncio.run(
            ask(srv.base_url, Path(d) / "s.db", args.questions, args.timeout)
        )
        served, skipped, most = srv.stats.requests, srv.stats.abandoned, srv.stats.max_waiting
    print(
        f"{args.questions} questions, {args.service:g} s each, one at a time, timeout {args.timeout:g} s "
        f"(serial minimum {args.questions * args.service:.1f} s)"
    )
    print(
        f"wall {wall:.2f} s, cpu {cpu_seconds() - cpu0:.2f} s, failed {failed}, retries {retries}, back-offs {backoffs}, "
        f"smallest window {smallest}, requests at the server {served}, skipped (client gone) {skipped}, most waiting {most}"
    )


if __name__ == "__main__":
    main()

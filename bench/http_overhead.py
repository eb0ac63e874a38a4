"""Client CPU per call of the HTTP clients an OpenAI-compatible call could go through.

A fixed-latency chat endpoint runs in a separate process (so its CPU is not the client's); each
client sends ``--calls`` chat requests with ``--concurrency`` in flight, each with a real chat
body, and parses the JSON reply. Printed per client: wall time, the ideal wall time
(calls x latency / concurrency), and the client process's CPU per call (median of ``--reps``
repetitions, after one warm-up round that opens the connections).

Clients: ``aiohttp`` (a bare session: post, read, json.loads), ``grandrounds`` (the provider's
own path, OpenAIProvider._post: grandrounds.providers.http on aiohttp with the size cap, the
deadline, status and JSON handling), ``httpx2`` (a bare AsyncClient, the HTTP stack under the
openai SDK), ``openai-post`` (the SDK's ``post(cast_to=object)``, which skips its typed models)
and ``openai-create`` (the SDK's typed ``chat.completions.create``).

    python bench/http_overhead.py --latency 0.05 --concurrency 64 --calls 3000

Measured on the 2-core development machine while other work loaded it (load average 6-8, so
the wall ratios are inflated and only the CPU column compares clients), 50 ms latency, 64 in
flight, 3,000 calls, median of 3:

    client          cpu ms/call   wall/ideal
    grandrounds        0.25          1.26
    aiohttp            0.24          1.44
    httpx2             1.17          4.36
    openai-post        1.83          7.77
    openai-create      2.84         11.28

and, with this script before the provider moved to aiohttp (same machine, same day):

    lean               0.08-0.12     the hand-written HTTP/1.1 client the provider had
    sdk, 8 lanes       1.29          the provider's former default: openai-post over 8 pools of 8

The provider's path costs what bare aiohttp costs. It is about 0.15 ms over the hand-written
client, which read close-delimited bodies as empty, crashed on a long header and had no proxy
support or size limit; the SDK costs 5 to 7 times as much for features the runner does not use
(its retries: the executor retries; its typed models: the replies are read directly).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

BODY = {
    "model": "bench",
    "messages": [
        {"role": "system", "content": "You are a careful clinician. Answer with one letter."},
        {
            "role": "user",
            "content": "A 54-year-old man has crushing chest pain for 40 minutes. Which test first? "
            "A. ECG B. chest X-ray C. D-dimer D. echocardiogram " * 3,
        },
    ],
    "temperature": 0.0,
    "max_tokens": 16,
    "seed": 0,
}
REPLY_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Answer: A"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 80, "completion_tokens": 3, "total_tokens": 83},
    }
).encode()
REPLY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(REPLY_BODY),
    REPLY_BODY,
)


class FixedLatency(asyncio.Protocol):
    """Answers every request ``latency`` s after its last byte, by a timer; parses only what it must."""

    latency = 0.05

    def __init__(self) -> None:
        self.buf = b""
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.loop.call_later(self.latency, self._reply)

    def _reply(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(REPLY)  # type: ignore[attr-defined]


def serve(latency: float, q: mp.Queue[str]) -> None:
    async def main() -> None:
        FixedLatency.latency = latency
        server = await asyncio.get_running_loop().create_server(
            FixedLatency, "127.0.0.1", 0, backlog=1024
        )
        q.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        await asyncio.sleep(3600)

    asyncio.run(main())


Post = Callable[[], Awaitable[Any]]
Client = Callable[[str, int], Awaitable[tuple[Post, Callable[[], Awaitable[None]]]]]


async def aiohttp_client(base: str, conc: int):
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    headers = {"Authorization": "Bearer EMPTY", "Content-Type": "application/json"}
    url = base + "/chat/completions"

    async def post() -> Any:
        data = json.dumps(BODY).encode()
        async with session.post(url, data=data, headers=headers) as r:
            return json.loads(await r.read())

    return post, session.close


async def grandrounds_client(base: str, conc: int):
    from grandrounds.providers.base import ModelSpec
    from grandrounds.providers.openai_compat import OpenAIProvider

    p = OpenAIProvider(ModelSpec("openai", "bench", base))

    async def post() -> Any:
        return await p._post(
            "/chat/completions", BODY
        )  # the provider's HTTP path: transport, status, JSON

    return post, p.aclose


async def httpx2_client(base: str, conc: int):
    import httpx2

    c = httpx2.AsyncClient(
        limits=httpx2.Limits(max_connections=conc, max_keepalive_connections=conc), timeout=120
    )
    headers = {"Authorization": "Bearer EMPTY"}
    url = base + "/chat/completions"

    async def post() -> Any:
        r = await c.post(
            url,
            content=json.dumps(BODY).encode(),
            headers=headers | {"Content-Type": "application/json"},
        )
        return json.loads(r.content)

    return post, c.aclose


def _openai(base: str, conc: int):
    import httpx2
    import openai

    pool = openai.DefaultAsyncHttpxClient(
        limits=httpx2.Limits(max_connections=conc, max_keepalive_connections=conc)
    )
    return openai.AsyncOpenAI(
        api_key="EMPTY", base_url=base, max_retries=0, timeout=120, http_client=pool
    )


async def openai_post_client(base: str, conc: int):
    c = _openai(base, conc)

    async def post() -> Any:
        return await c.post("/chat/completions", cast_to=object, body=BODY)

    return post, c.close


async def openai_create_client(base: str, conc: int):
    c = _openai(base, conc)

    async def post() -> Any:
        return await c.chat.completions.create(**BODY)  # type: ignore[arg-type]

    return post, c.close


CLIENTS: dict[str, Client] = {
    "aiohttp": aiohttp_client,
    "grandrounds": grandrounds_client,
    "httpx2": httpx2_client,
    "openai-post": openai_post_client,
    "openai-create": openai_create_client,
}


async def drive(client: Client, base: str, calls: int, conc: int) -> tuple[float, float]:
    """(wall s, client CPU s) of ``calls`` calls with ``conc`` in flight, after one warm-up round."""
    post, close = await client(base, conc)
    try:

        async def worker(n: int) -> None:
            for _ in range(n):
                out = await post()
                assert out is not None

        await asyncio.gather(*(worker(1) for _ in range(conc)))  # open the connections
        per, extra = divmod(calls, conc)
        t0, c0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker(per + (i < extra)) for i in range(conc)))
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        await close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--clients", default=",".join(CLIENTS), help="comma-separated, from: " + ", ".join(CLIENTS)
    )
    args = ap.parse_args()
    names = [n for n in args.clients.split(",") if n]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        ap.error(f"unknown client(s): {', '.join(unknown)}")

    q: mp.Queue[str] = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, q), daemon=True)
    proc.start()
    base = q.get(timeout=30)
    try:
        ideal = args.calls * args.latency / args.concurrency
        print(
            f"latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}, {args.calls} calls, median of {args.reps}"
        )
        print(f"{'client':<15}{'cpu ms/call':>12}{'wall s':>9}{'ideal s':>9}{'wall/ideal':>12}")
        for name in names:
            try:
                runs = [
                    asyncio.run(drive(CLIENTS[name], base, args.calls, args.concurrency))
                    for _ in range(args.reps)
                ]
            except ImportError as e:  # openai and httpx2 come with the dev extra
                print(f"{name:<15}{'n/a':>12}  ({e})")
                continue
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(
                f"{name:<15}{cpu / args.calls * 1000:>12.3f}{wall:>9.2f}{ideal:>9.2f}{wall / ideal:>12.2f}"
            )
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

"""Would moving the HTTP exchange to a process of its own close the wall-time gap? HealthBench-500
judged per criterion by `grandrounds run` as it is, and with every HTTP exchange sent to a
transport process.

bench/healthbench_wall.py shows the wall follows the event loop's thread: its work per call
(prompt, cache key, store, lease, the HTTP exchange through aiohttp, verdict, grade) delays each
reply it has not yet read. aiohttp's own share of that thread is a quarter to a third. On a
2-core machine a second process could take that share onto the other core, leaving the loop's
thread the rest plus passing frames over a socket. This script measures what that would buy
before any such design is built.

Each round runs the real CLI twice against one loopback server (healthbench_wall's, in its own
process), each on a fresh store, in alternating order:

- ``in-process``: ``python -m grandrounds run healthbench ...`` with default flags;
- ``transport process``: the same command, with ``HttpClient._exchange`` replaced (in this
  script's ``--cli`` mode, before the command runs) by a hand-off to a worker process that this
  script starts on the first call (``--worker``): each request goes as one frame (URL, headers,
  body) over a socket pair, the worker posts it through one aiohttp session and sends the status,
  headers and body back. A prototype: no deadline, size cap or error mapping, which a real
  transport would add (each a little more work per call).

For each: the process's wall time, the time to the first request and after the last reply (as
the server saw them), the span of the requests, the CLI's CPU, and the worker's CPU (it writes
its own at exit). Medians over the rounds.

    .venv/bin/python bench/transport_process.py --data ../shared/data/healthbench/healthbench_500.jsonl --repeat 3

Measured on the shared 2-core development machine (AMD EPYC, 2 CPUs), 3 rounds (a bare aiohttp
client took 5.5 s on the same kind of server the same hour, bench/healthbench_wall.py):
in-process wall 6.86-7.24 s (median 6.92), requests spanning 5.89-6.07 s, CLI CPU 6.18-6.90 s;
transport process wall 6.97-7.25 s (median 7.18), requests spanning 5.63-5.78 s (0.3 s or 5 %
less), CLI CPU 4.77-5.11 s plus the worker's 2.36-2.40 s (11 % more CPU in all). The worker
starts on the first call here, which puts the first request 0.45 s later; started beside the
CLI's own start-up, and with aiohttp imported only by the worker (0.2 s of the CLI's start-up),
such a design might save 0.5 s of a 6.9 s run at best. The CLI's CPU falls by 1.7 s but the
requests' span by 0.3 s: the worker (aiohttp's work), the frames on both sides, the store's
writer thread and the server share the same two cores. A transport process was not built: at
best about 7 % of the wall, for a second process in every run, more CPU per call, and an IPC
layer under every provider's calls. Later, on a quicker hour of the machine (4 rounds, medians):
in-process 6.65 s, requests spanning 5.77 s, CLI CPU 5.85 s; transport process 6.83 s, 5.61 s
(3 % less), CLI CPU 4.44 s plus the worker's 2.22 s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import healthbench_wall as hw  # noqa: E402  (the server, its reply, the paths, the call summary)

#: request frame: id, URL length, headers length, body length; then the three.
REQUEST = struct.Struct("!IIII")
#: reply frame: id, status, headers length, body length; then the two.
REPLY = struct.Struct("!IHII")


# ---- the worker (a process of its own) ---------------------------------------------------------


def worker(fd: int, cpu_file: str) -> None:
    """Serve request frames from the socket ``fd`` through one aiohttp session until it closes."""
    import aiohttp
    import orjson

    from grandrounds.core import eventloop

    async def main() -> None:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        closed = asyncio.Event()

        class Frames(asyncio.Protocol):
            def __init__(self) -> None:
                self.buf = bytearray()

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.transport = transport

            def connection_lost(self, exc: Exception | None) -> None:
                closed.set()

            def data_received(self, data: bytes) -> None:
                buf = self.buf
                buf += data
                while len(buf) >= REQUEST.size:
                    rid, ul, hl, bl = REQUEST.unpack_from(buf)
                    end = REQUEST.size + ul + hl + bl
                    if len(buf) < end:
                        break
                    at = REQUEST.size
                    url = bytes(buf[at : at + ul]).decode()
                    headers = orjson.loads(buf[at + ul : at + ul + hl])
                    body = bytes(buf[at + ul + hl : end])
                    del buf[:end]
                    asyncio.ensure_future(self.post(rid, url, headers, body))

            async def post(self, rid: int, url: str, headers: dict[str, str], body: bytes) -> None:
                async with session.post(url, data=body, headers=headers) as resp:
                    data = await resp.read()
                    head = orjson.dumps([(str(k), v) for k, v in resp.headers.items()])
                    self.transport.write(
                        REPLY.pack(rid, resp.status, len(head), len(data)) + head + data
                    )  # type: ignore[attr-defined]

        sock = socket.socket(fileno=fd)
        await asyncio.get_running_loop().create_connection(Frames, sock=sock)
        await closed.wait()
        await session.close()

    eventloop.run(main())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(cpu_file).write_text(f"{usage.ru_utime + usage.ru_stime}\n")


# ---- the CLI with its exchange handed to the worker ----------------------------------------------


def cli_with_transport(cpu_file: str, argv: list[str]) -> None:
    """Run the grandrounds CLI with ``HttpClient._exchange`` sent to a worker process."""
    import orjson
    from multidict import CIMultiDict, CIMultiDictProxy

    from grandrounds.cli import main as cli
    from grandrounds.providers import http

    class Frames(asyncio.Protocol):
        def __init__(self) -> None:
            self.buf = bytearray()
            self.waiting: dict[int, asyncio.Future[tuple[int, bytes, bytes]]] = {}
            self.next = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            buf = self.buf
            buf += data
            while len(buf) >= REPLY.size:
                rid, status, hl, bl = REPLY.unpack_from(buf)
                end = REPLY.size + hl + bl
                if len(buf) < end:
                    break
                head, body = (
                    bytes(buf[REPLY.size : REPLY.size + hl]),
                    bytes(buf[REPLY.size + hl : end]),
                )
                del buf[:end]
                fut = self.waiting.pop(rid)
                if not fut.done():
                    fut.set_result((status, head, body))

        def post(
            self, url: bytes, headers: bytes, body: bytes
        ) -> asyncio.Future[tuple[int, bytes, bytes]]:
            self.next += 1
            fut = asyncio.get_running_loop().create_future()
            self.waiting[self.next] = fut
            self.transport.write(
                REQUEST.pack(self.next, len(url), len(headers), len(body)) + url + headers + body
            )  # type: ignore[attr-defined]
            return fut

    started: dict[str, asyncio.Future[Frames]] = {}

    async def start() -> Frames:
        ours, theirs = socket.socketpair()
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(theirs.fileno()), cpu_file],
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        _, frames = await asyncio.get_running_loop().create_connection(Frames, sock=ours)
        return frames

    async def exchange(
        self: http.HttpClient, session: object, url: str, data: bytes
    ) -> http.HttpReply:
        if "frames" not in started:
            started["frames"] = asyncio.ensure_future(start())
        frames = await started["frames"]
        headers = self.__dict__.get("_bench_headers")
        if headers is None:
            headers = self.__dict__["_bench_headers"] = orjson.dumps(self.headers)
        status, head, body = await frames.post(url.encode(), headers, data)
        return http.HttpReply(status, CIMultiDictProxy(CIMultiDict(orjson.loads(head))), body)

    http.HttpClient._exchange = exchange  # type: ignore[method-assign]
    sys.argv = ["grandrounds", *argv]
    cli.entry()


# ---- the bench ------------------------------------------------------------------------------------


def one_run(
    kind: str, base_url: str, data: Path, tmp: Path, tag: str, first, last
) -> dict[str, float]:  # type: ignore[no-untyped-def]
    store = tmp / f"{tag}.db"
    args = [
        "run",
        "healthbench",
        "--model",
        "openai/bench",
        "--base-url",
        base_url,
        "--judge",
        "openai/bench-judge",
        "--judge-base-url",
        base_url,
        "--data",
        str(data),
        "--store",
        str(store),
    ]
    cpu_file = tmp / f"{tag}.worker-cpu"
    if kind == "in-process":
        cmd = [sys.executable, "-m", "grandrounds", *args]
    else:
        cmd = [sys.executable, __file__, "--cli", str(cpu_file), *args]
    env = os.environ | {"COLUMNS": "200", "OPENAI_API_KEY": "EMPTY"}
    env.setdefault("GRANDROUNDS_REFERENCE", str(hw.DEFAULT_REFERENCE))
    first.value = last.value = 0.0
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    t1 = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"error: the {kind} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    calls = sum(int(m) for _, m, _, _ in hw.CALLS.findall(proc.stderr))
    worker_cpu = float("nan")
    if kind != "in-process":
        for _ in range(100):  # the worker writes its CPU when the CLI's socket closes
            if cpu_file.exists() and cpu_file.read_text().strip():
                worker_cpu = float(cpu_file.read_text())
                break
            time.sleep(0.05)
    shutil.rmtree(tmp / "out", ignore_errors=True)
    store.unlink(missing_ok=True)
    return {
        "wall": t1 - t0,
        "first": first.value - t0,
        "span": last.value - first.value,
        "after": t1 - last.value,
        "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "worker_cpu": worker_cpu,
        "calls": calls,
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--cli":
        cli_with_transport(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=hw.DEFAULT_DATA,
        help="HealthBench JSONL (default: the shared 500-row file)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    args = ap.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such file")
    args.data = args.data.resolve()
    q: mp.Queue[str] = mp.Queue()
    first, last = mp.Value("d", 0.0), mp.Value("d", 0.0)
    server = mp.Process(target=hw.serve, args=(0.05, q, mp.Value("q", 0), first, last), daemon=True)
    server.start()
    base_url = q.get(timeout=30)
    results: dict[str, list[dict[str, float]]] = {"in-process": [], "transport process": []}
    print(f"HealthBench {args.data.name} per criterion, 50 ms latency, default flags")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for i in range(1, args.repeat + 1):
            kinds = list(results) if i % 2 else list(reversed(results))
            for kind in kinds:
                r = one_run(kind, base_url, args.data, tmp, f"r{i}-{kind.split()[0]}", first, last)
                results[kind].append(r)
                print(
                    f"round {i} {kind:<18} calls {r['calls']}  wall {r['wall']:.2f} s  to first request {r['first']:.2f} s  "
                    f"requests {r['span']:.2f} s  after last reply {r['after']:.2f} s  CLI cpu {r['cpu']:.2f} s  worker cpu {r['worker_cpu']:.2f} s"
                )
    server.terminate()
    print(f"medians of {args.repeat} round(s):")
    for kind, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"  {kind:<18} wall {med['wall']:.2f} s  to first request {med['first']:.2f} s  requests {med['span']:.2f} s  "
            f"after last reply {med['after']:.2f} s  CLI cpu {med['cpu']:.2f} s  worker cpu {med['worker_cpu']:.2f} s"
        )


if __name__ == "__main__":
    main()

"""Runner throughput against a loopback OpenAI-compatible server with a fixed latency.

Starts the server in a separate process (so its CPU is not the harness's), writes a synthetic
MedQA-format file, runs it through the real runner (store, cache, retries, grading) and prints:
calls, wall time, ideal wall time (calls x latency / concurrency), their ratio, and the
harness CPU time per call, through the OpenAI provider's one HTTP path (aiohttp; the clients it
was chosen over are compared in bench/http_overhead.py).

The default server answers each request exactly ``--latency`` after it arrived and reports how
late its replies actually went out (the "server late ms" column), so the ratio is the harness's
own cost; ``--server loopback`` uses the test suite's full server instead (rules, fault
injection, statistics), which costs itself about 0.1 ms of CPU more per request.

    python bench/throughput.py --latency 0.05 --concurrency 64 --calls 3000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path


class FixedLatencyServer(asyncio.Protocol):
    """A minimal OpenAI-compatible chat endpoint: every request is answered ``latency`` seconds
    after its last byte arrived, by a timer rather than a sleeping coroutine, with a reply
    prepared once. It parses only the request line and Content-Length, so its own overhead
    stays small and the ratio measures the harness, not the test server. ``GET /stats`` returns
    how late the replies went out (timer and scheduling lateness) and resets the counters."""

    latency = 0.05
    lateness: list[float] = []

    def __init__(self) -> None:
        self.buf = b""
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if head.startswith("GET /stats"):
                lat = sorted(FixedLatencyServer.lateness) or [0.0]
                FixedLatencyServer.lateness = []
                body = json.dumps(
                    {"n": len(lat), "mean_ms": 1000 * sum(lat) / len(lat), "max_ms": 1000 * lat[-1]}
                ).encode()
                self.transport.write(_http(body))  # type: ignore[attr-defined]
                continue
            due = self.loop.time() + self.latency
            self.loop.call_at(due, self._reply, due)

    def _reply(self, due: float) -> None:
        FixedLatencyServer.lateness.append(self.loop.time() - due)
        if not self.transport.is_closing():
            self.transport.write(REPLY)  # type: ignore[attr-defined]


def _http(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


REPLY = _http(
    json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Answer: B"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
        }
    ).encode()
)


def serve(latency: float, kind: str, q: mp.Queue[str]) -> None:
    if kind == "loopback":  # the full test server (rules, fault injection, statistics)
        from grandrounds.testing import LoopbackServer

        with LoopbackServer(lambda body: "Answer: B", latency=latency) as srv:
            q.put(srv.base_url)
            time.sleep(3600)
        return

    async def main() -> None:
        FixedLatencyServer.latency = latency
        server = await asyncio.get_running_loop().create_server(
            FixedLatencyServer, "127.0.0.1", 0, backlog=1024
        )
        q.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        await asyncio.sleep(3600)

    asyncio.run(main())


def server_lateness(base_url: str) -> dict[str, float] | None:
    """Mean and max lateness of the fixed-latency server's replies since the last call."""
    import urllib.request

    try:
        with urllib.request.urlopen(base_url.rsplit("/v1", 1)[0] + "/stats", timeout=5) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_questions(path: Path, n: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            rec = {
                "question": f"Synthetic question {i}: which option is the second one?",
                "options": {"A": "first", "B": "second", "C": "third", "D": "fourth"},
                "answer_idx": "B",
                "meta_info": "synthetic",
            }
            f.write(json.dumps(rec) + "\n")


def measure(base_url: str, data: Path, concurrency: int) -> tuple[int, float, float, float | None]:
    from grandrounds.run.config import RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store

    with tempfile.TemporaryDirectory() as d:
        store = Store(Path(d) / "bench.db")
        cfg = RunConfig(
            benchmark="medqa",
            model="openai/bench",
            data=data,
            base_url=base_url,
            concurrency=concurrency,
        )
        t0, c0 = time.perf_counter(), time.process_time()
        out = asyncio.run(run(store, cfg))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        store.close()
    return out.answer_stats.made, wall, cpu, out.result.score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument(
        "--server",
        choices=["fixed", "loopback"],
        default="fixed",
        help="fixed: minimal timer-driven server (default); loopback: the full test server of the test suite",
    )
    args = ap.parse_args()

    q: mp.Queue[str] = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, args.server, q), daemon=True)
    proc.start()
    base_url = q.get(timeout=30)
    try:
        with tempfile.TemporaryDirectory() as d:
            data = Path(d) / "questions.jsonl"
            write_questions(data, args.calls)
            ideal = args.calls * args.latency / args.concurrency
            print(
                f"latency {args.latency * 1000:.0f} ms, concurrency {args.concurrency}, {args.calls} questions, {args.server} server"
            )
            print(
                f"{'transport':<10}{'calls':>7}{'wall s':>9}{'ideal s':>9}{'ratio':>7}{'cpu ms/call':>13}{'server ms/call':>16}{'accuracy':>10}{'server late ms':>16}"
            )
            s0 = proc_cpu(proc.pid)
            calls, wall, cpu, score = measure(base_url, data, args.concurrency)
            server = proc_cpu(proc.pid) - s0
            stats = server_lateness(base_url) if args.server == "fixed" else None
            late = f"{stats['mean_ms']:.2f}" if stats else "n/a"
            print(
                f"{'aiohttp':<10}{calls:>7}{wall:>9.2f}{ideal:>9.2f}{wall / ideal:>7.2f}"
                f"{cpu / max(calls, 1) * 1000:>13.3f}{server / max(calls, 1) * 1000:>16.3f}"
                f"{score if score is not None else float('nan'):>10.3f}"
                f"{late:>16}"
            )
    finally:
        proc.kill()


if __name__ == "__main__":
    main()

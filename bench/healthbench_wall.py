"""HealthBench-500 judged per criterion: `grandrounds run` against a bare asyncio client on one server.

What it measures, in one invocation, against one loopback OpenAI-compatible server that answers
every request ``--latency`` after it arrived (bench/throughput.py's ``FixedLatencyServer``, run in
its own process so its CPU is not the harness's):

- the real CLI (``python -m grandrounds run healthbench ...`` in a subprocess, a temporary store)
  with its default flags, and again with ``--concurrency N --judge-concurrency N`` (N =
  ``--connections``): calls made (answers, judges, as the run reports them; requests as the server
  counted them), wall time of the whole process, process CPU (``getrusage(RUSAGE_CHILDREN)``);
- a bare client sending the same number of requests with ``--connections`` in flight: one
  aiohttp session, bodies encoded beforehand, each reply's body read and nothing else (no store,
  no JSON parsing), timed around its sending loop in this process; and the same client as a
  program of its own (``--bare-child``: interpreter start-up, importing aiohttp and reading the
  bodies from a file included, as a run's start-up is included in grandrounds' wall). Its bodies are the ones the run sends: the conversation under the reference
  protocol's system message for answers, and the official grader prompt filled with the
  conversation, the server's reply and the rubric item for judges (mean request bytes as the
  server received them are printed for both, to show they match);
- the ratio grandrounds wall / bare wall, for each grandrounds run of the round;
- harness CPU per call, split into phases by more runs of the CLI on the default run's store,
  all with default flags. First the same command again, which finds the grading settled and
  reads its result back (its wall is printed); then, its settled row deleted: W, a warm re-run
  (no call: start-up, loading, the stored grades, aggregation); G, the same command after this script deleted the store's grades (no call either:
  answers and verdicts from the store, every sample graded again); J, the command with another
  judge name (answers from the store, every judge call new); A, the command with another
  candidate name (every answer call new; its judge requests equal the default run's, since the
  server's reply is the same, so the verdicts come from the store). Per judge call, all-in
  (prompt, call, verdict, grade): (J - W) / judge calls; the call alone: (J - G) / judge calls;
  per answer call: (A - G) / answer calls. These are differences of two runs' CPU: read them
  over several rounds;
- the server's lateness (how late its replies went out: its own scheduling, not the client's) and
  its CPU per request, so a busy machine shows up as such.

Default flags: an ``openai/`` model's concurrency is ``OpenAIProvider.default_concurrency`` (64)
for answers and for each judge, and executors on one server share one endpoint limit (the
largest asked, so 64): with candidate and judge on the loopback server, 64 requests are in flight
in all, as many as the bare client's connections. The second run states ``--concurrency N``.

The server's single reply is a JSON object with ``explanation`` and ``criteria_met``: a usable
candidate answer and a HealthBench verdict alike. Rounds alternate the order of the bare and the
grandrounds runs (odd rounds bare first, even rounds bare last); each round is printed, then the
medians.

    .venv/bin/python bench/healthbench_wall.py --repeat 3
    .venv/bin/python bench/healthbench_wall.py --data ../shared/data/healthbench/healthbench_500.jsonl \
        --latency 0.05 --connections 64 --repeat 1

Measured on the shared 2-core development machine, HealthBench-500, 50 ms, 64 connections: 500
answer + 5,962 judge calls (5,965 rubric items; three repeat an item of their conversation). The
machine's speed varies by half within minutes, so compare figures of one round only. 3 rounds:
bare client 5.38-5.39 s (as its own process 5.65-5.73 s); grandrounds with default flags
6.17-6.21 s (1.15x-1.16x the bare loop, median 1.15x; 1.09-1.10x the bare client as its own
process), with --concurrency 64 6.31-6.36 s (1.17-1.18x); grandrounds CPU 0.63 ms per call all-in;
per judge call 0.44-0.55 ms all-in, 0.32-0.41 ms the call alone; a warm re-run 0.64-0.77 s. What
brought it there from 1.13-1.23x (median 1.17x), each by A/B runs against the code before it: the
event loop on uvloop (6.63 s -> 6.23 s, CPU 4.34 s -> 4.00 s); typer kept below 0.29, whose
pydantic validation of each option cost every command 0.09 s; flushes written as multi-row INSERTs
(6.42 s -> 6.29 s). Before that: a lease's release buffered apart from the other writes and flushes
of 1,024 rows (wall -5%); the CLI's imports halved and the interpreter's teardown skipped; flushes
and lease transactions on the store's writer thread (wall -3 to -6%). What is left: in-flight
leases (taking and releasing them costs about 5% of the wall and 14% of the CPU: measured by
stubbing them out, which no run does), aiohttp's own work per request, the judge prompt, verdict
and grade, and start-up (about 0.45 s before the first request, against the bare process's 0.3 s).

Measured again later on the same kind of machine, on a slower day (the bare client's own CPU
0.26-0.30 ms per call against 0.22 before), 4 rounds of A/B between this code and the code before
the settled re-runs: bare client 5.46-5.59 s; grandrounds with default flags 7.12-7.57 s, 1.30-1.39x
the bare loop (1.22-1.28x the bare process), CPU 1.0-1.18 ms per call, with no difference between
the two codes beyond the rounds' spread. The wall there is the harness's CPU: one core's worth of
Python for 6,462 calls in about as many seconds. Per judge call 0.97-1.01 ms all-in, 0.68-0.79 ms
the call alone; per answer call 0.32-0.82 ms (a difference of two runs, noisy). The re-run of the
finished command reads its result back: 0.68-0.72 s; with every stored grade read again 1.06-1.08 s.

The machine, not the code, moved those figures: the code that measured 0.63 ms per call and 1.15x
(commit ce7cae8, run with this script of its own day) measured 1.166 ms per call and 1.44x on the
later machine, within minutes of the code then current (1.112 ms, 1.34x). On that machine, 3 rounds
of the code with per-kind token limits (none set here): bare client 5.54-5.63 s
(its own CPU 0.27-0.32 ms per call); default flags 7.13-7.65 s, 1.29-1.37x the bare loop
(1.18-1.25x the bare process), 1.05-1.17 ms per call all-in; per judge call 0.76-1.02 ms all-in,
0.59-0.74 ms the call alone; per answer call 0.37 ms (median; one round's difference came out
below zero); grading from a stored verdict 0.27 ms. bench/two_processes.py shows why the work was
not split over two processes.

Later again, with the store look-ups of a loop turn batched, the request's canonical text built
from plain dicts, the reply-parsing shortcuts and public_url remembered (3-6 % fewer instructions
per judge call, 6.7 % fewer on the event loop's thread, by bench/call_instructions.py), 3 rounds: bare client 5.51-5.55 s; default flags
7.31-8.32 s, 1.32-1.51x the bare loop (1.25-1.36x the bare process), CPU 1.09-1.23 ms per call
all-in; per judge call 0.92-0.95 ms all-in, 0.68-0.71 ms the call alone; grading from a stored
verdict 0.22-0.27 ms; the re-run of the finished command 0.68-0.87 s. One round of the code
before, the same day: 7.42 s, 1.25x, 1.075 ms per call. The machine's swings are larger than
the change, which is why the instruction count is the comparison.

Later again, with a small file's samples held from the check pass and the graded samples found
with one query (3 rounds): bare client 5.51-5.61 s (as its own process 6.02-6.15 s, 1.11x its
loop); default flags 7.12-8.03 s, 1.29-1.43x the bare loop (median 1.36x; 1.18-1.31x the bare
process), CPU 1.02-1.12 ms per call all-in; per judge call 0.88-0.95 ms all-in, 0.64-0.66 ms
the call alone; grading from a stored verdict 0.24-0.30 ms. Where the wall goes (server-side
timestamps, bench/transport_process.py): 0.7-1.0 s to the first request (imports 0.5-0.6 s, of
which aiohttp 0.2 s and NumPy 0.1 s; the data's check pass 0.1-0.2 s), the requests' span
5.9-6.7 s, 0.2-0.3 s after the last reply (0.1 s of it HealthBench's bootstrap over 70 metrics).
With the bare process already 1.11x its loop, 1.15x leaves about 0.2 s for everything a harness
does over 6,462 calls beyond sending them.

Why the wall follows the event loop's thread and not the process's CPU (judge-only runs of
HealthBench-500, 5,962 calls, measured with wrappers around the CLI, not part of this script):
the loop's thread is busy 4.45 s of a 6.28 s run (user 3.92 s, sys 0.53 s; the store's writer
and checkpoint threads take the rest of the process's 5.83 s); 61.6 requests are in flight on
average (of 64), each about 62 ms for the server's 50 ms, the difference being how long a reply
waits for the loop. Adding 0.2 ms of work per call on the loop's thread adds 1.3-1.6 s to the
wall (1.4 s of work in all); writing nothing to the store (flushes and lease transactions
stubbed out) takes 1.5 s of CPU off the process but only 0.1-0.8 s off the wall. Lease
transactions wait a median 115 ms on the writer thread (21 keys each) but stay off the wall: 1,200
calls hold their lease and wait for a connection slot while 138 wait for a lease. So what
shortens the wall is less work per call on the loop's thread.

Official prompt text comes from ``$GRANDROUNDS_REFERENCE`` (default: ../shared/reference beside the
repository), as for any run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402  (bench/throughput.py: the fixed-latency server and its lateness)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared/data/healthbench/healthbench_500.jsonl"
DEFAULT_REFERENCE = REPO.parent / "shared/reference"

#: The server's one reply: a verdict the reference protocol reads (a JSON object, criteria_met a
#: JSON bool), and as a candidate answer a few sentences long.
VERDICT = {
    "explanation": "The response recommends an urgent in-person assessment and names the warning signs "
    "that need emergency care, as the rubric item asks.",
    "criteria_met": True,
}
CONTENT = json.dumps(VERDICT)
REPLY_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": CONTENT},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
    }
).encode()


# ---- the server (its own process) ------------------------------------------------------------


def serve(
    latency: float,
    q: mp.Queue[str],
    received: mp.sharedctypes.Synchronized[int],  # type: ignore[name-defined]
    first: mp.sharedctypes.Synchronized[float] | None = None,
    last: mp.sharedctypes.Synchronized[float] | None = None,
) -> None:  # type: ignore[name-defined]
    """throughput.FixedLatencyServer with this script's reply, counting the request bytes it
    receives; with ``first`` and ``last``, also the time (``time.time``) of the first request
    after ``first`` was set to 0 and of the latest reply."""
    throughput.REPLY = throughput._http(REPLY_BODY)  # _reply writes the module's REPLY

    class Counting(throughput.FixedLatencyServer):
        def data_received(self, data: bytes) -> None:
            received.value += len(data)
            if first is not None and first.value == 0:
                first.value = time.time()
            super().data_received(data)

        def _reply(self, due: float) -> None:
            super()._reply(due)
            if last is not None:
                last.value = time.time()

    async def main() -> None:
        throughput.FixedLatencyServer.latency = latency
        server = await asyncio.get_running_loop().create_server(
            Counting, "127.0.0.1", 0, backlog=1024
        )
        q.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
        await asyncio.sleep(24 * 3600)

    asyncio.run(main())


@dataclass
class Server:
    proc: mp.Process
    base_url: str
    received: mp.sharedctypes.Synchronized[int]  # type: ignore[name-defined]
    cpu0: float = 0.0
    bytes0: int = 0

    def mark(self) -> None:
        """Start a measurement: reset the lateness figures, note CPU and bytes received."""
        throughput.server_lateness(self.base_url)
        self.cpu0, self.bytes0 = throughput.proc_cpu(self.proc.pid), self.received.value

    def read(self) -> dict[str, float]:
        """Requests, lateness, CPU and request bytes since :meth:`mark`."""
        cpu = throughput.proc_cpu(self.proc.pid) - self.cpu0
        size = self.received.value - self.bytes0
        stats = throughput.server_lateness(self.base_url) or {
            "n": 0,
            "mean_ms": float("nan"),
            "max_ms": float("nan"),
        }
        n = int(stats["n"])
        return {
            "requests": n,
            "late_mean_ms": stats["mean_ms"],
            "late_max_ms": stats["max_ms"],
            "cpu_ms_per_req": 1000 * cpu / max(n, 1),
            "bytes_per_req": size / max(n, 1),
        }


# ---- the bare client ------------------------------------------------------------------------


def request_bodies(data: Path, limit: int | None) -> tuple[list[bytes], list[bytes]]:
    """The answer and judge bodies the run sends under the reference protocol (per-criterion
    judging), encoded once: the same messages, model names and generation settings."""
    os.environ.setdefault("GRANDROUNDS_REFERENCE", str(DEFAULT_REFERENCE))
    from grandrounds.sources.healthbench import API_SYSTEM_MESSAGE, GRADER_TEMPLATE

    system = API_SYSTEM_MESSAGE.load().text
    template = GRADER_TEMPLATE.load().text
    gen = {
        "temperature": 0.5,
        "max_tokens": 2048,
        "seed": 0,
    }  # the reference protocol's (healthbench.REFERENCE)
    answers, judges = [], []
    with open(data, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            rec = json.loads(line)
            msgs = [{"role": m["role"], "content": m["content"]} for m in rec["prompt"]]
            if msgs[0]["role"] != "system":
                msgs = [{"role": "system", "content": system}, *msgs]
            answers.append(json.dumps({"messages": msgs, "model": "bench", **gen}).encode())
            convo = "\n\n".join(
                f"{m['role']}: {m['content']}"
                for m in [*msgs, {"role": "assistant", "content": CONTENT}]
            )
            for item in rec["rubrics"]:
                prompt = template.replace("<<conversation>>", convo).replace(
                    "<<rubric_item>>", f"[{item['points']}] {item['criterion']}"
                )
                body = {
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": prompt},
                    ],
                    "model": "bench-judge",
                    **gen,
                }
                judges.append(json.dumps(body).encode())
    # A rubric listing one item twice makes one judge call (the second is the first's, from the
    # cache): the bare client sends each distinct body once too.
    return answers, list(dict.fromkeys(judges))


async def bare_client(base_url: str, bodies: list[bytes], connections: int) -> float:
    """Wall seconds to send every body with ``connections`` in flight, reading each reply's body."""
    url = base_url + "/chat/completions"
    headers = {"Authorization": "Bearer EMPTY", "Content-Type": "application/json"}
    todo = iter(bodies)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:

        async def worker() -> None:
            for body in todo:  # one shared iterator: each worker takes the next body
                async with session.post(url, data=body, headers=headers) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"bare client: HTTP {r.status}")

        await asyncio.gather(*(worker() for _ in range(connections)))
    return time.perf_counter() - t0


class RunFailed(Exception):
    """A grandrounds run exited with an error or printed no call summary."""


# ---- the grandrounds CLI ----------------------------------------------------------------------


CALLS = re.compile(
    r"^\s*(answers|judge \S+): (\d+) calls made, (\d+) from the store, (\d+) failed", re.M
)


@dataclass
class CliRun:
    wall: float
    cpu: float
    answers_made: int
    judges_made: int
    cached: int
    failed: int
    server: dict[str, float] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return self.answers_made + self.judges_made


def grandrounds_run(
    srv: Server,
    data: Path,
    store: Path,
    model: str,
    judge: str,
    concurrency: int | None,
    limit: int | None,
    profile: Path | None = None,
) -> CliRun:
    """One `grandrounds run healthbench` in a subprocess: wall, CPU, calls from its summary."""
    cmd = [sys.executable]
    if profile is not None:
        cmd += ["-m", "cProfile", "-o", str(profile)]
    cmd += [
        "-m",
        "grandrounds",
        "run",
        "healthbench",
        "--model",
        model,
        "--base-url",
        srv.base_url,
        "--judge",
        judge,
        "--judge-base-url",
        srv.base_url,
        "--data",
        str(data),
        "--store",
        str(store),
    ]
    if concurrency is not None:
        cmd += ["--concurrency", str(concurrency), "--judge-concurrency", str(concurrency)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    env = os.environ | {"COLUMNS": "200", "OPENAI_API_KEY": "EMPTY"}
    env.setdefault("GRANDROUNDS_REFERENCE", str(DEFAULT_REFERENCE))
    srv.mark()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=store.parent)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    server = srv.read()
    if proc.returncode != 0:
        raise RunFailed(f"grandrounds run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    found = CALLS.findall(proc.stderr)
    if not found:
        raise RunFailed(f"no call summary in the run's output:\n{proc.stderr[-3000:]}")
    answers = sum(int(m) for who, m, _, _ in found if who == "answers")
    judges = sum(int(m) for who, m, _, _ in found if who != "answers")
    cached = sum(int(c) for _, _, c, _ in found)
    failed = sum(int(x) for _, _, _, x in found)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return CliRun(wall, cpu, answers, judges, cached, failed, server)


def forget_settled(store: Path) -> None:
    """Delete a store's settled rows, so the next identical run reads every stored grade (as a
    re-run after an interrupted run does) instead of its result alone."""
    import sqlite3

    db = sqlite3.connect(store)
    with db:
        db.execute("DELETE FROM settled")
    db.close()


def forget_grades(store: Path) -> None:
    """Delete a store's grades and results (a temporary store of this script's), so the next
    identical run grades again from the stored answers and verdicts without making a call."""
    import sqlite3

    db = sqlite3.connect(store)
    with db:
        db.execute("DELETE FROM grades")
        db.execute("DELETE FROM results")
    db.close()


# ---- one round --------------------------------------------------------------------------------


def run_round(
    i: int, srv: Server, data: Path, bodies: list[bytes], args: argparse.Namespace, tmp: Path
) -> dict[str, float]:
    """One round: the bare client and the two grandrounds runs (order alternating), then the phase runs."""
    out: dict[str, float] = {}
    stores = {name: tmp / f"round{i}-{name}" / "store.db" for name in ("default", "conn")}
    for p in stores.values():
        p.parent.mkdir(parents=True)

    def bare() -> None:
        srv.mark()
        c0 = time.process_time()
        wall = asyncio.run(bare_client(srv.base_url, bodies, args.connections))
        cpu = time.process_time() - c0
        s = srv.read()
        out.update(
            bare_wall=wall,
            bare_cpu_ms=1000 * cpu / len(bodies),
            bare_requests=s["requests"],
            bare_bytes=s["bytes_per_req"],
            bare_late=s["late_mean_ms"],
        )
        print(
            f"  bare aiohttp, {args.connections} connections: {s['requests']} requests, wall {wall:.2f} s, "
            f"client cpu {1000 * cpu / len(bodies):.3f} ms/call, {s['bytes_per_req']:.0f} B/request, "
            f"server late {s['late_mean_ms']:.2f} ms (max {s['late_max_ms']:.1f}), server cpu {s['cpu_ms_per_req']:.3f} ms/req"
        )

    def bare_process() -> None:
        # The same client as a program of its own: interpreter start-up, importing aiohttp and
        # reading the bodies from a file count, as a run's start-up counts for grandrounds.
        srv.mark()
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--bare-child",
                str(bodies_file),
                srv.base_url,
                str(args.connections),
            ],
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RunFailed(f"the bare client process failed:\n{proc.stderr[-2000:]}")
        s = srv.read()
        out.update(bare_proc_wall=wall)
        print(
            f"  bare aiohttp as a process of its own (start-up, import, reading the bodies included): "
            f"{s['requests']} requests, wall {wall:.2f} s"
        )

    def gr(name: str, concurrency: int | None) -> None:
        r = grandrounds_run(
            srv, data, stores[name], "openai/bench", "openai/bench-judge", concurrency, args.limit
        )
        out.update(
            {
                f"{name}_wall": r.wall,
                f"{name}_cpu_ms": 1000 * r.cpu / max(r.calls, 1),
                f"{name}_calls": r.calls,
                f"{name}_answers": r.answers_made,
                f"{name}_judges": r.judges_made,
                f"{name}_failed": r.failed,
                f"{name}_late": r.server["late_mean_ms"],
                f"{name}_bytes": r.server["bytes_per_req"],
            }
        )
        label = (
            "default flags"
            if concurrency is None
            else f"--concurrency {concurrency} --judge-concurrency {concurrency}"
        )
        print(
            f"  grandrounds, {label}: {r.answers_made} answer + {r.judges_made} judge calls "
            f"({r.server['requests']} requests at the server, {r.failed} failed), wall {r.wall:.2f} s, "
            f"cpu {r.cpu:.2f} s = {1000 * r.cpu / max(r.calls, 1):.3f} ms/call all-in, {r.server['bytes_per_req']:.0f} B/request, "
            f"server late {r.server['late_mean_ms']:.2f} ms (max {r.server['late_max_ms']:.1f}), server cpu {r.server['cpu_ms_per_req']:.3f} ms/req"
        )

    bodies_file = tmp / f"round{i}-bodies.jsonl"
    bodies_file.write_bytes(b"\n".join(bodies) + b"\n")  # a JSON text holds no raw newline
    steps = [bare, bare_process, lambda: gr("default", None), lambda: gr("conn", args.connections)]
    for step in steps if i % 2 == 1 else reversed(steps):
        step()
    out["ratio_default"] = out["default_wall"] / out["bare_wall"]
    out["ratio_conn"] = out["conn_wall"] / out["bare_wall"]
    out["ratio_proc"] = out["default_wall"] / out["bare_proc_wall"]
    print(
        f"  ratio grandrounds/bare: default flags {out['ratio_default']:.2f}, "
        f"{args.connections} connections {out['ratio_conn']:.2f}; default flags over the bare process {out['ratio_proc']:.2f}"
    )

    # Phases, on the default run's store (default flags). See the module docstring.
    store = stores["default"]
    settled = grandrounds_run(
        srv, data, store, "openai/bench", "openai/bench-judge", None, args.limit
    )
    forget_settled(store)
    warm = grandrounds_run(srv, data, store, "openai/bench", "openai/bench-judge", None, args.limit)
    forget_grades(store)
    regr = grandrounds_run(srv, data, store, "openai/bench", "openai/bench-judge", None, args.limit)
    ans = grandrounds_run(
        srv, data, store, "openai/bench-b", "openai/bench-judge", None, args.limit
    )
    jud = grandrounds_run(
        srv, data, store, "openai/bench", "openai/bench-judge-b", None, args.limit
    )
    n_judge = max(jud.judges_made, 1)
    full_cpu = out["default_cpu_ms"] * out["default_calls"] / 1000
    out.update(
        warm_wall=warm.wall,
        warm_cpu=warm.cpu,
        warm_calls=warm.calls,
        regrade_calls=regr.calls,
        regrade_cpu=regr.cpu,
        settled_wall=settled.wall,
        settled_calls=settled.calls,
    )
    out["judge_cpu_ms"] = 1000 * (jud.cpu - warm.cpu) / n_judge
    out["judge_call_cpu_ms"] = 1000 * (jud.cpu - regr.cpu) / n_judge
    out["stored_verdict_cpu_ms"] = 1000 * (regr.cpu - warm.cpu) / n_judge
    out["answer_cpu_ms"] = 1000 * (ans.cpu - regr.cpu) / max(ans.answers_made, 1)
    predicted = (
        warm.cpu
        + (
            out["answer_cpu_ms"] * out["default_answers"]
            + out["judge_cpu_ms"] * out["default_judges"]
        )
        / 1000
    )
    print(
        f"  re-run of the finished command (result read back): {settled.calls} calls, wall {settled.wall:.2f} s"
    )
    print(
        f"  warm re-run (every stored grade read): {warm.calls} calls, wall {warm.wall:.2f} s, cpu {warm.cpu:.2f} s"
    )
    print(
        f"  grades deleted, re-run: {regr.calls} calls (answers and verdicts from the store), wall {regr.wall:.2f} s, "
        f"cpu {regr.cpu:.2f} s -> grading from a stored verdict {out['stored_verdict_cpu_ms']:.3f} ms each"
    )
    print(
        f"  judges only: {jud.answers_made} answer + {jud.judges_made} judge calls, wall {jud.wall:.2f} s, cpu {jud.cpu:.2f} s "
        f"-> per judge call {out['judge_cpu_ms']:.3f} ms all-in (over the warm re-run), {out['judge_call_cpu_ms']:.3f} ms "
        f"for the call alone (over the re-grade)"
    )
    print(
        f"  answers only: {ans.answers_made} answer + {ans.judges_made} judge calls, wall {ans.wall:.2f} s, cpu {ans.cpu:.2f} s "
        f"-> {out['answer_cpu_ms']:.3f} ms per answer call (over the re-grade)"
    )
    print(
        f"  check: warm cpu + answers x {out['answer_cpu_ms']:.3f} + judges x {out['judge_cpu_ms']:.3f} = {predicted:.2f} s; "
        f"the default run took {full_cpu:.2f} s (it also stores the samples, once per store)"
    )
    return out


def bare_child(path: str, base_url: str, connections: int) -> None:
    """The bare client as its own process: read the bodies, send them, exit."""
    bodies = Path(path).read_bytes().splitlines()
    asyncio.run(bare_client(base_url, bodies, connections))


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--bare-child":
        bare_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help="HealthBench JSONL (default: the shared 500-row file)",
    )
    ap.add_argument("--latency", type=float, default=0.05, help="server latency, seconds")
    ap.add_argument(
        "--connections",
        type=int,
        default=64,
        help="the bare client's connections, and the second grandrounds run's concurrency",
    )
    ap.add_argument("--repeat", type=int, default=3, help="rounds")
    ap.add_argument(
        "--limit", type=int, default=None, help="first N conversations only (a quick check)"
    )
    args = ap.parse_args()
    if not args.data.is_file():
        raise SystemExit(f"error: {args.data}: no such file")

    answers, judges = request_bodies(args.data, args.limit)
    bodies = [*answers, *judges]
    ideal = len(bodies) * args.latency / args.connections
    received = mp.Value("q", 0, lock=False)
    q: mp.Queue[str] = mp.Queue()
    proc = mp.Process(target=serve, args=(args.latency, q, received), daemon=True)
    proc.start()
    srv = Server(proc, q.get(timeout=30), received)
    print(
        f"HealthBench {args.data.name}: {len(answers)} answer + {len(judges)} judge calls per run; latency "
        f"{args.latency * 1000:.0f} ms; {args.connections} connections; ideal wall at {args.connections} in flight "
        f"{ideal:.2f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} CPUs"
    )
    rounds = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for i in range(1, args.repeat + 1):
                print(f"round {i} ({'bare first' if i % 2 == 1 else 'bare last'}):")
                try:
                    rounds.append(run_round(i, srv, args.data, bodies, args, Path(d)))
                except (
                    RunFailed
                ) as e:  # the figures of the rounds completed so far are still printed
                    print(f"round {i} abandoned: {e}")
                    break
    finally:
        proc.kill()
        proc.join()

    if not rounds:
        raise SystemExit("error: no round completed")

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    print(
        f"median of {len(rounds)} round(s); load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'run':<34}{'calls':>7}{'wall s':>8}{'/bare':>7}{'cpu ms/call':>13}{'B/req':>7}{'server late ms':>16}"
    )
    print(
        f"{'bare aiohttp':<34}{len(bodies):>7}{med('bare_wall'):>8.2f}{1.0:>7.2f}{med('bare_cpu_ms'):>13.3f}{med('bare_bytes'):>7.0f}{med('bare_late'):>16.2f}"
    )
    print(
        f"{'bare aiohttp, own process':<34}{len(bodies):>7}{med('bare_proc_wall'):>8.2f}{med('bare_proc_wall') / med('bare_wall'):>7.2f}"
    )
    for name, label in (
        ("default", "grandrounds, default flags"),
        ("conn", f"grandrounds, --concurrency {args.connections}"),
    ):
        print(
            f"{label:<34}{med(name + '_calls'):>7.0f}{med(name + '_wall'):>8.2f}{med('ratio_' + name):>7.2f}"
            f"{med(name + '_cpu_ms'):>13.3f}{med(name + '_bytes'):>7.0f}{med(name + '_late'):>16.2f}"
        )
    print(
        f"harness cpu per call, default flags: judge call {med('judge_cpu_ms'):.3f} ms all-in (prompt, call, verdict, "
        f"grade; {med('judge_call_cpu_ms'):.3f} ms the call alone), answer call {med('answer_cpu_ms'):.3f} ms; grading "
        f"from a stored verdict {med('stored_verdict_cpu_ms'):.3f} ms; warm re-run {med('warm_wall'):.2f} s wall, "
        f"{med('warm_cpu'):.2f} s cpu, {med('warm_calls'):.0f} calls"
    )
    per_round = ", ".join(f"{r['ratio_default']:.2f}" for r in rounds)
    per_round_proc = ", ".join(f"{r['ratio_proc']:.2f}" for r in rounds)
    print(
        f"ratio per round, default flags / bare: {per_round}; over the bare process: {per_round_proc}"
    )


if __name__ == "__main__":
    main()

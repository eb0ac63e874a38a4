"""Shards, snapshots, merge and settle against scripted loopback servers, with the figures printed.

Scenarios (each the real CLI in subprocesses, each with fresh stores in a temporary folder):

- ``medqa``: MedQA-200 in 4 shards started at once (each its own store and snapshots), merged and
  settled, against one process's run of the same command: per-shard samples and calls, total
  requests, distinct keys, calls made by the settle, run ids, and whether results.json and
  samples.jsonl are byte-identical.
- ``healthbench``: HealthBench-30 judged per criterion, the same (shard balance in judge calls,
  by hash and cost-balanced).
- ``agentclinic``: AgentClinic-10 (MedQA cases) with a simulated patient and a moderator judge.
- ``vqa``: VQA-RAD-50 against a server that decodes every image (images merged by sha256).
- ``kill``: MedQA-200 in 4 shards, one killed with SIGKILL halfway and restarted on "another
  node" (a fresh local store restored from its snapshot).
- ``two``: two processes on one store against a 100 ms server, against one process.
- ``wall``: 4 shards against one process, a 200 ms server, 8 requests in flight per process.
- ``merge5000``: the 5,000-conversation HealthBench run (HealthBench-500 repeated, as
  bench/healthbench_scale.py builds it) in 4 shards, then merge + settle timed.

    python bench/shards.py                        # every scenario but merge5000
    python bench/shards.py medqa kill two wall
    python bench/shards.py merge5000

Goals: total requests = distinct keys = one run's; settle 0 calls; same run id; identical files;
the 4 shards' wall <= 0.3x one process's at 200 ms; merge + settle of 5,000 conversations < 30 s.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from grandrounds.testing import LoopbackServer  # noqa: E402

SHARED = ROOT.parent / "shared"
DATA = SHARED / "data"
ENV = dict(
    os.environ,
    PYTHONPATH=str(ROOT / "src"),
    GRANDROUNDS_REFERENCE=os.environ.get("GRANDROUNDS_REFERENCE", str(SHARED / "reference")),
    OPENAI_API_KEY="bench",
    COLUMNS="200",
)
VERDICT = json.dumps({"explanation": "The response meets the criterion.", "criteria_met": True})


def answer(body: dict[str, Any]) -> str:
    text = json.dumps(body.get("messages"))
    return "Answer: " + "ABCD"[len(text) % 4]


def gr(*args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args], env=ENV, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    if check and r.returncode != 0:
        raise SystemExit(
            f"grandrounds {' '.join(args[:2])} exited {r.returncode}:\n{r.stderr[-3000:]}"
        )
    return wall, r


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "grandrounds", *args],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def calls_made(err: str) -> int:
    total = 0
    for line in err.splitlines():
        if "calls made" in line:
            head = line.split("calls made")[0].split()[-1].replace(",", "")
            total += int(head) if head.isdigit() else 0
    return total


def run_id(err: str) -> str:
    return err.split(": run ", 1)[1].split()[0]


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute(sql).fetchone()[0])


def shards_then_settle(
    name: str, srv: Any, run: list[str], n: int, tmp: Path, shard_extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One process's run, then ``n`` shards at once, merge and settle; the figures printed."""
    t1, one = gr(*run, "--store", str(tmp / "one.db"), "--out", str(tmp / "one"))
    single = srv.stats.requests
    snaps = tmp / "snaps"
    t0 = time.perf_counter()
    procs = [
        start(*run, "--store", str(tmp / f"node{i}" / "local.db"), "--shard", f"{i}/{n}",
              "--snapshot-to", str(snaps), *shard_extra)
        for i in range(n)
    ]  # fmt: skip
    outs = [p.communicate() for p in procs]
    t_shards = time.perf_counter() - t0
    for p, (_, err) in zip(procs, outs):
        if p.returncode:
            raise SystemExit(f"a shard exited {p.returncode}:\n{err[-3000:]}")
    shard_requests = srv.stats.requests - single
    snapshots = sorted(snaps.glob("*.db"))
    per = [
        (count(s, "SELECT n_samples FROM shards"), calls_made(err))
        for s, (_, err) in zip(snapshots, outs)
    ]
    merged = tmp / "merged.db"
    t_merge, m = gr("merge", *map(str, snapshots), "--into", str(merged))
    before = srv.stats.requests
    t_settle, settle = gr(*run, "--store", str(merged), "--out", str(tmp / "merged"))
    same_files = all(
        (tmp / "merged" / f).read_bytes() == (tmp / "one" / f).read_bytes()
        for f in ("results.json", "samples.jsonl")
    )
    distinct = count(merged, "SELECT COUNT(DISTINCT key) FROM calls")
    loads = [c for _, c in per]
    print(f"{name}: {n} shards")
    print(
        "  per shard (samples, calls): "
        + ", ".join(f"{s}/{c}" for s, c in per)
        + f"; balance max/mean {max(loads) / (sum(loads) / len(loads)):.2f}"
    )
    print(
        f"  one process: {single} requests in {t1:.1f} s; shards: {shard_requests} requests in "
        f"{t_shards:.1f} s; distinct keys merged {distinct}"
    )
    print(
        f"  merge {t_merge:.2f} s, settle {t_settle:.2f} s with {srv.stats.requests - before} requests "
        f"({calls_made(settle.stderr)} calls made); run id one {run_id(one.stderr)} / merged "
        f"{run_id(settle.stderr)}; results.json and samples.jsonl identical: {same_files}"
    )
    return {"single": single, "shards": shard_requests, "distinct": distinct, "t": t_shards}


def medqa_run(url: str, limit: int = 200, *extra: str) -> list[str]:
    data = DATA / "medqa" / "phrases_no_exclude_test.jsonl"
    return ["run", "medqa", "--data", str(data), "--limit", str(limit), "-m", "openai/m",
            "--base-url", url, *extra]  # fmt: skip


def scenario_medqa(tmp: Path) -> None:
    with LoopbackServer(answer) as srv:
        shards_then_settle("MedQA-200", srv, medqa_run(srv.base_url), 4, tmp)


def scenario_healthbench(tmp: Path) -> None:
    data = DATA / "healthbench" / "healthbench_500.jsonl"
    for assign in ("", ":cost"):
        sub = tmp / (assign.strip(":") or "hash")
        sub.mkdir()
        with LoopbackServer(lambda b: VERDICT) as srv:
            run = ["run", "healthbench", "--data", str(data), "--limit", "30", "-m", "openai/m",
                   "--base-url", srv.base_url, "--judge", f"openai/judge@{srv.base_url}"]  # fmt: skip
            if assign:
                # the shard spec carries the assignment: rebuild the shard commands with it
                shards_then_settle_assign(
                    f"HealthBench-30 (judged, {assign[1:]})", srv, run, 4, sub, assign
                )
            else:
                shards_then_settle("HealthBench-30 (judged, hash)", srv, run, 4, sub)


def shards_then_settle_assign(
    name: str, srv: Any, run: list[str], n: int, tmp: Path, assign: str
) -> None:
    """:func:`shards_then_settle` with ``--shard i/N:cost``."""
    global start
    plain = start

    def with_assign(*args: str) -> subprocess.Popen[str]:
        a = list(args)
        if "--shard" in a:
            a[a.index("--shard") + 1] += assign
        return plain(*a)

    start = with_assign
    try:
        shards_then_settle(name, srv, run, n, tmp)
    finally:
        start = plain


def scenario_agentclinic(tmp: Path) -> None:
    from tests.test_agentclinic import FILES, Clinic

    clinic = Clinic("medqa")
    with LoopbackServer(clinic.rule) as srv:
        u = srv.base_url
        run = ["run", "agentclinic", "--param", "dataset=medqa", "--data",
               str(DATA / "agentclinic" / FILES["medqa"]), "--limit", "10", "--model", "openai/doctor",
               "--base-url", u, "--simulator", f"openai/sim@{u}", "--judge", f"openai/mod@{u}"]  # fmt: skip
        shards_then_settle("AgentClinic-10 (simulated patient, moderator)", srv, run, 4, tmp)


def scenario_vqa(tmp: Path) -> None:
    from grandrounds.testing.vision import VisionServer

    with VisionServer(lambda seen: "yes") as srv:
        run = ["run", "vqa-rad", "--data", str(DATA / "vqa-rad"), "--limit", "50",
               "-m", "openai/vlm", "--base-url", srv.base_url]  # fmt: skip
        shards_then_settle("VQA-RAD-50 (images)", srv, run, 4, tmp)
        merged = tmp / "merged.db.images"
        files = [p for p in merged.rglob("*") if p.is_file()]
        one = [p for p in (tmp / "one.db.images").rglob("*") if p.is_file()]
        print(f"  images beside the merged store: {len(files)} (one process's store: {len(one)})")


def scenario_kill(tmp: Path) -> None:
    with LoopbackServer(answer, latency=0.2) as srv:
        run = medqa_run(srv.base_url, 200, "--concurrency", "2")
        snaps = tmp / "snaps"
        common = ("--snapshot-to", str(snaps), "--snapshot-every", "0.02")
        procs = [
            start(*run, "--store", str(tmp / f"node{i}" / "local.db"), "--shard", f"{i}/4", *common)
            for i in range(4)
        ]
        victim = procs[0]
        snap = snaps / "local.shard-0-of-4.db"
        while True:
            if snap.exists() and count(snap, "SELECT COUNT(*) FROM calls") >= 15:
                break
            time.sleep(0.05)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        for p in procs[1:]:
            p.communicate()
        saved = count(snap, "SELECT COUNT(*) FROM calls")
        at_kill = srv.stats.requests
        r = start(*run, "--store", str(tmp / "node9" / "local.db"), "--shard", "0/4", *common)
        _, err = r.communicate()
        assert r.returncode == 0, err
        resumed = calls_made(err)
        merged = tmp / "merged.db"
        gr("merge", *map(str, sorted(snaps.glob("*.db"))), "--into", str(merged))
        before = srv.stats.requests
        gr(*run, "--store", str(merged))
        distinct = count(merged, "SELECT COUNT(DISTINCT key) FROM calls")
        print("kill -9: MedQA-200 in 4 shards, shard 0 killed halfway, resumed from its snapshot")
        print(
            f"  snapshot held {saved} calls at the kill; requests by then {at_kill}; the resumed shard "
            f"made {resumed}; total requests {srv.stats.requests - 0}; distinct keys {distinct}; "
            f"re-asked (made after the last snapshot, lost with the node) {srv.stats.requests - distinct}; "
            f"settle {srv.stats.requests - before} requests"
        )


def scenario_two(tmp: Path) -> None:
    with LoopbackServer(answer, latency=0.1) as srv:
        run = medqa_run(srv.base_url, 1273, "--concurrency", "8")
        t_one, _ = gr(*run, "--store", str(tmp / "one.db"))
        one = srv.stats.requests
        t0 = time.perf_counter()
        procs = [start(*run, "--store", str(tmp / "shared.db")) for _ in range(2)]
        outs = [p.communicate() for p in procs]
        t_two = time.perf_counter() - t0
        made = [calls_made(err) for _, err in outs]
        distinct = count(tmp / "shared.db", "SELECT COUNT(DISTINCT key) FROM calls")
        print("two processes on one store, 100 ms server, 8 in flight each, MedQA (all 1,273)")
        print(
            f"  one process: {one} requests, {t_one:.2f} s; the pair: {t_two:.2f} s "
            f"({t_two / t_one:.2f}x), calls {made[0]} + {made[1]} = {sum(made)}, requests "
            f"{srv.stats.requests - one}, distinct keys {distinct}, paid twice "
            f"{srv.stats.requests - one - distinct}"
        )


def scenario_wall(tmp: Path) -> None:
    with LoopbackServer(answer, latency=0.2) as srv:
        run = medqa_run(srv.base_url, 1273, "--concurrency", "8")
        t_one, _ = gr(*run, "--store", str(tmp / "one.db"))
        figures = shards_then_settle_timed(srv, run, tmp)
        print(
            f"wall: MedQA (all 1,273), 200 ms server, 8 in flight per process: one process {t_one:.2f} s, "
            f"4 shards together {figures:.2f} s ({figures / t_one:.2f}x; goal <= 0.3x)"
        )


def shards_then_settle_timed(srv: Any, run: list[str], tmp: Path) -> float:
    t0 = time.perf_counter()
    procs = [start(*run, "--store", str(tmp / f"w{i}.db"), "--shard", f"{i}/4") for i in range(4)]
    for p in procs:
        p.communicate()
    return time.perf_counter() - t0


def scenario_merge5000(tmp: Path) -> None:
    import multiprocessing as mp

    from healthbench_scale import serve, write_conversations  # bench/healthbench_scale.py

    data = tmp / "hb5000.jsonl"
    write_conversations(DATA / "healthbench" / "healthbench_500.jsonl", data, 5000)
    q: mp.Queue[str] = mp.Queue()
    server = mp.Process(target=serve, args=(0.002, q), daemon=True)
    server.start()
    url = q.get(timeout=30)
    run = ["run", "healthbench", "--data", str(data), "-m", "openai/m", "--base-url", url,
           "--judge", f"openai/judge@{url}", "--concurrency", "64", "--judge-concurrency", "64"]  # fmt: skip
    snaps = tmp / "snaps"
    t0 = time.perf_counter()
    procs = [
        start(
            *run,
            "--store",
            str(tmp / f"n{i}" / "l.db"),
            "--shard",
            f"{i}/4",
            "--snapshot-to",
            str(snaps),
        )
        for i in range(4)
    ]
    outs = [p.communicate() for p in procs]
    t_shards = time.perf_counter() - t0
    for p, (_, err) in zip(procs, outs):
        if p.returncode:
            raise SystemExit(err[-2000:])
    merged = tmp / "merged.db"
    t_merge, _ = gr("merge", *map(str, sorted(snaps.glob("*.db"))), "--into", str(merged))
    t_settle, settle = gr(*run, "--store", str(merged), "--out", str(tmp / "out"))
    server.terminate()
    print(
        f"merge5000: HealthBench 5,000 conversations in 4 shards ({t_shards:.0f} s, "
        f"{sum(calls_made(e) for _, e in outs):,} calls); merge {t_merge:.1f} s + settle {t_settle:.1f} s "
        f"= {t_merge + t_settle:.1f} s (goal < 30 s); settle calls made {calls_made(settle.stderr)}"
    )


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "medqa": scenario_medqa,
    "healthbench": scenario_healthbench,
    "agentclinic": scenario_agentclinic,
    "vqa": scenario_vqa,
    "kill": scenario_kill,
    "two": scenario_two,
    "wall": scenario_wall,
    "merge5000": scenario_merge5000,
}


def main() -> None:
    names = sys.argv[1:] or [n for n in SCENARIOS if n != "merge5000"]
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"gr-shards-{name}-") as tmp:
            SCENARIOS[name](Path(tmp))


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()

"""Peak memory and wall time of `grandrounds run` against an endpoint that streams an endless body.

Starts tests/hostile_server.py in this process, runs the real command line
(``grandrounds run demo --model openai/m --base-url ...``) in a child process, and prints for
that child: exit code, wall time, peak RSS (from wait4, the child alone), requests the server
received, megabytes the server managed to push, and the failure reason the run's summary gives.
The same run against a well-behaved server (``ok``) comes first as the baseline.

    python bench/hostile_endpoint.py --limit 12 --concurrency 4

Measured on the 2-core development machine (shared, so walls vary), 12 demo questions, 8 MB cap:

    in flight  server   exit  wall s  peak RSS MB  requests  MB pushed
        4      ok         0    3.61       64.7        12        0.0
        4      endless    3    3.13       92.9        12      141.9
       12      ok         0    2.57       64.8        12        0.0
       12      endless    3    4.44      127.1        12      141.9

Every call fails once as "response too large: over 8 MB" (not retried) and the run exits 3
(nothing scored). Memory is bounded by the calls in flight times the cap, plus the socket
buffers (the server pushes about 4 MB per call past what is read); without a cap, an endless
stream grows a run's memory for as long as it lasts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.hostile_server import MB, HostileServer  # noqa: E402


def run_once(mode: str, limit: int, concurrency: int, cap_mb: float | None) -> dict[str, object]:
    with HostileServer(mode) as srv, tempfile.TemporaryDirectory() as d:
        cmd = [
            sys.executable,
            "-m",
            "grandrounds",
            "run",
            "demo",
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(Path(d) / "s.db"),
            "--limit",
            str(limit),
            "--concurrency",
            str(concurrency),
        ]
        if cap_mb is not None:
            cmd += ["--model-opt", f"max_response_mb={cap_mb:g}"]
        env = dict(os.environ, COLUMNS="200")
        reference = ROOT.parent / "shared" / "reference"
        if "GRANDROUNDS_REFERENCE" not in env and reference.is_dir():
            env["GRANDROUNDS_REFERENCE"] = str(
                reference
            )  # the demo exam's prompt text, without a download
        env.setdefault("OPENAI_API_KEY", "sk-bench-not-a-real-key-000000")
        log = Path(d) / "stderr.txt"
        with open(log, "wb") as err, open(os.devnull, "wb") as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=d)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
            wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        lines = log.read_text(errors="replace").splitlines()
        return {
            "exit": proc.returncode,
            "wall": wall,
            "rss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
            "requests": srv.stats.requests,
            "pushed_mb": sum(srv.stats.bytes_sent) / MB,
            "reason": next((ln.strip() for ln in lines if "failures:" in ln), ""),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=12, help="demo questions (at most 12)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument(
        "--max-response-mb",
        type=float,
        default=None,
        help="the provider's cap (default: its own, 8 MB)",
    )
    args = ap.parse_args()
    cap = f"{args.max_response_mb:g} MB" if args.max_response_mb is not None else "the default"
    print(
        f"grandrounds run demo --limit {args.limit} --concurrency {args.concurrency}, response cap {cap}"
    )
    print(
        f"{'server':<10}{'exit':>5}{'wall s':>9}{'peak RSS MB':>13}{'requests':>10}{'MB pushed':>11}"
    )
    reasons = []
    for mode in ("ok", "endless"):
        r = run_once(mode, args.limit, args.concurrency, args.max_response_mb)
        print(
            f"{mode:<10}{r['exit']:>5}{r['wall']:>9.2f}{r['rss_mb']:>13.1f}{r['requests']:>10}{r['pushed_mb']:>11.1f}"
        )
        reasons.append(f"{mode}: {r['reason'] or 'no failures'}")
    print("\n".join(reasons))


if __name__ == "__main__":
    main()

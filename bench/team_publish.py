"""Publishing to the team store at scale: 100 runs of 1,000 judged samples each (a HealthBench-like
synthetic store: 6 rubric criteria per sample, two judges' votes on each) published into a private
PostgreSQL server started in a temporary folder, then published again (nothing to do), then the
leaderboard read from PostgreSQL and from SQLite.

Prints the store's size, the time of each publish, rows and the database's size
(``pg_database_size``), and the leaderboard's time on each store.

    .venv/bin/python bench/team_publish.py [--runs 100] [--samples 1000]

Measured on the shared 2-core development machine (PostgreSQL 15, fsync off as the tests' server
runs, a test suite running beside it): a 693.6 MB store of 100 runs x 1,000 samples (100,000
answers, calls and grades of 6 criteria and two judges' votes each) published in 127.1 s (about 790
answers a second; 91.8 s before the server computed each grade's counted columns, on a quieter
machine); the database then takes 311.4 MB (PostgreSQL compresses the long JSON texts). Publishing
it again took 5.2 s and wrote nothing (each run's state is known to be published). The leaderboard
of the 100 runs took 14.2 s from PostgreSQL and 15.4 s from SQLite, byte for byte the same output.

Needs the PostgreSQL server binaries (``apt-get install -y postgresql``); under root it runs the
server as the user ``scripts/ci/postgres-user.sh`` creates (or ``nobody``).
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
from tests.pg_server import start_server  # noqa: E402
from tests.synthetic import SynthSpec, build_store  # noqa: E402


def timed(*args: str) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "grandrounds", *args], capture_output=True, text=True, env=env
    )
    if r.returncode != 0:
        sys.exit(f"{' '.join(args[:1])} failed: {r.stderr[-2000:]}")
    return time.perf_counter() - t, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--samples", type=int, default=1000)
    args = ap.parse_args()
    import psycopg

    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "big.db"
        t = time.perf_counter()
        build_store(db, SynthSpec(n_samples=args.samples, n_models=args.runs, xss=False)).close()
        print(
            f"store: {args.runs} runs x {args.samples} samples built in {time.perf_counter() - t:.1f} s, "
            f"{db.stat().st_size / 1e6:.1f} MB of SQLite"
        )
        server = start_server()
        pg = next(server)
        try:
            dsn = pg.createdb("bench")
            first, out1 = timed("publish", "--store", str(db), "--to", dsn)
            with psycopg.connect(dsn) as con:
                size = con.execute("SELECT pg_database_size(current_database())").fetchone()[0]
                rows = {
                    t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                    for t in ("runs", "samples", "answers", "calls", "grades", "grade_calls")
                }
            print(
                f"first publish: {first:.1f} s ({args.runs * args.samples / first:,.0f} answers/s)"
            )
            print("  " + out1.strip().splitlines()[-1])
            print(f"  rows: {rows}")
            print(f"  database size: {size / 1e6:.1f} MB")
            again, out2 = timed("publish", "--store", str(db), "--to", dsn)
            print(f"second publish (nothing new): {again:.1f} s")
            print("  " + out2.strip().splitlines()[-1])
            lb_pg, board_pg = timed("leaderboard", "--store", dsn)
            lb_sq, board_sq = timed("leaderboard", "--store", str(db))
            same = "byte-equal" if board_pg == board_sq else "DIFFERENT"
            print(f"leaderboard: {lb_pg:.1f} s from PostgreSQL, {lb_sq:.1f} s from SQLite ({same})")
        finally:
            next(server, None)


if __name__ == "__main__":
    main()

"""Viewer latency on a synthetic store of 5,000 samples x 10 models with rubric verdicts.

Prints the store build time, the index build time, and wall-clock latency (median and max of
several requests over HTTP on 127.0.0.1) of the first page, a filtered page, a search, a deep
page and a question page. Goal: first page and question page each < 1 s.

    python bench/viewer_load.py [--samples 5000] [--models 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grandrounds.viewer.server import make_server  # noqa: E402
from tests.synthetic import SynthSpec, build_store  # noqa: E402


def timed(url: str, repeat: int = 5) -> tuple[float, float, int]:
    times, size = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        with urllib.request.urlopen(url) as r:
            size = len(r.read())
        times.append(time.perf_counter() - t)
    return statistics.median(times), max(times), size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=5000)
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--criteria", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "viewer.db"
        t = time.perf_counter()
        build_store(
            db, SynthSpec(n_samples=args.samples, n_models=args.models, n_criteria=args.criteria)
        ).close()
        print(
            f"synthetic store: {args.samples} samples x {args.models} models x {args.criteria} criteria, built in {time.perf_counter() - t:.1f} s, {db.stat().st_size / 1e6:.0f} MB"
        )
        t = time.perf_counter()
        srv = make_server(db, port=0)
        print(f"viewer index built in {time.perf_counter() - t:.1f} s")
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        cases = {
            "first page (50 questions, all models)": "/api/items?page=1&per_page=50",
            "question page (10 answers, rubric, verdicts)": "/api/item/2500",
            "filtered page (model + dimension + verdict=unknown)": "/api/items?model=scripted/model-03&dimension=axis:accuracy&verdict=unknown",
            "search (FTS trigram)": "/api/items?q=insulin%20sepsis",
            "search (2 Chinese chars, LIKE)": "/api/items?q=%E6%82%A3%E8%80%85",
            "deep page (page 100)": "/api/items?page=100&per_page=50",
            "runs": "/api/runs",
        }
        worst = {}
        for name, path in cases.items():
            med, mx, size = timed(base + path)
            worst[name] = mx
            print(
                f"{name:55s} median {med * 1000:7.1f} ms  max {mx * 1000:7.1f} ms  ({size / 1e3:.0f} kB)"
            )
        srv.shutdown()
        srv.server_close()
        ok = (
            worst["first page (50 questions, all models)"] < 1
            and worst["question page (10 answers, rubric, verdicts)"] < 1
        )
        print("PASS: first page and question page < 1 s" if ok else "FAIL: over 1 s")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

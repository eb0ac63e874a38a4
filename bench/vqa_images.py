"""A full image benchmark run through the real command: wall time, peak memory, image bytes read.

Runs ``grandrounds run slake`` (English test half, 1,061 questions on 96 images; ``--benchmark
vqa-rad`` for VQA-RAD's 451 on 203) against a loopback vision server in this process that decodes
and hashes every image it receives, with the command in a child process. Prints the wall time,
the child's peak RSS, the requests and images the server received (and the distinct ones), the
image files the child opened under the image folder and how often (each should be read once;
counted by a ``sys.addaudithook`` hook, which slows the first run), then the warm re-run.

    python bench/vqa_images.py [--benchmark slake|vqa-rad] [--data ../shared/data/slake]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from grandrounds.testing.vision import VisionServer  # noqa: E402

#: Run in the child: counts the bytes of every file opened under the image folder, by file.
AUDIT = """
import atexit, json, os, sys
folder, out = os.environ["BENCH_IMAGE_DIR"], os.environ["BENCH_READS"]
opened = {}
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith(folder) and "r" in str(args[1] or "r"):
        opened[args[0]] = opened.get(args[0], 0) + 1
sys.addaudithook(hook)
atexit.register(lambda: open(out, "w").write(json.dumps(opened)))
from grandrounds.cli.main import entry
sys.argv = ["grandrounds"] + sys.argv[1:]
entry()
"""


def run_once(args: list[str], env: dict[str, str], audit: bool = True) -> tuple[float, int, int]:
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    cmd = ["-c", AUDIT] if audit else ["-m", "grandrounds"]
    r = subprocess.run([sys.executable, *cmd, *args], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(r.stderr[-3000:])
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="slake", choices=("slake", "vqa-rad"))
    ap.add_argument("--data", type=Path, default=None)
    a = ap.parse_args()
    data = a.data or ROOT.parent / "shared" / "data" / a.benchmark
    images = data / ("imgs" if a.benchmark == "slake" else "VQA_RAD Image Folder")
    with tempfile.TemporaryDirectory() as tmp, VisionServer(lambda seen: "yes") as srv:
        reads = Path(tmp) / "reads.json"
        env = dict(os.environ) | {
            "PYTHONPATH": str(ROOT / "src"),
            "BENCH_IMAGE_DIR": str(images.resolve()),
            "BENCH_READS": str(reads),
            "GRANDROUNDS_REFERENCE": os.environ.get(
                "GRANDROUNDS_REFERENCE", str(ROOT.parent / "shared" / "reference")
            ),
        }
        args = [
            "run",
            a.benchmark,
            "--model",
            "openai/vlm",
            "--base-url",
            srv.base_url,
            "--data",
            str(data),
            "--store",
            str(Path(tmp) / "s.db"),
            "--out",
            str(Path(tmp) / "out"),
        ]
        wall, peak, _ = run_once(args, env)
        opened = json.loads(reads.read_text())
        size = sum(Path(p).stat().st_size for p in opened)
        result = json.loads((Path(tmp) / "out" / "results.json").read_text())["results"][0]
        print(
            f"{a.benchmark}: {result['n']} questions in {wall:.2f} s wall; child peak RSS {peak / 1024:.0f} MB"
        )
        print(
            f"  server: {srv.stats.requests} requests, {srv.stats.images} images ({len(srv.stats.distinct_images)} distinct, "
            f"{srv.stats.image_bytes / 1e6:.1f} MB decoded), problems {len(srv.stats.problems)}, mismatches {srv.stats.mismatches}"
        )
        print(
            f"  image files opened: {len(opened)}; opens per file: max {max(opened.values())}, "
            f"{size / len(opened) / 1024:.1f} KB per image, {size / 1e6:.1f} MB in all"
        )
        made = srv.stats.requests
        wall2, _, _ = run_once(args, env, audit=False)
        print(
            f"  warm re-run (no audit hook): {wall2:.2f} s wall, {srv.stats.requests - made} requests"
        )


if __name__ == "__main__":
    main()

"""Memory and time of the viewer's worst searches, measured on the server process.

Builds a synthetic store (default 2,000 samples x 4 models with rubric verdicts), starts the
viewer in a child process and sends searches of growing size: long single words (FTS trigram
phrases), many words, many short words (LIKE). For each it prints the HTTP status, the wall
time, the server's resident memory after the request and its peak so far (VmRSS / VmHWM from
/proc, Linux only).

    python bench/viewer_search.py [--samples 2000] [--models 4] [--src PATH]

``--src`` puts another source tree first on the child's path (e.g. an older checkout's ``src``)
to compare before and after a change on the same store.
"""

from __future__ import annotations

import argparse
import http.client
import random
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.synthetic import ZH, SynthSpec, build_store  # noqa: E402

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from grandrounds.viewer.server import make_server
srv = make_server(sys.argv[2], port=0)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


def request(port: int, path: str, timeout: float = 120.0) -> tuple[int | str, float]:
    """(status or error name, seconds) of one GET with a loopback Host header."""
    t = time.perf_counter()
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        con.request("GET", path)
        r = con.getresponse()
        r.read()
        status: int | str = r.status
    except (OSError, http.client.HTTPException) as e:
        status = type(e).__name__
    finally:
        con.close()
    return status, time.perf_counter() - t


def cases() -> dict[str, str]:
    """Search text per case; the query string is percent-encoded by the caller."""
    word = "insulinsepsis"
    rng = random.Random(0)
    zh = "".join(
        rng.choice(ZH) for _ in range(12000)
    )  # Chinese answers are written without spaces: every trigram is common
    return {
        "one common word": "insulin",
        "one Chinese word of 2,000 chars": zh[:2000],
        "one Chinese word of 7,000 chars": zh[:7000],
        "one word of 1,000 chars": (word * 80)[:1000],
        "one word of 10,000 chars": (word * 800)[:10000],
        "one word of 60,000 chars": (word * 5000)[:60000],
        "2,000 words of 3+ chars": " ".join(["dose", "fever", "renal", "rash"] * 500),
        # the largest searches the capped viewer accepts (200 characters, 8 words, 64 per word)
        "capped: one Chinese word, 64": zh[:64],
        "capped: 8 Chinese words, 24 each": " ".join(zh[i * 24 : (i + 1) * 24] for i in range(8)),
        "capped: 8 two-char words (LIKE)": "do fe re in pa se al ch",
        "3,000 two-char words (LIKE)": " ".join(["患者", "ab", "发热"] * 1000),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument(
        "--src", type=Path, default=ROOT / "src", help="source tree the viewer is imported from"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "viewer.db"
        build_store(db, SynthSpec(n_samples=args.samples, n_models=args.models)).close()
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(args.src.resolve()), str(db)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            rss, hwm = memory_mb(child.pid)
            print(
                f"viewer from {args.src}: {args.samples} samples x {args.models} models; server after start: rss {rss:.0f} MB, peak {hwm:.0f} MB"
            )
            print(f"{'case':34s} {'status':>8s} {'seconds':>8s} {'rss MB':>8s} {'peak MB':>8s}")
            for name, text in cases().items():
                status, secs = request(port, "/api/items?" + urllib.parse.urlencode({"q": text}))
                rss, hwm = memory_mb(child.pid)
                print(f"{name:34s} {status!s:>8s} {secs:8.2f} {rss:8.0f} {hwm:8.0f}")
        finally:
            child.terminate()
            child.wait(timeout=10)


if __name__ == "__main__":
    main()

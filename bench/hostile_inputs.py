"""Small inputs that ask for a lot: peak memory and wall of each one, refused, in a child process.

Each case runs in a fresh interpreter (the loaders as a run calls them) and prints the one-line
refusal, the wall time and the peak RSS of the child and of what it started (the PDF renderer),
from ``resource.getrusage``, against the bounds stated here (500 MB, 10 s):

- a 333-byte PDF with one 10,000-pt page, and one of 200,000 pt (MedBench ``img_path``);
- a 10 KB PDF of 5 pages sharing a content stream that takes ~18 s a page to draw;
- a PMC-VQA ``images.zip`` whose member inflates to 1.5 GiB;
- a 4 KB MedBench row naming one 5 MB image 150 times, and 300 times (OpenAI's request limits);
- a mirror that streams 300 MiB for a file pinned at a few KB.

    python bench/hostile_inputs.py [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_RSS_MB = 500
MAX_WALL_S = 10.0

PRELUDE = f"""
import json, os, resource, sys, time
sys.path[:0] = [{str(ROOT / "src")!r}, {str(ROOT)!r}]
from pathlib import Path
tmp = Path(sys.argv[1])
start = time.monotonic()
def done(line):
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({{"line": line, "wall": time.monotonic() - start,
                      "rss_mb": max(own, kids) / 1024}}))
"""

CASES = {
    "pdf-10000pt": """
from tests import hostile_files as h
from grandrounds.benchmarks.medbench import MedBench
(tmp / "big.pdf").write_bytes(h.big_page_pdf(10_000))
row = {"question": "q", "answer": "", "other": {"id": 1, "source": "MedVLM_V4"}, "img_path": "big.pdf"}
(tmp / "MedVLM_V4.jsonl").write_text(json.dumps(row) + "\\n")
start = time.monotonic()
try:
    MedBench().load(tmp); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "pdf-200000pt": """
from tests import hostile_files as h
from grandrounds.benchmarks.medbench import MedBench
(tmp / "big.pdf").write_bytes(h.big_page_pdf(200_000))
row = {"question": "q", "answer": "", "other": {"id": 1, "source": "MedVLM_V4"}, "img_path": "big.pdf"}
(tmp / "MedVLM_V4.jsonl").write_text(json.dumps(row) + "\\n")
start = time.monotonic()
try:
    MedBench().load(tmp); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "pdf-slow-5-pages": """
from tests import hostile_files as h
from grandrounds.benchmarks.medbench import MedBench
(tmp / "slow.pdf").write_bytes(h.slow_pdf())
row = {"question": "q", "answer": "", "other": {"id": 1, "source": "MedVLM_V4"}, "img_path": "slow.pdf"}
(tmp / "MedVLM_V4.jsonl").write_text(json.dumps(row) + "\\n")
start = time.monotonic()
try:
    MedBench().load(tmp); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "zip-1.5GiB-member": """
from tests import hostile_files as h
from grandrounds.benchmarks.image_exams import PMCVQA
head = "Figure_path,Question,Answer,Choice A,Choice B,Choice C,Choice D,Answer_label\\n"
(tmp / "test_clean.csv").write_text(head + "f.jpg,q?,x, A:a, B:b, C:c, D:d,A\\n")
h.inflating_zip(tmp / "images.zip", "images/f.jpg", 3 * 2**29)
print("images.zip:", (tmp / "images.zip").stat().st_size, "bytes", file=sys.stderr)
start = time.monotonic()
try:
    PMCVQA().load(tmp); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "one-5MB-image-x150": """
from PIL import Image
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.providers.images import openai_limits
Image.frombytes("RGB", (1300, 1300), os.urandom(1300 * 1300 * 3)).save(tmp / "big.png")
row = {"question": "q", "answer": "", "other": {"id": 1, "source": "MedVLM_V4"}, "img_path": ["big.png"] * 150}
(tmp / "MedVLM_V4.jsonl").write_text(json.dumps(row) + "\\n")
start = time.monotonic()
try:
    (s,) = MedBench().load(tmp)
    openai_limits(20.0).check(s); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "one-5MB-image-x300": """
from PIL import Image
from grandrounds.benchmarks.medbench import MedBench
from grandrounds.providers.images import openai_limits
Image.frombytes("RGB", (1300, 1300), os.urandom(1300 * 1300 * 3)).save(tmp / "big.png")
row = {"question": "q", "answer": "", "other": {"id": 1, "source": "MedVLM_V4"}, "img_path": ["big.png"] * 300}
(tmp / "MedVLM_V4.jsonl").write_text(json.dumps(row) + "\\n")
start = time.monotonic()
try:
    (s,) = MedBench().load(tmp)
    openai_limits(20.0).check(s); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
    "download-300MiB": """
import http.server, threading
from grandrounds.sources import downloads
from grandrounds.sources.pinned_sizes import PINNED_BYTES
class Endless(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
        try:
            for _ in range(300 * 16):
                self.wfile.write(b"x" * 65536)
        except OSError:
            pass
    def log_message(self, *a):
        pass
sha, size = min(PINNED_BYTES.items(), key=lambda kv: kv[1] if kv[1] > 1000 else 1 << 60)
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
threading.Thread(target=srv.serve_forever, daemon=True).start()
os.environ["GRANDROUNDS_CACHE"] = str(tmp / "cache")
url = f"http://127.0.0.1:{srv.server_address[1]}/f.json"
start = time.monotonic()
try:
    downloads.fetch(downloads.RemoteFile(url, "f.json", sha), tmp / "d"); done("NOT REFUSED")
except Exception as e:
    done(str(e))
""",
}


def run_case(name: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-c", PRELUDE + CASES[name], tmp],
            capture_output=True,
            text=True,
            timeout=600,
        )
        outer = time.monotonic() - t
    if out.returncode != 0 or not out.stdout.strip():
        return {"name": name, "line": f"FAILED: {out.stderr.strip()[-300:]}", "wall": outer}
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"name": name, **got, "process_wall": outer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(CASES))
    args = ap.parse_args()
    names = [args.only] if args.only else list(CASES)
    print(f"bounds: peak RSS < {MAX_RSS_MB} MB, wall of the refused work < {MAX_WALL_S:g} s")
    print(f"{'case':22} {'rss MB':>7} {'wall s':>7} {'proc s':>7}  ok  refusal")
    bad = 0
    for name in names:
        r = run_case(name)
        rss = float(r.get("rss_mb", float("nan")))  # type: ignore[arg-type]
        wall = float(r["wall"])  # type: ignore[arg-type]
        ok = rss < MAX_RSS_MB and wall < MAX_WALL_S and "NOT REFUSED" not in str(r["line"])
        bad += not ok
        print(
            f"{name:22} {rss:7.1f} {wall:7.2f} {float(r.get('process_wall', wall)):7.2f}  "  # type: ignore[arg-type]
            f"{'yes' if ok else 'NO ':3} {str(r['line'])[:150]}"
        )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

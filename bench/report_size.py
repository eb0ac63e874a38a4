"""Size and build time of the self-contained HTML report for 500 samples x 3 models (goal < 25 MB).

python bench/report_size.py [--samples 500] [--models 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from grandrounds.reports import build_report  # noqa: E402
from tests.synthetic import SynthSpec, build_store  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--criteria", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        st = build_store(
            Path(d) / "r.db",
            SynthSpec(n_samples=args.samples, n_models=args.models, n_criteria=args.criteria),
        )
        for fmt in ("html", "json", "xlsx", "parquet", "csv", "md"):
            t = time.perf_counter()
            paths = build_report(st, fmt, Path(d) / f"report.{fmt}")
            size = sum(p.stat().st_size for p in paths)
            print(f"{fmt:8s} {size / 1e6:7.2f} MB  in {time.perf_counter() - t:5.2f} s")
            if fmt == "html":
                html_size = size
        st.close()
    print(
        f"HTML for {args.samples} samples x {args.models} models x {args.criteria} criteria: {html_size / 1e6:.2f} MB "
        + ("(PASS < 25 MB)" if html_size < 25e6 else "(FAIL >= 25 MB)")
    )
    sys.exit(0 if html_size < 25e6 else 1)


if __name__ == "__main__":
    main()

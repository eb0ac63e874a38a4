"""`compare` on two scripted models of known accuracy over the real MedQA test file.

python bench/compare_scripted.py [--data ../shared/data/medqa/phrases_no_exclude_test.jsonl]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from grandrounds.reports.compare import compare_models  # noqa: E402
from grandrounds.store import Store  # noqa: E402
from tests.synthetic import scripted_mcq_runs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data" / "medqa" / "phrases_no_exclude_test.jsonl",
    )
    ap.add_argument("--a", type=float, default=0.80)
    ap.add_argument("--b", type=float, default=0.70)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        st = Store(Path(d) / "c.db")
        exact = scripted_mcq_runs(st, args.data, {"model-a": args.a, "model-b": args.b})
        for c in compare_models(st, "model-a", "model-b", seed=0):
            r = c.result
            print(
                f"scripted accuracies {exact['model-a']:.4f} vs {exact['model-b']:.4f} (known difference {exact['model-a'] - exact['model-b']:+.4f})"
            )
            print(
                f"compare: n={r.n} diff={r.diff:+.4f} 95% CI [{r.ci95[0]:+.4f}, {r.ci95[1]:+.4f}] McNemar b={r.mcnemar[0]} c={r.mcnemar[1]} p={r.mcnemar[2]:.3g} -> {c.verdict()}"
            )
        st.close()


if __name__ == "__main__":
    main()

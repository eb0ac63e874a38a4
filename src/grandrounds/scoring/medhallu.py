"""MedHallu detection metrics: F1 with "hallucinated" (label "1") as the positive class.

As the paper reports it (Pandit et al., "MedHallu", arXiv 2502.14302) and as Medmarks' ``postprocess.py``
(tmabraham/med-lm-envs @ 7ee0452, ``environments/medhallu/postprocess.py``) computes it: answers of
"2" (not sure) and answers that are not 0, 1 or 2 are dropped and counted, then accuracy, precision,
recall and F1 (scikit-learn's, ``pos_label="1"``, ``zero_division=0``) over the rest; every figure is
0.0 when nothing is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict


class Figures(TypedDict):
    """Counts, then the rates over the answers kept."""

    total: int
    kept: int
    dropped_unsure: int
    dropped_missing: int
    accuracy: float
    precision: float
    recall: float
    f1: float


def detection_metrics(gold: Sequence[str], pred: Sequence[str | None]) -> Figures:
    """The figures of ``postprocess_medhallu`` for gold labels and predictions ("0", "1", "2" or anything else)."""
    kept = [(g, p) for g, p in zip(gold, pred) if p in ("0", "1")]
    unsure = sum(1 for p in pred if p == "2")
    tp = sum(1 for g, p in kept if g == "1" and p == "1")
    fp = sum(1 for g, p in kept if g != "1" and p == "1")
    fn = sum(1 for g, p in kept if g == "1" and p != "1")
    right = sum(1 for g, p in kept if g == p)
    return {
        "total": len(pred),
        "kept": len(kept),
        "dropped_unsure": unsure,
        "dropped_missing": len(pred) - len(kept) - unsure,
        "accuracy": right / len(kept) if kept else 0.0,
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "f1": 2 * tp / (2 * tp + fp + fn) if tp else 0.0,
    }

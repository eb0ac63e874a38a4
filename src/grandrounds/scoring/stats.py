"""Statistics for scores: confidence intervals, bootstrap, paired comparison, agreement.

All functions are pure; randomness comes from an explicit seed so every number can be
reproduced from the store. numpy is imported by the functions that resample, not at import:
exam runs need only the Wilson interval, and starting a run should not pay for numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Z95 = 1.959963984540054


def wilson_ci(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion (Wilson 1927); better than Wald near 0 and 1."""
    if n == 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap(
    values: Sequence[float],
    stat: Callable[[np.ndarray], float] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, tuple[float, float]] | None:
    """Std and 95% percentile interval of ``stat`` (default: the mean) over resamples with replacement (size n)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None
    rng = np.random.default_rng(seed)
    if stat is None or stat is np.mean or stat is clipped_mean:
        # The mean of every resample at once, a block of rows at a time (memory stays at about a
        # million draws whatever the sample size). The blocks draw the same indices as one draw of
        # the whole matrix, and a row's mean along the last axis equals np.mean of that row.
        rows = max(1, (1 << 20) // arr.size)
        parts = []
        for start in range(0, n_resamples, rows):
            idx = rng.integers(0, arr.size, size=(min(rows, n_resamples - start), arr.size))
            parts.append(arr[idx].mean(axis=1))
        stats = np.concatenate(parts)
        if stat is clipped_mean:
            stats = np.clip(stats, 0.0, 1.0)
    else:
        idx = rng.integers(0, arr.size, size=(n_resamples, arr.size))
        stats = np.array([stat(arr[row]) for row in idx])
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(np.std(stats)), (float(lo), float(hi))


def clipped_mean(arr: np.ndarray) -> float:
    """HealthBench's aggregate: the mean clipped to [0, 1] (simple-evals healthbench_eval.py)."""
    import numpy as np

    return float(np.clip(np.mean(arr), 0.0, 1.0))


def mean_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float] | None:
    """95% CI of a mean: Wilson for 0/1 data, seeded bootstrap otherwise."""
    if not len(values):
        return None
    if all(v in (0.0, 1.0) for v in values):
        return wilson_ci(int(sum(values)), len(values))
    out = bootstrap(values, seed=seed)
    return out[1] if out else None


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], n_resamples: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Mean of a - b over paired items, with a 95% percentile CI resampling the pairs."""
    if len(a) != len(b) or not len(a):
        raise ValueError("paired_bootstrap needs two equal, non-empty sequences")
    import numpy as np

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(n_resamples, d.size))
    means = d[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), (float(lo), float(hi))


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> tuple[int, int, float]:
    """Exact McNemar test (two-sided binomial on discordant pairs, McNemar 1947).

    Returns (b, c, p) with b = a right & b wrong, c = a wrong & b right.
    """
    b = sum(1 for x, y in zip(a_correct, b_correct) if x and not y)
    c = sum(1 for x, y in zip(a_correct, b_correct) if y and not x)
    n = b + c
    if n == 0:
        return b, c, 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return b, c, min(1.0, 2 * tail)


def cohen_kappa(x: Sequence[object], y: Sequence[object]) -> float | None:
    """Cohen's kappa between two raters' labels on the same items (Cohen 1960)."""
    if len(x) != len(y) or not x:
        return None
    labels = sorted(set(x) | set(y), key=str)
    n = len(x)
    po = sum(1 for a, b in zip(x, y) if a == b) / n
    pe = sum(
        (sum(1 for a in x if a == lab) / n) * (sum(1 for b in y if b == lab) / n) for lab in labels
    )
    if pe == 1.0:
        return 1.0 if po == 1.0 else 0.0
    return (po - pe) / (1 - pe)


def macro_f1(truth: Sequence[object], pred: Sequence[object]) -> float | None:
    """Unweighted mean over labels of per-label F1, treating ``truth`` as the reference."""
    if len(truth) != len(pred) or not truth:
        return None
    f1s = []
    for lab in sorted(set(truth) | set(pred), key=str):
        tp = sum(1 for t, p in zip(truth, pred) if t == lab and p == lab)
        fp = sum(1 for t, p in zip(truth, pred) if t != lab and p == lab)
        fn = sum(1 for t, p in zip(truth, pred) if t == lab and p != lab)
        denom = 2 * tp + fp + fn
        f1s.append(2 * tp / denom if denom else 0.0)
    return sum(f1s) / len(f1s)

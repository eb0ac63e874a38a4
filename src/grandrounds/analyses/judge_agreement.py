"""Agreement figures of a judge and of physicians on HealthBench's meta-evaluation rows, and their
bootstraps, for :mod:`grandrounds.analyses.judge_validation`.

Agreement (``compute_metrics_for_rater_by_class``, ``compute_f1_metric``,
``compute_balanced_metric``, reproduced from their arithmetic): a rater (the judge, or one
physician) is compared with the other raters of the same rows; every (rater label, other label)
pair counts once.

- ``precision_pos`` = share of agreeing pairs among pairs where the rater said met;
  ``precision_neg`` the same where it said unmet;
- ``recall_pos`` = share of agreeing pairs among pairs where the other rater said met;
  ``recall_neg`` the same where the other said unmet;
- ``f1_c`` = 2 p r / (p + r) (0 when both are 0), counted over n_p + n_r - p n_p pairs;
- ``*_balanced`` = (pos + neg) / 2, for precision, recall and F1; ``f1_balanced`` (simple-evals'
  ``pairwise_model_f1_balanced``) is the headline: the macro F1 over met and unmet.

A figure exists only when it has pairs (an F1 only with its precision and recall, a balanced
figure only with both classes), overall and per category, as in the reference. Physicians:
each physician against the other physicians of the rows they labelled (leave one out), over
every selected row.

Bootstrap. The reference's only bootstrap is ``common.aggregate_results`` over per-row metrics
(``num_physician_labels``, ``percent_physician_pos``, ``model_predicted_positive``, each also per
category, and ``score``): mean, n_samples and the std of the mean over 1,000 resamples drawn from
the unseeded ``np.random``; :func:`reference_row_stats` draws them from ``RandomState(seed)``, so
with the same seed both agree. The agreement figures have no interval in the reference; ours
(:func:`judge_interval`) is the 2.5/97.5 percentile of the judge's balanced F1 over 1,000
resamples of conversations (rows sharing a conversation and completion are resampled together,
since their labels are not independent).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from grandrounds.analyses.judge_meta_rows import MetaRow

#: Resamples of the reference's bootstrap (``_compute_stat``) and of ours.
N_RESAMPLES = 1000


Rater = Literal["model", "physician"]


@dataclass(frozen=True)
class Stat:
    """One agreement figure: its value (None: undefined) over ``n`` pairs (a float for F1, as in the reference)."""

    n: float
    value: float | None


@dataclass(frozen=True)
class RaterMetrics:
    """A rater's figures overall and per category: name (``precision_pos``, ``f1_balanced``, ...) -> Stat."""

    overall: Mapping[str, Stat]
    by_category: Mapping[str, Mapping[str, Stat]]


def _f1(p: Stat, r: Stat) -> Stat:
    # compute_f1_metric in healthbench_meta_eval.py: the same operations in the same order, so the
    # floats agree to the last bit; n = TP+FP + TP+FN - TP with TP = precision * n_precision.
    if p.value is None or r.value is None:
        return Stat(p.n + r.n, None)
    tp = p.value * p.n
    if p.value == 0 and r.value == 0:
        return Stat(p.n + r.n - tp, 0.0)
    return Stat(p.n + r.n - tp, 2 * (p.value * r.value) / (p.value + r.value))


def _figures(counts: Mapping[str, list[int]]) -> dict[str, Stat]:
    """Precision and recall per class from (agreeing, total) pair counts, then F1 and balanced figures."""
    out = {name: Stat(n, agree / n) for name, (agree, n) in counts.items() if n}
    for cls in ("pos", "neg"):
        p, r = out.get(f"precision_{cls}"), out.get(f"recall_{cls}")
        if p is not None and r is not None:
            out[f"f1_{cls}"] = _f1(p, r)
    for metric in ("precision", "recall", "f1"):
        pos, neg = out.get(f"{metric}_pos"), out.get(f"{metric}_neg")
        if pos is not None and neg is not None:
            value = None if pos.value is None or neg.value is None else (pos.value + neg.value) / 2
            out[f"{metric}_balanced"] = Stat(pos.n + neg.n, value)
    return out


def rater_metrics(
    selves: Sequence[bool], others: Sequence[Sequence[bool]], categories: Sequence[str]
) -> RaterMetrics:
    """A rater's labels against the other raters' labels of the same rows, overall and per category.

    Each (label, other label) pair adds to the rater's precision for the class the rater chose
    and to its recall for the class the other rater chose, agreeing or not.
    """
    if not len(selves) == len(others) == len(categories):
        raise ValueError("selves, others and categories differ in length")
    overall: dict[str, list[int]] = {}
    per: dict[str, dict[str, list[int]]] = {}
    for mine, theirs, cat in zip(selves, others, categories):
        scopes = (overall, per.setdefault(cat, {}))
        for other in theirs:
            agree = int(mine == other)
            for name in (
                "precision_pos" if mine else "precision_neg",
                "recall_pos" if other else "recall_neg",
            ):
                for scope in scopes:
                    c = scope.setdefault(name, [0, 0])
                    c[0] += agree
                    c[1] += 1
    return RaterMetrics(_figures(overall), {cat: _figures(c) for cat, c in per.items() if c})


def judge_metrics(rows: Sequence[MetaRow], verdicts: Sequence[bool | None]) -> RaterMetrics:
    """The judge against every physician label of the rows it labelled (unknown rows left out)."""
    kept = [(r, v) for r, v in zip(rows, verdicts, strict=True) if v is not None]
    return rater_metrics(
        [v for _, v in kept], [r.labels for r, _ in kept], [r.category for r, _ in kept]
    )


def physician_metrics(rows: Sequence[MetaRow]) -> dict[str, RaterMetrics]:
    """Each physician (first-seen order) against the other physicians of every row they labelled."""
    lists: dict[str, tuple[list[bool], list[tuple[bool, ...]], list[str]]] = {}
    for row in rows:
        for i, (pid, label) in enumerate(zip(row.physicians, row.labels)):
            mine, theirs, cats = lists.setdefault(pid, ([], [], []))
            mine.append(label)
            theirs.append(row.labels[:i] + row.labels[i + 1 :])
            cats.append(row.category)
    return {pid: rater_metrics(*v) for pid, v in lists.items()}


def reference_keys(m: RaterMetrics, rater: Rater) -> dict[str, dict[str, float | None]]:
    """The figures under simple-evals' names: ``pairwise_{rater}_{metric}_{class}`` and
    ``{category}: pairwise_...``, each ``{"n": ..., "value": ...}``."""
    out = {f"pairwise_{rater}_{k}": {"n": s.n, "value": s.value} for k, s in m.overall.items()}
    for cat, figs in m.by_category.items():
        out.update(
            {f"{cat}: pairwise_{rater}_{k}": {"n": s.n, "value": s.value} for k, s in figs.items()}
        )
    return out


def physician_summary(per: Mapping[str, RaterMetrics]) -> dict[str, Any]:
    """Mean and median of each figure over the physicians who have it, overall and per category (ours)."""

    def summarise(figs: Sequence[Mapping[str, Stat]]) -> dict[str, dict[str, float | int]]:
        values: dict[str, list[float]] = {}
        for f in figs:
            for name, s in f.items():
                if s.value is not None:
                    values.setdefault(name, []).append(s.value)
        return {
            k: {"mean": statistics.fmean(v), "median": statistics.median(v), "n_physicians": len(v)}
            for k, v in values.items()
        }

    cats = sorted({c for m in per.values() for c in m.by_category})
    return {
        "n_physicians": len(per),
        "overall": summarise([m.overall for m in per.values()]),
        "by_category": {
            c: summarise([m.by_category[c] for m in per.values() if c in m.by_category])
            for c in cats
        },
    }


# ---- bootstraps ---------------------------------------------------------------------------------


def reference_row_stats(
    rows: Sequence[MetaRow],
    verdicts: Sequence[bool | None],
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, dict[str, float]]:
    """simple-evals' per-row metrics aggregated as ``common.aggregate_results`` does with
    ``("mean", "n_samples", "bootstrap_std")``: names in the order it first sees them (each row's
    metrics, then ``score``), each resampled 1,000 times with replacement.

    ``np.random.choice(values, n)`` draws ``randint(0, n, n)``; drawing those from
    ``RandomState(seed)`` in the same order (in blocks of rows, the same stream) gives the same
    resamples as the reference with ``np.random.seed(seed)``.
    """
    name2values: dict[str, list[float]] = {}
    for row, v in zip(rows, verdicts, strict=True):
        if v is None:
            continue
        k = len(row.labels)
        metrics: dict[str, float] = {
            "num_physician_labels": k,
            "percent_physician_pos": sum(row.labels) / k,
            "model_predicted_positive": v,
        }
        metrics |= {f"{row.category}: {name}": value for name, value in metrics.items()}
        for name, value in metrics.items():
            name2values.setdefault(name, []).append(value)
        name2values.setdefault("score", []).append(v)
    rng = np.random.RandomState(seed)
    out: dict[str, dict[str, float]] = {}
    for name, values in name2values.items():
        arr = np.asarray(values, dtype=float)
        block = max(1, 2_000_000 // arr.size)
        means = []
        for start in range(0, n_resamples, block):
            idx = rng.randint(0, arr.size, size=(min(block, n_resamples - start), arr.size))
            means.append(arr[idx].mean(axis=1))
        out[name] = {
            "mean": float(np.mean(arr)),
            "n_samples": len(values),
            "bootstrap_std": float(np.std(np.concatenate(means))),
        }
    return out


def _pair_counts(row: MetaRow, verdict: bool) -> tuple[int, ...]:
    """A judged row's (agreeing, total) pair counts for precision_pos, precision_neg, recall_pos, recall_neg."""
    k, p = len(row.labels), sum(row.labels)
    if verdict:
        return (p, k, 0, 0, p, p, 0, k - p)
    return (0, 0, k - p, k, 0, p, k - p, k - p)


def _balanced_f1(sums: np.ndarray) -> np.ndarray:
    """Balanced F1 from summed pair counts (last axis: the 8 counts of :func:`_pair_counts`); NaN where undefined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        f1s = []
        for base in (0, 2):  # pos, neg
            p = sums[..., base] / sums[..., base + 1]
            r = sums[..., base + 4] / sums[..., base + 5]
            f1 = np.where((p == 0) & (r == 0), 0.0, 2 * p * r / (p + r))
            f1s.append(f1)
        return (f1s[0] + f1s[1]) / 2


def judge_interval(
    rows: Sequence[MetaRow],
    verdicts: Sequence[bool | None],
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, Any]:
    """95% percentile interval of the judge's balanced F1, overall and per category (ours).

    Conversations (rows with the same messages and completion) are resampled with replacement,
    ``n_resamples`` times from ``default_rng(seed)``; a resample where a figure is undefined is
    left out of that figure's interval.
    """
    judged = [(r, v) for r, v in zip(rows, verdicts, strict=True) if v is not None]
    if not judged:
        return {"overall": None, "by_category": {}}
    cats = sorted({r.category for r, _ in judged})
    cat_index = {c: i for i, c in enumerate(cats)}
    clusters: dict[tuple[Any, ...], int] = {}
    rows_counts = []
    for r, v in judged:
        cid = clusters.setdefault((r.messages, r.completion), len(clusters))
        rows_counts.append((cid, cat_index[r.category], _pair_counts(r, v)))
    counts = np.zeros((len(clusters), 1 + len(cats), 8))
    for cid, ci, c in rows_counts:
        counts[cid, 0] += c
        counts[cid, 1 + ci] += c
    flat = counts.reshape(len(clusters), -1)
    rng = np.random.default_rng(seed)
    n = len(clusters)
    stats = []
    block = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        draws = rng.integers(0, n, size=(size, n))
        weights = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)
        stats.append(_balanced_f1((weights @ flat).reshape(size, 1 + len(cats), 8)))
    f1 = np.concatenate(stats)  # (n_resamples, 1 + categories)

    def interval(col: np.ndarray) -> list[float] | None:
        ok = col[~np.isnan(col)]
        return [float(x) for x in np.percentile(ok, [2.5, 97.5])] if ok.size else None

    return {
        "overall": interval(f1[:, 0]),
        "by_category": {c: interval(f1[:, 1 + i]) for i, c in enumerate(cats)},
        "n_conversations": n,
        "n_resamples": n_resamples,
    }

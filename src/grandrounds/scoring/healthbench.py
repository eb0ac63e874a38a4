"""HealthBench arithmetic, as in openai/simple-evals healthbench_eval.py @ ee3b031.

Reference rules:

- example score = sum of points of met items / sum of positive points (negatives subtract;
  NOT clipped per example); ``None`` when there are no positive points;
- rubric-tag score (axis:, level:, cluster:) = the same over the items carrying that tag,
  skipped when that subset has no positive points;
- example-tag score (theme:, physician_agreed_category:) = the example's overall score;
- every metric m = clip(mean over the examples having m, 0, 1), with the std of that clipped
  mean over 1000 bootstrap resamples (here seeded, the reference is unseeded);
  :func:`reference_aggregate` draws the resamples exactly as ``_compute_clipped_stats`` does.

Our tri-state rule (a documented choice, not in the reference, which re-asks until it gets a
boolean): criteria whose verdict is ``unknown`` are left out of both numerator and denominator,
i.e. score = sum of points of KNOWN met items / sum of positive points of KNOWN items. With every
verdict known this is exactly the reference. Coverage (known / total) is reported beside it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from grandrounds.core.records import Criterion, Verdict
from grandrounds.scoring.stats import bootstrap, clipped_mean

EXAMPLE_TAG_PREFIXES = ("theme:", "physician_agreed_category:")


def rubric_score(points: Sequence[float], met: Sequence[bool]) -> float | None:
    """Achieved / possible points (simple-evals ``calculate_score``); None if nothing is positive."""
    if len(points) != len(met):
        raise ValueError("points and met differ in length")
    possible = sum(p for p in points if p > 0)
    if possible == 0:
        return None
    return sum(p for p, m in zip(points, met) if m) / possible


def reference_rubric_score(rubric: Sequence[Criterion], status: Mapping[str, str]) -> float | None:
    """:func:`rubric_score` when every criterion has a met/unmet ``status``; None otherwise.

    The official score needs every verdict (simple-evals re-asks until it has one).
    """
    if any(status.get(c.id) not in ("met", "unmet") for c in rubric):
        return None
    return rubric_score([c.points for c in rubric], [status[c.id] == "met" for c in rubric])


def known_rubric_score(rubric: Sequence[Criterion], status: Mapping[str, str]) -> float | None:
    """:func:`rubric_score` over the criteria whose ``status`` (criterion id -> verdict) is known."""
    known = [c for c in rubric if status.get(c.id) in ("met", "unmet")]
    return rubric_score([c.points for c in known], [status[c.id] == "met" for c in known])


def reference_example_metrics(
    rubric: Sequence[Criterion], met: Sequence[bool], example_tags: Sequence[str]
) -> dict[str, float]:
    """The per-example metrics simple-evals computes when every verdict is known.

    Keys: ``overall_score``, each example tag (= overall score) and each rubric tag whose items
    include a positive one.
    """
    overall = rubric_score([c.points for c in rubric], met)
    if overall is None:
        raise ValueError("rubric has no positive points")
    metrics: dict[str, float] = {"overall_score": overall}
    metrics.update(dict.fromkeys(example_tags, overall))
    by_tag: dict[str, list[int]] = defaultdict(list)
    for i, crit in enumerate(rubric):
        for tag in crit.tags:
            by_tag[tag].append(i)
    for tag, idx in by_tag.items():
        score = rubric_score([rubric[i].points for i in idx], [met[i] for i in idx])
        if score is not None:
            metrics[tag] = score
    return metrics


@dataclass(frozen=True)
class KnownScore:
    """One example scored over its known verdicts: overall, per-tag metrics and coverage."""

    overall: float | None
    metrics: Mapping[str, float]
    known: int
    total: int

    @property
    def coverage(self) -> float:
        return self.known / self.total if self.total else 0.0


def known_example_metrics(
    rubric: Sequence[Criterion], verdicts: Sequence[Verdict], example_tags: Sequence[str] = ()
) -> KnownScore:
    """Reference metrics over the criteria with a known (met/unmet) verdict only.

    ``overall`` is None when no known criterion has positive points (the example is then
    unscored); ``metrics`` is empty in that case.
    """
    status = {v.criterion_id: v.status for v in verdicts}
    known = [c for c in rubric if status.get(c.id) in ("met", "unmet")]
    met = [status[c.id] == "met" for c in known]
    overall = rubric_score([c.points for c in known], met)
    if overall is None:
        return KnownScore(None, {}, len(known), len(rubric))
    return KnownScore(
        overall, reference_example_metrics(known, met, example_tags), len(known), len(rubric)
    )


@dataclass(frozen=True)
class ClippedStat:
    """A HealthBench metric: clipped mean, bootstrap std and 95% percentile interval, n."""

    score: float
    std: float
    ci95: tuple[float, float]
    n: int


def clipped_stat(
    values: Sequence[float], seed: int = 0, n_resamples: int = 1000
) -> ClippedStat | None:
    """clip(mean, 0, 1) with a seeded bootstrap (simple-evals ``_compute_clipped_stats``)."""
    if not len(values):
        return None
    boot = bootstrap(values, stat=clipped_mean, n_resamples=n_resamples, seed=seed)
    assert boot is not None
    std, ci = boot
    return ClippedStat(clipped_mean(np.asarray(values, dtype=float)), std, ci, len(values))


def aggregate_metrics(
    per_example: Sequence[Mapping[str, float]], seed: int = 0
) -> dict[str, ClippedStat]:
    """Every metric name seen in any example -> its clipped statistic over the examples having it."""
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_example:
        for name, value in metrics.items():
            values[name].append(value)
    out = {}
    for name, vals in values.items():
        stat = clipped_stat(vals, seed=seed)
        assert stat is not None
        out[name] = stat
    return out


def reference_aggregate(
    per_example: Sequence[Mapping[str, float]], seed: int = 0, n_resamples: int = 1000
) -> dict[str, ClippedStat]:
    """Every metric as simple-evals' ``_aggregate_get_clipped_mean`` computes it, plus ``score``.

    Metrics are collected in the official order (each example's metrics, then its overall score
    under ``score``); per metric, in that order: clip(mean, 0, 1), n, and the std of clip(mean) over
    ``n_resamples`` resamples drawn like ``np.random.choice(values, len(values))`` from a
    ``RandomState(seed)`` (the official draws from the unseeded global state: seeded alike, both
    give the same numbers). ``ci95`` is the 2.5/97.5 percentile of the same resampled means.
    """
    values: dict[str, list[float]] = defaultdict(list)
    for metrics in per_example:
        for name, value in metrics.items():
            values[name].append(value)
        values["score"].append(metrics["overall_score"])
    rng = np.random.RandomState(seed)
    out: dict[str, ClippedStat] = {}
    for name, vals in values.items():
        arr = np.asarray(vals, dtype=float)
        # RandomState.choice(a, n) with replacement draws randint(0, len(a), n): one draw of shape
        # (n_resamples, n) is the same stream as n_resamples draws in a row, row means as np.mean.
        means = np.clip(
            arr[rng.randint(0, arr.size, size=(n_resamples, arr.size))].mean(axis=1), 0, 1
        )
        lo, hi = np.percentile(means, [2.5, 97.5])
        out[name] = ClippedStat(
            float(np.clip(np.mean(vals), 0, 1)),
            float(np.std(means)),
            (float(lo), float(hi)),
            len(vals),
        )
    return out


def length_adjusted(
    score: float, response_text: str, center: float, penalty_per_500_chars: float
) -> float:
    """``calculate_length_adjusted_score`` (healthbench_eval.py @ 0f3b62d): the score moved by
    ``penalty`` per 500 characters the response is longer (or shorter) than ``center``; not clipped."""
    return score - penalty_per_500_chars * ((len(response_text) - center) / 500.0)

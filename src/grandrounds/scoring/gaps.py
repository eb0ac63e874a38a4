"""GAPS arithmetic (AQ-MedAI/MedicalAiBenchEval @ 85e91cf), pure.

- Points per level (config.yaml ``point``): A1=5, A2=3, A3=1, S1..S4=-1..-4. ``A4`` and any
  missing/unknown level score 0 and are left out of the maximum, as the reference does; they
  stay visible as criteria with 0 points (tag ``level:A4``).
- Vote (judge_engine.vote): drop unknowns; fewer than ``min_valid`` valid -> review_needed;
  else the most common label if it has >= 2 votes, else review_needed.
- Question score = max(0, earned - irrelevant penalty) / max positive points, 4 dp.
  Reference: review_needed counts as not met, and a question without positive points scores 0
  (calculate_scores). Ours: review_needed is unknown and excluded (from earned and, for positive
  items, from the maximum), coverage reported beside it; nothing to score is None.
- Irrelevant passages: severities S1..S4 from several graders combined by a strategy.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

LEVEL_POINTS: dict[str, int] = {"A1": 5, "A2": 3, "A3": 1, "S1": -1, "S2": -2, "S3": -3, "S4": -4}
MET: Final = "met"
UNMET: Final = "unmet"
UNKNOWN: Final = "unknown"
REVIEW: Final = "review_needed"
Strategy = Literal["conservative", "majority", "average"]
STRATEGIES: tuple[str, ...] = ("conservative", "majority", "average")


def level_points(level: str | None) -> int:
    """Points of a rubric level; A4, missing or unknown levels are worth 0 (reference behaviour)."""
    return LEVEL_POINTS.get((level or "").strip().upper(), 0)


def vote(labels: Sequence[str], min_valid: int = 2) -> str:
    """Panel decision for one criterion: ``met``, ``unmet`` or ``review_needed``.

    judge_engine.vote: unknowns dropped; < min_valid valid votes -> review_needed; the most
    common label wins only with >= 2 votes. A tie between labels (possible with 4+ judges) is
    review_needed here; the reference picks one by set iteration order, i.e. arbitrarily.
    ``min_valid=1`` (our extension, for a single judge) lets one vote decide.
    """
    valid = [lab for lab in labels if lab in (MET, UNMET)]
    if len(valid) < min_valid:
        return REVIEW
    counts = Counter(valid).most_common()
    top, n = counts[0]
    if n < min(2, min_valid) or (len(counts) > 1 and counts[1][1] == n):
        return REVIEW
    return top


@dataclass(frozen=True, kw_only=True)
class QuestionScore:
    """Both conventions for one answer, plus what they are made of."""

    reference: float
    ours: float | None
    max_points: float
    known_max_points: float
    earned_reference: float
    earned_ours: float
    coverage: float | None
    n_review_needed: int
    penalty: float


def score_question(items: Sequence[tuple[float, str]], penalty: float = 0.0) -> QuestionScore:
    """Score one answer from (points, decision) pairs, decision met/unmet/review_needed.

    clinical_scoring_calculator (reference): normalized = max(0, total) / max_possible, where
    total = sum of points of met items - irrelevant-content deduction; 4 decimals.
    """
    max_points = sum(p for p, _ in items if p > 0)
    earned_ref = sum(p for p, d in items if d == MET)
    known = [(p, d) for p, d in items if d != REVIEW]
    known_max = sum(p for p, _ in known if p > 0)
    earned_ours = sum(p for p, d in known if d == MET)
    scoring = [p for p, _ in items if p != 0]
    coverage = (
        sum(1 for p, d in items if p != 0 and d != REVIEW) / len(scoring) if scoring else None
    )
    return QuestionScore(
        # calculate_scores: normalized = max(final_total_score, 0) / max_possible if max_possible > 0 else 0
        reference=_normalize(earned_ref - penalty, max_points) or 0.0,
        ours=_normalize(earned_ours - penalty, known_max),
        max_points=max_points,
        known_max_points=known_max,
        earned_reference=earned_ref,
        earned_ours=earned_ours,
        coverage=coverage,
        n_review_needed=sum(1 for _, d in items if d == REVIEW),
        penalty=penalty,
    )


def _normalize(earned: float, max_points: float) -> float | None:
    if max_points <= 0:
        return None
    return round(max(0.0, earned) / max_points, 4)


def combine_severity(levels: Sequence[int | None], strategy: str = "conservative") -> int:
    """One severity 1..4 for an irrelevant passage from several graders' S-levels.

    The official ``--voting-strategy``: unparseable grades count as S1;
    conservative = any S4 -> S4, else the mode, ties -> the more severe; majority = the mode,
    ties -> the upper median of all grades; average = round(mean) clamped to [1, 4] (Python
    round, half to even, as the reference's round()).
    """
    vals = [min(4, max(1, int(v))) if v is not None else 1 for v in levels]
    if not vals:
        raise ValueError("combine_severity needs at least one grade")
    if strategy == "average":
        return min(4, max(1, round(sum(vals) / len(vals))))
    counts = Counter(vals)
    best = max(counts.values())
    modes = sorted(v for v, c in counts.items() if c == best)
    if strategy == "conservative":
        return 4 if 4 in vals else modes[-1]
    if strategy == "majority":
        return modes[0] if len(modes) == 1 else int(statistics.median_high(vals))
    raise ValueError(f"unknown voting strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def irrelevant_penalty(severities: Sequence[int]) -> float:
    """Deduction for irrelevant passages: |points| of each passage's S-level (S1=1 .. S4=4)."""
    return float(sum(abs(LEVEL_POINTS[f"S{s}"]) for s in severities))

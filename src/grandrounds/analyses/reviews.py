"""Clinician reviews: stored beside the judge's verdicts, never over them, and the review queue.

A review is a reviewer's own verdict on one criterion (met/unmet) or their own score on a
whole answer, with a name, a reason and a time stamp, appended to the store's reviews.
The judge's grade is never modified; "with reviews" figures are computed on the side, and how
criterion reviews change a value is the grader's rule (``Grader.rescore``), not this module's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from grandrounds.analyses.leaderboard import AgreementPair
from grandrounds.analyses.review_scales import check_score, review_scale
from grandrounds.core.records import Grade, Sample
from grandrounds.store import QueueEntry, QueueRow, ReviewInput, ReviewRow, Store

if TYPE_CHECKING:
    from grandrounds.graders import Grader

__all__ = [
    "REVIEW_VERDICTS",
    "ReviewError",
    "ReviewInput",
    "add_review",
    "agreement_pairs",
    "fill_queue",
    "latest",
    "queue",
    "queue_reasons",
    "reviewed_value",
    "reviewed_values",
    "reviews_for",
]

REVIEW_VERDICTS = ("met", "unmet")


class ReviewError(ValueError):
    """A review that cannot be stored (missing name, unknown criterion, bad score...)."""


def add_review(store: Store, r: ReviewInput) -> int:
    """Validate and append one review; returns its id. Raises ReviewError on bad input.

    A whole-answer score must be finite and on the benchmark's scale
    (:mod:`grandrounds.analyses.review_scales`): the one check, for reviews from the viewer and the API alike.
    """
    reviewer, reason = r.reviewer.strip(), r.reason.strip()
    if not reviewer:
        raise ReviewError("a review needs the reviewer's name")
    if not reason:
        raise ReviewError("a review needs a reason")
    grade = store.grade(r.run_id, r.grader_fp, r.sample_id)
    if grade is None:
        raise ReviewError(
            f"no grade for run {r.run_id!r}, grader {r.grader_fp[:12]!r}, sample {r.sample_id!r}"
        )
    if r.criterion_id:
        if r.verdict not in REVIEW_VERDICTS or r.score is not None:
            raise ReviewError("a criterion review needs verdict 'met' or 'unmet' (and no score)")
        if r.criterion_id not in {v.criterion_id for v in grade.verdicts}:
            raise ReviewError(f"answer has no criterion {r.criterion_id!r}")
    elif r.verdict is not None or r.score is None:
        raise ReviewError("an answer review needs a finite score (and no verdict)")
    else:
        why = check_score(r.score, review_scale(store, r))  # the benchmark's own scale
        if why:
            raise ReviewError(why)
    return store.put_review(replace(r, reviewer=reviewer, reason=reason))


def reviews_for(
    store: Store, run_id: str | None = None, sample_id: str | None = None
) -> list[ReviewRow]:
    """Reviews (oldest first), optionally for one run and/or sample."""
    return store.reviews(run_id=run_id, sample_id=sample_id)


def latest(reviews: Iterable[ReviewRow]) -> dict[tuple[str, str, str, str], ReviewRow]:
    """The newest review per (run, grader, sample, criterion): what "with reviews" uses."""
    out: dict[tuple[str, str, str, str], ReviewRow] = {}
    for r in sorted(reviews, key=lambda r: r["id"]):
        out[(r["run_id"], r["grader_fp"], r["sample_id"], r["criterion_id"])] = r
    return out


def reviewed_value(
    store: Store,
    grader_fp: str,
    sample: Sample | None,
    grade: Grade | None,
    reviews: Sequence[ReviewRow],
    graders: dict[str, Grader | None] | None = None,
) -> float | None:
    """One answer's value with the newest of its ``reviews`` applied.

    A whole-answer score review replaces the value. Criterion reviews replace the judge's
    verdicts and the grader that made the grade rescores the answer (graders without
    per-criterion arithmetic keep the judge's value). ``graders`` caches rebuilt graders by
    fingerprint across calls.
    """
    if grade is None:
        return None
    newest = {r["criterion_id"]: r for r in sorted(reviews, key=lambda r: r["id"])}
    score = newest[""]["score"] if "" in newest else None
    if score is not None:
        return float(score)
    if not newest or sample is None:
        return grade.value
    grader = _grader(store, grader_fp, graders if graders is not None else {})
    if grader is None:
        return grade.value
    statuses = {v.criterion_id: v.status for v in grade.verdicts} | {
        c: str(r["verdict"]) for c, r in newest.items()
    }
    return grader.rescore(
        sample, grade, {c: s for c, s in statuses.items() if s in REVIEW_VERDICTS}
    )


def _grader(store: Store, grader_fp: str, cache: dict[str, Grader | None]) -> Grader | None:
    """The grader behind a fingerprint, rebuilt from its stored spec (None when none is stored)."""
    if grader_fp not in cache:
        from grandrounds.graders import grader_from_fingerprint

        spec = store.grader_spec(grader_fp)
        cache[grader_fp] = grader_from_fingerprint(spec) if spec is not None else None
    return cache[grader_fp]


def reviewed_values(
    store: Store, run_id: str, grader_fp: str, benchmark: str, dataset: str
) -> dict[str, float | None]:
    """Per-answer values of a (run, grader) with the newest reviews applied (see
    :func:`reviewed_value`); the judge-only values in the store are untouched."""
    vals = store.grade_values(run_id, grader_fp)
    by_sample: dict[str, list[ReviewRow]] = {}
    for r in store.reviews(run_id=run_id, grader_fp=grader_fp):
        by_sample.setdefault(r["sample_id"], []).append(r)
    graders: dict[str, Grader | None] = {}
    for sid, revs in by_sample.items():
        grade = store.grade(run_id, grader_fp, sid)
        if grade is not None:
            vals[sid] = reviewed_value(
                store, grader_fp, store.sample(benchmark, dataset, sid), grade, revs, graders
            )
    return vals


def agreement_pairs(store: Store) -> list[AgreementPair]:
    """(judge verdict, newest reviewer verdict) for every reviewed criterion, with its dimensions."""
    pairs = []
    runs = {r.id: r for r in store.runs()}
    newest = latest(r for r in store.reviews() if r["criterion_id"])
    for (run_id, fp, sid, cid), r in newest.items():
        grade, run = store.grade(run_id, fp, sid), runs.get(run_id)
        if grade is None or run is None:
            continue
        judge = next((v.status for v in grade.verdicts if v.criterion_id == cid), "unknown")
        sample = store.sample(run.benchmark, run.dataset_sha256, sid)
        crit = next((c for c in sample.rubric if c.id == cid), None) if sample else None
        pairs.append(
            AgreementPair(run.benchmark, crit.tags if crit else (), judge, str(r["verdict"]))
        )
    return pairs


def _draw(seed: int, *parts: str) -> float:
    """A uniform number in [0, 1) fixed by the seed and the item, independent of scan order."""
    h = hashlib.sha256(":".join([str(seed), *parts]).encode("utf-8")).hexdigest()
    return int(h[:12], 16) / float(1 << 48)


def queue_reasons(
    grade: Grade, share: float, seed: int, run_id: str, fp: str
) -> list[tuple[str, str]]:
    """(criterion id, reason) to queue from one grade: unknown, panel disagreement, random share."""
    out = []
    for v in grade.verdicts:
        known_votes = {x for x in v.statuses if x != "unknown"}
        if v.status == "unknown":
            out.append((v.criterion_id, "unknown verdict"))
        elif len(known_votes) > 1:
            out.append((v.criterion_id, "judges disagree"))
        elif _draw(seed, run_id, fp, grade.sample_id, v.criterion_id) < share:
            out.append((v.criterion_id, f"random {share:g}"))
    if (
        not grade.verdicts
        and grade.value is not None
        and _draw(seed, run_id, fp, grade.sample_id, "") < share
    ):
        out.append(("", f"random {share:g}"))
    return out


def fill_queue(store: Store, share: float = 0.05, seed: int = 0) -> dict[str, int]:
    """Queue unknown verdicts, judge-panel disagreements and a seeded share of the rest.

    Re-running adds nothing already queued. Returns the count added per reason.
    """
    if not 0.0 <= share <= 1.0:
        raise ReviewError("share must be between 0 and 1")
    entries = [
        QueueEntry(g.run_id, g.grader_fp, g.grade.sample_id, cid, reason, seed)
        for g in store.iter_grades()
        for cid, reason in queue_reasons(g.grade, share, seed, g.run_id, g.grader_fp)
    ]
    added: dict[str, int] = {}
    for e in store.enqueue_reviews(entries):
        key = "random share" if e.reason.startswith("random") else e.reason
        added[key] = added.get(key, 0) + 1
    return added


def queue(store: Store, limit: int = 100) -> list[QueueRow]:
    """Queued items not yet reviewed, oldest first."""
    return store.unreviewed_queue(limit)

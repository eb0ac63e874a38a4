"""Clinician reviews: stored beside the judge's verdicts, never over them, and the review queue.

A review is a reviewer's own verdict on one criterion (met/unmet) or their own score on a
whole answer, with a name, a reason and a time stamp, appended to the ``reviews`` table.
The judge's grade is never modified; "with reviews" figures are computed on the side.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from grandrounds.analysis import AgreementPair
from grandrounds.records import Grade, grade_from_json, sample_from_json
from grandrounds.scoring.healthbench import rubric_score
from grandrounds.store import Store, now

REVIEW_VERDICTS = ("met", "unmet")


class ReviewError(ValueError):
    """A review that cannot be stored (missing name, unknown criterion, bad score...)."""


@dataclass(frozen=True)
class ReviewInput:
    run_id: str
    grader_fp: str
    sample_id: str
    reviewer: str
    reason: str
    criterion_id: str = ""
    verdict: str | None = None
    score: float | None = None


def _grade(store: Store, run_id: str, grader_fp: str, sample_id: str) -> Grade | None:
    row = store.db.execute(
        "SELECT grade_json FROM grades WHERE run_id = ? AND grader_fp = ? AND sample_id = ?", (run_id, grader_fp, sample_id)
    ).fetchone()
    return grade_from_json(json.loads(row[0])) if row else None


def add_review(store: Store, r: ReviewInput) -> int:
    """Validate and append one review; returns its id. Raises ReviewError on bad input."""
    reviewer, reason = r.reviewer.strip(), r.reason.strip()
    if not reviewer:
        raise ReviewError("a review needs the reviewer's name")
    if not reason:
        raise ReviewError("a review needs a reason")
    grade = _grade(store, r.run_id, r.grader_fp, r.sample_id)
    if grade is None:
        raise ReviewError(f"no grade for run {r.run_id!r}, grader {r.grader_fp[:12]!r}, sample {r.sample_id!r}")
    if r.criterion_id:
        if r.verdict not in REVIEW_VERDICTS or r.score is not None:
            raise ReviewError("a criterion review needs verdict 'met' or 'unmet' (and no score)")
        if r.criterion_id not in {v.criterion_id for v in grade.verdicts}:
            raise ReviewError(f"answer has no criterion {r.criterion_id!r}")
    else:
        if r.verdict is not None or r.score is None or not math.isfinite(r.score):
            raise ReviewError("an answer review needs a finite score (and no verdict)")
    cur = store.db.execute(
        "INSERT INTO reviews (run_id, grader_fp, sample_id, criterion_id, reviewer, verdict, score, reason, created_at) "
        "VALUES (?,?,?,?,?,?,?,?,?)",
        (r.run_id, r.grader_fp, r.sample_id, r.criterion_id, reviewer, r.verdict, r.score, reason, now()),
    )
    return int(cur.lastrowid or 0)


def reviews_for(store: Store, run_id: str | None = None, sample_id: str | None = None) -> list[dict[str, Any]]:
    """Reviews (oldest first), optionally for one run and/or sample."""
    q, args = "SELECT * FROM reviews WHERE 1=1", []
    if run_id:
        q, args = q + " AND run_id = ?", args + [run_id]
    if sample_id:
        q, args = q + " AND sample_id = ?", args + [sample_id]
    return [dict(r) for r in store.db.execute(q + " ORDER BY id", args)]


def latest(reviews: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """The newest review per (run, grader, sample, criterion): what "with reviews" uses."""
    out: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for r in sorted(reviews, key=lambda r: r["id"]):
        out[(r["run_id"], r["grader_fp"], r["sample_id"], r["criterion_id"])] = r
    return out


def reviewed_values(store: Store, run_id: str, grader_fp: str, benchmark: str, dataset: str) -> dict[str, float | None]:
    """Per-answer values with the newest reviews applied; the judge-only values are untouched.

    An answer score review replaces the value. Criterion reviews change the value only where
    the arithmetic is the plain rubric ratio (HealthBench: simple-evals ``calculate_score``,
    met positive points over possible positive points, over criteria with a known verdict).
    """
    vals: dict[str, float | None] = {
        r[0]: r[1] for r in store.db.execute("SELECT sample_id, value FROM grades WHERE run_id = ? AND grader_fp = ?", (run_id, grader_fp))
    }
    newest = latest([r for r in reviews_for(store, run_id) if r["grader_fp"] == grader_fp])
    by_sample: dict[str, dict[str, dict[str, Any]]] = {}
    for (_, _, sid, cid), r in newest.items():
        by_sample.setdefault(sid, {})[cid] = r
    for sid, revs in by_sample.items():
        if "" in revs:
            vals[sid] = float(revs[""]["score"])
        elif benchmark.startswith("healthbench"):
            vals[sid] = _rescored(store, run_id, grader_fp, benchmark, dataset, sid, revs, vals.get(sid))
    return vals


def _rescored(store: Store, run_id: str, fp: str, bench: str, dataset: str, sid: str, revs: dict[str, dict[str, Any]], old: float | None) -> float | None:
    grade = _grade(store, run_id, fp, sid)
    row = store.db.execute("SELECT sample_json FROM samples WHERE benchmark = ? AND dataset_sha256 = ? AND sample_id = ?", (bench, dataset, sid)).fetchone()
    if grade is None or row is None:
        return old
    status = {v.criterion_id: v.status for v in grade.verdicts} | {cid: r["verdict"] for cid, r in revs.items()}
    rubric = [c for c in sample_from_json(json.loads(row[0])).rubric if status.get(c.id) in REVIEW_VERDICTS]
    return rubric_score([c.points for c in rubric], [status[c.id] == "met" for c in rubric])


def agreement_pairs(store: Store) -> list[AgreementPair]:
    """(judge verdict, newest reviewer verdict) for every reviewed criterion, with its dimensions."""
    pairs = []
    runs = {r.id: r for r in store.runs()}
    newest = latest([r for r in reviews_for(store) if r["criterion_id"]])
    for (run_id, fp, sid, cid), r in newest.items():
        grade, run = _grade(store, run_id, fp, sid), runs.get(run_id)
        if grade is None or run is None:
            continue
        judge = next((v.status for v in grade.verdicts if v.criterion_id == cid), "unknown")
        row = store.db.execute(
            "SELECT sample_json FROM samples WHERE benchmark = ? AND dataset_sha256 = ? AND sample_id = ?", (run.benchmark, run.dataset_sha256, sid)
        ).fetchone()
        tags: tuple[str, ...] = ()
        if row:
            crit = next((c for c in sample_from_json(json.loads(row[0])).rubric if c.id == cid), None)
            tags = crit.tags if crit else ()
        pairs.append(AgreementPair(run.benchmark, tags, judge, r["verdict"]))
    return pairs


def _draw(seed: int, *parts: str) -> float:
    """A uniform number in [0, 1) fixed by the seed and the item, independent of scan order."""
    h = hashlib.sha256(":".join([str(seed), *parts]).encode("utf-8")).hexdigest()
    return int(h[:12], 16) / float(1 << 48)


def queue_reasons(grade: Grade, share: float, seed: int, run_id: str, fp: str) -> list[tuple[str, str]]:
    """(criterion id, reason) to queue from one grade: unknown, panel disagreement, random share."""
    out = []
    for v in grade.verdicts:
        known_votes = {x for x in v.votes if x != "unknown"}
        if v.status == "unknown":
            out.append((v.criterion_id, "unknown verdict"))
        elif len(known_votes) > 1:
            out.append((v.criterion_id, "judges disagree"))
        elif _draw(seed, run_id, fp, grade.sample_id, v.criterion_id) < share:
            out.append((v.criterion_id, f"random {share:g}"))
    if not grade.verdicts and grade.value is not None and _draw(seed, run_id, fp, grade.sample_id, "") < share:
        out.append(("", f"random {share:g}"))
    return out


def fill_queue(store: Store, share: float = 0.05, seed: int = 0) -> dict[str, int]:
    """Queue unknown verdicts, judge-panel disagreements and a seeded share of the rest.

    Re-running adds nothing already queued. Returns the count added per reason.
    """
    if not 0.0 <= share <= 1.0:
        raise ReviewError("share must be between 0 and 1")
    added: dict[str, int] = {}
    store.db.execute("BEGIN IMMEDIATE")
    try:
        for run_id, fp, gj in store.db.execute("SELECT run_id, grader_fp, grade_json FROM grades").fetchall():
            grade = grade_from_json(json.loads(gj))
            for cid, reason in queue_reasons(grade, share, seed, run_id, fp):
                cur = store.db.execute(
                    "INSERT OR IGNORE INTO review_queue (run_id, grader_fp, sample_id, criterion_id, reason, seed, created_at) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (run_id, fp, grade.sample_id, cid, reason, seed, now()),
                )
                if cur.rowcount:
                    key = "random share" if reason.startswith("random") else reason
                    added[key] = added.get(key, 0) + 1
        store.db.execute("COMMIT")
    except Exception:
        store.db.execute("ROLLBACK")
        raise
    return added


def queue(store: Store, limit: int = 100) -> list[dict[str, Any]]:
    """Queued items not yet reviewed, oldest first."""
    q = (
        "SELECT q.* FROM review_queue q WHERE NOT EXISTS (SELECT 1 FROM reviews r WHERE r.run_id = q.run_id AND "
        "r.grader_fp = q.grader_fp AND r.sample_id = q.sample_id AND r.criterion_id = q.criterion_id) ORDER BY q.id LIMIT ?"
    )
    return [dict(r) for r in store.db.execute(q, (limit,))]

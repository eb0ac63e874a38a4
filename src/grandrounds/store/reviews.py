"""The store's tables of clinician review: reviews (append-only) and the review queue.

Validation (who may say what about which criterion) is :mod:`grandrounds.analyses.reviews`' job; this
module only stores and reads rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from grandrounds.store.connection import StoreBase, now
from grandrounds.store.rows import QueueEntry, QueueRow, ReviewInput, ReviewRow

_UNREVIEWED = (
    "NOT EXISTS (SELECT 1 FROM reviews r WHERE r.run_id = q.run_id AND r.grader_fp = q.grader_fp "
    "AND r.sample_id = q.sample_id AND r.criterion_id = q.criterion_id)"
)


class ReviewTables(StoreBase):
    """Reads and writes of ``reviews`` and ``review_queue``."""

    def put_review(self, review: ReviewInput) -> int:
        """Append one review as given (time-stamped now); returns its id."""
        r = review
        cur = self.db.execute(
            "INSERT INTO reviews (run_id, grader_fp, sample_id, criterion_id, reviewer, verdict, score, reason, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (
                r.run_id,
                r.grader_fp,
                r.sample_id,
                r.criterion_id,
                r.reviewer,
                r.verdict,
                r.score,
                r.reason,
                now(),
            ),
        )
        return int(cur.lastrowid or 0)

    def reviews(
        self, run_id: str | None = None, grader_fp: str | None = None, sample_id: str | None = None
    ) -> list[ReviewRow]:
        """Reviews oldest first, narrowed to a run, a grader and/or a sample when given."""
        filters = {"run_id": run_id, "grader_fp": grader_fp, "sample_id": sample_id}
        used = {k: v for k, v in filters.items() if v}
        where = " AND ".join(f"{k} = ?" for k in used) or "1=1"
        rows = self.db.execute(
            f"SELECT * FROM reviews WHERE {where} ORDER BY id", tuple(used.values())
        )
        return [cast(ReviewRow, dict(r)) for r in rows]

    def review_counts(self) -> dict[str, int]:
        """run id -> number of reviews of its answers (runs without reviews are left out)."""
        return dict(self.db.execute("SELECT run_id, COUNT(*) FROM reviews GROUP BY run_id"))

    def enqueue_reviews(self, entries: Iterable[QueueEntry]) -> list[QueueEntry]:
        """Queue entries for review in one transaction; returns those that were new (an item
        already queued for the same answer and criterion is kept, whatever its reason)."""
        added = []
        with self._atomic():
            for e in entries:
                cur = self.db.execute(
                    "INSERT OR IGNORE INTO review_queue (run_id, grader_fp, sample_id, criterion_id, reason, seed, created_at) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (*e, now()),
                )
                if cur.rowcount:
                    added.append(e)
        return added

    def unreviewed_queue(self, limit: int = 100) -> list[QueueRow]:
        """Queued items nobody has reviewed yet (no review of that answer and criterion), oldest first."""
        rows = self.db.execute(
            f"SELECT q.* FROM review_queue q WHERE {_UNREVIEWED} ORDER BY q.id LIMIT ?", (limit,)
        )
        return [cast(QueueRow, dict(r)) for r in rows]

    def queued_answers(self) -> set[tuple[str, str, str]]:
        """(run id, grader fingerprint, sample id) of every answer with something queued, reviewed or not."""
        return {
            (r, fp, s)
            for r, fp, s in self.db.execute(
                "SELECT DISTINCT run_id, grader_fp, sample_id FROM review_queue"
            )
        }

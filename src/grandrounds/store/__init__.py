"""The SQLite store: cache of every call, and every stage of every run.

Each write is its own short transaction (WAL journal), so a run killed at any moment leaves
the store consistent and re-running the same command finishes only what is missing. A
successful call is never overwritten by a later failure; a failure is replaced by success.

The store owns its SQL: every read and write of its tables is a :class:`Store` method, split
by table family over ``runs`` (calls, runs, samples, answers), ``grades`` (graders, grades,
results) and ``reviews`` (reviews, review queue). Open it with ``with Store(path) as st:``.
"""

from __future__ import annotations

import json

from grandrounds.store.agreement import AgreementRecord, AgreementTables
from grandrounds.store.batches import BatchTables
from grandrounds.store.connection import now
from grandrounds.store.episodes import EpisodeTables
from grandrounds.store.grades import GradeTables
from grandrounds.store.images import ImageStore
from grandrounds.store.leases import LeaseTables
from grandrounds.store.reviews import ReviewTables
from grandrounds.store.rows import (
    AnswerText,
    QueueEntry,
    QueueRow,
    ReviewInput,
    ReviewRow,
    RunRecord,
    RunState,
    StoredGrade,
    StoredSample,
    VerdictCounts,
)
from grandrounds.store.runs import RunTables
from grandrounds.store.shards import ShardTables

__all__ = [
    "AgreementRecord",
    "AnswerText",
    "QueueEntry",
    "QueueRow",
    "ReviewInput",
    "ReviewRow",
    "RunRecord",
    "RunState",
    "Store",
    "StoredGrade",
    "StoredSample",
    "VerdictCounts",
    "now",
]


class Store(
    LeaseTables,
    RunTables,
    GradeTables,
    ReviewTables,
    AgreementTables,
    BatchTables,
    EpisodeTables,
    ShardTables,
):
    """A handle on one store file. Pass it explicitly; there is no global store."""

    def image_store(self) -> ImageStore:
        """Where the images the store's runs sent are kept (a folder beside the store file)."""
        return ImageStore.beside(self.path)

    def change_stamp(self) -> str:
        """A value that changes whenever samples, answers, grades, results or the review queue
        change, so readers that derive data from the store (the viewer's index) know to redo it."""
        row = self.db.execute(
            "SELECT (SELECT COUNT(*) FROM samples), (SELECT COUNT(*) FROM answers), (SELECT COUNT(*) FROM grades), "
            "(SELECT MAX(created_at) FROM grades), (SELECT COUNT(*) FROM results), (SELECT MAX(created_at) FROM results), "
            "(SELECT COUNT(*) FROM review_queue)"
        ).fetchone()
        return json.dumps(list(row))

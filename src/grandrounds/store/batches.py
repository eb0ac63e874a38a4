"""The store's tables of submitted batches (migration 5): what was sent to a batch API and is owed back.

A row of ``batches`` is one batch at one provider's endpoint: the provider's batch id, its state
as last seen, the request keys it carries (each a ``custom_id``), its counts, and when it was
created, last updated and collected. ``batch_requests`` holds, for every key of a batch not yet
collected, the request itself (its canonical JSON) and which attempt it is, so results that land
after a restart are stored even for calls the new process has not asked for yet. A batch is
written and committed before anything waits on it, so an exit or a kill at any moment leaves it
to be picked up by the next run; it is closed (``collected_at`` set, its request rows dropped)
only after the results it brought are committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from grandrounds.store.connection import StoreBase, now


@dataclass(frozen=True, kw_only=True)
class StoredBatch:
    """One row of ``batches``."""

    row: int
    provider: str
    endpoint: str
    batch_id: str
    state: str
    keys: tuple[str, ...]
    counts: Mapping[str, Any] = field(default_factory=dict)
    detail: str = ""
    created_at: str = ""
    updated_at: str = ""
    collected_at: str | None = None


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch as stored: its key, attempt number and canonical JSON."""

    key: str
    attempt: int
    request_json: str


class BatchTables(StoreBase):
    """Reads and writes of ``batches`` and ``batch_requests``. Every write is committed at once,
    outside any write-behind buffer: a batch id must be on disk before the run waits on it."""

    def add_batch(
        self, provider: str, endpoint: str, batch_id: str, state: str, items: Iterable[BatchItem]
    ) -> StoredBatch:
        """Record a batch the provider accepted, with its requests; returns the stored row."""
        items = list(items)
        t = now()
        keys = [i.key for i in items]
        with self._atomic():
            cur = self.db.execute(
                "INSERT INTO batches (provider, endpoint, batch_id, state, keys_json, created_at, updated_at) VALUES (?,?,?,?,?,?,?)",
                (provider, endpoint, batch_id, state, json.dumps(keys), t, t),
            )
            row = int(cur.lastrowid or 0)
            self.db.executemany(
                "INSERT INTO batch_requests VALUES (?,?,?,?)",
                [(row, i.key, i.attempt, i.request_json) for i in items],
            )
        return StoredBatch(
            row=row,
            provider=provider,
            endpoint=endpoint,
            batch_id=batch_id,
            state=state,
            keys=tuple(keys),
            counts={},
            detail="",
            created_at=t,
            updated_at=t,
        )

    def open_batches(self, provider: str, endpoint: str) -> list[StoredBatch]:
        """Batches at this endpoint whose results are not yet collected, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM batches WHERE provider = ? AND endpoint = ? AND collected_at IS NULL ORDER BY id",
            (provider, endpoint),
        ).fetchall()
        return [_batch(r) for r in rows]

    def batch_attempts(self, row: int) -> dict[str, int]:
        """key -> attempt number for the requests of an open batch."""
        return {
            r[0]: int(r[1])
            for r in self.db.execute(
                "SELECT key, attempt FROM batch_requests WHERE batch = ?", (row,)
            )
        }

    def batch_request_json(self, row: int, key: str) -> str | None:
        """The stored request of one key of an open batch (None once the batch is collected)."""
        got = self.db.execute(
            "SELECT request_json FROM batch_requests WHERE batch = ? AND key = ?", (row, key)
        ).fetchone()
        return got[0] if got else None

    def update_batch(
        self, row: int, state: str, counts: Mapping[str, Any], detail: str = ""
    ) -> None:
        """The state and counts the provider last reported."""
        with self._atomic():
            self.db.execute(
                "UPDATE batches SET state = ?, counts_json = ?, detail = ?, updated_at = ? WHERE id = ?",
                (state, json.dumps(dict(counts), sort_keys=True), detail, now(), row),
            )

    def close_batch(
        self, row: int, state: str, counts: Mapping[str, Any], detail: str = ""
    ) -> None:
        """Mark a batch collected: first every buffered call is committed (its results among them),
        then the batch is closed and its request rows dropped, in one transaction."""
        self.flush()
        t = now()
        with self._atomic():
            self.db.execute(
                "UPDATE batches SET state = ?, counts_json = ?, detail = ?, updated_at = ?, collected_at = ? WHERE id = ?",
                (state, json.dumps(dict(counts), sort_keys=True), detail, t, t, row),
            )
            self.db.execute("DELETE FROM batch_requests WHERE batch = ?", (row,))

    def batches(self, provider: str | None = None) -> list[StoredBatch]:
        """Every recorded batch (of one provider when given), oldest first."""
        if provider is None:
            rows = self.db.execute("SELECT * FROM batches ORDER BY id").fetchall()
        else:
            rows = self.db.execute(
                "SELECT * FROM batches WHERE provider = ? ORDER BY id", (provider,)
            ).fetchall()
        return [_batch(r) for r in rows]


def _batch(r: Any) -> StoredBatch:
    return StoredBatch(
        row=int(r["id"]),
        provider=r["provider"],
        endpoint=r["endpoint"],
        batch_id=r["batch_id"],
        state=r["state"],
        keys=tuple(json.loads(r["keys_json"])),
        counts=json.loads(r["counts_json"] or "{}"),
        detail=r["detail"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        collected_at=r["collected_at"],
    )

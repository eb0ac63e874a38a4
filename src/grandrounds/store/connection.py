"""The store's connection: opening and migrating the file, transactions, write-behind, closing.

Every table module of the store (calls and runs, grades, reviews) builds on :class:`StoreBase`,
so they share one connection, one write path (:meth:`StoreBase._write`) and one way to group
writes (:meth:`StoreBase.batch`).
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, Iterator, Self

from grandrounds.records import Response
from grandrounds.store.migrations import MIGRATIONS


def now() -> str:
    """The current UTC time as ISO 8601 with milliseconds: the ``created_at`` of every row."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class StoreBase:
    """One SQLite connection (WAL journal, foreign keys on) and the write path every table uses.

    Use it as a context manager (``with Store(path) as st:``): leaving the block flushes rows
    buffered by :meth:`write_behind` and closes the connection, also when an error escapes.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._pending_calls: dict[str, Response] = {}
        self._pending_since = 0.0
        self._behind: tuple[int, float] | None = None
        self._migrate()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Flush buffered rows, then close the connection (closed even when the flush fails)."""
        try:
            self.flush()
        finally:
            self.db.close()

    # ---- transactions -------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back if anything inside raises."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    @contextmanager
    def _atomic(self) -> Iterator[None]:
        """Direct writes made inside land together: joins an open transaction, else opens one."""
        if self.db.in_transaction:
            yield
            return
        with self._transaction():
            yield

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group several writes into one transaction (all or none of them land).

        Inside an open transaction or under :meth:`write_behind` the writes join what is already
        there, so batches nest.
        """
        if self.db.in_transaction or self._behind is not None:
            yield
            return
        with self._transaction():
            yield

    # ---- write-behind -------------------------------------------------------------------
    @contextmanager
    def write_behind(self, max_rows: int = 256, max_age: float = 0.05) -> Iterator[None]:
        """Buffer calls, samples, answers and grades and commit them together every ``max_rows``
        rows, or once they are ``max_age`` seconds old when the holder calls :meth:`flush_if_due`
        (the runner does so from a timer, so a commit never sits between a reply and the next request).

        Each flush is one transaction, so a crash loses at most the last unflushed moment of
        work (asked again on resume) and never leaves a half-written row. Reads of calls see
        buffered ones, so the cache never misses its own writes.
        """
        self._behind = (max_rows, max_age)
        try:
            yield
        finally:
            self._behind = None
            self.flush()

    def flush(self) -> None:
        """Commit every buffered row now, in one transaction (nothing happens when none wait)."""
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        # One executemany per statement, rows of a statement in their order. Reordering across
        # statements is safe: the buffered tables have no foreign keys between them, and the two
        # call statements agree whatever their order (a stored success is never replaced by a failure).
        by_sql: dict[str, list[tuple[Any, ...]]] = {}
        for sql, params in rows:
            by_sql.setdefault(sql, []).append(params)
        try:
            with self._transaction():
                for sql, group in by_sql.items():
                    self.db.executemany(sql, group)
        except BaseException:
            self._pending = rows + self._pending
            raise
        self._pending_calls.clear()

    def flush_if_due(self) -> None:
        """Flush when write-behind is on and the oldest buffered row is ``max_age`` seconds old."""
        if self._behind and self._pending and time.monotonic() - self._pending_since >= self._behind[1]:
            self.flush()

    def _write(self, sql: str, params: tuple[Any, ...], call: Response | None = None) -> None:
        """Run one write now, or buffer it under write-behind (a successful ``call`` stays readable)."""
        if self._behind is None:
            self.db.execute(sql, params)
            return
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append((sql, params))
        if call is not None and call.ok:
            self._pending_calls[call.key] = replace(call, cached=True)
        if len(self._pending) >= self._behind[0]:
            self.flush()

    # ---- schema -------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Apply the numbered migrations this file has not had yet, each in its own transaction."""
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
        done = {r[0] for r in self.db.execute("SELECT version FROM schema_migrations")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            with self._transaction():
                for stmt in sql.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                self.db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))

"""The store's connection: opening and migrating the file, transactions, write-behind, closing.

Every table module of the store (calls and runs, grades, reviews) builds on :class:`StoreBase`,
so they share one connection, one write path (:meth:`StoreBase._write`) and one way to group
writes (:meth:`StoreBase.batch`). The SQLite connection itself (opening, actionable errors, the WAL
switch) is in :mod:`grandrounds.store.sqlite`, how buffered writes land in :mod:`grandrounds.store.commits`,
and write-behind's writer and checkpoint threads in :mod:`grandrounds.store.writer`.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, Self

from grandrounds.core.errors import StoreError
from grandrounds.core.records import Response
from grandrounds.store.commits import commit_groups, group_writes, transaction
from grandrounds.store.migrations import MIGRATIONS
from grandrounds.store.rows import storable
from grandrounds.store.sqlite import connect, store_error, wal_journal
from grandrounds.store.writer import Checkpointer, Writer

#: The newest schema version this code knows; a store that has applied a later one is refused at open.
SCHEMA_VERSION = max(v for v, _ in MIGRATIONS)

#: (whole second, its ISO 8601 text): :func:`now` formats a second once, not every row's time.
_SECOND: tuple[int, str] = (-1, "")


def now() -> str:
    """The current UTC time as ISO 8601 with milliseconds (``2026-01-31T12:00:00.123+00:00``, as
    ``datetime.isoformat(timespec="milliseconds")`` writes it): the ``created_at`` of every row.

    Called for every row written (several per call), so the date and time of day are formatted
    once a second; the pair is swapped whole, so threads never mix two seconds' parts.
    """
    global _SECOND
    t = time.time()
    sec = int(t)
    cached, text = _SECOND
    if cached != sec:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _SECOND = (sec, text)
    return f"{text}.{min(999, int((t - sec) * 1000)):03d}+00:00"


class _Handed(NamedTuple):
    """A flush handed to the writer: what it commits, kept until it is known to have landed."""

    done: Future[None]
    rows: list[tuple[str, tuple[Any, ...]]]
    last: dict[str, list[tuple[Any, ...]]]
    calls: dict[str, Response]
    n: int


#: Flushes handed to the writer and not yet known to have landed, at most (then the run waits).
_MAX_HANDED = 4


class StoreBase:
    """One SQLite connection (WAL journal, foreign keys on) and the write path every table uses.

    Use it as a context manager (``with Store(path) as st:``): leaving the block flushes rows
    buffered by :meth:`write_behind` and closes the connection, also when an error escapes.

    Opening checks the file before anything else: a directory, a file that is not SQLite or not a
    grandrounds store, or a store from a newer schema (written by a later grandrounds) is a
    StoreError naming the file and the versions, with the file left unchanged. ``readonly=True``
    opens an existing store for reading only (SQLite ``mode=ro``; on read-only media, where SQLite
    cannot create the WAL index beside the file, ``immutable=1``), as read commands do.
    """

    def __init__(self, path: Path | str, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        memory = str(path) == ":memory:"
        if not memory:
            if self.path.is_dir():
                raise StoreError(self.path, "is a directory, not a store file (pass --store FILE)")
            if readonly and not self.path.exists():
                raise StoreError(
                    self.path, "no store here: nothing has been run with it yet (pass --store PATH)"
                )
            if not readonly:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreError(
                        self.path, f"cannot create its folder ({e.strerror or e})"
                    ) from None
        self.db = connect(self.path, str(path), readonly)
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        #: Buffered writes that commute with every other (a lease's release): statement -> parameters.
        self._pending_last: dict[str, list[tuple[Any, ...]]] = {}
        #: How many writes are buffered (in both of the above).
        self._buffered = 0
        #: Successful calls buffered since the last hand-off to the writer.
        self._new_calls: dict[str, Response] = {}
        self._writer: Writer | None = None
        self._handed: deque[_Handed] = deque()
        #: Set by :meth:`close`.
        self.closed = False
        #: Successful calls not yet known to be committed (buffered, or handed to the writer).
        self._pending_calls: dict[str, Response] = {}
        self._pending_since = 0.0
        self._behind: tuple[int, float] | None = None
        self._checkpoints: Checkpointer | None = None
        try:
            self._open()
        except BaseException:
            self.db.close()
            raise

    def _open(self) -> None:
        """Check what the file is and its schema version, then set the connection up (and migrate)."""
        try:
            version = self._schema_version()
            if self.readonly:
                self.db.execute("PRAGMA query_only=ON")
                if version < SCHEMA_VERSION:
                    self._upgrade_for_reading(version)
                return
            self._setup_connection(self.db)
            self._migrate()
        except StoreError:
            raise
        except sqlite3.DatabaseError as e:
            raise (
                store_error(self.path, e)
                or StoreError(self.path, f"cannot be opened as a store ({e})")
            ) from None

    def _setup_connection(self, db: sqlite3.Connection) -> None:
        """The settings of every connection that writes to the store (its own, and the writer's
        under write-behind): WAL journal, synchronous NORMAL, foreign keys on."""
        wal_journal(db)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")

    def _schema_version(self) -> int:
        """The newest migration the file has had (0 for a new, empty file); refuses what is not ours."""
        tables = {
            r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if "schema_migrations" not in tables:
            if tables:
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise StoreError(
                    self.path,
                    f"an SQLite database but not a grandrounds store (its tables: {shown}); pass another --store",
                )
            if self.readonly:
                raise StoreError(self.path, "an empty store: nothing has been run with it yet")
            return 0
        version = self.db.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] or 0
        if version > SCHEMA_VERSION:
            raise StoreError(
                self.path,
                f"store schema version {version} is newer than this grandrounds understands (version {SCHEMA_VERSION}): "
                "it was written by a later grandrounds; upgrade grandrounds to use it (the store was not changed)",
            )
        return int(version)

    def _upgrade_for_reading(self, version: int) -> None:
        """Apply missing migrations to a store opened for reading, through a short write connection,
        when the file may be written; else say what to do."""
        writable = os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)
        if not writable:
            raise StoreError(
                self.path,
                f"store schema version {version} is older than this grandrounds's ({SCHEMA_VERSION}) and the file is "
                "read-only, so it cannot be upgraded: copy it somewhere writable and pass the copy as --store",
            )
        StoreBase(self.path).close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush buffered rows, then close the connection (closed even when the flush fails)."""
        try:
            self.flush()
        finally:
            self._stop_writer()
            self.db.close()
            self.closed = True

    # ---- transactions -------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` on the store's connection, rolled back if anything
        inside raises. Under write-behind, what the writer holds lands first (so this
        connection neither waits for its lock nor writes ahead of rows handed to it)."""
        if self._writer is not None:
            self.flush()
            self._writer.submit(lambda db: None).result()
        with transaction(self.db):
            yield

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
    def write_behind(self, max_rows: int = 1024, max_age: float = 0.2) -> Iterator[None]:
        """Buffer calls, samples, answers and grades and commit them together every ``max_rows``
        rows, or once they are ``max_age`` seconds old when the holder calls :meth:`flush_if_due`
        (the runner does so from a timer, so a commit never sits between a reply and the next request).

        Each flush is one transaction, so a crash loses at most the last unflushed moment of
        work (asked again on resume) and never leaves a half-written row. Reads of calls see
        buffered ones, so the cache never misses its own writes. Flushes and lease transactions
        run on a writer thread with its own connection (:class:`Writer`); :meth:`flush` and
        leaving the block wait until everything has landed.
        """
        self._behind = (max_rows, max_age)
        checkpoints = self._start_checkpoints()
        started = self._writer is None
        if started:
            self._writer = self._start_writer()
        try:
            yield
        finally:
            self._behind = None
            try:
                self.flush()
            finally:
                if started:
                    self._stop_writer()
                if checkpoints is not None:
                    self._stop_checkpoints(checkpoints)

    def _start_checkpoints(self) -> Checkpointer | None:
        """The checkpoint thread of write-behind, SQLite's automatic checkpoint off meanwhile; None
        where there is none to run (a read-only or in-memory store) or it runs already."""
        if self.readonly or self._checkpoints is not None or str(self.path) == ":memory:":
            return None
        checkpoints = Checkpointer(str(self.path))
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpoints = checkpoints
        checkpoints.start()
        return checkpoints

    def _stop_checkpoints(self, checkpoints: Checkpointer) -> None:
        checkpoints.stop()
        self._checkpoints = None
        if not self.closed and not self.db.in_transaction:
            self.db.execute("PRAGMA wal_autocheckpoint=1000")  # SQLite's default

    def _start_writer(self) -> Writer | None:
        """The store's writer, or None where write-behind commits on the store's own connection
        (an in-memory or read-only store, or a second connection that cannot be opened)."""
        if self.readonly or str(self.path) == ":memory:":
            return None
        return Writer.start(
            str(self.path),
            self._setup_connection,
            self._checkpoints.wake if self._checkpoints else None,
        )

    def _stop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()

    def flush(self) -> None:
        """Commit every buffered row now, in one transaction (nothing happens when none wait);
        under write-behind, return once everything handed to the writer has landed."""
        if self._writer is not None:
            self._hand_off()
            self._settle(wait=True)
            return
        if not self._buffered:
            return
        rows, self._pending = self._pending, []
        last, self._pending_last = self._pending_last, {}
        buffered, self._buffered = self._buffered, 0
        try:
            commit_groups(self.db, group_writes(rows, last))
        except BaseException:
            self._restore(rows, last, buffered)
            raise
        self._pending_calls.clear()
        self._new_calls.clear()
        if self._checkpoints is not None:
            self._checkpoints.wake.set()

    def _restore(
        self,
        rows: list[tuple[str, tuple[Any, ...]]],
        last: dict[str, list[tuple[Any, ...]]],
        count: int,
    ) -> None:
        """Put rows whose flush failed back ahead of those buffered since."""
        self._pending = rows + self._pending
        self._buffered += count
        for sql, group in last.items():
            self._pending_last[sql] = group + self._pending_last.get(sql, [])

    def _hand_off(self) -> None:
        """Give the buffered rows to the writer (without waiting for them to land)."""
        assert self._writer is not None
        if not self._buffered:
            return
        if len(self._handed) >= _MAX_HANDED:  # the writer is behind: wait rather than hold more
            self._settle(wait=True, upto=1)
        rows, last, calls, count = (
            self._pending,
            self._pending_last,
            self._new_calls,
            self._buffered,
        )
        self._pending, self._pending_last, self._new_calls, self._buffered = [], {}, {}, 0
        groups = group_writes(rows, last)
        done = self._writer.submit(lambda db: commit_groups(db, groups), flush=True)
        self._handed.append(_Handed(done, rows, last, calls, count))

    def _settle(self, wait: bool, upto: int | None = None) -> None:
        """Account for the flushes the writer has finished, oldest first (all of them, waiting
        for each, when ``wait``): a landed flush's calls are read from the store from now on; a
        failed one's rows, and those of every later one, go back to the buffer and its error is
        raised here."""
        settled = 0
        while self._handed and (upto is None or settled < upto):
            first = self._handed[0]
            if not wait and not first.done.done():
                return
            err = first.done.exception()
            if err is not None:
                failed = list(self._handed)
                self._handed.clear()
                for later in reversed(failed):  # each waited for (skipped ones end at once)
                    later.done.exception()
                    self._restore(later.rows, later.last, later.n)
                    self._new_calls = later.calls | self._new_calls
                assert self._writer is not None
                self._writer.broken = False
                raise err
            self._handed.popleft()
            settled += 1
            for key, call in first.calls.items():
                if self._pending_calls.get(key) is call:
                    del self._pending_calls[key]

    def flush_if_due(self) -> None:
        """Flush when write-behind is on and the oldest buffered row is ``max_age`` seconds old
        (handed to the writer, where there is one: the caller does not wait for it to land)."""
        if (
            self._behind
            and self._buffered
            and time.monotonic() - self._pending_since >= self._behind[1]
        ):
            self._flush_soon()
        elif self._writer is not None:
            self._settle(wait=False)

    def _flush_soon(self) -> None:
        if self._writer is None:
            self.flush()
        else:
            self._hand_off()
            self._settle(wait=False)

    def _write(
        self,
        sql: str,
        params: tuple[Any, ...],
        call: Response | None = None,
        commutes: bool = False,
    ) -> None:
        """Run one write now, or buffer it under write-behind (a successful ``call`` stays readable).

        ``commutes``: the write's outcome does not depend on its order among the other buffered
        writes (no other buffered statement touches its rows), so a flush may run it after them.
        """
        params = storable(params)
        if self._behind is None:
            self.db.execute(sql, params)
            return
        if not self._buffered:
            self._pending_since = time.monotonic()
        self._buffered += 1
        if commutes:
            self._pending_last.setdefault(sql, []).append(params)
        else:
            self._pending.append((sql, params))
        if call is not None and call.ok:
            self._pending_calls[call.key] = self._new_calls[call.key] = replace(call, cached=True)
        if self._buffered >= self._behind[0]:
            self._flush_soon()

    # ---- schema -------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Apply the numbered migrations this file has not had yet, each in its own transaction."""
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)"
        )
        done = {r[0] for r in self.db.execute("SELECT version FROM schema_migrations")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            with self._transaction():
                # Another process opening the same new store may have applied it meanwhile.
                if self.db.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = ?", (version,)
                ).fetchone():
                    continue
                for stmt in sql.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                self.db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))

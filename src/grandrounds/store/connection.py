"""The store's connection: opening and migrating the file, transactions, write-behind, closing.

Every table module of the store (calls and runs, grades, reviews) builds on :class:`StoreBase`,
so they share one connection, one write path (:meth:`StoreBase._write`) and one way to group
writes (:meth:`StoreBase.batch`).
"""

from __future__ import annotations

import os
import queue
import re
import sqlite3
import threading
import time
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Iterator, NamedTuple, Self

from grandrounds.errors import StoreError
from grandrounds.records import Response
from grandrounds.store.migrations import MIGRATIONS

#: The newest schema version this code knows; a store that has applied a later one is refused at open.
SCHEMA_VERSION = max(v for v, _ in MIGRATIONS)

#: SQLite failures a user can act on, by a phrase of SQLite's message -> what to say (the store file
#: is named before it). Others (constraint violations, SQL errors) are bugs and keep their traceback.
_SQLITE_PROBLEMS = (
    ("database or disk is full", "the disk is full (SQLite: database or disk is full); everything committed "
     "before is kept: free some space and run the same command again to resume"),
    ("attempt to write a readonly database", "the store is read-only here (SQLite: attempt to write a readonly "
     "database); this command needs to write to it"),
    ("disk i/o error", "disk I/O error (SQLite: disk I/O error); check the disk, then run the command again"),
    ("file is not a database", "not an SQLite database (SQLite: file is not a database): not a grandrounds store, or damaged"),
    ("database disk image is malformed", "the store file is damaged (SQLite: database disk image is malformed); "
     "restore it from a copy, or pass another --store"),
    ("database is locked", "the store is locked by another process (SQLite: database is locked, waited 30 s); "
     "try again when it finishes"),
    ("unable to open database file", "cannot open the store file (SQLite: unable to open database file); check "
     "the path and its permissions"),
)


def store_error(path: Path | str, err: sqlite3.Error) -> StoreError | None:
    """The one-line StoreError for an SQLite failure a user can act on, or None for any other."""
    text = str(err).lower()
    for phrase, problem in _SQLITE_PROBLEMS:
        if phrase in text:
            return StoreError(path, problem)
    return None


def _translated(path: str, err: sqlite3.Error) -> BaseException:
    """The StoreError for ``err`` where a user can act on it; ``err`` itself otherwise (constraint
    violations and SQL mistakes are bugs and keep their traceback)."""
    if isinstance(err, sqlite3.IntegrityError) or not isinstance(err, sqlite3.DatabaseError):
        return err
    return store_error(path, err) or err


class _Cursor(sqlite3.Cursor):
    """Rows read from a damaged page fail while fetching, after ``execute`` returned: same translation
    for the fetch methods. (Not for ``for row in cursor``: a Python ``__next__`` would slow every row
    read by about 1 us, +75 % on a plain scan; the first step, where a damaged table shows, runs in
    ``execute`` and is translated there.)"""

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as e:
            raise _translated(getattr(self.connection, "store_path", ""), e) from None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.Error as e:
            raise _translated(getattr(self.connection, "store_path", ""), e) from None

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as e:
            raise _translated(getattr(self.connection, "store_path", ""), e) from None


class _Connection(sqlite3.Connection):
    """An SQLite connection whose actionable failures (a full disk, a read-only or damaged file) are
    StoreErrors naming the store, whichever table module ran the statement."""

    store_path = ""

    def cursor(self, factory: Any = _Cursor) -> Any:  # noqa: D102 (sqlite3.Connection.cursor, with our cursor)
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return self.cursor().execute(sql, parameters)
        except sqlite3.Error as e:
            raise _translated(self.store_path, e) from None

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> sqlite3.Cursor:
        try:
            return self.cursor().executemany(sql, seq_of_parameters)
        except sqlite3.Error as e:
            raise _translated(self.store_path, e) from None


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


class _Checkpointer:
    """WAL checkpoints in a thread of their own while write-behind is on.

    SQLite copies the write-ahead log back into the database file (a checkpoint, with its fsync)
    inside the COMMIT that passes 1,000 pages: on the event loop's thread, where it stalls every
    call in flight (by up to hundreds of milliseconds on a busy disk). While write-behind is on,
    that automatic checkpoint is off and this thread, on its own connection, runs a PASSIVE
    checkpoint after each flush instead: it never blocks the writer, and SQLite releases the GIL
    while it works. Without write-behind SQLite checkpoints as usual.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="grandrounds-checkpoint", daemon=True)

    @classmethod
    def start(cls, store: "StoreBase") -> "_Checkpointer | None":
        if store.readonly or store._checkpoints is not None or str(store.path) == ":memory:":
            return None
        checkpoints = cls(str(store.path))
        store.db.execute("PRAGMA wal_autocheckpoint=0")
        store._checkpoints = checkpoints
        checkpoints._thread.start()
        return checkpoints

    def stop(self, store: "StoreBase") -> None:
        self._stopping = True
        self.wake.set()
        self._thread.join(timeout=60)
        store._checkpoints = None
        if not store.closed and not store.db.in_transaction:
            store.db.execute("PRAGMA wal_autocheckpoint=1000")  # SQLite's default

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except sqlite3.Error:
            return  # the writer's connection still works; its close checkpoints the log
        try:
            while True:
                self.wake.wait()
                self.wake.clear()
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except sqlite3.Error:
                    pass  # tried again after the next flush; a clean close checkpoints anyway
                if self._stopping:
                    return
        finally:
            db.close()



@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` on ``db``, rolled back if anything inside raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite may have rolled back already (a full disk does)
            db.execute("ROLLBACK")
        raise
    try:
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


#: Buffered writes as a flush runs them: one executemany per statement and group of parameters.
Groups = list[tuple[str, list[tuple[Any, ...]]]]


#: ``VALUES (?,?,...)``: the one row of placeholders of an INSERT that :func:`commit_groups`
#: repeats to write many rows in one statement.
_VALUES_ROW = re.compile(r"VALUES (\(\?(?:,\?)*\))")

#: Rows per multi-row INSERT: at most this many, and at most 999 bound values (SQLite's lowest
#: default limit on variables, before 3.32).
_ROWS_PER_INSERT = 64


def _multirow(sql: str) -> tuple[str, str, str] | None:
    """An INSERT with one ``VALUES`` row of placeholders as (text before the row, the row, text
    after it), or None for any other statement."""
    if not sql.startswith("INSERT"):
        return None
    rows = list(_VALUES_ROW.finditer(sql))
    if len(rows) != 1:
        return None
    m = rows[0]
    return sql[: m.start(1)], m.group(1), sql[m.end(1) :]


def commit_groups(db: sqlite3.Connection, groups: Groups) -> None:
    """Run a flush's groups in one transaction. A group of rows for one INSERT goes as multi-row
    INSERTs (``VALUES (...),(...),...``), which SQLite applies row by row in order, as
    executemany does (an upsert's conflict with a row earlier in the same statement included),
    but with one statement step per many rows: the thread takes and releases the GIL once per
    statement, not once per row, so the event loop's thread waits on it less."""
    with transaction(db):
        for sql, group in groups:
            parts = _multirow(sql) if len(group) > 1 else None
            if parts is None:
                db.executemany(sql, group)
                continue
            head, row, tail = parts
            per = max(1, min(_ROWS_PER_INSERT, 999 // max(1, row.count("?"))))
            for i in range(0, len(group), per):
                chunk = group[i : i + per]
                if len(chunk) == 1:
                    db.execute(sql, chunk[0])
                else:
                    db.execute(head + ",".join([row] * len(chunk)) + tail, [v for params in chunk for v in params])


def _groups(rows: list[tuple[str, tuple[Any, ...]]], last: dict[str, list[tuple[Any, ...]]]) -> Groups:
    """One executemany per run of the same statement, in the order written: a grade's judge calls
    are deleted and written again when the grade is replaced, so statements must not be
    reordered across one another. Writes that commute with all others come after them, one
    executemany per statement (a call and its lease's release alternate in the buffer: in order,
    each would be an executemany of its own)."""
    groups: Groups = []
    for sql, params in rows:
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    groups.extend(last.items())
    return groups


#: SQLite's own execute, raising sqlite3 errors untranslated (the WAL switch tells "locked" apart).
_raw_execute = sqlite3.Connection.execute

#: Seconds a new store's switch to the WAL journal is retried while another process holds it
#: (as long as SQLite's busy timeout on every other statement).
WAL_SWITCH_WAIT = 30.0


def _wal_journal(db: sqlite3.Connection) -> None:
    """Put the store in WAL mode (a no-op for a store already in it). SQLite does not wait for
    the switch as it waits for other locks: two processes that create one store at the same moment
    (two runs started together on a new --store) find it locked at once. So the switch is retried,
    with growing pauses, for up to :data:`WAL_SWITCH_WAIT` seconds."""
    if _raw_execute(db, "PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        return
    deadline, pause = time.monotonic() + WAL_SWITCH_WAIT, 0.02
    while True:
        try:
            _raw_execute(db, "PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e).lower() or time.monotonic() >= deadline:
                raise _translated(getattr(db, "store_path", ""), e) from None
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


class _Skipped(Exception):
    """A flush not run because an earlier one failed (its rows go back to the buffer)."""


class _Writer:
    """Write-behind's commits and the lease transactions, on a connection and thread of their own.

    A flush of a run's buffered rows (a few megabytes of requests and answers) used to run on the
    event loop's thread, where every call in flight waited for it; here SQLite works with the GIL
    released while the loop goes on. Leases are taken on the same thread, so the loop's
    connection never waits for this one's write lock, and jobs run in the order handed in. After
    a flush fails, later flushes are skipped until the store has put their rows back in its
    buffer (:meth:`StoreBase._settle`), so rows never land out of order.
    """

    def __init__(self, path: str, setup: Callable[[sqlite3.Connection], None], landed: threading.Event | None) -> None:
        self.path, self.setup = path, setup
        #: Set after each flush that landed (the checkpoint thread's cue).
        self.landed = landed
        self.jobs: "queue.SimpleQueue[tuple[Callable[[sqlite3.Connection], Any], Future[Any], bool] | None]" = queue.SimpleQueue()
        self.broken = False
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="grandrounds-writer", daemon=True)

    @classmethod
    def start(cls, store: "StoreBase") -> "_Writer | None":
        """The store's writer, or None where write-behind commits on the store's own connection
        (an in-memory or read-only store, or a second connection that cannot be opened)."""
        if store.readonly or str(store.path) == ":memory:":
            return None
        writer = cls(str(store.path), store._setup_connection, store._checkpoints.wake if store._checkpoints else None)
        writer._thread.start()
        if writer._ready.exception() is not None:
            writer._thread.join()
            return None
        return writer

    def submit(self, job: Callable[[sqlite3.Connection], Any], flush: bool = False) -> "Future[Any]":
        done: Future[Any] = Future()
        self.jobs.put((job, done, flush))
        return done

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, timeout=30, factory=_Connection)
            db.store_path = self.path  # type: ignore[attr-defined]
            self.setup(db)
        except BaseException as e:
            self._ready.set_exception(e)
            return
        self._ready.set_result(None)
        try:
            while (item := self.jobs.get()) is not None:
                job, done, flush = item
                if flush and self.broken:
                    done.set_exception(_Skipped())
                    continue
                try:
                    done.set_result(job(db))
                    if flush and self.landed is not None:
                        self.landed.set()
                except BaseException as e:
                    self.broken = self.broken or flush
                    done.set_exception(e)
        finally:
            db.close()


class _Handed(NamedTuple):
    """A flush handed to the writer: what it commits, kept until it is known to have landed."""

    done: "Future[None]"
    rows: list[tuple[str, tuple[Any, ...]]]
    last: dict[str, list[tuple[Any, ...]]]
    calls: dict[str, Response]
    count: int


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
                raise StoreError(self.path, "no store here: nothing has been run with it yet (pass --store PATH)")
            if not readonly:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreError(self.path, f"cannot create its folder ({e.strerror or e})") from None
        self.db = self._connect(str(path), memory)
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        #: Buffered writes that commute with every other (a lease's release): statement -> parameters.
        self._pending_last: dict[str, list[tuple[Any, ...]]] = {}
        #: How many writes are buffered (in both of the above).
        self._buffered = 0
        #: Successful calls buffered since the last hand-off to the writer.
        self._new_calls: dict[str, Response] = {}
        self._writer: _Writer | None = None
        self._handed: deque[_Handed] = deque()
        #: Set by :meth:`close`.
        self.closed = False
        #: Successful calls not yet known to be committed (buffered, or handed to the writer).
        self._pending_calls: dict[str, Response] = {}
        self._pending_since = 0.0
        self._behind: tuple[int, float] | None = None
        self._checkpoints: _Checkpointer | None = None
        try:
            self._open()
        except BaseException:
            self.db.close()
            raise

    def _connect(self, path: str, memory: bool) -> sqlite3.Connection:
        """The connection, read-only (``mode=ro``, then ``immutable=1`` on read-only media) when asked."""
        try:
            if not self.readonly or memory:
                db = sqlite3.connect(path, isolation_level=None, timeout=30, factory=_Connection)
            else:
                db = self._connect_readonly()
        except sqlite3.Error as e:
            raise (store_error(self.path, e) or StoreError(self.path, f"cannot open ({e})")) from None
        db.store_path = str(self.path)  # type: ignore[attr-defined]
        db.row_factory = sqlite3.Row
        return db

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30, factory=_Connection)
        db.store_path = str(self.path)  # type: ignore[attr-defined]
        try:
            sqlite3.Connection.execute(db, "SELECT COUNT(*) FROM sqlite_master").fetchone()  # SQLite's own error
            return db
        except sqlite3.OperationalError as e:
            db.close()
            if "unable to open" not in str(e):
                raise
        # A WAL store in a folder nobody may write to: SQLite cannot create its shared-memory index
        # there. Nothing can write the store either, so reading it as immutable is safe; a clean
        # close leaves no -wal file whose content this would miss.
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None, timeout=30, factory=_Connection)

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
            raise (store_error(self.path, e) or StoreError(self.path, f"cannot be opened as a store ({e})")) from None

    def _setup_connection(self, db: sqlite3.Connection) -> None:
        """The settings of every connection that writes to the store (its own, and the writer's
        under write-behind): WAL journal, synchronous NORMAL, foreign keys on."""
        _wal_journal(db)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")

    def _schema_version(self) -> int:
        """The newest migration the file has had (0 for a new, empty file); refuses what is not ours."""
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "schema_migrations" not in tables:
            if tables:
                shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
                raise StoreError(self.path, f"an SQLite database but not a grandrounds store (its tables: {shown}); pass another --store")
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

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
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
        run on a writer thread with its own connection (:class:`_Writer`); :meth:`flush` and
        leaving the block wait until everything has landed.
        """
        self._behind = (max_rows, max_age)
        checkpoints = _Checkpointer.start(self)
        started = self._writer is None
        if started:
            self._writer = _Writer.start(self)
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
                    checkpoints.stop(self)

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
            commit_groups(self.db, _groups(rows, last))
        except BaseException:
            self._restore(rows, last, buffered)
            raise
        self._pending_calls.clear()
        self._new_calls.clear()
        if self._checkpoints is not None:
            self._checkpoints.wake.set()

    def _restore(self, rows: list[tuple[str, tuple[Any, ...]]], last: dict[str, list[tuple[Any, ...]]], count: int) -> None:
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
        rows, last, calls, count = self._pending, self._pending_last, self._new_calls, self._buffered
        self._pending, self._pending_last, self._new_calls, self._buffered = [], {}, {}, 0
        groups = _groups(rows, last)
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
                    self._restore(later.rows, later.last, later.count)
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
        if self._behind and self._buffered and time.monotonic() - self._pending_since >= self._behind[1]:
            self._flush_soon()
        elif self._writer is not None:
            self._settle(wait=False)

    def _flush_soon(self) -> None:
        if self._writer is None:
            self.flush()
        else:
            self._hand_off()
            self._settle(wait=False)

    def _write(self, sql: str, params: tuple[Any, ...], call: Response | None = None, commutes: bool = False) -> None:
        """Run one write now, or buffer it under write-behind (a successful ``call`` stays readable).

        ``commutes``: the write's outcome does not depend on its order among the other buffered
        writes (no other buffered statement touches its rows), so a flush may run it after them.
        """
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
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
        done = {r[0] for r in self.db.execute("SELECT version FROM schema_migrations")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            with self._transaction():
                # Another process opening the same new store may have applied it meanwhile.
                if self.db.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                    continue
                for stmt in sql.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                self.db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))

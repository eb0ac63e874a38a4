"""The SQLite connection under the store: opening it (read-only on request), SQLite failures a user
can act on as StoreErrors naming the store file, and the switch to the WAL journal."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from grandrounds.core.errors import StoreError

#: SQLite failures a user can act on, by a phrase of SQLite's message -> what to say (the store file
#: is named before it). Others (constraint violations, SQL errors) are bugs and keep their traceback.
_SQLITE_PROBLEMS = (
    (
        "database or disk is full",
        "the disk is full (SQLite: database or disk is full); everything committed "
        "before is kept: free some space and run the same command again to resume",
    ),
    (
        "attempt to write a readonly database",
        "the store is read-only here (SQLite: attempt to write a readonly "
        "database); this command needs to write to it",
    ),
    (
        "disk i/o error",
        "disk I/O error (SQLite: disk I/O error); check the disk, then run the command again",
    ),
    (
        "file is not a database",
        "not an SQLite database (SQLite: file is not a database): not a grandrounds store, or damaged",
    ),
    (
        "database disk image is malformed",
        "the store file is damaged (SQLite: database disk image is malformed); "
        "restore it from a copy, or pass another --store",
    ),
    (
        "database is locked",
        "the store is locked by another process (SQLite: database is locked, waited 30 s); "
        "try again when it finishes",
    ),
    (
        "unable to open database file",
        "cannot open the store file (SQLite: unable to open database file); check "
        "the path and its permissions",
    ),
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


class StoreConnection(sqlite3.Connection):
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


def connect(path: Path, name: str, readonly: bool) -> StoreConnection:
    """The store's connection to ``name`` (the path as given, or ``:memory:``), read-only
    (``mode=ro``, then ``immutable=1`` on read-only media) when asked; rows as :class:`sqlite3.Row`."""
    try:
        if not readonly or name == ":memory:":
            db = sqlite3.connect(name, isolation_level=None, timeout=30, factory=StoreConnection)
        else:
            db = _connect_readonly(path)
    except sqlite3.Error as e:
        raise (store_error(path, e) or StoreError(path, f"cannot open ({e})")) from None
    db.store_path = str(path)
    db.row_factory = sqlite3.Row
    return db


def _connect_readonly(path: Path) -> StoreConnection:
    uri = path.resolve().as_uri()
    db = sqlite3.connect(
        f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30, factory=StoreConnection
    )
    db.store_path = str(path)
    try:
        sqlite3.Connection.execute(
            db, "SELECT COUNT(*) FROM sqlite_master"
        ).fetchone()  # SQLite's own error
        return db
    except sqlite3.OperationalError as e:
        db.close()
        if "unable to open" not in str(e):
            raise
    # A WAL store in a folder nobody may write to: SQLite cannot create its shared-memory index
    # there. Nothing can write the store either, so reading it as immutable is safe; a clean
    # close leaves no -wal file whose content this would miss.
    return sqlite3.connect(
        f"{uri}?mode=ro&immutable=1",
        uri=True,
        isolation_level=None,
        timeout=30,
        factory=StoreConnection,
    )


#: SQLite's own execute, raising sqlite3 errors untranslated (the WAL switch tells "locked" apart).
_raw_execute = sqlite3.Connection.execute

#: Seconds a new store's switch to the WAL journal is retried while another process holds it
#: (as long as SQLite's busy timeout on every other statement).
WAL_SWITCH_WAIT = 30.0


def wal_journal(db: sqlite3.Connection) -> None:
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

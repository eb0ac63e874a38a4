"""The store's threads under write-behind: the writer (flushes and lease transactions, on a
connection of its own) and the WAL checkpointer."""

from __future__ import annotations

import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from grandrounds.store.sqlite import StoreConnection


class Checkpointer:
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
        self._thread = threading.Thread(
            target=self._run, name="grandrounds-checkpoint", daemon=True
        )

    def start(self) -> None:
        """Start the thread (the store has turned its automatic checkpoint off)."""
        self._thread.start()

    def stop(self) -> None:
        """Wake the thread for a last checkpoint and wait (up to a minute) for it to end."""
        self._stopping = True
        self.wake.set()
        self._thread.join(timeout=60)

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


class _Skipped(Exception):
    """A flush not run because an earlier one failed (its rows go back to the buffer)."""


class Writer:
    """Write-behind's commits and the lease transactions, on a connection and thread of their own.

    A flush of a run's buffered rows (a few megabytes of requests and answers) used to run on the
    event loop's thread, where every call in flight waited for it; here SQLite works with the GIL
    released while the loop goes on. Leases are taken on the same thread, so the loop's
    connection never waits for this one's write lock, and jobs run in the order handed in. After
    a flush fails, later flushes are skipped until the store has put their rows back in its
    buffer (:meth:`StoreBase._settle`), so rows never land out of order.
    """

    def __init__(
        self, path: str, setup: Callable[[sqlite3.Connection], None], landed: threading.Event | None
    ) -> None:
        self.path, self.setup = path, setup
        #: Set after each flush that landed (the checkpoint thread's cue).
        self.landed = landed
        self.jobs: queue.SimpleQueue[
            tuple[Callable[[sqlite3.Connection], Any], Future[Any], bool] | None
        ] = queue.SimpleQueue()
        self.broken = False
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name="grandrounds-writer", daemon=True)

    @classmethod
    def start(
        cls, path: str, setup: Callable[[sqlite3.Connection], None], landed: threading.Event | None
    ) -> Writer | None:
        """A running writer on a connection of its own to ``path``, set up by ``setup``; None when
        that connection cannot be opened (write-behind then commits on the store's own)."""
        writer = cls(path, setup, landed)
        writer._thread.start()
        if writer._ready.exception() is not None:
            writer._thread.join()
            return None
        return writer

    def submit(self, job: Callable[[sqlite3.Connection], Any], flush: bool = False) -> Future[Any]:
        done: Future[Any] = Future()
        self.jobs.put((job, done, flush))
        return done

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(
                self.path, isolation_level=None, timeout=30, factory=StoreConnection
            )
            db.store_path = self.path
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

"""What the viewer's request handler works from: the store with its search index
(:class:`ViewerState`) and, with the checks' settings, the :class:`ViewerContext` a server hands it."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grandrounds.analyses.collect import shown_image
from grandrounds.store import Store
from grandrounds.store.images import ImageStore
from grandrounds.store.team.dsn import is_team_dsn, shown
from grandrounds.viewer import index, queries
from grandrounds.viewer.security import Guard, HostPolicy


class ViewerState:
    """The store path, the sidecar index and per-thread connections to both."""

    def __init__(self, store_path: Path | str) -> None:
        self.team = is_team_dsn(store_path)
        if (
            self.team
        ):  # a team store in PostgreSQL: read, reviews its only write; the index beside nothing
            self.dsn = str(store_path)
            self.store_path = Path(shown(self.dsn))
            with self._open():  # reachable, and of a schema this code reads
                pass
            self.index_path = index.team_index_path(self.dsn)
        else:
            self.store_path = Path(store_path)
            with Store(self.store_path):  # create / migrate before anything reads it
                pass
            self.index_path = index.index_path(self.store_path)
        self.images = ImageStore.beside(self.store_path)
        self.lock = threading.Lock()
        self.generation = 0
        self.checked = 0.0
        self.local = threading.local()
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Rebuild the index if the store changed (checked at most every 2 s)."""
        if not force and time.monotonic() - self.checked < 2.0:
            return
        with self.lock, self._open() as st:
            if not index.is_current(self.index_path, st):
                index.build(self.index_path, st)
                self.generation += 1
            self.checked = time.monotonic()

    def con(self) -> sqlite3.Connection:
        """This thread's read-only connection to the index (reopened after each rebuild)."""
        c = getattr(self.local, "con", None)
        if c is None or getattr(self.local, "gen", -1) != self.generation:
            if c is not None:
                c.close()
            c = index.connect_readonly(
                self.index_path, like_bytes=8 * queries.MAX_TERM_CHARS
            )  # 4 bytes a character, escapes
            self.local.con, self.local.gen = c, self.generation
        return c

    def image(self, sha256: str) -> tuple[bytes, str] | None:
        """(bytes, media type) of a stored image, checked by :func:`shown_image` (None when not stored;
        ValueError for a malformed name, ImageRefused for an image that is not shown)."""
        if self.team:  # the images table, through this thread's connection
            return shown_image(self.store().image_store(), sha256)
        return shown_image(self.images, sha256)

    def store(self) -> Store:
        """This thread's handle on the store (a connection cannot be shared across threads)."""
        s = getattr(self.local, "store", None)
        if s is None:
            s = self.local.store = self._open()
        return s

    def _open(self) -> Store:
        """A handle on the store: the SQLite file, or the team store (reviews its only write)."""
        if self.team:
            from grandrounds.store.team.connection import TeamStore

            return TeamStore(self.dsn, reviews=True)
        return Store(self.store_path)


@dataclass(frozen=True)
class ViewerContext:
    """Everything a request is checked against and answered from.

    ``policy`` says which Host headers are this viewer's, ``guard`` holds the access token (None
    on loopback) and the CSRF key, ``idle_timeout`` bounds each wait for the client (a whole
    request must be in within three times that)."""

    state: ViewerState
    policy: HostPolicy
    guard: Guard
    idle_timeout: float = 10.0

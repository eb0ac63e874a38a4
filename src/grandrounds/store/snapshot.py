"""Consistent copies of a store written elsewhere (a shared folder, a mounted bucket).

A worker keeps its store on local disk (SQLite's WAL journal does not work over a network file
system) and writes snapshots of it to ``--snapshot-to``: at exit, on SIGTERM, and every few
minutes while it runs. A snapshot is SQLite's online backup of the store (a consistent copy even
while the run writes), written to a hidden temporary file in the destination folder and renamed
over the snapshot's name, so a reader never sees half a file. A worker started with a missing
local store and a snapshot of the same name restores it first (a preempted shard resumes on
another node where it stopped).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path
from types import TracebackType

from grandrounds.core.errors import StoreError
from grandrounds.store.images import MEDIA_TYPES, ImageStore, ImageStoreError


def snapshot(store_file: Path, dest: Path) -> Path:
    """Write a consistent copy of ``store_file`` to ``dest`` (atomically renamed); returns ``dest``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        src = sqlite3.connect(f"file:{store_file}?mode=ro", uri=True, timeout=30)
        try:
            out = sqlite3.connect(tmp)
            try:
                src.backup(out)
                # A snapshot is read elsewhere, maybe on a file system where WAL does not work.
                out.execute("PRAGMA journal_mode=DELETE")
            finally:
                out.close()
        finally:
            src.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        # the images first: a snapshot in place names no image its folder lacks
        copy_images(ImageStore.beside(store_file), ImageStore.beside(dest))
        os.replace(tmp, dest)
    except (sqlite3.Error, OSError, ImageStoreError) as e:
        tmp.unlink(missing_ok=True)
        raise StoreError(store_file, f"snapshot to {dest} failed: {e}") from None
    return dest


def copy_images(src: ImageStore, dest: ImageStore) -> int:
    """Copy the images of ``src`` that ``dest`` lacks (by sha256: each file's bytes are checked
    against its name, so an altered file is refused, never copied); returns how many were copied."""
    copied = 0
    if not src.root.is_dir():
        return 0
    for folder in sorted(src.root.iterdir()):
        if not folder.is_dir() or folder.is_symlink():
            continue
        for f in sorted(folder.iterdir()):
            media = MEDIA_TYPES.get(f.suffix, "application/octet-stream")
            if f.name.startswith(".") or f.is_symlink() or not f.is_file():
                continue
            if dest.find(f.stem) is not None:
                continue
            copied += dest.put(f.stem, media, src.get(f.stem, media))
    return copied


def restore(snapshot_file: Path, store_file: Path) -> bool:
    """Copy ``snapshot_file`` to ``store_file`` where the store does not exist yet (a worker that
    restarts elsewhere); False where there is nothing to restore or the store is there already."""
    if store_file.exists() or not snapshot_file.is_file():
        return False
    store_file.parent.mkdir(parents=True, exist_ok=True)
    snapshot(snapshot_file, store_file)
    return True


class Snapshots:
    """Snapshots of ``store_file`` to ``dest`` every ``every`` seconds while the block runs, and one
    as it ends (normally, on an error, on Ctrl-C or SIGTERM). ``taken`` counts those written."""

    def __init__(self, store_file: Path, dest: Path, every: float) -> None:
        self.store_file, self.dest, self.every = store_file, dest, every
        self.taken = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def take(self) -> None:
        with self._lock:
            if not self.store_file.exists():
                return
            try:
                snapshot(self.store_file, self.dest)
                self.taken += 1
            except StoreError as e:
                self.errors.append(str(e))

    def _loop(self) -> None:
        next_at = time.monotonic() + self.every
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            self.take()
            next_at = time.monotonic() + self.every

    def __enter__(self) -> Snapshots:
        if self.every > 0:
            self._thread = threading.Thread(target=self._loop, name="snapshots", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.take()

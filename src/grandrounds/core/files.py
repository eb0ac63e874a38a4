"""Files a command writes for the user (``run --out``, ``plan.json``, reports and their side files,
bundles), and the files a data file names (:func:`inside`).

Each file is written under a temporary name created exclusively in its own directory
(:func:`tempfile.mkstemp`: ``O_CREAT | O_EXCL``, so a link planted at that name is never followed
and never written through), then renamed over the final name (:func:`os.replace`: a link planted
at the final name is replaced, not followed). Until every file of the set is complete nothing is
renamed, so a failure (a full disk, an error in the data) leaves the earlier files as they were.
A directory owned by another user (other than root) is refused, since its owner could swap what
is in it while we write.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from grandrounds.core.errors import ConfigError, DataError


def _foreign(st: os.stat_result) -> bool:
    """Whether ``st`` belongs to a user other than us and root (never on a platform without uids)."""
    getuid = getattr(os, "getuid", None)
    return getuid is not None and st.st_uid not in (getuid(), 0)


def output_dir(directory: Path, create: bool = True) -> Path:
    """``directory``, checked (and made, with ``create``) as a place to write into: a directory, ours
    or root's, and where it is a symbolic link, one that is ours or root's too."""
    if create and not os.path.lexists(directory):
        directory.mkdir(parents=True, exist_ok=True)
    try:
        link = os.lstat(directory)
        target = os.stat(directory)
    except OSError as e:
        raise ConfigError(f"output directory {directory}: {e.strerror or e}") from None
    if not stat.S_ISDIR(target.st_mode):
        raise ConfigError(f"output directory {directory} is not a directory")
    if _foreign(link) or _foreign(target):
        owner = link.st_uid if _foreign(link) else target.st_uid
        raise ConfigError(
            f"output directory {directory} belongs to another user (uid {owner}): "
            "refusing to write there; choose a directory of your own"
        )
    return directory


def inner_dir(root: Path, rel: Path | str) -> Path:
    """``root/rel``, a folder made one level at a time inside ``root`` (itself checked as
    :func:`output_dir`): a level that exists as a symbolic link, or as anything but a folder, is a
    ConfigError, so nothing is ever written through a link planted inside ``root``."""
    here = output_dir(root)
    for part in Path(rel).parts:
        if part in ("", ".", "..") or Path(part).is_absolute():
            raise ConfigError(f"{root}: {str(rel)!r} is not a path inside it")
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            here.mkdir()
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
            raise ConfigError(
                f"{here} is {what}: refusing to write through it; remove it or choose another folder"
            )
    return here


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class Staged:
    """Files of one set, each written under an exclusive temporary name beside its final name."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []  # (temporary, final)
        self._checked: set[Path] = set()

    def open(self, final: Path, mode: str = "w") -> IO[Any]:
        """A new file that becomes ``final`` when the set is committed (``mode`` "w" or "wb")."""
        parent = final.parent if str(final.parent) else Path(".")
        if parent not in self._checked:
            output_dir(parent)
            self._checked.add(parent)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{final.name}.", suffix=".tmp")
        self._pending.append((Path(tmp), final))
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(
                    fd, 0o666 & ~_umask()
                )  # as an ordinary new file would be, not mkstemp's 0600
            if "b" in mode:
                return os.fdopen(fd, mode)
            return os.fdopen(fd, mode, encoding="utf-8", newline="")
        except BaseException:
            os.close(fd)
            raise

    def commit(self) -> None:
        for tmp, final in self._pending:
            os.replace(tmp, final)
        self._pending.clear()

    def discard(self) -> None:
        for tmp, _ in self._pending:
            tmp.unlink(missing_ok=True)
        self._pending.clear()


@contextmanager
def staged() -> Iterator[Staged]:
    """``with staged() as files: with files.open(path) as f: ...``: every file opened is renamed into
    place when the block ends without error; on any error (or interrupt) every temporary is removed
    and no final file changes. A failed write (OSError) becomes a one-line ConfigError naming the files."""
    files = Staged()
    try:
        yield files
    except OSError as e:  # a full disk, a quota, a file size limit: one line, and nothing replaced
        names = ", ".join(str(final) for _, final in files._pending) or "the output"
        files.discard()
        raise ConfigError(
            f"could not write {names}: {e.strerror or e}; no file was replaced (earlier ones are as they were)"
        ) from None
    except BaseException:
        files.discard()
        raise
    files.commit()


def write_text(path: Path, text: str) -> None:
    """``text`` written to ``path`` as UTF-8, atomically and without following a planted link."""
    with staged() as files, files.open(path) as f:
        f.write(text)


def inside(root: Path, name: str, source: Path | str, record: str | int | None) -> Path:
    """The file a data file (``source``, at ``record``) names as ``name``, relative to ``root``:
    resolved, symbolic links followed, and required to lie inside ``root`` (itself resolved).

    An absolute name, one that climbs out with ``..``, or one that leads out through a link is a
    one-line DataError naming the data file, the record and the name: a data file downloaded from
    anywhere must not make a run read (and send, and store) a file of the user's elsewhere."""
    try:
        base = root.resolve()
        path = (base / name).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # a link loop, a NUL byte in the name
        raise DataError(source, record, f"path {name!r} cannot be resolved ({e})") from None
    if not path.is_relative_to(base):
        raise DataError(
            source,
            record,
            f"path {name!r} leads outside the data folder {base} (to {str(path)!r}); "
            "a file a data file names must stay inside its folder",
        )
    return path

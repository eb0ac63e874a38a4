"""Where a benchmark's data comes from: a local path, or its public source through a checksummed cache."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from grandrounds.core.errors import ConfigError, DataError
from grandrounds.sources.downloads import RemoteFile, cache_dir, fetch

__all__ = ["RemoteFile", "cache_dir", "fetch", "resolve"]


class HasData(Protocol):
    """What :func:`resolve` reads of a benchmark: its name and public files (and, optionally, a
    ``default_path()`` of packaged data)."""

    name: str
    remote_files: Sequence[RemoteFile]


def resolve(bench: HasData, data: Path | None) -> Path:
    """The path ``bench.load`` should read: ``data`` if given, else the packaged or cached public files."""
    if data is not None:
        if not data.exists():
            raise DataError(data, None, "file or directory not found")
        return data
    default = getattr(bench, "default_path", None)
    if callable(default):
        return Path(default())
    if not bench.remote_files:
        raise ConfigError(f"benchmark {bench.name!r} has no public download; pass --data PATH")
    root = cache_dir() / bench.name
    for rf in bench.remote_files:
        fetch(rf, root)
    return root

"""Where a benchmark's data comes from: a local path, or its public source through a checksummed cache."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from grandrounds.core.errors import ConfigError, DataError
from grandrounds.sources.downloads import RemoteFile, cache_dir, fetch
from grandrounds.sources.mirrors import bundle_root, bundled_data, bundled_file, bundled_folder

__all__ = ["RemoteFile", "cache_dir", "fetch", "resolve"]


class HasData(Protocol):
    """What :func:`resolve` reads of a benchmark: its name, public files and ``default_path()``
    (its packaged data, None where it has none)."""

    @property
    def name(self) -> str: ...

    @property
    def remote_files(self) -> Sequence[RemoteFile]: ...

    def default_path(self) -> Path | None: ...


def resolve(bench: HasData, data: Path | None) -> Path:
    """The path ``bench.load`` should read: ``data`` if given, else the packaged or cached public files."""
    if data is not None:
        if not data.exists():
            raise DataError(data, None, "file or directory not found")
        return data
    packaged = bench.default_path()
    if packaged is not None:
        return Path(packaged)
    bundle = bundle_root()
    if bundle is not None:
        return _from_bundle(bench, bundle)
    if not bench.remote_files:
        raise ConfigError(f"benchmark {bench.name!r} has no public download; pass --data PATH")
    root = cache_dir() / bench.name
    for rf in bench.remote_files:
        fetch(rf, root)
    return root


def _from_bundle(bench: HasData, bundle: Path) -> Path:
    """``bench``'s data in the bundle, each file checked against the manifest: the local file the
    bundle was made from where one was given, else the public files in the cache's layout."""
    given = bundled_data(bundle, bench.name)
    if given is not None and given != f"data/{bench.name}":
        if not given.startswith(f"data/{bench.name}/") or ".." in given.split("/"):
            raise DataError(
                bundle / "manifest.json",
                bench.name,
                f"data path {given!r} lies outside data/{bench.name}/",
            )
        return bundled_folder(bundle, given)  # a file, or a folder of files, as it was given
    if not bench.remote_files:
        raise ConfigError(
            f"benchmark {bench.name!r} has no data in the bundle {bundle}; pass --data PATH, or write the "
            f"bundle with `grandrounds bundle --data {bench.name}=PATH`"
        )
    for rf in bench.remote_files:
        bundled_file(bundle, f"data/{bench.name}/{rf.filename}", rf.sha256)
    return bundle / "data" / bench.name

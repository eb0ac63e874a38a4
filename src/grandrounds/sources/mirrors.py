"""Where downloads are fetched from: mirrors of the public hosts, and bundles read with no network.

Every file grandrounds downloads has a canonical URL (the one written in the source, recorded in
fingerprints and download records). A mirror changes only where the bytes are fetched from; the
file must still hash to its pinned sha256 (or to the one recorded at its first download).

- ``GRANDROUNDS_GITHUB_MIRROR``: replaces ``https://raw.githubusercontent.com`` in every URL on that
  host (data files and the official upstream files). Both common shapes work: a proxy that takes
  the whole URL after its own (``https://ghproxy.example/https://raw.githubusercontent.com``) and a
  host that serves the same paths (``https://raw.gitmirror.example``).
- ``HF_ENDPOINT``: replaces ``https://huggingface.co``, as the Hugging Face hub library reads it
  (e.g. ``https://hf-mirror.com``).
- ``GRANDROUNDS_MIRROR``: every other host, as ``<mirror>/<host>/<path>`` (a folder laid out by
  host, served by any static file server, or a proxy with that shape); also GitHub and Hugging Face
  files when their own variables are not set.

``GRANDROUNDS_BUNDLE`` names a folder written by ``grandrounds bundle``: files are read from it and
checked against its ``manifest.json``, and nothing is downloaded.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from grandrounds.core.errors import DataError
from grandrounds.core.hashing import file_sha256

GITHUB_MIRROR_ENV = "GRANDROUNDS_GITHUB_MIRROR"
HF_ENDPOINT_ENV = "HF_ENDPOINT"
MIRROR_ENV = "GRANDROUNDS_MIRROR"
BUNDLE_ENV = "GRANDROUNDS_BUNDLE"
MANIFEST = "manifest.json"
#: Origins with their own mirror variable.
GITHUB_RAW = "https://raw.githubusercontent.com"
HUGGING_FACE = "https://huggingface.co"

#: What the first-run error and a failed download say: every way to a run without the public host.
WAYS_OUT = (
    "to prepare: `grandrounds fetch BENCHMARK` where the network works (fills the cache), "
    f"or `grandrounds bundle --out DIR BENCHMARK` there and `{BUNDLE_ENV}=DIR` (or `run --bundle DIR`) here, "
    f"or a mirror ({GITHUB_MIRROR_ENV}, {HF_ENDPOINT_ENV}, {MIRROR_ENV}; `run --mirror URL`)"
)


#: Settings given as command options (``--mirror``, ``--bundle``...), over the environment's. They
#: are this command's: :func:`set_overrides` replaces all of them at once, so one command's options
#: never outlive it in a process that runs several (tests, notebooks), and none is passed on to
#: child processes through the environment.
_overrides: dict[str, str] = {}


def set_overrides(values: dict[str, str]) -> None:
    """Use ``values`` (environment variable name -> value) over the environment until the next call."""
    _overrides.clear()
    _overrides.update({k: v for k, v in values.items() if v})


def _env(name: str) -> str:
    return (_overrides.get(name) or os.environ.get(name, "")).strip().rstrip("/")


def mirrored(url: str) -> str:
    """The URL ``url`` is fetched from under the mirror settings (``url`` itself when none applies)."""
    for origin, env in ((GITHUB_RAW, GITHUB_MIRROR_ENV), (HUGGING_FACE, HF_ENDPOINT_ENV)):
        base = _env(env)
        if base and (url == origin or url.startswith(origin + "/")):
            return base + url[len(origin) :]
    generic = _env(MIRROR_ENV)
    parts = urlsplit(url)
    if generic and parts.scheme in ("http", "https") and parts.netloc:
        rest = url.split(parts.netloc, 1)[1]
        return f"{generic}/{parts.netloc}{rest}"
    return url


# ---- download attempts ------------------------------------------------------------------

_attempts: list[str] = []
_attempts_guard = threading.Lock()


def note_attempt(url: str) -> None:
    """Record that the network was asked for ``url`` (what :func:`download_attempts` counts), and log
    it (logger ``grandrounds.downloads``, level INFO)."""
    with _attempts_guard:
        _attempts.append(url)
    logging.getLogger("grandrounds.downloads").info("download attempt: %s", url)


def download_attempts() -> list[str]:
    """Every URL this process has tried to download, in order (a bundled run's list stays empty)."""
    with _attempts_guard:
        return list(_attempts)


# ---- bundles ----------------------------------------------------------------------------


def read_manifest(path: Path, remedy: str) -> dict[str, Any]:
    """A bundle's manifest, read and checked (an object with a ``files`` table), or a one-line
    DataError naming it and saying ``remedy``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # json nests by recursion: a manifest nested 100,000 deep
        raise DataError(
            path, None, f"unreadable bundle manifest (nested too deep); {remedy}"
        ) from None
    except (OSError, ValueError) as e:
        raise DataError(path, None, f"unreadable bundle manifest ({e}); {remedy}") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise DataError(path, None, f"not a bundle manifest (no 'files' table); {remedy}")
    return data


def bundle_root() -> Path | None:
    """The bundle folder named by ``$GRANDROUNDS_BUNDLE``, or None."""
    value = (_overrides.get(BUNDLE_ENV) or os.environ.get(BUNDLE_ENV, "")).strip()
    return Path(value) if value else None


_manifests: dict[Path, dict[str, Any]] = {}
_verified: dict[tuple[Path, int, int], str] = {}
_bundle_guard = threading.Lock()


def manifest(root: Path) -> dict[str, Any]:
    """The bundle's manifest (``{"files": {relative path: {sha256, bytes, ...}}, "data": {...}}``)."""
    with _bundle_guard:
        if root in _manifests:
            return _manifests[root]
    path = root / MANIFEST
    if not path.is_file():
        raise DataError(
            path,
            None,
            f"no bundle manifest here: {BUNDLE_ENV} must name a folder written by `grandrounds bundle --out DIR`",
        )
    data = read_manifest(path, "write the bundle again")
    with _bundle_guard:
        _manifests[root] = data
    return data


def bundled_file(root: Path, rel: str, pinned: str | None = None) -> Path:
    """``root/rel`` checked against the manifest's sha256 (and ``pinned``, where the source pins one).

    A file the manifest does not list, a missing file or a changed one is a DataError naming it and
    saying how to make a bundle that holds it; nothing is downloaded.
    """
    entry = manifest(root)["files"].get(rel)
    path = root / rel
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        raise DataError(
            path,
            None,
            f"not in the bundle {root} (its manifest does not list {rel}); "
            "write a bundle that holds it with `grandrounds bundle --out DIR BENCHMARK`",
        )
    if not path.is_file():
        raise DataError(
            path,
            None,
            f"listed in {root / MANIFEST} but missing; copy the whole bundle folder again",
        )
    stat = path.stat()
    key = (path, stat.st_size, stat.st_mtime_ns)
    with _bundle_guard:
        got = _verified.get(key)
    if got is None:
        got = file_sha256(path)
        with _bundle_guard:
            _verified[key] = got
    if got != entry["sha256"]:
        raise DataError(
            path,
            None,
            f"does not match the bundle manifest (sha256 {got}, manifest {entry['sha256']}); copy the bundle again",
        )
    if pinned is not None and got != pinned:
        raise DataError(path, None, f"does not match its pinned sha256 {pinned} (got {got})")
    return path


def bundled_folder(root: Path, rel: str) -> Path:
    """The folder ``root/rel`` with every file the manifest lists under it checked as
    :func:`bundled_file` checks one (a folder given with ``bundle --data NAME=FOLDER``)."""
    prefix = rel.rstrip("/") + "/"
    listed = [name for name in manifest(root)["files"] if name.startswith(prefix)]
    if not listed:
        return bundled_file(root, rel)  # names neither a file nor a folder: the one-line error
    for name in listed:
        bundled_file(root, name)
    return root / rel


def bundled_data(root: Path, benchmark: str) -> str | None:
    """The path (relative to the bundle) the manifest gives for ``benchmark``'s data, or None."""
    entry = manifest(root).get("data", {}).get(benchmark)
    return (
        entry.get("path")
        if isinstance(entry, dict) and isinstance(entry.get("path"), str)
        else None
    )

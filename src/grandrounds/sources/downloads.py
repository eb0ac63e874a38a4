"""Public files fetched into a checksummed cache: benchmark data and upstream reference files.

A file whose checksum is published (``RemoteFile.sha256``) is checked against it on every use. A
file whose checksum cannot be known in advance (an upstream branch that moves, a release never
hashed) gets its sha256 recorded at its first download, in ``<file>.download.json`` beside it
(URL, sha256, bytes, time); every later use compares the file, or a fresh download of it, with that
record and warns (:class:`ChecksumChanged`) when they differ. The data used is then not the data
first recorded, and the run's fingerprint (``dataset_sha256``) says which it was.
"""

from __future__ import annotations

import http.client
import json
import os
import tempfile
import urllib.request
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grandrounds.core.errors import DataError
from grandrounds.core.files import output_dir, write_text
from grandrounds.core.hashing import file_sha256
from grandrounds.sources.mirrors import BUNDLE_ENV, WAYS_OUT, bundle_root, mirrored, note_attempt

#: Suffix of the record kept beside a downloaded file that has no published checksum.
RECORD_SUFFIX = ".download.json"


class DownloadError(DataError):
    """A file that had to be downloaded and could not be (network, mirror, checksum, or a bundled run)."""


class ChecksumChanged(UserWarning):
    """A public file without a published checksum differs from the one recorded at its first download."""


@dataclass(frozen=True)
class RemoteFile:
    """A public file: where it lives, what it must hash to, and its name in the cache."""

    url: str
    filename: str
    sha256: str | None = None


def cache_dir() -> Path:
    """``$GRANDROUNDS_CACHE`` or ``~/.cache/grandrounds``."""
    env = os.environ.get("GRANDROUNDS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "grandrounds"


#: The most bytes a download may bring when its file is not pinned with a known size (a file
#: without a published sha256); ``$GRANDROUNDS_MAX_DOWNLOAD_MB`` sets another.
DEFAULT_MAX_DOWNLOAD_BYTES = 2 * 1024**3
MAX_DOWNLOAD_ENV = "GRANDROUNDS_MAX_DOWNLOAD_MB"


def size_bound(rf: RemoteFile) -> tuple[int, str]:
    """(most bytes ``rf``'s download may bring, why): the pinned file's own size where its sha256
    is pinned and its size known (:mod:`grandrounds.sources.pinned_sizes`), else the default."""
    from grandrounds.sources.pinned_sizes import PINNED_BYTES

    if rf.sha256 is not None and rf.sha256 in PINNED_BYTES:
        return PINNED_BYTES[rf.sha256], "the size of the file its sha256 pins"
    env = os.environ.get(MAX_DOWNLOAD_ENV, "").strip()
    try:
        if env:
            return int(float(env) * 1024 * 1024), f"${MAX_DOWNLOAD_ENV}"
    except ValueError:
        pass
    return DEFAULT_MAX_DOWNLOAD_BYTES, f"the default bound (${MAX_DOWNLOAD_ENV} sets another)"


#: Set (to anything but "", "0", "false" or "no"), nothing is downloaded from another machine: a file
#: that is neither cached, bundled nor on a mirror served from this machine is one line at once,
#: instead of a wait for a network that is not there. The test suite sets it.
OFFLINE_ENV = "GRANDROUNDS_OFFLINE"


#: The URLs this process refused under OFFLINE_ENV (the test suite reads it to tell a test that
#: needed a file it does not have from one that failed).
OFFLINE_REFUSALS: list[str] = []


def offline() -> bool:
    return os.environ.get(OFFLINE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def on_this_machine(url: str) -> bool:
    """Whether ``url`` names this machine (a loopback address or ``localhost``), or a local file."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "file":
        return True
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fetch(rf: RemoteFile, dest_dir: Path, timeout: float = 60.0) -> Path:
    """Download ``rf`` into ``dest_dir`` unless a copy with the right checksum is there.

    The file is written to a temporary name and renamed only after its sha256 matches, so an
    interrupted or corrupted download never passes for the real file. Without a published sha256,
    the first download's is recorded beside the file and later ones are compared with it
    (:func:`check_recorded`); a record naming another URL means the cached copy came from elsewhere,
    and the file is downloaded again.
    """
    dest = dest_dir / rf.filename
    if rf.sha256 is None:
        record = recorded(dest)
        if dest.exists() and (record is None or record.get("url") == rf.url):
            check_recorded(rf, dest)
            return dest
    elif dest.exists() and file_sha256(dest) == rf.sha256:
        return dest
    if bundle_root() is not None:  # a bundled run reads what the bundle holds and never downloads
        raise DownloadError(
            rf.url,
            None,
            f"not in the bundle {bundle_root()} ({BUNDLE_ENV}), and a bundled run downloads nothing; "
            "write a bundle that holds it with `grandrounds bundle --out DIR BENCHMARK`",
        )
    source = mirrored(rf.url)
    shown = rf.url if source == rf.url else f"{rf.url} (from {source})"
    if offline() and not on_this_machine(source):
        OFFLINE_REFUSALS.append(rf.url)
        raise DownloadError(
            shown,
            None,
            f"not downloaded: {OFFLINE_ENV} is set, and only a mirror on this machine is asked; {WAYS_OUT}",
        )
    output_dir(dest_dir)  # made if missing; a folder of another user's is refused
    fd, tmp_name = tempfile.mkstemp(dir=dest_dir, prefix=".part-")
    tmp = Path(tmp_name)
    try:
        note_attempt(source)
        bound, why = size_bound(rf)
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(source, timeout=timeout) as resp:  # noqa: S310
            expected = resp.headers.get("Content-Length")
            if expected is not None and expected.isdigit() and int(expected) > bound:
                raise DownloadError(
                    shown,
                    None,
                    f"the server offers {int(expected):,} bytes, over {bound:,} ({why}); not downloaded",
                )
            written = 0
            while block := resp.read(min(1 << 20, bound + 1 - written)):
                written += len(block)
                if written > bound:  # stopped here: the rest is never read, nor written to disk
                    raise DownloadError(
                        shown,
                        None,
                        f"download passed {bound:,} bytes ({why}); stopped before checking its sha256",
                    )
                out.write(block)
        if expected is not None and expected.isdigit() and written != int(expected):
            raise DownloadError(
                shown,
                None,
                f"download interrupted: {written} of {expected} bytes; pass --data PATH to use a local copy",
            )
        tmp.chmod(0o644)
        got = file_sha256(tmp)
        if rf.sha256 is not None and got != rf.sha256:
            raise DownloadError(
                shown, None, f"checksum mismatch: expected sha256 {rf.sha256}, got {got}"
            )
        tmp.replace(dest)
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise DownloadError(
            shown,
            None,
            f"download failed ({type(e).__name__}: {e}); pass --data PATH to use a local copy; {WAYS_OUT}",
        ) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    if rf.sha256 is None:
        check_recorded(rf, dest, got)
    return dest


def record_path(dest: Path) -> Path:
    """Where the first-download record of ``dest`` is kept: beside it, ``<name>.download.json``."""
    return dest.with_name(dest.name + RECORD_SUFFIX)


def recorded(dest: Path) -> dict[str, Any] | None:
    """The first-download record of ``dest`` (url, sha256, bytes, recorded_at), or None. An unreadable
    record is a DataError naming it: it is the only trace of what was first downloaded."""
    path = record_path(dest)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise DataError(
            path,
            None,
            f"unreadable download record ({e}); delete it to record the current file anew",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str):
        raise DataError(
            path,
            None,
            "download record without a sha256; delete it to record the current file anew",
        )
    return data


def check_recorded(rf: RemoteFile, dest: Path, sha256: str | None = None) -> str:
    """The sha256 of ``dest`` (``sha256`` if already computed), recorded beside it if nothing is
    recorded for ``rf.url`` yet; a warning when it differs from the record. The record is kept as it
    was, so every use of a changed file warns until the record is deleted (accepting the new file)."""
    got = sha256 or file_sha256(dest)
    record = recorded(dest)
    if record is None or record.get("url") != rf.url:
        entry = {
            "url": rf.url,
            "sha256": got,
            "bytes": dest.stat().st_size,
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        write_text(record_path(dest), json.dumps(entry, indent=1) + "\n")  # never through a link
    elif record["sha256"] != got:
        warnings.warn(
            f"{dest}: differs from the file first downloaded from {rf.url} on {record.get('recorded_at', '?')} "
            f"(sha256 {record['sha256']} then, {got} now); results on it are kept apart by their dataset hash. "
            f"Delete {record_path(dest).name} to accept the new file.",
            ChecksumChanged,
            stacklevel=2,
        )
    return got

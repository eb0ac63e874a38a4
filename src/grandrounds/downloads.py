"""Public files fetched into a checksummed cache: benchmark data and upstream reference files."""

from __future__ import annotations

import http.client
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from grandrounds.errors import DataError
from grandrounds.hashing import file_sha256


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


def fetch(rf: RemoteFile, dest_dir: Path, timeout: float = 60.0) -> Path:
    """Download ``rf`` into ``dest_dir`` unless a copy with the right checksum is there.

    The file is written to a temporary name and renamed only after its sha256 matches, so an
    interrupted or corrupted download never passes for the real file.
    """
    dest = dest_dir / rf.filename
    if dest.exists() and (rf.sha256 is None or file_sha256(dest) == rf.sha256):
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest_dir, prefix=".part-")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(rf.url, timeout=timeout) as resp:  # noqa: S310
            expected = resp.headers.get("Content-Length")
            written = 0
            while block := resp.read(1 << 20):
                out.write(block)
                written += len(block)
        if expected is not None and expected.isdigit() and written != int(expected):
            raise DataError(rf.url, None, f"download interrupted: {written} of {expected} bytes; pass --data PATH to use a local copy")
        tmp.chmod(0o644)
        got = file_sha256(tmp)
        if rf.sha256 is not None and got != rf.sha256:
            raise DataError(rf.url, None, f"checksum mismatch: expected sha256 {rf.sha256}, got {got}")
        tmp.replace(dest)
        return dest
    except (OSError, http.client.HTTPException, ValueError) as e:
        raise DataError(rf.url, None, f"download failed ({type(e).__name__}: {e}); pass --data PATH to use a local copy") from None
    finally:
        if tmp.exists():
            tmp.unlink()

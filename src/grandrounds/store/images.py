"""Images beside the store, content-addressed: each stored once however many requests name it.

A request names an image by the sha256 of the bytes sent (``ImagePart.sha256``); those bytes are
kept in ``<store>.images/<first two hex digits>/<sha256><extension>``, so every answer can be
shown with the image it was given and replayed offline. A file is written to a temporary name
and renamed into place, and is never rewritten: its name is its content's hash, checked again
when it is read.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from grandrounds.core.errors import GrandroundsError

#: File extension per media type (anything else is kept as ``.bin``).
EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp"}
MEDIA_TYPES = {v: k for k, v in EXTENSIONS.items()}


class ImageStoreError(GrandroundsError):
    """An image file in the store is missing or does not match its name."""


class ImageStore:
    """The images of one store, under ``root`` (``<store path>.images``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def beside(cls, store_path: Path | str) -> ImageStore:
        p = Path(store_path)
        return cls(p.with_name(p.name + ".images"))

    def path(self, sha256: str, media_type: str) -> Path:
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise ImageStoreError(f"not an image hash: {sha256!r}")
        return self.root / sha256[:2] / (sha256 + EXTENSIONS.get(media_type, ".bin"))

    def put(self, sha256: str, media_type: str, data: bytes) -> bool:
        """Keep ``data`` under its hash; True when it was written now, False when already there."""
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ImageStoreError(f"image {sha256[:12]}: its bytes do not hash to its name")
        dest = self.path(sha256, media_type)
        if dest.exists():
            return False
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
        return True

    def get(self, sha256: str, media_type: str) -> bytes:
        """The bytes of a stored image, checked against its hash."""
        p = self.path(sha256, media_type)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise ImageStoreError(f"image {sha256[:12]} is not in {self.root}") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ImageStoreError(f"{p}: the file does not match its hash (changed on disk)")
        return data

    def find(self, sha256: str) -> tuple[Path, str] | None:
        """The file holding an image and its media type, whatever its extension, or None."""
        if len(sha256) != 64:
            return None
        folder = self.root / sha256[:2]
        for ext, media in MEDIA_TYPES.items():
            p = folder / (sha256 + ext)
            if p.exists():
                return p, media
        return None

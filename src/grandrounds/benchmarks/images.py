"""Images read from a benchmark's files and prepared the way its protocol says, once per run.

How an image is prepared changes what a model sees, so it is a declared setting of every image
benchmark (:data:`IMAGE_PARAMS`, ``--param image_format=png`` ...), part of its spec, run id and
fingerprint: runs prepared differently are never ranked together. Each benchmark's reference
protocol names its own defaults.

- ``image_format``: ``keep`` sends the file's bytes unchanged, unless another setting has to
  change the pixels (a size limit, a colour mode, an EXIF rotation), which re-encodes them as PNG
  (lossless); ``png`` and ``jpeg`` always re-encode (JPEG at ``image_quality``).
- ``image_max_side`` / ``image_max_pixels``: shrink (never enlarge) to at most that many pixels on
  the long side / in all, keeping the aspect ratio (Lanczos resampling); 0 is no limit.
- ``image_exif``: apply the EXIF orientation tag before anything else (what a viewer shows).
- ``image_colour``: ``keep``, ``RGB`` or ``L`` (greyscale).
- ``image_detail``: OpenAI's ``detail`` sent with each image (``low``, ``high``, ``auto``; empty:
  not sent); it is part of the image part, so of every request's key.

Pillow decodes and encodes. A file is read and prepared once per run, however many questions
show it (:class:`ImageLoader` keeps the prepared part by path), and its bytes travel with the
sample's :class:`~grandrounds.core.records.ImagePart`.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import content_hash
from grandrounds.core.params import Param
from grandrounds.core.records import ImagePart, Sample

FORMATS = ("keep", "png", "jpeg")
COLOURS = ("keep", "RGB", "L")
DETAILS = ("", "low", "high", "auto")
_MEDIA = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
}


@dataclass(frozen=True)
class ImagePrep:
    """How images are prepared (see the module docstring); the defaults send files as they are."""

    image_format: str = "keep"
    image_quality: int = 95
    image_max_side: int = 0
    image_max_pixels: int = 0
    image_exif: bool = True
    image_colour: str = "keep"
    image_detail: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ImagePrep:
        prep = cls(**{k: params[k] for k in cls.__dataclass_fields__ if k in params})
        if not 1 <= prep.image_quality <= 100:
            raise ConfigError(
                f"--param image_quality={prep.image_quality}: a JPEG quality is 1 to 100"
            )
        return prep


def image_params(defaults: ImagePrep = ImagePrep()) -> tuple[Param, ...]:
    """The declared image settings, with a benchmark's reference defaults."""
    d = defaults
    return (
        Param(
            "image_format",
            str,
            d.image_format,
            "keep (the file's bytes) | png | jpeg: how images are sent",
            choices=FORMATS,
        ),
        Param(
            "image_quality",
            int,
            d.image_quality,
            "JPEG quality when image_format=jpeg (1-100)",
            minimum=1,
        ),
        Param(
            "image_max_side",
            int,
            d.image_max_side,
            "shrink images to at most this many pixels on the long side (0: no limit)",
            minimum=0,
        ),
        Param(
            "image_max_pixels",
            int,
            d.image_max_pixels,
            "shrink images to at most this many pixels in all (0: no limit)",
            minimum=0,
        ),
        Param("image_exif", bool, d.image_exif, "apply the EXIF orientation before sending"),
        Param("image_colour", str, d.image_colour, "keep | RGB | L (greyscale)", choices=COLOURS),
        Param(
            "image_detail",
            str,
            d.image_detail,
            "OpenAI's detail sent with each image: low | high | auto (empty: not sent)",
            choices=DETAILS,
        ),
    )


def _scale(size: tuple[int, int], prep: ImagePrep) -> float:
    w, h = size
    s = 1.0
    if prep.image_max_side and max(w, h) > prep.image_max_side:
        s = min(s, prep.image_max_side / max(w, h))
    if prep.image_max_pixels and w * h > prep.image_max_pixels:
        s = min(s, (prep.image_max_pixels / (w * h)) ** 0.5)
    return s


def prepare(
    raw: bytes, prep: ImagePrep, where: Path, record: str | int | None
) -> tuple[bytes, str, int, int]:
    """(bytes to send, media type, width, height) of one image file's bytes, as ``prep`` says."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        img: Image.Image = Image.open(io.BytesIO(raw))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(where, record, f"not a readable image ({type(e).__name__}: {e})") from None
    fmt = img.format or ""
    changed = False
    if prep.image_exif and img.getexif().get(0x0112, 1) not in (
        1,
        None,
    ):  # 0x0112: EXIF Orientation
        img, changed = ImageOps.exif_transpose(img), True
    if prep.image_colour != "keep" and img.mode != prep.image_colour:
        img, changed = img.convert(prep.image_colour), True
    s = _scale(img.size, prep)
    if s < 1.0:
        img, changed = (
            img.resize(
                (max(1, round(img.width * s)), max(1, round(img.height * s))),
                Image.Resampling.LANCZOS,
            ),
            True,
        )
    if prep.image_format == "keep" and not changed and fmt in _MEDIA:
        return raw, _MEDIA[fmt], img.width, img.height
    out = io.BytesIO()
    if prep.image_format == "jpeg":
        (img if img.mode in ("RGB", "L") else img.convert("RGB")).save(
            out, "JPEG", quality=prep.image_quality
        )
        return out.getvalue(), "image/jpeg", img.width, img.height
    img.save(out, "PNG")
    return out.getvalue(), "image/png", img.width, img.height


def images_dataset_hash(
    questions: str, samples: Iterable[Sample], prep: ImagePrep, **extra: Any
) -> str:
    """A dataset key for questions asked with images: the question files' hash with the sha256 of
    every image the samples show (an image changed is another dataset) and how they were prepared."""
    shas: set[str] = set()
    for s in samples:
        found = s.metadata.get("image_sha256")
        shas.update([found] if isinstance(found, str) else (found or ()))
    return content_hash(
        {"questions": questions, "images": sorted(shas), "prep": prep.__dict__, **extra}
    )


class ImageLoader:
    """Prepared images by file, each read and prepared once (a benchmark holds one per load)."""

    def __init__(self, prep: ImagePrep) -> None:
        self.prep = prep
        self._parts: dict[Path, ImagePart] = {}
        #: bytes read from disk, counted once per file (what ``bench/`` reports per image)
        self.bytes_read = 0

    def part(self, path: Path, record: str | int | None) -> ImagePart:
        """The prepared image of ``path`` (a DataError naming the record when it is missing or unreadable)."""
        hit = self._parts.get(path)
        if hit is not None:
            return hit
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise DataError(
                path, record, f"image not readable ({e.strerror or type(e).__name__})"
            ) from None
        self.bytes_read += len(raw)
        data, media, w, h = prepare(raw, self.prep, path, record)
        part = ImagePart(
            hashlib.sha256(data).hexdigest(),
            media,
            detail=self.prep.image_detail,
            data=data,
            width=w,
            height=h,
        )
        self._parts[path] = part
        return part

    def blank(self, width: int, height: int) -> ImagePart:
        """A white PNG of ``width`` x ``height`` (the blank-image probe), made once per size."""
        from PIL import Image

        key = Path(f"<blank {width}x{height}>")
        hit = self._parts.get(key)
        if hit is None:
            out = io.BytesIO()
            Image.new("RGB", (max(1, width), max(1, height)), "white").save(out, "PNG")
            data = out.getvalue()
            hit = self._parts[key] = ImagePart(
                hashlib.sha256(data).hexdigest(),
                "image/png",
                detail=self.prep.image_detail,
                data=data,
                width=width,
                height=height,
            )
        return hit

    def pdf_pages(
        self, path: Path, record: str | int | None, max_pages: int, scale: float
    ) -> list[ImagePart]:
        """The first ``max_pages`` pages of a PDF rendered to PNG at ``scale`` x 72 dpi (PDFium),
        then prepared like any image; each page once per run."""
        import pypdfium2 as pdfium

        key = Path(f"{path}#pages={max_pages}@{scale}")
        hits = [self._parts[k] for k in self._parts if str(k).startswith(f"{key}/")]
        if hits:
            return hits
        try:
            raw = path.read_bytes()
            doc = pdfium.PdfDocument(raw)
        except (OSError, pdfium.PdfiumError) as e:
            raise DataError(path, record, f"not a readable PDF ({type(e).__name__}: {e})") from None
        self.bytes_read += len(raw)
        out = []
        try:
            for i in range(min(len(doc), max_pages)):
                buf = io.BytesIO()
                doc[i].render(scale=scale).to_pil().save(buf, "PNG")
                data, media, w, h = prepare(buf.getvalue(), self.prep, path, record)
                part = ImagePart(
                    hashlib.sha256(data).hexdigest(),
                    media,
                    detail=self.prep.image_detail,
                    data=data,
                    width=w,
                    height=h,
                )
                self._parts[Path(f"{key}/{i}")] = part
                out.append(part)
        finally:
            doc.close()
        return out

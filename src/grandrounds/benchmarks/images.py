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
import os
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
            name="image_format",
            type=str,
            default=d.image_format,
            help="keep (the file's bytes) | png | jpeg: how images are sent",
            choices=FORMATS,
        ),
        Param(
            name="image_quality",
            type=int,
            default=d.image_quality,
            help="JPEG quality when image_format=jpeg (1-100)",
            minimum=1,
        ),
        Param(
            name="image_max_side",
            type=int,
            default=d.image_max_side,
            help="shrink images to at most this many pixels on the long side (0: no limit)",
            minimum=0,
        ),
        Param(
            name="image_max_pixels",
            type=int,
            default=d.image_max_pixels,
            help="shrink images to at most this many pixels in all (0: no limit)",
            minimum=0,
        ),
        Param(
            name="image_exif",
            type=bool,
            default=d.image_exif,
            help="apply the EXIF orientation before sending",
        ),
        Param(
            name="image_colour",
            type=str,
            default=d.image_colour,
            help="keep | RGB | L (greyscale)",
            choices=COLOURS,
        ),
        Param(
            name="image_detail",
            type=str,
            default=d.image_detail,
            help="OpenAI's detail sent with each image: low | high | auto (empty: not sent)",
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


#: Modes the PNG encoder writes as they are; any other is converted first (:func:`_png_ready`).
_PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I", "I;16"})


def _eight_bit(img: Any) -> Any:
    """A greyscale image of more than 8 bits (16- or 32-bit integers, floats) as 8-bit greyscale,
    its own darkest..brightest values spread over 0..255 (a constant image: black)."""
    from PIL import Image

    f = img.convert("F")
    lo, hi = f.getextrema()
    if not (hi > lo):  # also NaN
        return Image.new("L", img.size, 0)
    return f.point(lambda v: (v - lo) * 255.0 / (hi - lo)).convert("L")


def _png_ready(img: Any) -> Any:
    """``img`` in a mode PNG holds: CMYK and YCbCr as RGB, float greyscale (and integer layouts
    PNG lacks) as 8-bit (:func:`_eight_bit`), anything else with transparency as RGBA, else RGB."""
    if img.mode in _PNG_MODES:
        return img
    if img.mode in ("I", "F") or img.mode.startswith("I;"):
        return _eight_bit(img)
    if img.mode in ("PA", "RGBa", "La") or "A" in img.mode:
        return img.convert("RGBA")
    return img.convert("RGB")


def _jpeg_ready(img: Any) -> Any:
    """``img`` in a mode JPEG holds (RGB or L): deeper greyscale as 8-bit, the rest as RGB."""
    if img.mode in ("RGB", "L"):
        return img
    if img.mode in ("I", "F") or img.mode.startswith("I;"):
        return _eight_bit(img)
    return img.convert("RGB")


def _line(e: BaseException) -> str:
    """An exception's text on one line (a library's message may hold line breaks)."""
    return " ".join(str(e).split())


def prepare(
    raw: bytes, prep: ImagePrep, where: Path, record: str | int | None
) -> tuple[bytes, str, int, int]:
    """(bytes to send, media type, width, height) of one image file's bytes, as ``prep`` says.

    Whatever Pillow cannot decode, transform or encode is a one-line DataError naming ``where``
    and ``record``. When the pixels are re-encoded, modes the target format cannot hold are
    converted first: CMYK (after its EXIF rotation) to RGB, palette images with transparency to
    RGBA, 16-bit greyscale kept as 16-bit PNG (8-bit for JPEG), 32-bit integer and float images
    (a float TIFF) to 8-bit greyscale spread over their own range."""
    from PIL import Image, UnidentifiedImageError

    try:
        img: Image.Image = Image.open(io.BytesIO(raw))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise DataError(
            where, record, f"not a readable image ({type(e).__name__}: {_line(e)})"
        ) from None
    try:
        return _prepared(img, raw, prep)
    except (OSError, ValueError, TypeError, KeyError, SyntaxError, MemoryError) as e:
        # Pillow's own errors on a mode, a depth or a tag it cannot handle: one line, never a traceback
        raise DataError(
            where,
            record,
            f"image could not be prepared ({img.mode}: {type(e).__name__}: {_line(e)})",
        ) from None


def _prepared(img: Any, raw: bytes, prep: ImagePrep) -> tuple[bytes, str, int, int]:
    from PIL import Image, ImageOps

    fmt = img.format or ""
    changed = False
    # 0x0112: EXIF Orientation
    if prep.image_exif and img.getexif().get(0x0112, 1) not in (1, None):
        img, changed = ImageOps.exif_transpose(img), True
    if prep.image_colour != "keep" and img.mode != prep.image_colour:
        src = _eight_bit(img) if img.mode in ("I", "F") or img.mode.startswith("I;") else img
        img, changed = src.convert(prep.image_colour), True
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
        _jpeg_ready(img).save(out, "JPEG", quality=prep.image_quality)
        return out.getvalue(), "image/jpeg", img.width, img.height
    _png_ready(img).save(out, "PNG")
    return out.getvalue(), "image/png", img.width, img.height


#: The most bytes one image file (or archive member, once inflated) may hold; a larger one is
#: refused before it is read whole. No API takes an image a tenth this size.
MAX_IMAGE_BYTES = 256 * 1024 * 1024


def read_member(archive: Any, name: str, where: Path, record: str | int | None) -> bytes:
    """The member ``name`` of the open ``zipfile.ZipFile`` ``archive``, inflated a block at a time
    with a running count: refused when its declared size, or what it actually inflates to, passes
    :data:`MAX_IMAGE_BYTES` (a small archive whose member inflates to gigabytes stops at the bound).
    Any failure is a one-line DataError naming ``where`` and ``record``."""
    import zipfile
    import zlib

    try:
        info = archive.getinfo(name)
    except KeyError:
        raise DataError(where, record, f"no member {name}") from None
    if info.file_size > MAX_IMAGE_BYTES:
        raise DataError(
            where,
            record,
            f"member {name} declares {info.file_size:,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; not inflated",
        )
    out = bytearray()
    try:
        with archive.open(info) as f:
            while block := f.read(1 << 20):
                out += block
                if len(out) > MAX_IMAGE_BYTES or len(out) > info.file_size:
                    raise DataError(
                        where,
                        record,
                        f"member {name} inflates past {min(MAX_IMAGE_BYTES, info.file_size):,} bytes "
                        f"(it declares {info.file_size:,}); stopped",
                    )
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as e:
        raise DataError(
            where, record, f"member {name} unreadable ({type(e).__name__}: {_line(e)})"
        ) from None
    return bytes(out)


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
            size = path.stat().st_size
            if size > MAX_IMAGE_BYTES:
                raise DataError(
                    path,
                    record,
                    f"image file of {size:,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; not read",
                )
            raw = path.read_bytes()
        except OSError as e:
            raise DataError(
                path, record, f"image not readable ({e.strerror or type(e).__name__})"
            ) from None
        self.bytes_read += len(raw)
        data, media, w, h = prepare(raw, self.prep, path, record)
        part = ImagePart(
            sha256=hashlib.sha256(data).hexdigest(),
            media_type=media,
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
                sha256=hashlib.sha256(data).hexdigest(),
                media_type="image/png",
                detail=self.prep.image_detail,
                data=data,
                width=width,
                height=height,
            )
        return hit

    def pdf_pages(
        self, path: Path, record: str | int | None, max_pages: int, scale: float
    ) -> list[ImagePart]:
        """The first ``max_pages`` pages of a PDF rendered to PNG at ``scale`` x 72 dpi (PDFium, in a
        child process: :func:`render_pdf`), then prepared like any image; each page once per run."""
        key = Path(f"{path}#pages={max_pages}@{scale}")
        hits = [self._parts[k] for k in self._parts if str(k).startswith(f"{key}/")]
        if hits:
            return hits
        try:
            size = path.stat().st_size
            if size > MAX_IMAGE_BYTES:
                raise DataError(
                    path,
                    record,
                    f"PDF of {size:,} bytes, over the limit of {MAX_IMAGE_BYTES:,}; not read",
                )
            raw = path.read_bytes()
        except OSError as e:
            raise DataError(
                path, record, f"PDF not readable ({e.strerror or type(e).__name__})"
            ) from None
        self.bytes_read += len(raw)
        out = []
        for i, png in enumerate(render_pdf(raw, max_pages, scale, path, record)):
            data, media, w, h = prepare(png, self.prep, path, f"{record}, page {i + 1}")
            part = ImagePart(
                sha256=hashlib.sha256(data).hexdigest(),
                media_type=media,
                detail=self.prep.image_detail,
                data=data,
                width=w,
                height=h,
            )
            self._parts[Path(f"{key}/{i}")] = part
            out.append(part)
        return out


#: A PDF page is rendered only if its size times the scale is at most this many pixels, read from
#: the page's dimensions before anything is drawn (5,000 x 5,000; an A4 page at scale 2 is 2 M).
PDF_MAX_PIXELS = 25_000_000
#: Seconds one page may take to render (and the document to open) before the PDF is refused.
PDF_PAGE_SECONDS = 5.0
#: Seconds allowed on top for the renderer's process to start (an interpreter and PDFium).
_START_SECONDS = 5.0


def render_pdf(
    raw: bytes,
    max_pages: int,
    scale: float,
    where: Path,
    record: str | int | None,
    max_pixels: int = PDF_MAX_PIXELS,
    seconds: float = PDF_PAGE_SECONDS,
) -> list[bytes]:
    """The first ``max_pages`` pages of the PDF ``raw`` as PNG bytes, rendered by PDFium in a child
    process (:mod:`grandrounds.benchmarks.pdf_child`, run by path with no secret in its
    environment): a page past ``seconds`` is stopped by ending the process, which a thread could
    not do, and a crash in PDFium ends only the child. Each page's size x ``scale`` is checked
    against ``max_pixels`` before it is drawn. Any failure is a one-line DataError naming the file,
    the record and the page."""
    import queue
    import subprocess
    import sys
    import threading

    env = {"LANG": "C.UTF-8"} | {
        k: os.environ[k] for k in ("PYTHONPATH", "PATH", "SYSTEMROOT") if k in os.environ
    }
    child = subprocess.Popen(
        [
            sys.executable,
            "-s",
            "-B",
            str(Path(__file__).with_name("pdf_child.py")),
            str(max_pages),
            repr(float(scale)),
            str(max_pixels),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    frames: queue.Queue[tuple[bytes, bytes] | None] = queue.Queue()
    reader = threading.Thread(target=_read_frames, args=(child, frames), daemon=True)
    reader.start()
    pages: list[bytes] = []
    opened = False
    try:
        try:
            assert child.stdin is not None
            child.stdin.write(raw)
            child.stdin.close()
        except OSError:
            pass  # the child ended early: what it said (or its exit) is read below
        while True:
            try:
                # until the document is open, the wait covers the child's start too
                got = frames.get(timeout=seconds + (0.0 if opened else _START_SECONDS))
            except queue.Empty:
                step = f"page {len(pages) + 1}" if opened else "document"
                raise DataError(
                    where,
                    record,
                    f"PDF {step} took over {seconds:g} s to render; refused "
                    f"(pages rendered: {len(pages)})",
                ) from None
            if got is None:
                child.wait(5)
                raise DataError(
                    where,
                    record,
                    f"PDF renderer ended without a result at page {len(pages) + 1} "
                    f"(exit code {child.returncode})",
                )
            kind, payload = got
            if kind == b"R":
                opened = True
            elif kind == b"P":
                pages.append(payload)
            elif kind == b"D":
                return pages
            else:
                text = payload.decode("utf-8", "replace")
                raise DataError(where, record, f"PDF page {len(pages) + 1}: {text}")
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(5)
        if child.stdout is not None:
            child.stdout.close()


def _read_frames(child: Any, frames: Any) -> None:
    """The child's frames onto ``frames`` (kind, payload), then None when its output ends."""
    out = child.stdout
    try:
        while True:
            head = out.read(9)
            if len(head) < 9:
                break
            n = int.from_bytes(head[1:], "big")
            payload = out.read(n)
            if len(payload) < n:
                break
            frames.put((head[:1], payload))
    except (OSError, ValueError):
        pass
    frames.put(None)

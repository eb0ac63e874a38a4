"""Small files that ask for a lot: PDFs written object by object (a huge page, a slow shared content
stream, a page tree nested deep), images in unusual modes, archives that inflate far, nested JSON.
Shared by the hardening tests and ``bench/hostile_inputs.py``."""

from __future__ import annotations

import io
import zlib
from pathlib import Path


def pdf(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalogue), with a correct cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def big_page_pdf(points: int) -> bytes:
    """One empty page of ``points`` x ``points`` pt (a few hundred bytes)."""
    return pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] >>" % (points, points),
        ]
    )


def slow_pdf(pages: int = 5, ops: int = 50_000) -> bytes:
    """``pages`` ordinary pages sharing one deflated content stream of ``ops`` overlapping
    semi-transparent strokes: tens of kilobytes, seconds of drawing a page."""
    stroke = b"0.5 w 1 0 0 RG " + b"".join(
        b"%d %d m %d %d l S\n" % (i % 600, (i * 7) % 800, (i * 13) % 600, (i * 3) % 800)
        for i in range(200)
    )
    content = zlib.compress(b"/G gs " + stroke * (ops // 200), 9)
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content)
        + content
        + b"\nendstream",
        b"<< /G << /Type /ExtGState /CA 0.5 >> >>",
    ]
    objs += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 3 0 R "
        b"/Resources << /ExtGState 4 0 R >> >>"
    ] * pages
    return pdf(objs)


def deep_tree_pdf(depth: int = 2000) -> bytes:
    """A page tree of ``depth`` nested /Pages nodes with one page at the bottom."""
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for i in range(depth):
        n = 2 + i
        parent = b" /Parent %d 0 R" % (n - 1) if i else b""
        objs.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (n + 1, parent))
    objs.append(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 200 200] >>" % (depth + 1))
    return pdf(objs)


def deep_json(depth: int) -> str:
    """A JSON array nested ``depth`` deep."""
    return "[" * depth + "]" * depth


def cmyk_rotated_jpeg() -> bytes:
    """A CMYK JPEG carrying an EXIF orientation of 6 (rotate 90)."""
    from PIL import Image

    img = Image.new("CMYK", (40, 20), (0, 128, 255, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


def float_tiff() -> bytes:
    """A 32-bit float greyscale TIFF with values from -1 to 1000."""
    from PIL import Image

    img = Image.new("F", (16, 16))
    img.putdata([-1.0 + i * 4 for i in range(256)])
    buf = io.BytesIO()
    img.save(buf, "TIFF")
    return buf.getvalue()


def sixteen_bit_png() -> bytes:
    from PIL import Image

    img = Image.new("I;16", (16, 16))
    img.putdata([i * 250 for i in range(256)])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def palette_png_with_transparency() -> bytes:
    from PIL import Image

    img = Image.new("P", (8, 8), 1)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    buf = io.BytesIO()
    img.save(buf, "PNG", transparency=0)
    return buf.getvalue()


def inflating_zip(path: Path, member: str, size: int) -> Path:
    """An archive whose one member is ``size`` zero bytes (deflate makes it about size / 1000)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        with z.open(member, "w", force_zip64=True) as f:
            block = bytes(1 << 20)
            left = size
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)
    return path

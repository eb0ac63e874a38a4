"""The child process that renders a PDF's pages (run by path from
:func:`grandrounds.benchmarks.images.render_pdf`; imports only PDFium's and Pillow's bindings).

Arguments: pages, scale, pixel limit. Standard input: the PDF's bytes. Standard output: frames of
one kind byte (``R`` the document is open, ``P`` a page's PNG bytes, ``E`` a one-line error,
``D`` done), an 8-byte big-endian
length and the payload. Each page's size is read from its boxes and checked against the pixel limit
before anything is drawn.
"""

from __future__ import annotations

import io
import math
import sys


def frame(kind: bytes, payload: bytes) -> None:
    out = sys.stdout.buffer
    out.write(kind + len(payload).to_bytes(8, "big") + payload)
    out.flush()


def main() -> None:
    max_pages, scale, max_pixels = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    raw = sys.stdin.buffer.read()
    try:
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(raw)
        try:
            n = min(len(doc), max_pages)
            frame(b"R", b"")  # opened: each page's time starts now
            for i in range(n):
                page = doc[i]
                w, h = page.get_size()  # points, from the page's boxes: nothing drawn yet
                px = w * scale * h * scale
                if not math.isfinite(px) or px > max_pixels:
                    frame(
                        b"E",
                        f"{w:g} x {h:g} pt at scale {scale:g} is {px:,.0f} pixels, over the limit "
                        f"of {max_pixels:,}; refused before rendering".encode(),
                    )
                    return
                buf = io.BytesIO()
                page.render(scale=scale).to_pil().save(buf, "PNG")
                frame(b"P", buf.getvalue())
        finally:
            doc.close()
    except Exception as e:  # noqa: BLE001  (PDFium's and Pillow's errors, as one line to the parent)
        text = " ".join(str(e).split())
        frame(b"E", f"not a readable PDF ({type(e).__name__}: {text})".encode())
        return
    frame(b"D", b"")


if __name__ == "__main__":
    main()

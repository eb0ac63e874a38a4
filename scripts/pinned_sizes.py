"""Write ``src/grandrounds/sources/pinned_sizes.py``: the size in bytes of every file the sources
pin by sha256, read from local copies of those files (folders given on the command line).

Usage: ``python scripts/pinned_sizes.py FOLDER [FOLDER ...]`` (the data and reference folders).
A download stops at the size of the file its sha256 pins (``grandrounds.sources.downloads``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "grandrounds" / "sources" / "pinned_sizes.py"
PIN = re.compile(r'"([0-9a-f]{64})"')


def main(folders: list[str]) -> None:
    pins: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        if path != OUT:
            pins.update(PIN.findall(path.read_text(encoding="utf-8")))
    sizes: dict[str, int] = {}
    for folder in folders:
        for d, _, names in os.walk(folder):
            for name in names:
                p = Path(d) / name
                h = hashlib.sha256(p.read_bytes()).hexdigest()
                if h in pins:
                    sizes[h] = p.stat().st_size
    lines = [
        '"""Bytes of each file pinned by sha256 (written by scripts/pinned_sizes.py): a download of',
        'it stops there (:func:`grandrounds.sources.downloads.size_bound`)."""',
        "",
        "PINNED_BYTES: dict[str, int] = {",
        *(f'    "{h}": {n},' for h, n in sorted(sizes.items())),
        "}",
        "",
    ]
    OUT.write_text("\n".join(lines), encoding="utf-8")
    print(f"{len(sizes)} of {len(pins)} pinned files sized -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Decoding data files: text encodings, GB18030 detection, a file's whole text or its lines, file checks.

Text encodings: a file is read as UTF-8 (with or without BOM); failing that, as GB18030 only when
the result is confidently Chinese (:func:`gb18030_doubt`); anything else is a DataError naming the
file and suggesting ``--encoding``. ``--encoding NAME`` (the CLI sets it with :func:`data_encoding`)
decodes every data file of the command strictly with that codec instead.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from grandrounds.core.errors import ConfigError, DataError

#: The codec every data file is decoded with, when the user names one (``--encoding``); None = detect.
DATA_ENCODING: ContextVar[str | None] = ContextVar("grandrounds_data_encoding", default=None)

#: The largest share of doubtful characters (see :func:`gb18030_doubt`) a non-UTF-8 file may have and
#: still be read as GB18030 without ``--encoding``. Measured on real text: Chinese records of CMB and
#: LLMEval-Med re-encoded as GB18030 have at most 0.113 per record (0.0023 per whole file); Latin-script
#: HealthBench prompts encoded as Windows-1252 that decode as GB18030 at all have 1.0, every one.
GB18030_DOUBT_LIMIT = 0.25

#: A non-ASCII character with an ASCII letter on each side: how an accented Latin letter misread as
#: GB18030 looks (its byte pairs with the next letter into one "character", as in M閚i鑢e for Ménière).
_STRANDED = re.compile(r"[A-Za-z]([^\x00-\x7f])(?=[A-Za-z])")


def check_encoding(name: str) -> str:
    """``name`` if Python has a text codec by that name, else a ConfigError saying so."""
    try:
        b"a".decode(name, "ignore")  # not b"": an empty decode never looks the codec up
    except LookupError as e:
        why = str(e).split(";")[0]  # not Python's advice on codecs.decode()
        raise ConfigError(
            f"--encoding {name!r}: {why} (e.g. utf-8, gb18030, cp1252, latin-1, utf-16)"
        ) from None
    return name


@contextmanager
def data_encoding(name: str | None) -> Iterator[None]:
    """Decode every data file read inside the block with codec ``name`` (None: detect, the default)."""
    token = DATA_ENCODING.set(check_encoding(name) if name else None)
    try:
        yield
    finally:
        DATA_ENCODING.reset(token)


def require_file(path: Path) -> Path:
    """``path`` if it is a non-empty regular file, else a DataError saying what it is instead."""
    if not path.exists():
        raise DataError(path, None, "file not found")
    if path.is_dir():
        raise DataError(path, None, "is a directory where a file is expected")
    if not path.is_file():
        raise DataError(path, None, "is not a regular file (a device, pipe or socket)")
    if path.stat().st_size == 0:
        raise DataError(path, None, "file is empty")
    return path


def gb18030_doubt(text: str) -> float:
    """Share of the non-ASCII characters of ``text`` (a GB18030 decode) that real Chinese text seldom has.

    A character is doubtful when it is outside GB2312 (the 6,763 common hanzi and the usual full-width
    symbols, which modern simplified Chinese text is written in) or sits alone between two ASCII
    letters. Windows-1252/Latin-1 text misread as GB18030 is made of exactly such characters: an
    accented letter's byte pairs with the following ASCII letter (trail bytes 0x40-0x7E, outside
    GB2312), or two accented letters pair into one hanzi stranded inside a Latin word.
    """
    n = len(text) - len(text.encode("ascii", errors="ignore"))  # non-ASCII characters
    if not n:
        return 0.0
    # Characters GB2312 cannot encode become "?" (minus the question marks already there).
    rare = text.encode("gb2312", errors="replace").count(b"?") - text.count("?")
    stranded_common = sum(1 for ch in _STRANDED.findall(text) if _in_gb2312(ch))
    return (rare + stranded_common) / n


def _in_gb2312(ch: str) -> bool:
    try:
        ch.encode("gb2312")
    except UnicodeEncodeError:
        return False
    return True


def decode(raw: bytes, path: Path, encoding: str | None = None) -> str:
    """The text of a data file's bytes, by the rule in the module docstring; a leading BOM is dropped."""
    if encoding:
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            raise DataError(
                path,
                line,
                f"cannot decode as {encoding} (byte 0x{raw[e.start]:02x} at offset {e.start})",
            ) from None
        return text[1:] if text.startswith("\ufeff") else text
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = e
    if raw.startswith(b"PK\x03\x04"):  # a workbook or archive given where text is read
        from grandrounds.benchmarks.readers.sniff import wrong_file

        raise DataError(
            path,
            None,
            f"cannot be read as text: {wrong_file(path, 'the text file (JSON Lines, JSON or CSV) this benchmark reads')}",
        )
    line = raw[: bad.start].count(b"\n") + 1
    where = f"cannot decode as UTF-8 (byte 0x{raw[bad.start]:02x} at offset {bad.start})"
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        raise DataError(
            path, line, f"{where} or GB18030; pass --encoding NAME (e.g. --encoding cp1252)"
        ) from None
    doubt = gb18030_doubt(text)
    if doubt > GB18030_DOUBT_LIMIT:
        raise DataError(
            path,
            line,
            f"{where}, and GB18030 would be a guess ({doubt:.0%} of its non-ASCII characters look like misread "
            "Windows-1252/Latin-1 text); pass --encoding NAME (e.g. --encoding cp1252, or --encoding gb18030 to read it as Chinese)",
        )
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: Path, encoding: str | None = None) -> str:
    """A data file's text: ``encoding`` if given, else the one ``--encoding`` set, else detected
    (UTF-8, or GB18030 when confidently Chinese). A file that fits none is a DataError naming its
    first bad line and suggesting ``--encoding``."""
    require_file(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    return decode(raw, path, encoding or DATA_ENCODING.get())


#: Bytes read at a time by :func:`iter_lines`.
CHUNK = 1 << 20


def iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of a data file, split at ``\n`` only, without holding the file.

    A UTF-8 file (the usual case) is decoded line by line, as read; the encoding ``--encoding``
    names, incrementally. A file that is not UTF-8 is read whole by :func:`read_text`, whose rule
    (confidently Chinese GB18030, else an error suggesting ``--encoding``) needs all of its text:
    such files are small. Memory therefore stays at about one line for large files.
    """
    require_file(path)
    encoding = DATA_ENCODING.get()
    if encoding is None and not is_utf8(path):
        yield from enumerate(read_text(path).split("\n"), start=1)
        return
    decoder = codecs.getincrementaldecoder(encoding or "utf-8-sig")("strict")
    # The line being read, in pieces: joined once when its end arrives, so a line of n bytes costs
    # O(n), however many chunks it spans (re-joining it at every chunk would be quadratic).
    no, pending, offset = 1, [], 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                try:
                    text = decoder.decode(chunk)
                except UnicodeDecodeError as e:
                    at = offset + e.start
                    bad = no + chunk[: e.start].count(b"\n")
                    raise DataError(
                        path,
                        bad,
                        f"cannot decode as {encoding} (byte 0x{chunk[e.start]:02x} at offset {at})",
                    ) from None
                if offset == 0 and text.startswith("\ufeff"):
                    # a BOM the named codec keeps (utf-8): not part of the first record
                    text = text[1:]
                offset += len(chunk)
                *lines, tail = text.split("\n")
                if lines:
                    pending.append(lines[0])
                    lines[0] = "".join(pending)
                    pending = []
                    for line in lines:
                        yield no, line
                        no += 1
                if tail:
                    pending.append(tail)
            pending.append(decoder.decode(b"", final=True))
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    yield no, "".join(pending)


def is_utf8(path: Path) -> bool:
    """Whether the whole file decodes as UTF-8, checked a chunk at a time (nothing kept); remembered
    for the process while the file's size and modification time stay the same (a run reads its
    data twice: once to check every record, once as it asks)."""
    try:
        st = path.stat()
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    stamp = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    known = _UTF8_CHECKED.get(stamp)
    if known is None:
        known = _UTF8_CHECKED[stamp] = _decodes_as_utf8(path)
    return known


#: (path, size, mtime) -> whether that file decodes as UTF-8.
_UTF8_CHECKED: dict[tuple[str, int, int], bool] = {}


def _decodes_as_utf8(path: Path) -> bool:
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    return True

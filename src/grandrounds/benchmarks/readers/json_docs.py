"""JSON documents: parsed whole by Python's json, or their top-level items streamed by ijson."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.readers.decoding import DATA_ENCODING, is_utf8, read_text, require_file
from grandrounds.core.errors import DataError


def parse_json(text: str, path: Path | str, where: int | str | None) -> Any:
    """``json.loads(text)``, every failure a DataError at ``where``: syntax (with its column),
    nesting deeper than Python's parser allows, numbers longer than Python converts."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(
            path,
            where if where is not None else e.lineno,
            f"invalid JSON ({e.msg} at column {e.colno})",
        ) from None
    except RecursionError:
        raise DataError(
            path, where, "JSON nested too deeply to read (over about 1,000 levels)"
        ) from None
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        raise DataError(path, where, f"invalid JSON ({e})") from None


def read_json(path: Path) -> Any:
    """A whole-file JSON document; a syntax error is reported with its line number."""
    return parse_json(read_text(path), path, None)


# ---- JSON documents, a record at a time ------------------------------------------------------------
#
# A file whose top level is an array of records (or an object mapping ids to records) is parsed
# incrementally by ijson (its C backend, yajl2_c), which reads the file 64 KiB at a time: on a
# 200 MB array of 490,453 records it read them all in 2.5-3.2 s holding 23 MB, where json.loads of
# the text took 2.7-4.2 s and 938 MB (bench/loader_memory.py --json-parsers 200, three runs on a
# shared 2-core machine); the first 10 records took 0.4 s. Wherever ijson and Python's json
# could disagree, json decides: a document ijson refuses (NaN, an integer beyond 64 bits, a syntax
# error anywhere) is read again whole by the whole-file reader, which reports the error exactly as
# before (file, line, column) or, for what json accepts, gives the records after those already
# yielded. An escaped lone surrogate ("\ud800" without its pair, not a Unicode character), which
# ijson reads as "?" where json keeps it, is found in the bytes before ijson is handed them
# (:class:`_SurrogateWatch`), and the document is then read by json too.


#: The top level a document is read as: an array or an object.
JsonKind = type[list[Any]] | type[dict[str, Any]]


def iter_json_array(path: Path, expected: str) -> Iterator[tuple[int, Any]]:
    """(index, item) of each item of a JSON file whose top level is an array, read as asked for.

    Decoded by the rule of :func:`iter_lines` (UTF-8, or the codec ``--encoding`` names,
    incrementally; a non-UTF-8 file is read whole by :func:`read_json`). A top level that is not an
    array is the DataError ``expected`` (e.g. "expected a non-empty JSON array of questions");
    invalid JSON is :func:`read_json`'s error.
    """
    return _iter_json_file(path, list, expected)


def iter_json_object(path: Path, expected: str) -> Iterator[tuple[str, Any]]:
    """(key, value) of each member of a JSON file whose top level is an object, read as asked for.

    As :func:`iter_json_array`. A key written twice is yielded twice (where ``json.load`` keeps its
    last value): callers that key records by it say what they do.
    """
    return _iter_json_file(path, dict, expected)


def _iter_json_file(path: Path, kind: JsonKind, expected: str) -> Iterator[Any]:
    require_file(path)
    encoding = DATA_ENCODING.get()
    if encoding is None and not is_utf8(path):
        return _items_of(read_json(path), kind, path, expected, 0)
    return stream_json(
        lambda: open(path, "rb"), lambda: read_json(path), path, kind, expected, encoding
    )


def stream_json(
    source: Callable[[], Any],
    whole: Callable[[], Any],
    path: Path | str,
    kind: JsonKind,
    expected: str,
    encoding: str | None = None,
) -> Iterator[Any]:
    """The items of a JSON document's top-level array (``kind`` list: (index, item)) or object
    (``kind`` dict: (key, value)), parsed as they are asked for.

    ``source()`` opens the document's bytes (a binary file object, used as a context manager): UTF-8
    with or without a BOM, or in ``encoding``. ``whole()`` is the whole-document reader, the
    authority: it is called when the top level is not of ``kind`` (a DataError ``expected`` when its
    result is not ``kind`` either) and when the incremental parse fails, so an invalid document
    fails with its own error and a document only Python's json reads goes on from the items not
    yet given.
    """
    import ijson

    given = 0
    try:
        with source() as raw:
            stream = _Utf8Reader(raw, encoding)
            try:
                head = stream.head()
            except ValueError:  # not in the encoding: whole() names the byte
                head = b""
            if head.lstrip().startswith(b"[" if kind is list else b"{"):
                items = (
                    ijson.items(stream, "item", use_float=True, buf_size=JSON_READ)
                    if kind is list
                    else ijson.kvitems(stream, "", use_float=True, buf_size=JSON_READ)
                )
                while True:
                    try:
                        item = next(items)
                    except StopIteration:
                        if stream.watch.found:
                            break  # the last items may hold the lone surrogate: whole() decides
                        return
                    except (ijson.JSONError, ValueError):
                        break  # whole() decides
                    if stream.watch.found:
                        break  # a lone surrogate, which ijson reads as "?": whole() decides
                    yield (given, item) if kind is list else item
                    given += 1
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    yield from _items_of(whole(), kind, path, expected, given)


#: Bytes ijson is handed at a time (its own default: 1 MiB reads measured slower here).
JSON_READ = 1 << 16


class _Utf8Reader:
    """A document's bytes as ijson reads them: UTF-8 without its BOM, decoded from ``encoding`` and
    encoded again when one is named. :meth:`head` looks at the start without using it up."""

    def __init__(self, raw: Any, encoding: str | None) -> None:
        self.raw = raw
        self.decoder = codecs.getincrementaldecoder(encoding)("strict") if encoding else None
        self.ended = False
        self.kept = b""
        #: Looks at every byte before ijson has it, for an escaped lone surrogate.
        self.watch = _SurrogateWatch()

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson's probe of what the reader returns
            return b""
        while True:
            if self.kept:
                data, self.kept = self.kept, b""
            else:
                data = self._next(size if size > 0 else JSON_READ)
            out = self.watch.pass_on(data)
            if out or not data:  # b"" only at the end
                return out

    def _next(self, size: int) -> bytes:
        while True:
            data = self.raw.read(size)
            if self.decoder is None:
                return data
            if data:
                text = self.decoder.decode(data)
            elif self.ended:
                return b""
            else:
                self.ended = True
                text = self.decoder.decode(b"", final=True)
            if text or self.ended:
                return text.encode("utf-8")

    def head(self) -> bytes:
        """The bytes up to the first that is not whitespace (a leading BOM dropped), kept for :meth:`read`."""
        bom = codecs.BOM_UTF8
        head = b""
        while len(head) < len(bom) and (data := self._next(JSON_READ)):
            head += data
        head = head.removeprefix(bom)
        while not head.strip() and (data := self._next(JSON_READ)):
            head += data
        self.kept = head
        return head


#: A ``\uXXXX`` escape of a UTF-16 surrogate (D800-DFFF), as bytes: the high (D800-DBFF) and low halves.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_BACKSLASH = 0x5C


class _SurrogateWatch:
    """Finds an escaped surrogate that is not half of a pair in a JSON document's bytes, as they
    are passed on (:meth:`pass_on`), before ijson reads them: ijson's C backend reads such an escape
    as "?", Python's json keeps it, so the document is then for json to read (``found``).

    A surrogate escape is taken as half of a pair only when it is one of two, high then low,
    written next to each other, and the byte before the high one is not a backslash: then both are
    escapes (not the text of an escaped backslash, ``\\\\ud800``) and make one character. Every
    other one counts as found; the few false alarms (a pair after an escaped backslash, the text
    ``\\\\udc00``) only send the document to json, which reads it right anyway. The last 11
    bytes seen are kept back until the next read or the end (an escape and the one it pairs with
    may fall across reads), so ijson never has a byte not yet looked at.
    """

    #: Bytes an escape needs to be judged: itself and the one after it (12), the byte before its pair (7).
    AHEAD, BEHIND = 11, 7

    def __init__(self) -> None:
        self.found = False
        self._given = b""  # the last bytes passed on: what comes before those not yet judged
        self._held = b""  # bytes read but not yet passed on

    def pass_on(self, data: bytes) -> bytes:
        """The bytes that can go to ijson now, of those held and ``data`` (b"": the end, all of them)."""
        buf = self._given + self._held + data
        start = len(self._given)
        limit = len(buf) if not data else max(start, len(buf) - self.AHEAD)
        if not self.found:
            for m in _SURROGATE.finditer(buf, start):
                if m.start() >= limit:
                    break
                if not self._paired(buf, m.start()):
                    self.found = True
                    break
        self._held = buf[limit:]
        self._given = buf[max(0, limit - self.BEHIND) : limit]
        return buf[start:limit]

    @staticmethod
    def _paired(buf: bytes, at: int) -> bool:
        # ``buf`` holds the 7 bytes before ``at`` unless the document starts closer, so at < 7 is its start.
        if buf[at + 3] in b"89abAB":  # a high half: a low one right after it
            return (at == 0 or buf[at - 1] != _BACKSLASH) and _LOW.match(buf, at + 6) is not None
        return (
            at >= 6
            and _HIGH.match(buf, at - 6) is not None
            and (at < 7 or buf[at - 7] != _BACKSLASH)
        )


def _items_of(
    data: Any, kind: JsonKind, path: Path | str, expected: str, skip: int
) -> Iterator[Any]:
    """What :func:`stream_json` yields, from a whole document, after the first ``skip``."""
    if not isinstance(data, kind):
        raise DataError(path, None, expected)
    items = enumerate(data) if isinstance(data, list) else iter(data.items())
    for n, item in enumerate(items):
        if n >= skip:
            yield item

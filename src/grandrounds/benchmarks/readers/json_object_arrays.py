"""A JSON document whose top level is an object of arrays, read an item at a time by json's own decoder."""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.readers.decoding import CHUNK, DATA_ENCODING, is_utf8, require_file
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.core.errors import DataError

# ---- an object of arrays, an item at a time, read by json itself ------------------------------------
#
# ijson refuses NaN, which LLMEval-Med's release writes 275 times, so such a document would always
# be read whole. :func:`iter_json_object_arrays` reads the document's structure (the top-level
# object, each member's array) itself and every value in it with json's own decoder
# (``JSONDecoder.raw_decode``, the C scanner ``json.loads`` uses), so each value is exactly what
# json gives (NaN, integers of any size, lone surrogates). Whatever it does not read is for the
# whole-file reader to report, as in :func:`stream_json`.

_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as json skips it
#: What may still continue a number cut at the end of the text read so far ("1." + "5", "2e" + "3").
_NUMBER_TAIL = re.compile(r"[0-9.eE+-]*")
_DECODE = json.JSONDecoder().raw_decode
_END = object()


class _Refused(Exception):
    """The incremental reader cannot go on: the whole-file reader decides."""


class _JsonText:
    """A JSON document's text, read as needed, with a cursor: values are decoded by json itself.

    ``pos`` only moves past what has been read in full, so a value cut by the end of the text read
    so far is decoded again once more text is read (at least as much again as is pending, so a long
    value is decoded a few times only). Text before the cursor is dropped as more is read.
    """

    def __init__(self, raw: Any, encoding: str | None) -> None:
        self.raw = raw
        self.decoder = codecs.getincrementaldecoder(encoding or "utf-8-sig")("strict")
        self.text, self.pos, self.ended, self.started = "", 0, False, False

    def more(self) -> bool:
        if self.ended:
            return False
        data = self.raw.read(max(CHUNK, len(self.text) - self.pos))
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise _Refused from None  # the whole-file reader names the line and byte
        self.ended = not data
        if not self.started and text:
            self.started = True
            text = text.removeprefix("\ufeff")  # a BOM a named codec keeps (utf-8)
        self.text = self.text[self.pos :] + text
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next character after whitespace (consumed), "" at the end of the document."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]  # \s* always matches
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def take(self, chars: str) -> str:
        """The next character, which must be one of ``chars``."""
        ch = self.peek()
        if not ch or ch not in chars:
            raise _Refused
        self.pos += 1
        return ch

    def value(self, then: str) -> Any:
        """The value at the cursor, which must be followed by one of ``then`` (left to read)."""
        self.peek()
        while True:
            try:
                value, end = _DECODE(self.text, self.pos)
            except (
                ValueError,
                RecursionError,
            ):  # cut by the end of the text read so far, or invalid
                if self.more():
                    continue
                raise _Refused from None
            after = _WHITESPACE.match(self.text, end).end()  # type: ignore[union-attr]  # \s* always matches
            if after < len(self.text) and self.text[after] in then:
                self.pos = after
                return value
            cut = after == len(self.text) or (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and _NUMBER_TAIL.fullmatch(self.text, end) is not None
            )
            if not (cut and self.more()):
                raise _Refused


class JsonArray:
    """The items of one array of a document :func:`iter_json_object_arrays` reads, as (index, item),
    read as they are asked for (before the reader's next member)."""

    def __init__(self, owner: _ObjectArrays | None, items: list[Any] | None = None) -> None:
        self._owner = owner
        self._n = 0
        self._done = False
        #: The items from a whole-file read (given, or taken over from the incremental read).
        self._rest: Iterator[Any] | None = None if items is None else iter(items)

    def __iter__(self) -> JsonArray:
        return self

    def __next__(self) -> tuple[int, Any]:
        if self._rest is None and not self._done and self._owner is not None:
            try:
                item = self._owner.item(self._n)
            except _Refused:
                self._rest = self._owner.whole_items(self._n)
            else:
                if item is _END:
                    self._done = True
                else:
                    self._n += 1
                    return self._n - 1, item
        if self._rest is not None:
            item = next(self._rest)
            self._n += 1
            return self._n - 1, item
        raise StopIteration


class _ObjectArrays:
    """The state of one :func:`iter_json_object_arrays` read."""

    def __init__(self, path: Path, encoding: str | None, expected: str) -> None:
        self.path, self.encoding, self.expected = path, encoding, expected
        self.doc: _JsonText | None = None
        self.given = 0  # members given so far
        self.data: dict[str, Any] | None = None  # the whole-file read, once it has taken over

    def members(self) -> Iterator[tuple[str, Any]]:
        try:
            with open(self.path, "rb") as raw:
                self.doc = _JsonText(raw, self.encoding)
                try:
                    yield from self._members()
                    return
                except _Refused:
                    pass
                if self.data is not None:  # an array's items went on from the whole-file read
                    yield from self._whole_members()
                    return
        except OSError as e:
            raise DataError(self.path, None, f"cannot read ({e.strerror or e})") from None
        self._whole()
        yield from self._whole_members()

    def _members(self) -> Iterator[tuple[str, Any]]:
        doc = self.doc
        assert doc is not None
        if doc.peek() != "{":
            raise _Refused
        doc.pos += 1
        if doc.peek() == "}":
            doc.pos += 1
        else:
            while True:
                if doc.peek() != '"':
                    raise _Refused
                key = doc.value(":")
                doc.take(":")
                if doc.peek() == "[":
                    doc.pos += 1
                    items = JsonArray(self)
                    self.given += 1
                    yield key, items
                    for _ in items:  # the items the caller left
                        pass
                    if self.data is not None:
                        raise _Refused  # the whole-file read took over inside the array
                else:
                    value = doc.value(",}")
                    self.given += 1
                    yield key, value
                if doc.take(",}") == "}":
                    break
        if doc.peek():
            raise _Refused  # text after the document

    def item(self, n: int) -> Any:
        """Item ``n`` of the array being read, or _END after its last one."""
        doc = self.doc
        assert doc is not None
        if n and doc.take(",]") == "]":
            return _END
        if not n and doc.peek() == "]":
            doc.pos += 1
            return _END
        return doc.value(",]")

    def _whole(self) -> dict[str, Any]:
        if self.data is None:
            data = read_json(self.path)  # an invalid document fails here with json's error
            if not isinstance(data, dict):
                raise DataError(self.path, None, self.expected)
            self.data = data
        return self.data

    def whole_items(self, skip: int) -> Iterator[Any]:
        """The items after the first ``skip`` of the member being read, from the whole-file read."""
        members = list(self._whole().values())
        value = members[self.given - 1] if self.given <= len(members) else []
        return iter(value[skip:] if isinstance(value, list) else [])

    def _whole_members(self) -> Iterator[tuple[str, Any]]:
        for key, value in list(self._whole().items())[self.given :]:
            self.given += 1
            yield key, JsonArray(None, value) if isinstance(value, list) else value


def iter_json_object_arrays(path: Path, expected: str) -> Iterator[tuple[str, Any]]:
    """(key, value) of each member of a JSON file whose top level is an object, read as asked for,
    a value that is an array given as a :class:`JsonArray` whose items are read one at a time.

    Every value is decoded by Python's json (NaN included, which ijson refuses). Decoded as
    :func:`iter_lines` decodes (a non-UTF-8 file is read whole by :func:`read_json`). A top level
    that is not an object is the DataError ``expected``; an invalid document is :func:`read_json`'s
    error, raised once the items before the fault have been given. A key written twice is given
    twice (``json.load`` keeps its last value at the first one's place): callers say what they do.
    """
    require_file(path)
    encoding = DATA_ENCODING.get()
    reader = _ObjectArrays(path, encoding, expected)
    if encoding is None and not is_utf8(path):
        reader._whole()
        return reader._whole_members()
    return reader.members()

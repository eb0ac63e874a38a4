"""Reading benchmark files in their original formats, with errors that name the file and line or record.

Text encodings: a file is read as UTF-8 (with or without BOM); failing that, as GB18030 only when
the result is confidently Chinese (:func:`gb18030_doubt`); anything else is a DataError naming the
file and suggesting ``--encoding``. ``--encoding NAME`` (the CLI sets it with :func:`data_encoding`)
decodes every data file of the command strictly with that codec instead.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from grandrounds.errors import ConfigError, DataError

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
        raise ConfigError(f"--encoding {name!r}: {why} (e.g. utf-8, gb18030, cp1252, latin-1, utf-16)") from None
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
            raise DataError(path, line, f"cannot decode as {encoding} (byte 0x{raw[e.start]:02x} at offset {e.start})") from None
        return text[1:] if text.startswith("\ufeff") else text
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = e
    line = raw[: bad.start].count(b"\n") + 1
    where = f"cannot decode as UTF-8 (byte 0x{raw[bad.start]:02x} at offset {bad.start})"
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        raise DataError(path, line, f"{where} or GB18030; pass --encoding NAME (e.g. --encoding cp1252)") from None
    doubt = gb18030_doubt(text)
    if doubt > GB18030_DOUBT_LIMIT:
        raise DataError(
            path, line,
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


def parse_json(text: str, path: Path | str, where: int | str | None) -> Any:
    """``json.loads(text)``, every failure a DataError at ``where``: syntax (with its column),
    nesting deeper than Python's parser allows, numbers longer than Python converts."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, where if where is not None else e.lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise DataError(path, where, "JSON nested too deeply to read (over about 1,000 levels)") from None
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        raise DataError(path, where, f"invalid JSON ({e})") from None


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines file (:func:`iter_jsonl`, all at once)."""
    return list(iter_jsonl(path))


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines file, read as they are asked for.

    Lines end at ``\n`` only: ``str.splitlines`` would also break at U+2028 and U+0085, which
    occur raw inside JSON strings (HealthBench has them). A line that is not a JSON object
    (truncated, invalid, nested too deeply) is a DataError naming its line; a file of blank lines
    only is one too, once it has been read to its end.
    """
    seen = False
    for no, line in iter_lines(path):
        if not line.strip():
            continue
        obj = parse_json(line, path, no)
        if not isinstance(obj, dict):
            raise DataError(path, no, f"expected a JSON object, got {type(obj).__name__}")
        seen = True
        yield no, obj
    if not seen:
        raise DataError(path, None, "no records (only blank lines)")


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
    if encoding is None and not _is_utf8(path):
        yield from enumerate(read_text(path).split("\n"), start=1)
        return
    decoder = codecs.getincrementaldecoder(encoding or "utf-8-sig")("strict")
    no, rest, offset = 1, "", 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                try:
                    text = decoder.decode(chunk)
                except UnicodeDecodeError as e:
                    at = offset + e.start
                    line = no + rest.count("\n") + chunk[: e.start].count(b"\n")
                    raise DataError(path, line, f"cannot decode as {encoding} (byte 0x{chunk[e.start]:02x} at offset {at})") from None
                offset += len(chunk)
                if no == 1 and not rest and text.startswith("\ufeff"):
                    text = text[1:]  # a BOM the named codec keeps (utf-8): not part of the first record
                *lines, rest = (rest + text).split("\n")
                for line in lines:
                    yield no, line
                    no += 1
            rest += decoder.decode(b"", final=True)
    except OSError as e:
        raise DataError(path, None, f"cannot read ({e.strerror or e})") from None
    yield no, rest


def _is_utf8(path: Path) -> bool:
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


def read_json(path: Path) -> Any:
    """A whole-file JSON document; a syntax error is reported with its line number."""
    return parse_json(read_text(path), path, None)


class _Rows(csv.DictReader):  # type: ignore[type-arg]
    """A DictReader whose malformed rows (a cell over the CSV field limit, a bad quote) are DataErrors."""

    def __init__(self, text: str, path: Path) -> None:
        super().__init__(io.StringIO(text, newline=""))
        self.path = path

    @property
    def fieldnames(self) -> Any:
        try:
            return super().fieldnames
        except csv.Error as e:
            raise DataError(self.path, max(self.reader.line_num, 1), _csv_problem(e)) from None

    @fieldnames.setter
    def fieldnames(self, value: Any) -> None:
        self._fieldnames = value

    def __next__(self) -> dict[str, Any]:
        try:
            return super().__next__()
        except csv.Error as e:  # the reader's count includes the line it failed on
            raise DataError(self.path, max(self.reader.line_num, 1), _csv_problem(e)) from None


def _csv_problem(e: csv.Error) -> str:
    if "field limit" in str(e):
        return f"a cell is longer than the CSV reader's limit of {csv.field_size_limit():,} characters"
    return f"malformed CSV ({e})"


def read_csv(path: Path, columns: Iterable[str]) -> csv.DictReader:  # type: ignore[type-arg]
    """Rows of a CSV file with a header line; a DataError on line 1 names any of ``columns`` it lacks,
    and a malformed row (a cell over the CSV field limit, a bad quote) is a DataError naming its line."""
    reader = _Rows(read_text(path), path)
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise DataError(path, 1, f"missing columns: {', '.join(missing)}")
    return reader


# ---- CSV, a record at a time ---------------------------------------------------------------------

#: A position just after a carriage return that is not followed by a line feed (an old Mac line end).
_AFTER_LONE_CR = re.compile(r"(?<=\r)(?!\n)")


def _csv_lines(path: Path) -> Iterator[str]:
    """A data file's text in the lines the csv module expects, each with its ending, as
    ``io.StringIO(text, newline="")`` would cut them (at ``\n``, ``\r\n`` or a lone ``\r``), read
    through :func:`iter_lines` (so decoded by the same rule, ``--encoding`` included)."""
    previous: str | None = None
    for _, line in iter_lines(path):
        if previous is not None:
            yield from _cut_lone_cr(previous + "\n")
        previous = line
    if previous:  # text after the last line feed
        yield from _cut_lone_cr(previous)


def _cut_lone_cr(text: str) -> Iterator[str]:
    if "\r" not in text:
        yield text
        return
    yield from (piece for piece in _AFTER_LONE_CR.split(text) if piece)


def iter_csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line the row starts on, cells) of each non-blank row of a CSV file, read as they are asked for.

    Quoted cells may span lines; a row's line is the physical line it starts on. A malformed row (a
    cell over the CSV field limit, a bad quote) is a DataError naming that line, with
    :func:`read_csv`'s wording. Blank lines are skipped; no header is taken.
    """
    reader = csv.reader(_csv_lines(require_file(path)))
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(path, start, _csv_problem(e)) from None
        if row:
            yield start, row


class CsvRecords:
    """Rows of a CSV file with a header line, as ``(line the row starts on, row)``, read one at a time.

    The streaming form of :func:`read_csv`: the same header checks and the same rows (a dict by
    column name; cells beyond the header under the key None, missing cells None, as
    ``csv.DictReader`` gives them), and a malformed row is a DataError naming the line it starts on.
    The header is read when the object is made, so a missing column fails before any row is asked.
    """

    def __init__(self, path: Path, columns: Iterable[str]) -> None:
        self.path = path
        self._reader = csv.reader(_csv_lines(require_file(path)))
        try:  # the first line is the header, even a blank one (as DictReader takes it)
            header = next(self._reader, None)
        except csv.Error as e:
            raise DataError(path, 1, _csv_problem(e)) from None
        #: The header's column names; None for a file without a single line.
        self.fieldnames: list[str] | None = header
        missing = [c for c in columns if c not in (header or [])]
        if missing:
            raise DataError(path, 1, f"missing columns: {', '.join(missing)}")

    def __iter__(self) -> Iterator[tuple[int, dict[Any, Any]]]:
        return self

    def __next__(self) -> tuple[int, dict[Any, Any]]:
        names = self.fieldnames
        if names is None:
            raise StopIteration
        while True:
            start = self._reader.line_num + 1
            try:
                row = next(self._reader)
            except csv.Error as e:
                raise DataError(self.path, start, _csv_problem(e)) from None
            if row:
                break
        record: dict[Any, Any] = dict(zip(names, row))
        if len(row) > len(names):
            record[None] = row[len(names):]
        for name in names[len(row):]:
            record[name] = None
        return start, record


def iter_csv(path: Path, columns: Iterable[str]) -> CsvRecords:
    """(line the row starts on, row) for each row of a CSV file with a header line, read as they are
    asked for: :func:`read_csv`'s rows and errors without holding the file (:class:`CsvRecords`)."""
    return CsvRecords(path, columns)


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


def _iter_json_file(path: Path, kind: type, expected: str) -> Iterator[Any]:
    require_file(path)
    encoding = DATA_ENCODING.get()
    if encoding is None and not _is_utf8(path):
        return _items_of(read_json(path), kind, path, expected, 0)
    return stream_json(lambda: open(path, "rb"), lambda: read_json(path), path, kind, expected, encoding)


def stream_json(
    source: Callable[[], Any], whole: Callable[[], Any], path: Path | str, kind: type, expected: str, encoding: str | None = None
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
                items = (ijson.items(stream, "item", use_float=True, buf_size=JSON_READ) if kind is list
                         else ijson.kvitems(stream, "", use_float=True, buf_size=JSON_READ))
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
        self._given = buf[max(0, limit - self.BEHIND):limit]
        return buf[start:limit]

    @staticmethod
    def _paired(buf: bytes, at: int) -> bool:
        # ``buf`` holds the 7 bytes before ``at`` unless the document starts closer, so at < 7 is its start.
        if buf[at + 3] in b"89abAB":  # a high half: a low one right after it
            return (at == 0 or buf[at - 1] != _BACKSLASH) and _LOW.match(buf, at + 6) is not None
        return at >= 6 and _HIGH.match(buf, at - 6) is not None and (at < 7 or buf[at - 7] != _BACKSLASH)


def _items_of(data: Any, kind: type, path: Path | str, expected: str, skip: int) -> Iterator[Any]:
    """What :func:`stream_json` yields, from a whole document, after the first ``skip``."""
    if not isinstance(data, kind):
        raise DataError(path, None, expected)
    items = enumerate(data) if kind is list else iter(data.items())
    for n, item in enumerate(items):
        if n >= skip:
            yield item


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
        self.text = self.text[self.pos:] + text
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next character after whitespace (consumed), "" at the end of the document."""
        while True:
            self.pos = _WHITESPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
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
            except (ValueError, RecursionError):  # cut by the end of the text read so far, or invalid
                if self.more():
                    continue
                raise _Refused from None
            after = _WHITESPACE.match(self.text, end).end()  # type: ignore[union-attr]
            if after < len(self.text) and self.text[after] in then:
                self.pos = after
                return value
            cut = after == len(self.text) or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
                and _NUMBER_TAIL.fullmatch(self.text, end) is not None)
            if not (cut and self.more()):
                raise _Refused


class JsonArray:
    """The items of one array of a document :func:`iter_json_object_arrays` reads, as (index, item),
    read as they are asked for (before the reader's next member)."""

    def __init__(self, owner: "_ObjectArrays | None", items: list[Any] | None = None) -> None:
        self._owner = owner
        self._n = 0
        self._done = False
        #: The items from a whole-file read (given, or taken over from the incremental read).
        self._rest: Iterator[Any] | None = None if items is None else iter(items)

    def __iter__(self) -> "JsonArray":
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
        for key, value in list(self._whole().items())[self.given:]:
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
    if encoding is None and not _is_utf8(path):
        reader._whole()
        return reader._whole_members()
    return reader.members()


def require_fields(
    path: Path, where: int | str, record: Mapping[str, Any], fields: Iterable[str], nonempty: bool = True
) -> None:
    """DataError naming the record if any of ``fields`` is missing (or empty/null when ``nonempty``)."""
    for f in fields:
        if f not in record:
            raise DataError(path, where, f"missing field {f!r}")
        v = record[f]
        if nonempty and (v is None or (isinstance(v, str) and not v.strip())):
            raise DataError(path, where, f"field {f!r} is empty")


class IdSet:
    """The ids met so far in one data file, read whole or record by record. Sample ids key answers
    in the store, so a repeated id is a DataError (by default at ``record 'ID'``: duplicate id)."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self._seen: set[str] = set()

    def add(self, sid: str, where: Any = None, problem: str = "duplicate id") -> str:
        if sid in self._seen:
            raise DataError(self.path, f"record {sid!r}" if where is None else where, problem)
        self._seen.add(sid)
        return sid

    def __contains__(self, sid: object) -> bool:
        return sid in self._seen

    def __len__(self) -> int:
        return len(self._seen)


def check_unique_ids(path: Path, ids: Iterable[str]) -> None:
    """Sample ids key answers in the store: a repeated id is a DataError."""
    seen = IdSet(path)
    for i in ids:
        seen.add(i)

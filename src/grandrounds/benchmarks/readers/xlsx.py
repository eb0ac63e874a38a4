"""Read an xlsx workbook read-only without holding its shared-strings table.

Excel keeps the text of a workbook's cells in one table (``xl/sharedStrings.xml``, one ``<si>``
entry per distinct text) and a cell of type ``s`` holds an index into it. openpyxl's read-only
mode reads that table whole into a list when it opens the workbook, so opening a large workbook
costs the text of the whole file, however few rows are read. :func:`open_xlsx` opens a workbook
exactly as ``openpyxl.load_workbook(path, read_only=True, data_only=True)`` does, except that the
table is a :class:`SharedStrings`: a sequence that parses ``<si>`` entries from the archive
member only as far as the highest index asked for (Excel numbers the entries in order of first
use, so the first rows need only the start of the table) and keeps the texts parsed so far in a
temporary spill file (UTF-8, offsets in an ``array``), not in Python strings. Memory is then
flat in the table's size; the spill file grows on disk with the part of the table parsed.

Each entry is read with openpyxl's own pieces, as its ``read_string_table`` reads it
(``Text.from_tree(node).content``: plain text, or the rich-text runs joined, phonetic runs left
out; then ``x005F_`` removed), so every cell value is identical to openpyxl's. Where openpyxl's
internals are not what this module expects (another version), :func:`open_xlsx` falls back to
the plain ``load_workbook`` and says so in :attr:`Xlsx.streaming`.

Every XML part openpyxl opens through the archive (the table, each worksheet) is read through a
:class:`_CappedPart`, which runs the bytes through expat before openpyxl's parser sees them and
stops at the first cell (a table entry ``<si>`` or a worksheet cell ``<c>``, rich-text runs and
inline strings included) or text run longer than :func:`cell_limit` characters, the limit CSV
cells have (``csv.field_size_limit()``, 131,072 by default): so a 100 MB cell, which deflate
squeezes into 100 KB, costs at most one chunk of the part in memory and is a
:class:`CellTooLargeError`, never a 100 MB string. :func:`sheet_rows` reads a sheet's rows with
every failure (a cell too long, a bad shared-string index, a damaged archive member, bad XML)
turned into one :class:`~grandrounds.core.errors.DataError` naming the file, sheet and row.
"""

from __future__ import annotations

import csv
import inspect
import os
import tempfile
import xml.parsers.expat
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, overload

from grandrounds.core.errors import DataError

__all__ = [
    "CellTooLargeError",
    "SharedStrings",
    "SharedStringsError",
    "Xlsx",
    "cell_limit",
    "open_xlsx",
    "sheet_rows",
]


class SharedStringsError(ValueError):
    """A cell's shared-string index that the table cannot answer (past its end, negative), or a
    table that cannot be read (bad XML, damaged archive). The message names the file and part."""

    def __init__(self, filename: str, member: str, problem: str) -> None:
        self.filename, self.member, self.problem = filename, member, problem
        super().__init__(f"{filename}: {member}: {problem}")


class CellTooLargeError(SharedStringsError):
    """A cell (or a run of text) longer than :func:`cell_limit` characters, found while reading a part."""


def cell_limit() -> int:
    """The most characters a cell may hold: the CSV reader's field limit, so both formats refuse alike."""
    return csv.field_size_limit()


#: Bytes read from an archive member at a time by :class:`_CappedPart`.
PART_CHUNK = 64 * 1024
#: The elements whose text is summed as one cell: a table entry, a worksheet cell.
_CELL_TAGS = frozenset({"si", "c"})


class _CappedPart:
    """An XML archive member, read as openpyxl reads it, whose bytes are first fed to expat:
    counting the characters of each cell (:data:`_CELL_TAGS`, its text summed over every element
    inside it) and of each text run anywhere, and raising :class:`CellTooLargeError` once one
    passes ``limit``, before openpyxl's parser gets the rest. Bad XML is left for openpyxl's
    parser to report, as it would without this check."""

    def __init__(self, raw: IO[bytes], filename: str, member: str, limit: int) -> None:
        self._raw, self._filename, self._member, self._limit = raw, filename, member, limit
        self._cell = 0  # characters of the open cell
        self._depth = 0  # cells open (1 inside a cell; a nested one is not valid, but counted)
        self._run = 0  # characters since the last tag
        self._broken = False
        p = self._expat = xml.parsers.expat.ParserCreate(namespace_separator="}")
        p.buffer_text = True
        p.StartElementHandler, p.EndElementHandler, p.CharacterDataHandler = (
            self._start,
            self._end,
            self._text,
        )

    def _start(self, name: str, _attrs: Any) -> None:
        self._run = 0
        if name.rpartition("}")[2] in _CELL_TAGS:
            self._depth += 1
            if self._depth == 1:
                self._cell = 0

    def _end(self, name: str) -> None:
        self._run = 0
        if name.rpartition("}")[2] in _CELL_TAGS and self._depth:
            self._depth -= 1

    def _text(self, data: str) -> None:
        self._run += len(data)
        if self._depth:
            self._cell += len(data)
        if self._run > self._limit or self._cell > self._limit:
            what = "a cell" if self._depth else "a run of text"
            raise CellTooLargeError(
                self._filename,
                self._member,
                f"{what} is longer than the limit of {self._limit:,} characters (the CSV cell limit)",
            )

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(PART_CHUNK if n is None or n < 0 or n > PART_CHUNK else n)
        if not self._broken:
            try:
                self._expat.Parse(data, not data)
            except xml.parsers.expat.ExpatError:
                self._broken = True  # openpyxl's own parser reports it, at the same place
        return data

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _CappedPart:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _CappedArchive:
    """The workbook's zip archive, whose XML members open as :class:`_CappedPart`; all else as the archive's."""

    def __init__(self, archive: Any, limit: int) -> None:
        self._archive, self._limit = archive, limit

    def open(self, name: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        raw = self._archive.open(name, mode, *args, **kwargs)
        member = getattr(name, "filename", name)
        if mode != "r" or not str(member).endswith(".xml"):
            return raw
        return _CappedPart(raw, str(self._archive.filename), str(member), self._limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._archive, name)


def sheet_rows(path: Path, ws: Any) -> Iterator[tuple[Any, ...]]:
    """The values of ``ws``'s rows, any failure while reading one (a cell over the limit, a bad
    shared-string index, a damaged archive member, bad XML) a one-line DataError naming the file,
    the sheet and the row."""
    rows, r = ws.iter_rows(values_only=True), 0
    while True:
        r += 1
        try:
            values = next(rows)
        except StopIteration:
            return
        except SharedStringsError as e:
            raise DataError(
                path, f"sheet {ws.title!r} row {r}", f"{e.member}: {e.problem}"
            ) from None
        except (
            Exception
        ) as e:  # zipfile.BadZipFile, zlib.error, XML ParseError, EOFError, openpyxl's own
            why = " ".join(str(e).split())[:300] or "no detail"
            raise DataError(
                path,
                f"sheet {ws.title!r} row {r}",
                f"damaged worksheet ({type(e).__name__}: {why})",
            ) from None
        yield values


class SharedStrings(Sequence[str]):
    """The shared-strings table of one workbook, parsed on demand and spilled to a temporary file.

    ``table[i]`` parses ``<si>`` entries from the open archive member until entry ``i`` (or the
    table's end); :attr:`parsed` counts the entries parsed so far. ``len(table)`` parses the rest.
    """

    def __init__(self, archive: Any, member: str, filename: str) -> None:
        from openpyxl.cell.text import Text
        from openpyxl.xml.constants import SHEET_MAIN_NS
        from openpyxl.xml.functions import (
            iterparse,
        )  # defusedxml's when installed, as openpyxl reads

        self._iterparse, self._from_tree = iterparse, Text.from_tree

        self._filename, self._member = filename, member
        self._si_tag = f"{{{SHEET_MAIN_NS}}}si"
        self._src: IO[bytes] | None = archive.open(member)  # open while the workbook is read
        self._events: Iterator[tuple[str, Any]] | None = None
        self._root: Any = None
        self._complete = False
        self._failure: str | None = None
        #: start offset of entry i in the spill file at [i], and the end of the last at [-1]
        self._offsets = array("Q", [0])
        self._spill: IO[bytes] | None = None
        self.closed = False

    @property
    def parsed(self) -> int:
        """How many entries have been parsed (and spilled) so far."""
        return len(self._offsets) - 1

    def __len__(self) -> int:
        self._parse_until(None)
        return self.parsed

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:  # openpyxl's list would count from the end; no valid workbook has one
            raise self._error(f"a cell refers to shared string {i}; an index cannot be negative")
        if i < len(self._offsets) - 1:
            return self._read(i)
        last = self._parse_until(i)
        if i >= self.parsed:
            raise self._error(
                f"a cell refers to shared string {i}, but the table has only {self.parsed} "
                f"entries" + (f" (0..{self.parsed - 1})" if self.parsed else "")
            )
        return last if last is not None else self._read(i)

    def __iter__(self) -> Iterator[str]:
        i = 0
        while True:
            if i >= self.parsed:
                self._parse_until(i)
                if i >= self.parsed:
                    return
            yield self._read(i)
            i += 1

    def _parse_until(self, i: int | None) -> str | None:
        """Parse entries until entry ``i`` exists (None: to the end); return entry ``i``'s text
        when this call parsed it (saving a read back from the spill file)."""
        if self.closed:
            raise self._error("the workbook is closed")
        if self._failure is not None:
            raise self._error(self._failure)
        if self._complete:
            return None
        offsets, si_tag, from_tree = self._offsets, self._si_tag, self._from_tree
        want = -1 if i is None else i + 2  # len(offsets) once entry i is in (offsets starts with 0)
        try:
            if self._events is None:
                self._events = iter(self._iterparse(self._src, events=("start", "end")))
                for _, node in self._events:  # the first event: <sst> starts
                    self._root = node  # its parsed children are dropped below
                    break
            root = self._root
            for event, node in self._events:
                if event == "start" or node.tag != si_tag:
                    continue
                # openpyxl/reader/strings.py read_string_table: the same two steps per entry
                text = from_tree(node).content.replace("x005F_", "")
                root.clear()  # the entry and any before it: the tree stays one entry deep
                self._append(text)
                if len(offsets) == want:  # entries are added one at a time: this is entry i
                    return text
        except CellTooLargeError as e:
            self._failure = f"entry {self.parsed} of the shared-strings table: {e.problem}"
            raise self._error(self._failure, too_large=True) from None
        except Exception as e:  # bad XML, a damaged archive member, an unreadable entry
            self._failure = f"cannot read entry {self.parsed} of the shared-strings table: {type(e).__name__}: {e}"
            raise self._error(self._failure) from e
        self._complete = True
        self._events = self._root = None
        self._close_source()
        return None

    def _error(self, problem: str, too_large: bool = False) -> SharedStringsError:
        return (CellTooLargeError if too_large else SharedStringsError)(
            self._filename, self._member, problem
        )

    def _append(self, text: str) -> None:
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="grandrounds-sst-")  # deleted when closed
        data = text.encode("utf-8", "surrogatepass")
        self._spill.write(data)
        self._offsets.append(self._offsets[-1] + len(data))

    def _read(self, i: int) -> str:
        start, end = self._offsets[i], self._offsets[i + 1]
        if start == end:
            return ""
        spill = self._spill
        assert spill is not None
        spill.seek(start)  # a buffered file: seeking writes out what is pending first
        data = spill.read(end - start)
        spill.seek(0, os.SEEK_END)  # the next entry is appended at the end
        return data.decode("utf-8", "surrogatepass")

    def _close_source(self) -> None:
        src, self._src = self._src, None
        if src is not None:
            src.close()

    def close(self) -> None:
        """Close the archive member and the spill file (which deletes it). Safe to repeat."""
        self.closed = True
        self._events = self._root = None
        try:
            self._close_source()
        finally:
            spill, self._spill = self._spill, None
            if spill is not None:
                spill.close()


class Xlsx:
    """An open workbook: :attr:`workbook` (openpyxl, read-only, cached values), :attr:`strings`
    (its lazy table, None when it has none or when :attr:`streaming` is False). Closing it, or
    the workbook, closes the table, its spill file and the archive. A context manager."""

    def __init__(self, workbook: Any, strings: SharedStrings | None, streaming: bool) -> None:
        self.workbook, self.strings, self.streaming = workbook, strings, streaming
        self.closed = False
        close_archive = workbook.close

        def close() -> None:
            if self.closed:
                return
            self.closed = True
            try:
                if strings is not None:
                    strings.close()
            finally:
                close_archive()

        if strings is not None:
            workbook.close = close  # the workbook's own close() releases the table too
        self.close = close

    def __enter__(self) -> Xlsx:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _expected_internals() -> bool:
    """Whether openpyxl reads a read-only workbook the way :class:`_LazyReader` relies on:
    ``ExcelReader.read`` calling ``read_strings``, which sets ``shared_strings`` from the part
    ``package.find(SHARED_STRINGS)`` names, then handed to each ``ReadOnlyWorksheet``."""
    try:
        from openpyxl.cell.text import Text
        from openpyxl.reader import excel
        from openpyxl.worksheet._read_only import ReadOnlyWorksheet
    except ImportError:
        return False
    reader = getattr(excel, "ExcelReader", None)
    if reader is None or not isinstance(getattr(excel, "SHARED_STRINGS", None), str):
        return False
    if not all(
        callable(getattr(reader, m, None)) for m in ("read", "read_manifest", "read_strings")
    ):
        return False
    if not isinstance(getattr(Text, "content", None), property) or not hasattr(Text, "from_tree"):
        return False
    try:
        init = inspect.signature(reader.__init__).parameters
        sheet = inspect.signature(ReadOnlyWorksheet.__init__).parameters
    except (TypeError, ValueError):
        return False
    return {"read_only", "data_only"} <= set(init) and "shared_strings" in sheet


def _lazy_reader_class() -> type:
    from openpyxl.reader.excel import SHARED_STRINGS, ExcelReader

    class _LazyReader(ExcelReader):
        """openpyxl's reader with the table left in the archive, read as cells ask for it."""

        def read_strings(self) -> None:
            part = self.package.find(SHARED_STRINGS)
            if part is not None:
                self.shared_strings = SharedStrings(
                    self.archive, part.PartName[1:], str(self.archive.filename)
                )

    return _LazyReader


def _cause(err: BaseException, kind: type[CellTooLargeError]) -> CellTooLargeError | None:
    """``err`` or the first error of type ``kind`` it was raised from or while handling."""
    seen: set[int] = set()
    at: BaseException | None = err
    while at is not None and id(at) not in seen:
        if isinstance(at, kind):
            return at
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def open_xlsx(path: str | os.PathLike[str]) -> Xlsx:
    """Open ``path`` read-only with cached values (``data_only``), its shared strings read lazily.

    Raises what ``openpyxl.load_workbook`` raises for a file it cannot open (a
    :class:`CellTooLargeError` where a part read on opening holds a cell over the limit); a bad
    index or an unreadable table entry surfaces as :class:`SharedStringsError` while the rows are read.
    """
    import openpyxl
    from openpyxl.worksheet._read_only import ReadOnlyWorksheet

    filename = os.fspath(path)
    if not _expected_internals():
        return Xlsx(openpyxl.load_workbook(filename, read_only=True, data_only=True), None, False)
    reader = _lazy_reader_class()(filename, read_only=True, data_only=True)
    reader.archive = _CappedArchive(
        reader.archive, cell_limit()
    )  # every XML part read with the cell limit
    strings = None
    try:
        reader.read()
        strings = (
            reader.shared_strings if isinstance(reader.shared_strings, SharedStrings) else None
        )
        wb = reader.wb
        sheets = [ws for ws in getattr(wb, "_sheets", []) if isinstance(ws, ReadOnlyWorksheet)]
        wired = all(getattr(ws, "_shared_strings", None) is reader.shared_strings for ws in sheets)
        has_archive = getattr(wb, "_archive", None) is reader.archive
    except BaseException as e:
        if isinstance(reader.shared_strings, SharedStrings):
            reader.shared_strings.close()
        reader.archive.close()
        too_large = _cause(e, CellTooLargeError)
        if too_large is not None:  # openpyxl wraps it in an error of its own, several lines long
            raise too_large from None
        raise
    if not (wired and has_archive):  # the table did not reach the sheets as expected: read plainly
        if strings is not None:
            strings.close()
        reader.archive.close()
        return Xlsx(openpyxl.load_workbook(filename, read_only=True, data_only=True), None, False)
    return Xlsx(wb, strings, True)

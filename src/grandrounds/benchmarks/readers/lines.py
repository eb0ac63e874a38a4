"""JSON Lines and CSV files: read whole, or a record at a time, each record with the line it starts on."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.readers.decoding import iter_lines, read_text, require_file
from grandrounds.benchmarks.readers.json_docs import parse_json
from grandrounds.benchmarks.readers.sniff import csv_hint
from grandrounds.core.errors import DataError


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


class _Rows(csv.DictReader):
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
        return (
            f"a cell is longer than the CSV reader's limit of {csv.field_size_limit():,} characters"
        )
    return f"malformed CSV ({e})"


def read_csv(path: Path, columns: Iterable[str]) -> csv.DictReader[str]:
    """Rows of a CSV file with a header line; a DataError on line 1 names any of ``columns`` it lacks,
    and a malformed row (a cell over the CSV field limit, a bad quote) is a DataError naming its line."""
    reader = _Rows(read_text(path), path)
    columns = tuple(columns)
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise DataError(path, 1, f"missing columns: {', '.join(missing)}{csv_hint(path, columns)}")
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
        columns = tuple(columns)
        missing = [c for c in columns if c not in (header or [])]
        if missing:
            raise DataError(
                path, 1, f"missing columns: {', '.join(missing)}{csv_hint(path, columns)}"
            )

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
            record[None] = row[len(names) :]
        for name in names[len(row) :]:
            record[name] = None
        return start, record


def iter_csv(path: Path, columns: Iterable[str]) -> CsvRecords:
    """(line the row starts on, row) for each row of a CSV file with a header line, read as they are
    asked for: :func:`read_csv`'s rows and errors without holding the file (:class:`CsvRecords`)."""
    return CsvRecords(path, columns)


def read_rows(
    path: Path, columns: tuple[str, ...], refused: dict[str, str] | None = None
) -> Iterator[tuple[int, dict[str, str]]]:
    """(first line of the row, row) for each CSV row under its header, read as asked for
    (:func:`~grandrounds.benchmarks.readers.lines.iter_csv`: a missing column or malformed quoting is a
    DataError naming the line). A column in ``refused`` (name -> why) or a row with too few or too
    many cells is one too."""
    reader = iter_csv(path, columns)
    header = list(reader.fieldnames or [])
    for col, why in (refused or {}).items():
        if col in header:
            raise DataError(path, 1, f"unexpected column {col!r}: {why}")
    for start, row in reader:
        if None in row:
            raise DataError(
                path, start, f"{len(header) + len(row[None])} cells, the header has {len(header)}"
            )
        if any(v is None for v in row.values()):
            raise DataError(
                path,
                start,
                f"{sum(v is not None for v in row.values())} cells, the header has {len(header)}",
            )
        yield start, row

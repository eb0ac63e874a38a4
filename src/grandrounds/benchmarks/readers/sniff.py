"""What a data file looks like, for the error a wrong file gets: its kind (workbook, JSON Lines, CSV,
JSON), the names it holds (keys, columns, sheets), and the command that would read it where a
benchmark's own format matches.

Only the start of a file is read (its first line, its header, its workbook's first row): the
error of a wrong file must not cost a read of the whole file.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

from grandrounds.core.display import safe_text

#: Bytes read to tell what a file is.
HEAD = 64 * 1024


@dataclass(frozen=True)
class Look:
    """What a file looks like: ``kind`` (xlsx, zip, jsonl, json, csv, text, binary) and the names its
    first record or header holds (keys or columns, in the file's order)."""

    kind: str
    names: tuple[str, ...] = ()

    def describe(self) -> str:
        # names come from the file: shown on one line, control characters escaped, each cut at 60 characters
        shown = ", ".join(safe_text(n).replace("\n", " ")[:60] for n in self.names[:8]) + (
            ", ..." if len(self.names) > 8 else ""
        )
        return {
            "xlsx": f"an Excel workbook (first row: {shown})"
            if self.names
            else "an Excel workbook",
            "zip": "a zip archive",
            "jsonl": f"JSON Lines whose records have keys {shown}",
            "json": f"a JSON document (keys {shown})" if self.names else "a JSON document",
            "csv": f"CSV with columns {shown}",
            "binary": "a binary file",
        }.get(self.kind, "a text file")


def look(path: Path) -> Look:
    """What ``path`` looks like (an unreadable file: ``binary``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
    except OSError:
        return Look("binary")
    if head.startswith(b"PK\x03\x04"):
        return _workbook(path)
    text = head.decode("utf-8-sig", errors="replace")
    first = text.split("\n", 1)[0].strip()
    if first.startswith("{"):
        try:
            rec = json.loads(first)
        except ValueError:
            return Look("json")
        return Look("jsonl", tuple(rec)) if isinstance(rec, dict) else Look("json")
    if first.startswith("["):
        return Look("json")
    if "\x00" in text:
        return Look("binary")
    if "," in first or "\t" in first:
        import csv

        try:
            header = next(
                csv.reader([first], delimiter="\t" if "\t" in first and "," not in first else ",")
            )
        except csv.Error:
            return Look("text")
        return Look("csv", tuple(h.strip() for h in header))
    return Look("text")


def _workbook(path: Path) -> Look:
    try:
        names = zipfile.ZipFile(path).namelist()
    except (OSError, zipfile.BadZipFile):
        return Look("zip")
    if "xl/workbook.xml" not in names:
        return Look("zip")
    try:
        import openpyxl

        wb = openpyxl.load_workbook(path, read_only=True)
        try:
            row = next(wb.worksheets[0].iter_rows(max_row=1, values_only=True), ())
        finally:
            wb.close()
    except Exception:  # noqa: BLE001  (a damaged workbook: say what it is without its first row)
        return Look("xlsx")
    return Look("xlsx", tuple(str(c) for c in row if c is not None))


#: Formats of the benchmarks' own files: (kind, names every such file has, the command that reads one).
KNOWN: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "jsonl",
        frozenset({"prompt", "rubrics", "prompt_id"}),
        "grandrounds run healthbench --data {path}",
    ),
    ("csv", frozenset({"id", "question", "rubrics"}), "grandrounds run medeqbench --data {path}"),
    (
        "csv",
        frozenset({"question", "opa", "opb", "opc", "opd", "ope", "answer_idx", "explanation"}),
        "grandrounds run medbullets --data {path}",
    ),
    (
        "csv",
        frozenset({"question", "opa", "opb", "opc", "opd", "answer_idx", "explanation"}),
        "grandrounds run medbullets --data {path} --param options=4",
    ),
    (
        "jsonl",
        frozenset({"question", "options", "answer_idx"}),
        "grandrounds run medqa --data {path}",
    ),
    ("xlsx", frozenset({"question", "rubrics"}), "grandrounds run gaps --data {path}"),
    (
        "xlsx",
        frozenset({"Question", "Answer", "Focus (Drug)"}),
        "grandrounds run medicationqa --data {path}",
    ),
)


def command_for(path: Path, seen: Look | None = None) -> str | None:
    """The command that reads ``path``, where its look matches a benchmark's own format (the most
    specific match: the format naming the most of its names)."""
    seen = seen or look(path)
    matches = [
        (len(names), cmd)
        for kind, names, cmd in KNOWN
        if kind == seen.kind and names <= set(seen.names)
    ]
    if not matches:
        return None
    return max(matches)[1].format(path=path)


def wrong_file(path: Path, expected: str) -> str:
    """The sentence a wrong file's error ends with: what ``path`` looks like against what was
    ``expected``, and the command that would read it where one does."""
    seen = look(path)
    cmd = command_for(path, seen)
    tail = f"; to read it, run `{cmd}`" if cmd else ""
    return f"this file is {seen.describe()}, not {expected}{tail}"


def csv_hint(path: Path, columns: tuple[str, ...]) -> str:
    """What a CSV error with missing ``columns`` adds: ``; <what the file is>`` where the file is not
    CSV or a benchmark's own format matches it; "" for a CSV no benchmark's format names (its
    missing columns say it all)."""
    seen = look(path)
    if seen.kind == "csv" and command_for(path, seen) is None:
        return ""
    return "; " + wrong_file(path, f"the CSV this benchmark reads (columns {', '.join(columns)})")

"""Reading benchmark files in their original formats, with errors that name the file and line or record."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from grandrounds.benchmarks.base import read_text
from grandrounds.errors import DataError


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines file.

    Lines end at ``\n`` only: ``str.splitlines`` would also break at U+2028 and U+0085, which
    occur raw inside JSON strings (HealthBench has them). A line that is not a JSON object
    (truncated, invalid) is a DataError naming its line.
    """
    out: list[tuple[int, dict[str, Any]]] = []
    for no, line in enumerate(read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, no, f"invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(path, no, f"expected a JSON object, got {type(obj).__name__}")
        out.append((no, obj))
    if not out:
        raise DataError(path, None, "no records (only blank lines)")
    return out


def read_json(path: Path) -> Any:
    """A whole-file JSON document; a syntax error is reported with its line number."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None


def read_csv(path: Path, columns: Iterable[str]) -> csv.DictReader:
    """Rows of a CSV file with a header line; a DataError on line 1 names any of ``columns`` it lacks."""
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise DataError(path, 1, f"missing columns: {', '.join(missing)}")
    return reader


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


def check_unique_ids(path: Path, ids: Iterable[str]) -> None:
    """Sample ids key answers in the store: a repeated id is a DataError."""
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise DataError(path, f"record {i!r}", "duplicate id")
        seen.add(i)

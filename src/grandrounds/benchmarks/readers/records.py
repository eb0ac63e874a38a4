"""Checks on the records read from a data file: required fields, and ids met only once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from grandrounds.core.errors import DataError


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

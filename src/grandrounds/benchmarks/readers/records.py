"""Checks on the records read from a data file: required fields, ids met only once, rubric points."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grandrounds.core.errors import DataError


def require_fields(
    path: Path,
    where: int | str,
    record: Mapping[str, Any],
    fields: Iterable[str],
    nonempty: bool = True,
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


def check_points(path: Path, where: int | str, label: str, points: Iterable[Any]) -> None:
    """Rubric points must be finite numbers, and so must the sums a score is made of (the positive
    points, the negative points): NaN, Infinity, or values such as 1e308 whose sum overflows to
    infinity are a DataError naming the record (``label``: its id and ": ", or "")."""
    pos = neg = 0.0
    for i, p in enumerate(points):
        try:
            value = float(p)
        except OverflowError:  # an integer beyond any float
            value = math.inf
        if not math.isfinite(value):
            raise DataError(
                path,
                where,
                f"{label}rubric item {i} has points {p!r}: points must be finite numbers",
            )
        if value > 0:
            pos += value
        else:
            neg += value
    if not (math.isfinite(pos) and math.isfinite(neg)):
        raise DataError(
            path,
            where,
            f"{label}rubric points are too large: their sum overflows to infinity, so no score is defined",
        )

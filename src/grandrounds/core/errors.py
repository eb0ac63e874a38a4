"""Errors a user sees: each names the file and the line or record, and what was wrong."""

from __future__ import annotations

from pathlib import Path


class GrandroundsError(Exception):
    """Base of every error meant for the user rather than a traceback."""


class DataError(GrandroundsError):
    """A benchmark file that cannot be read as its format says.

    ``where`` is the line number (1-based) or record id; the message always starts with
    the file so the user can open it.
    """

    def __init__(self, path: Path | str, where: str | int | None, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.problem = problem
        loc = f"{self.path}"
        if where is not None:
            loc += f", line {where}" if isinstance(where, int) else f", {where}"
        super().__init__(f"{loc}: {problem}")


class ConfigError(GrandroundsError):
    """A command line or spec that cannot be acted on."""


class StoreError(GrandroundsError):
    """A store file that cannot be used as one: not SQLite, damaged, from a newer schema, read-only
    where a write was needed, or on a full disk. The message starts with the file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

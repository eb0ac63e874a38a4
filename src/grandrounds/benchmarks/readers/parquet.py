"""Parquet files read a record batch at a time (pyarrow, imported only when a Parquet file is read)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grandrounds.core.errors import ConfigError, DataError


def iter_parquet_rows(path: Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, row as a dict) of a Parquet file, a record batch at a time; a file pyarrow
    cannot read, or one without ``columns``, is a DataError."""
    try:
        import pyarrow.parquet as pq  # imported only when a Parquet file is read
    except ImportError:
        raise ConfigError(
            f"{path}: reading Parquet needs pyarrow (pip install 'grandrounds[reports]')"
        ) from None

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # not a Parquet file, truncated
        raise DataError(path, None, f"not a readable Parquet file ({e})") from None
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise DataError(path, None, f"missing column(s) {', '.join(missing)}")
    n = 0
    for batch in pf.iter_batches(batch_size=256):
        for row in batch.to_pylist():
            n += 1
            yield n, row

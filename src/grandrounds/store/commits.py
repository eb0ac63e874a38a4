"""How the store's writes land: one ``BEGIN IMMEDIATE`` transaction, and a flush's buffered writes
grouped by statement and committed as multi-row INSERTs."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` on ``db``, rolled back if anything inside raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:  # SQLite may have rolled back already (a full disk does)
            db.execute("ROLLBACK")
        raise
    try:
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


#: Buffered writes as a flush runs them: one executemany per statement and group of parameters.
Groups = list[tuple[str, list[tuple[Any, ...]]]]


#: ``VALUES (?,?,...)``: the one row of placeholders of an INSERT that :func:`commit_groups`
#: repeats to write many rows in one statement.
_VALUES_ROW = re.compile(r"VALUES (\(\?(?:,\?)*\))")

#: Rows per multi-row INSERT: at most this many, and at most 999 bound values (SQLite's lowest
#: default limit on variables, before 3.32).
_ROWS_PER_INSERT = 64


def _multirow(sql: str) -> tuple[str, str, str] | None:
    """An INSERT with one ``VALUES`` row of placeholders as (text before the row, the row, text
    after it), or None for any other statement."""
    if not sql.startswith("INSERT"):
        return None
    rows = list(_VALUES_ROW.finditer(sql))
    if len(rows) != 1:
        return None
    m = rows[0]
    return sql[: m.start(1)], m.group(1), sql[m.end(1) :]


def commit_groups(db: sqlite3.Connection, groups: Groups) -> None:
    """Run a flush's groups in one transaction. A group of rows for one INSERT goes as multi-row
    INSERTs (``VALUES (...),(...),...``), which SQLite applies row by row in order, as
    executemany does (an upsert's conflict with a row earlier in the same statement included),
    but with one statement step per many rows: the thread takes and releases the GIL once per
    statement, not once per row, so the event loop's thread waits on it less."""
    with transaction(db):
        for sql, group in groups:
            parts = _multirow(sql) if len(group) > 1 else None
            if parts is None:
                db.executemany(sql, group)
                continue
            head, row, tail = parts
            per = max(1, min(_ROWS_PER_INSERT, 999 // max(1, row.count("?"))))
            for i in range(0, len(group), per):
                chunk = group[i : i + per]
                if len(chunk) == 1:
                    db.execute(sql, chunk[0])
                else:
                    db.execute(
                        head + ",".join([row] * len(chunk)) + tail,
                        [v for params in chunk for v in params],
                    )


def group_writes(
    rows: list[tuple[str, tuple[Any, ...]]], last: dict[str, list[tuple[Any, ...]]]
) -> Groups:
    """One executemany per run of the same statement, in the order written: a grade's judge calls
    are deleted and written again when the grade is replaced, so statements must not be
    reordered across one another. Writes that commute with all others come after them, one
    executemany per statement (a call and its lease's release alternate in the buffer: in order,
    each would be an executemany of its own)."""
    groups: Groups = []
    for sql, params in rows:
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    groups.extend(last.items())
    return groups

"""Reading the team store: a PostgreSQL connection that takes the store's SQL as SQLite reads it
(:class:`PgConnection`), and :class:`TeamStore`, the store's own read methods over it.

The team schema mirrors the store's tables (:mod:`grandrounds.store.team.schema`), so the same
query code reads both: the connection turns ``?`` placeholders into psycopg's, drops SQLite's
``INDEXED BY`` hints and hands rows out as SQLite's do (by position and by column name). The few
methods whose SQL is SQLite's own (the order of ``GROUP BY`` groups, ``rowid``) are written again
here. Readers open it read-only (every transaction ``READ ONLY`` in the server); the viewer opens
it with ``reviews=True``, and a review is then its only write.
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from grandrounds.core.errors import StoreError
from grandrounds.store import Store
from grandrounds.store.connection import now
from grandrounds.store.rows import ReviewInput, ReviewRow
from grandrounds.store.team.dsn import scrub, shown, team_error
from grandrounds.store.team.schema import SCHEMA_VERSION

_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+", re.I)
#: Seconds to wait for the server before saying it cannot be reached.
CONNECT_TIMEOUT = 10


class Row(tuple[Any, ...]):
    """A row read by position, by column name, or as a mapping (``dict(row)``), as sqlite3.Row."""

    _names: tuple[str, ...] = ()

    def __new__(cls, values: Any, names: tuple[str, ...]) -> Row:
        row = super().__new__(cls, values)
        row._names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._names else default


def _value(v: Any) -> Any:
    """SQLite's number types for PostgreSQL's: a ``numeric`` (a SUM of integers) as int or float."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


def _row_factory(cursor: Any) -> Any:
    names = tuple(d.name for d in cursor.description) if cursor.description else ()

    def make(values: Any) -> Row:
        return Row([_value(v) for v in values], names)

    return make


def translate(sql: str) -> str:
    """The store's SQLite statement as psycopg takes it: ``?`` -> ``%s`` (a literal ``%`` doubled),
    SQLite's ``INDEXED BY`` hints dropped. The store's statements hold no ``?`` inside quotes."""
    return _INDEXED_BY.sub("", sql).replace("%", "%%").replace("?", "%s")


def connect(dsn: str, *, autocommit: bool = True) -> Any:
    """A psycopg connection to ``dsn`` (settings the DSN lacks come from the ``PG*`` variables, as
    libpq reads them), or a one-line StoreError naming the server without its password."""
    import psycopg

    try:
        return psycopg.connect(
            dsn,
            autocommit=autocommit,
            connect_timeout=CONNECT_TIMEOUT,
            application_name="grandrounds",
        )
    except psycopg.OperationalError as e:
        first = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise team_error(dsn, f"cannot reach the team store ({first})") from None


class PgConnection:
    """The subset of sqlite3.Connection the store's read methods use, over psycopg."""

    def __init__(self, con: Any, dsn: str) -> None:
        self.con = con
        self.dsn = dsn

    @property
    def in_transaction(self) -> bool:
        return False

    def execute(self, sql: str, params: Any = ()) -> Any:
        import psycopg

        cur = self.con.cursor(row_factory=_row_factory)
        try:
            if params:
                cur.execute(translate(sql), tuple(params))
            else:
                cur.execute(_INDEXED_BY.sub("", sql))
        except psycopg.OperationalError as e:
            raise team_error(self.dsn, f"the team store failed ({e})") from None
        return cur

    def executemany(self, sql: str, seq: Any) -> Any:
        cur = self.con.cursor()
        cur.executemany(translate(sql), [tuple(p) for p in seq])
        return cur

    def close(self) -> None:
        self.con.close()


def schema_version(db: PgConnection, dsn: str) -> int:
    """The newest team migration applied (0 where none is), refusing a schema newer than this code."""
    have = db.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()[0]
    if not have:
        return 0
    version = int(
        db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
    )
    if version > SCHEMA_VERSION:
        raise team_error(
            dsn,
            f"team store schema version {version} is newer than this grandrounds understands (version "
            f"{SCHEMA_VERSION}): it was written by a later grandrounds; upgrade grandrounds to use it",
        )
    return version


def review_digest(r: ReviewInput | dict[str, Any], created_at: str) -> str:
    """What makes a review the same review wherever it is published from: its content and time."""
    get = r.get if isinstance(r, dict) else lambda k: getattr(r, k)
    parts = [
        get("run_id"), get("grader_fp"), get("sample_id"), get("criterion_id") or "",
        get("reviewer"), get("verdict"), get("score"), get("reason") or "", created_at,
    ]  # fmt: skip
    return hashlib.sha256(repr(parts).encode("utf-8")).hexdigest()


_REVIEW_COLUMNS = (
    "id, run_id, grader_fp, sample_id, criterion_id, reviewer, verdict, score, reason, created_at"
)


class TeamImages:
    """The images of a team store, read from its ``images`` table (see :func:`grandrounds.analyses.collect.shown_image`)."""

    #: What a report names as where an image was looked for.
    root = Path("images table")

    def __init__(self, store: TeamStore) -> None:
        self.store = store

    def read(self, sha256: str, max_bytes: int) -> tuple[bytes | None, str, int] | None:
        """(bytes, media type, size) of a stored image, the bytes None when it is larger than
        ``max_bytes`` (not read then); None when the store holds no such image."""
        row = self.store.pg.execute(
            "SELECT media_type, octet_length(data), "
            "CASE WHEN octet_length(data) <= ? THEN data END FROM images WHERE sha256 = ?",
            (max_bytes, sha256),
        ).fetchone()
        if row is None:
            return None
        return (bytes(row[2]) if row[2] is not None else None), str(row[0]), int(row[1])


class TeamStore(Store):
    """The store's read methods over a team store in PostgreSQL (``reviews=True``: clinician
    reviews may be added, the only write). ``path`` is the DSN as it may be shown (no password)."""

    def __init__(self, dsn: str, reviews: bool = False) -> None:  # noqa: D107 (no SQLite file to open)
        self.dsn = dsn
        self.path = shown(dsn)  # type: ignore[assignment]  # printed as the store is named
        self.shown = shown(dsn)
        self.readonly = not reviews
        self._pending, self._pending_last, self._buffered = [], {}, 0
        self._new_calls, self._pending_calls = {}, {}
        self._writer = None
        self._handed = __import__("collections").deque()
        self._behind = None
        self._checkpoints = None
        self._pending_since = 0.0
        self.closed = False
        con = connect(dsn)
        self.pg = PgConnection(con, dsn)
        #: The store's read methods query ``self.db``: here the PostgreSQL connection.
        self.db = self.pg  # type: ignore[assignment]
        try:
            con.execute("SET default_transaction_read_only = on")
            version = schema_version(self.pg, dsn)
            if version == 0:
                raise team_error(
                    dsn,
                    "no grandrounds team store in this database: publish to it first "
                    "(grandrounds publish --store STORE --to DSN)",
                )
            if version < SCHEMA_VERSION:
                raise team_error(
                    dsn,
                    f"team store schema version {version} is older than this grandrounds's "
                    f"({SCHEMA_VERSION}): publish to it once with this grandrounds to upgrade it",
                )
        except BaseException:
            con.close()
            raise

    def __str__(self) -> str:
        return self.shown

    def image_store(self) -> Any:
        return TeamImages(self)

    # ---- what SQLite says in its own dialect --------------------------------------------
    # a grade's status, verdict count and failed judge call: columns the server computed as the
    # grade was published (team/schema.py), the same expressions as the store's
    _STATUS = "status"
    _N_VERDICTS = "n_verdicts"
    _JUDGE_FAILED = "judge_failed"

    def review_counts(self) -> dict[str, int]:
        return dict(
            self.db.execute("SELECT run_id, COUNT(*) FROM reviews GROUP BY run_id ORDER BY run_id")
        )

    def episode_statuses(self, run_id: str) -> dict[str, int]:
        rows = self.db.execute(
            "SELECT status, COUNT(*) FROM episodes WHERE run_id = ? GROUP BY status ORDER BY status",
            (run_id,),
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def reviews(
        self, run_id: str | None = None, grader_fp: str | None = None, sample_id: str | None = None
    ) -> list[ReviewRow]:
        filters = {"run_id": run_id, "grader_fp": grader_fp, "sample_id": sample_id}
        used = {k: v for k, v in filters.items() if v}
        where = " AND ".join(f"{k} = ?" for k in used) or "1=1"
        rows = self.db.execute(
            f"SELECT {_REVIEW_COLUMNS} FROM reviews WHERE {where} ORDER BY created_at, id",
            tuple(used.values()),
        )
        return [cast(ReviewRow, dict(r)) for r in rows]

    def put_review(self, review: ReviewInput) -> int:
        """Append one review (the viewer's only write), in its own read-write transaction."""
        if self.readonly:
            raise StoreError(self.shown, "opened read-only: reviews are added through the viewer")
        import psycopg

        created = now()
        r = review
        try:
            with self.pg.con.transaction():
                self.pg.con.execute("SET TRANSACTION READ WRITE")
                row = self.pg.execute(
                    "INSERT INTO reviews (run_id, grader_fp, sample_id, criterion_id, reviewer, verdict, "
                    "score, reason, created_at, digest) VALUES (?,?,?,?,?,?,?,?,?,?) RETURNING id",
                    (
                        r.run_id, r.grader_fp, r.sample_id, r.criterion_id, r.reviewer,
                        r.verdict, r.score, r.reason, created, review_digest(r, created),
                    ),
                ).fetchone()  # fmt: skip
        except psycopg.errors.InsufficientPrivilege as e:
            raise StoreError(self.shown, scrub(f"cannot add the review ({e})", self.dsn)) from None
        return int(row[0])

    def flush(self) -> None:
        """Nothing is buffered here."""

    def close(self) -> None:
        if not self.closed:
            self.db.close()
            self.closed = True

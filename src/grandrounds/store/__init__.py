"""The SQLite store: cache of every call, and every stage of every run.

Each write is its own short transaction (WAL journal), so a run killed at any moment leaves
the store consistent and re-running the same command finishes only what is missing. A
successful call is never overwritten by a later failure; a failure is replaced by success.
"""

from __future__ import annotations

import json
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from grandrounds.hashing import canonical_json
from grandrounds.records import Grade, Request, Response, Sample, Usage, grade_from_json, sample_from_json
from grandrounds.store.migrations import MIGRATIONS


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class RunRecord:
    id: str
    benchmark: str
    benchmark_spec: str
    model: str
    options: dict[str, Any]
    dataset_sha256: str
    package_version: str
    gen_params: dict[str, Any]
    data_source: str
    created_at: str = ""


class Store:
    """A handle on one store file. Pass it explicitly; there is no global store."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self._migrate()
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._pending_calls: dict[str, Response] = {}
        self._pending_since = 0.0
        self._behind: tuple[int, float] | None = None

    def close(self) -> None:
        self.flush()
        self.db.close()

    # ---- write-behind -------------------------------------------------------------------
    @contextmanager
    def write_behind(self, max_rows: int = 256, max_age: float = 0.05) -> Iterator[None]:
        """Buffer calls, samples, answers and grades and commit them together every ``max_rows``
        rows, or once they are ``max_age`` seconds old when the holder calls :meth:`flush_if_due`
        (the runner does so from a timer, so a commit never sits between a reply and the next request).

        Each flush is one transaction, so a crash loses at most the last unflushed moment of
        work (asked again on resume) and never leaves a half-written row. Reads of calls see
        buffered ones, so the cache never misses its own writes.
        """
        self._behind = (max_rows, max_age)
        try:
            yield
        finally:
            self._behind = None
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        # One executemany per statement, rows of a statement in their order. Reordering across
        # statements is safe: the buffered tables have no foreign keys between them, and the two
        # call statements agree whatever their order (a stored success is never replaced by a failure).
        by_sql: dict[str, list[tuple[Any, ...]]] = {}
        for sql, params in rows:
            by_sql.setdefault(sql, []).append(params)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for sql, group in by_sql.items():
                self.db.executemany(sql, group)
        except BaseException:
            self.db.execute("ROLLBACK")
            self._pending = rows + self._pending
            raise
        self.db.execute("COMMIT")
        self._pending_calls.clear()

    def flush_if_due(self) -> None:
        if self._behind and self._pending and time.monotonic() - self._pending_since >= self._behind[1]:
            self.flush()

    def _write(self, sql: str, params: tuple[Any, ...], call: Response | None = None) -> None:
        if self._behind is None:
            self.db.execute(sql, params)
            return
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append((sql, params))
        if call is not None and call.ok:
            self._pending_calls[call.key] = replace(call, cached=True)
        if len(self._pending) >= self._behind[0]:
            self.flush()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group several writes into one transaction (all or none of them land)."""
        if self.db.in_transaction or self._behind is not None:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # ---- schema -------------------------------------------------------------------------
    def _migrate(self) -> None:
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
        done = {r[0] for r in self.db.execute("SELECT version FROM schema_migrations")}
        for version, sql in MIGRATIONS:
            if version in done:
                continue
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in sql.split(";"):
                    if stmt.strip():
                        self.db.execute(stmt)
                self.db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (version, now()))
                self.db.execute("COMMIT")
            except Exception:
                self.db.execute("ROLLBACK")
                raise

    def schema_version(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0])

    # ---- calls (the cache) ----------------------------------------------------------------
    def get_call(self, key: str) -> Response | None:
        """A stored successful response for ``key``; failed calls are not cache hits."""
        pending = self._pending_calls.get(key)
        if pending is not None:
            return pending
        row = self.db.execute("SELECT * FROM calls WHERE key = ? AND error IS NULL", (key,)).fetchone()
        return _row_to_response(row, cached=True) if row else None

    def get_call_any(self, key: str) -> Response | None:
        row = self.db.execute("SELECT * FROM calls WHERE key = ?", (key,)).fetchone()
        return _row_to_response(row, cached=True) if row else None

    def put_call(self, request: Request, response: Response, attempts: int = 1) -> None:
        values = (
            response.key,
            request.provider,
            request.model,
            request.purpose,
            request.canonical(),
            response.text,
            response.error,
            json.dumps(dict(response.scores)) if response.scores else None,
            response.usage.prompt_tokens,
            response.usage.completion_tokens,
            response.latency,
            attempts,
            now(),
        )
        if response.ok:
            self._write("INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", values, response)
        else:
            self._write(
                "INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "error = excluded.error, attempts = calls.attempts + excluded.attempts, created_at = excluded.created_at "
                "WHERE calls.error IS NOT NULL",
                values,
            )

    def count_calls(self, purpose: str | None = None) -> int:
        if purpose:
            return int(self.db.execute("SELECT COUNT(*) FROM calls WHERE purpose = ?", (purpose,)).fetchone()[0])
        return int(self.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def calls_by_key(self, keys: list[str]) -> dict[str, Response]:
        out: dict[str, Response] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            q = f"SELECT * FROM calls WHERE key IN ({','.join('?' * len(chunk))})"
            for row in self.db.execute(q, chunk):
                out[row["key"]] = _row_to_response(row, cached=True)
        return out

    # ---- runs and samples ---------------------------------------------------------------
    def ensure_run(self, run: RunRecord) -> RunRecord:
        self.db.execute(
            "INSERT OR IGNORE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                run.id,
                run.benchmark,
                run.benchmark_spec,
                run.model,
                canonical_json(run.options),
                run.dataset_sha256,
                run.package_version,
                canonical_json(run.gen_params),
                run.data_source,
                run.created_at or now(),
            ),
        )
        got = self.get_run(run.id)
        assert got is not None
        return got

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _row_to_run(row) if row else None

    def runs(self) -> list[RunRecord]:
        return [_row_to_run(r) for r in self.db.execute("SELECT * FROM runs ORDER BY created_at")]

    def put_samples(self, benchmark: str, dataset_sha256: str, samples: list[Sample]) -> None:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(
                "INSERT OR IGNORE INTO samples VALUES (?,?,?,?,?)",
                [(benchmark, dataset_sha256, s.id, i, canonical_json(s)) for i, s in enumerate(samples)],
            )
            self.db.execute("COMMIT")
        except Exception:
            self.db.execute("ROLLBACK")
            raise

    def put_sample(self, benchmark: str, dataset_sha256: str, index: int, sample: Sample) -> None:
        """Store one sample (kept if already there); buffered like answers under write-behind."""
        self._write(
            "INSERT OR IGNORE INTO samples VALUES (?,?,?,?,?)",
            (benchmark, dataset_sha256, sample.id, index, canonical_json(sample)),
        )

    def sample_ids(self, benchmark: str, dataset_sha256: str) -> set[str]:
        rows = self.db.execute(
            "SELECT sample_id FROM samples WHERE benchmark = ? AND dataset_sha256 = ?", (benchmark, dataset_sha256)
        )
        return {r[0] for r in rows}

    def samples(self, benchmark: str, dataset_sha256: str) -> list[Sample]:
        rows = self.db.execute(
            "SELECT sample_json FROM samples WHERE benchmark = ? AND dataset_sha256 = ? ORDER BY idx",
            (benchmark, dataset_sha256),
        )
        return [sample_from_json(json.loads(r[0])) for r in rows]

    def put_answer(self, run_id: str, sample_id: str, request_key: str, prompt: Any) -> None:
        self._write(
            "INSERT OR REPLACE INTO answers VALUES (?,?,?,?)", (run_id, sample_id, request_key, canonical_json(prompt))
        )

    def answers(self, run_id: str) -> dict[str, tuple[str, Response | None]]:
        """sample_id -> (request key, stored response or None when never answered)."""
        rows = list(self.db.execute("SELECT sample_id, request_key FROM answers WHERE run_id = ?", (run_id,)))
        calls = self.calls_by_key([r[1] for r in rows])
        return {r[0]: (r[1], calls.get(r[1])) for r in rows}

    # ---- grades and results -------------------------------------------------------------
    def put_grader(self, fingerprint: str, spec: dict[str, Any]) -> None:
        self.db.execute("INSERT OR IGNORE INTO graders VALUES (?, ?)", (fingerprint, canonical_json(spec)))

    def grader_spec(self, fingerprint: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT spec_json FROM graders WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return json.loads(row[0]) if row else None

    def put_grade(self, run_id: str, grader_fp: str, grade: Grade) -> None:
        n_unknown = sum(1 for v in grade.verdicts if v.status == "unknown")
        self._write(
            "INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?)",
            (run_id, grader_fp, grade.sample_id, grade.value, n_unknown, canonical_json(grade), now()),
        )

    def grades(self, run_id: str, grader_fp: str) -> dict[str, Grade]:
        rows = self.db.execute("SELECT grade_json FROM grades WHERE run_id = ? AND grader_fp = ?", (run_id, grader_fp))
        out = {}
        for r in rows:
            g = grade_from_json(json.loads(r[0]))
            out[g.sample_id] = g
        return out

    def grader_fps(self, run_id: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT grader_fp FROM results WHERE run_id = ?", (run_id,))]

    def put_result(self, run_id: str, grader_fp: str, result: Any) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO results VALUES (?,?,?,?)", (run_id, grader_fp, canonical_json(result), now())
        )

    def results(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for r in self.db.execute("SELECT run_id, grader_fp, result_json FROM results ORDER BY created_at"):
            yield r[0], r[1], json.loads(r[2])


def _row_to_response(row: sqlite3.Row, cached: bool) -> Response:
    return Response(
        key=row["key"],
        text=row["text"],
        error=row["error"],
        scores=json.loads(row["scores_json"]) if row["scores_json"] else {},
        usage=Usage(row["prompt_tokens"], row["completion_tokens"]),
        latency=row["latency"],
        cached=cached,
    )


def _row_to_run(row: sqlite3.Row) -> RunRecord:
    return RunRecord(
        id=row["id"],
        benchmark=row["benchmark"],
        benchmark_spec=row["benchmark_spec"],
        model=row["model"],
        options=json.loads(row["options_json"]),
        dataset_sha256=row["dataset_sha256"],
        package_version=row["package_version"],
        gen_params=json.loads(row["gen_params_json"]),
        data_source=row["data_source"],
        created_at=row["created_at"],
    )

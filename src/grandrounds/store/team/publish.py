"""Publishing an SQLite store into the team store: every run with its samples, answers (and the
calls behind them), gradings, episodes, reviews and review queue, one transaction per run; then
judge-agreement figures and images.

Idempotent: rows are keyed as in the store (a run by its id, a grading by run and grader
fingerprint, a grade by run, fingerprint and sample), so publishing again changes nothing, and a
run re-graded since adds its new grading (a grade, result or episode replaces the published one
only when it is newer; a successful call replaces a failed one, never the reverse). Two
publishers may run at once, even over the same runs: rows go in with ``ON CONFLICT``, a run's
transaction holds an advisory lock on its id, and a transaction the server aborts as a deadlock
is retried. The call cache stays in SQLite: only the calls behind published rows are copied.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from grandrounds.core.errors import StoreError
from grandrounds.store import Store
from grandrounds.store.connection import now
from grandrounds.store.images import MEDIA_TYPES, ImageStore
from grandrounds.store.team.connection import PgConnection, connect, review_digest, schema_version
from grandrounds.store.team.dsn import scrub, shown, team_error
from grandrounds.store.team.schema import MIGRATIONS, SCHEMA_VERSION

#: Times a run's transaction is tried when the server aborts it as a deadlock or serialization failure.
TRIES = 5
#: Ids read from the store per query.
CHUNK = 500

_UPSERT_NEWER = "ON CONFLICT ({key}) DO UPDATE SET {sets} WHERE {table}.{stamp} < excluded.{stamp}"


def _upsert_newer(table: str, key: str, columns: Sequence[str], stamp: str) -> str:
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key.split(", "))
    marks = ",".join(["%s"] * len(columns))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) " + _UPSERT_NEWER.format(
        key=key, sets=sets, table=table, stamp=stamp
    )


def _insert_new(table: str, columns: Sequence[str], key: str = "") -> str:
    marks = ",".join(["%s"] * len(columns))
    target = f"({key}) " if key else ""
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) ON CONFLICT {target}DO NOTHING"


CALL_COLUMNS = (
    "key", "provider", "model", "purpose", "request_json", "text", "error", "scores_json",
    "prompt_tokens", "completion_tokens", "latency", "attempts", "created_at", "finish_reason",
    "tool_calls_json", "system_fingerprint",
)  # fmt: skip
#: A success replaces anything; a failure replaces only a failure, and only a newer one.
_CALL_UPSERT = (
    f"INSERT INTO calls ({', '.join(CALL_COLUMNS)}) VALUES ({','.join(['%s'] * len(CALL_COLUMNS))}) "
    "ON CONFLICT (key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in CALL_COLUMNS[1:])
    + " WHERE (calls.error IS NOT NULL AND excluded.error IS NULL) OR "
    "(calls.error IS NOT NULL AND excluded.error IS NOT NULL AND calls.created_at < excluded.created_at)"
)
RUN_COLUMNS = (
    "id", "benchmark", "benchmark_spec", "model", "options_json", "dataset_sha256",
    "package_version", "gen_params_json", "data_source", "created_at",
)  # fmt: skip
GRADE_COLUMNS = (
    "run_id", "grader_fp", "sample_id", "value", "n_unknown", "grade_json", "created_at",
)  # fmt: skip
_GRADE_UPSERT = (
    _upsert_newer("grades", "run_id, grader_fp, sample_id", GRADE_COLUMNS, "created_at")
    + " RETURNING grader_fp, sample_id, (xmax <> 0)"
)
RESULT_COLUMNS = ("run_id", "grader_fp", "result_json", "created_at")
SETTLED_COLUMNS = ("run_id", "grader_fp", "tally_json", "settled_at")
EPISODE_COLUMNS = ("run_id", "sample_id", "epoch", "status", "steps_json", "updated_at")
ANSWER_COLUMNS = ("run_id", "sample_id", "request_key", "prompt_json")
_ANSWER_UPSERT = (
    f"INSERT INTO answers ({', '.join(ANSWER_COLUMNS)}) VALUES (%s,%s,%s,%s) "
    "ON CONFLICT (run_id, sample_id) DO UPDATE SET request_key = excluded.request_key, "
    "prompt_json = excluded.prompt_json WHERE (answers.request_key, answers.prompt_json) "
    "IS DISTINCT FROM (excluded.request_key, excluded.prompt_json)"
)
REVIEW_COLUMNS = (
    "run_id", "grader_fp", "sample_id", "criterion_id", "reviewer", "verdict", "score", "reason",
    "created_at", "digest",
)  # fmt: skip
QUEUE_COLUMNS = (
    "run_id", "grader_fp", "sample_id", "criterion_id", "reason", "seed", "created_at",
)  # fmt: skip
AGREEMENT_COLUMNS = (
    "key", "suite", "judge", "judge_params_json", "protocol", "prompt", "dataset_sha256", "n_rows",
    "summary_json", "metrics_json", "verdicts_json", "package_version", "created_at",
)  # fmt: skip


class PublishError(StoreError):
    """A store or a row that cannot be published (the message names the store, run and row)."""


@dataclass
class RunPublished:
    """What publishing one run wrote: rows added or replaced, by table (0 everywhere: unchanged)."""

    run_id: str
    benchmark: str
    model: str
    written: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(self.written.values())


@dataclass
class Published:
    """What one ``publish`` did."""

    runs: list[RunPublished] = field(default_factory=list)
    images_added: int = 0
    agreements_written: int = 0
    seconds: float = 0.0


def migrate(dsn: str) -> None:
    """Create or upgrade the team schema (each migration in its own transaction, under an
    advisory lock, so publishers starting together apply each once)."""
    import psycopg

    con = connect(dsn, autocommit=True)
    try:
        db = PgConnection(con, dsn)
        version = schema_version(db, dsn)
        for number, sql in MIGRATIONS:
            if number <= version:
                continue
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(hashtext('grandrounds schema'))")
                con.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    '(version bigint PRIMARY KEY, applied_at text COLLATE "C")'
                )
                done = con.execute(
                    "SELECT 1 FROM schema_migrations WHERE version = %s", (number,)
                ).fetchone()
                if done:
                    continue
                con.execute(sql)
                con.execute(
                    "INSERT INTO schema_migrations VALUES (%s, %s)",
                    (number, time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())),
                )
    except psycopg.errors.InsufficientPrivilege as e:
        raise team_error(dsn, f"cannot create the team store's tables ({e})") from None
    finally:
        con.close()


def publish(
    store_path: Path,
    dsn: str,
    run_ids: Iterable[str] | None = None,
    log: Callable[[RunPublished], None] | None = None,
) -> Published:
    """Publish the store at ``store_path`` (every run, or those of ``run_ids``) into ``dsn``."""
    started = time.perf_counter()
    migrate(dsn)
    out = Published()
    with Store(store_path, readonly=True) as st:
        src = st.db
        ids = [r[0] for r in src.execute("SELECT id FROM runs ORDER BY created_at, rowid")]
        if run_ids is not None:
            wanted = set(run_ids)
            ids = [i for i in ids if i in wanted]
        con = connect(dsn, autocommit=True)
        try:
            out.images_added = _publish_images(con, ImageStore.beside(store_path), dsn)
            for run_id in ids:
                got = _with_retries(partial(_publish_run, con, src, run_id, dsn), dsn)
                out.runs.append(got)
                if log:
                    log(got)
            out.agreements_written = _with_retries(lambda: _publish_agreement(con, src), dsn)
        finally:
            con.close()
    out.seconds = time.perf_counter() - started
    return out


def _with_retries(work: Callable[[], Any], dsn: str) -> Any:
    import psycopg

    for attempt in range(TRIES):
        try:
            return work()
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
            if attempt == TRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
        except psycopg.errors.InsufficientPrivilege as e:
            raise team_error(dsn, f"not allowed to publish here ({e})") from None
        except psycopg.OperationalError as e:
            raise team_error(dsn, f"the team store failed while publishing ({e})") from None
    raise AssertionError("unreachable")


def _check_text(rows: list[tuple[Any, ...]], what: str, run_id: str, dsn: str) -> None:
    """PostgreSQL text cannot hold a NUL character: such a row is refused by name, before any write."""
    for row in rows:
        for v in row:
            if isinstance(v, str) and "\x00" in v:
                raise PublishError(
                    shown(dsn),
                    f"run {run_id}: a {what} row ({row[0]!s:.80}) holds a NUL character, which "
                    "PostgreSQL text cannot store; nothing of this run was published",
                )


def _in(src: Any, sql: str, head: tuple[Any, ...], keys: Sequence[str]) -> list[tuple[Any, ...]]:
    """``sql`` (with ``{marks}``) over ``keys`` a chunk at a time."""
    out: list[tuple[Any, ...]] = []
    for i in range(0, len(keys), CHUNK):
        part = list(keys[i : i + CHUNK])
        q = sql.format(marks=",".join("?" * len(part)))
        out.extend(tuple(r) for r in src.execute(q, (*head, *part)))
    return out


def _episode_keys(steps_json: str) -> set[str]:
    keys: set[str] = set()
    for st in json.loads(steps_json):
        if st.get("key"):
            keys.add(str(st["key"]))
        keys.update(str(k) for k in st.get("simulator_keys") or ())
    return keys


#: What a run's rows are read with, by table: (query by run id, ``ORDER BY``), in the order they are
#: written (a run before what references it, graders before grades). Samples, graders and calls
#: are read by what these rows name (:func:`_run_rows`).
_RUN_READS: dict[str, tuple[str, str]] = {
    "answers": (f"SELECT {', '.join(ANSWER_COLUMNS)} FROM answers", "sample_id"),
    "grades": (f"SELECT {', '.join(GRADE_COLUMNS)} FROM grades", "grader_fp, sample_id"),
    "grade_calls": ("SELECT run_id, grader_fp, sample_id, key, judge FROM grade_calls", "rowid"),
    "results": (f"SELECT {', '.join(RESULT_COLUMNS)} FROM results", "grader_fp"),
    "settled": (f"SELECT {', '.join(SETTLED_COLUMNS)} FROM settled", "grader_fp"),
    "episodes": (f"SELECT {', '.join(EPISODE_COLUMNS)} FROM episodes", "sample_id, epoch"),
    "reviews": (f"SELECT {', '.join(REVIEW_COLUMNS[:9])} FROM reviews", "id"),
    "review_queue": (f"SELECT {', '.join(QUEUE_COLUMNS)} FROM review_queue", "id"),
}
#: How each table's rows are written (after ``runs``, ``samples``, ``calls``, ``answers``,
#: ``graders`` and ``grades``, which :func:`_write_run` writes itself).
_RUN_WRITES: dict[str, str] = {
    "grade_calls": _insert_new(
        "grade_calls", ("run_id", "grader_fp", "sample_id", "key", "judge"),
        "run_id, grader_fp, sample_id, key",
    ),
    "results": _upsert_newer("results", "run_id, grader_fp", RESULT_COLUMNS, "created_at"),
    "settled": _upsert_newer("settled", "run_id, grader_fp", SETTLED_COLUMNS, "settled_at"),
    "episodes": _upsert_newer("episodes", "run_id, sample_id, epoch", EPISODE_COLUMNS, "updated_at"),
    "reviews": _insert_new("reviews", REVIEW_COLUMNS, "digest"),
    "review_queue": _insert_new(
        "review_queue", QUEUE_COLUMNS, "run_id, grader_fp, sample_id, criterion_id"
    ),
}  # fmt: skip
_SAMPLE_INSERT = _insert_new(
    "samples", ("benchmark", "dataset_sha256", "sample_id", "idx", "sample_json"),
    "benchmark, dataset_sha256, sample_id",
)  # fmt: skip


def _run_rows(src: Any, run_id: str, dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of one run in the store, by table, each checked for what PostgreSQL cannot hold."""
    rows: dict[str, list[tuple[Any, ...]]] = {
        "runs": [tuple(src.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone())]
    }  # fmt: skip
    bench, ds = rows["runs"][0][1], rows["runs"][0][5]
    rows["samples"] = [tuple(r) for r in src.execute(
        "SELECT benchmark, dataset_sha256, sample_id, idx, sample_json FROM samples "
        "WHERE benchmark = ? AND dataset_sha256 = ? ORDER BY sample_id", (bench, ds),
    )]  # fmt: skip
    for table, (select, order) in _RUN_READS.items():
        rows[table] = [
            tuple(r) for r in src.execute(f"{select} WHERE run_id = ? ORDER BY {order}", (run_id,))
        ]
    rows["reviews"] = [
        (*r, review_digest(dict(zip(REVIEW_COLUMNS, r)), r[8])) for r in rows["reviews"]
    ]
    fps = sorted({g[1] for g in rows["grades"]} | {r[1] for r in rows["results"]})
    rows["graders"] = _in(
        src, "SELECT fingerprint, spec_json FROM graders WHERE fingerprint IN ({marks})", (), fps
    )
    keys = {a[2] for a in rows["answers"]} | {g[3] for g in rows["grade_calls"]}
    for e in rows["episodes"]:
        keys |= _episode_keys(e[4])
    select_calls = f"SELECT {', '.join(CALL_COLUMNS)} FROM calls WHERE key IN ({{marks}})"
    rows["calls"] = sorted(_in(src, select_calls, (), sorted(keys)), key=lambda c: c[0])
    for table, got in rows.items():
        _check_text(got, table, run_id, dsn)
    return rows


#: What changes whenever a run's rows in the store change (counts and newest stamps of each of its
#: tables, the calls its answers and grades name included), read without reading the rows.
_SIGNATURE = (
    "SELECT (SELECT COUNT(*) FROM samples s, runs r WHERE r.id = ?1 AND s.benchmark = r.benchmark "
    "AND s.dataset_sha256 = r.dataset_sha256), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(c.created_at), '') || ' ' || IFNULL(SUM(c.error IS NULL), '') "
    "FROM answers a LEFT JOIN calls c ON c.key = a.request_key WHERE a.run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(c.created_at), '') FROM grade_calls g "
    "LEFT JOIN calls c ON c.key = g.key WHERE g.run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(created_at), '') FROM grades WHERE run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(created_at), '') FROM results WHERE run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(settled_at), '') FROM settled WHERE run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(updated_at), '') FROM episodes WHERE run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(id), '') FROM reviews WHERE run_id = ?1), "
    "(SELECT COUNT(*) || ' ' || IFNULL(MAX(id), '') FROM review_queue WHERE run_id = ?1)"
)


def run_signature(src: Any, run_id: str) -> str:
    """A digest of the state of a run's rows in the store (see :data:`_SIGNATURE`)."""
    row = src.execute(_SIGNATURE, (run_id,)).fetchone()
    return hashlib.sha256(json.dumps([run_id, SCHEMA_VERSION, *row]).encode()).hexdigest()


def _publish_run(con: Any, src: Any, run_id: str, dsn: str) -> RunPublished:
    """One run in one transaction (its advisory lock held till the end); nothing is read or sent
    when this state of the run was published whole before."""
    signature = run_signature(src, run_id)
    run = src.execute("SELECT benchmark, model FROM runs WHERE id = ?", (run_id,)).fetchone()
    out = RunPublished(run_id, run[0], run[1])
    done = "SELECT 1 FROM published_runs WHERE run_id = %s AND signature = %s"
    if con.execute(done, (run_id, signature)).fetchone():
        return out
    rows = _run_rows(src, run_id, dsn)
    with con.transaction(), con.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("grandrounds run " + run_id,))
        _write_run(cur, run_id, rows, out.written)
        cur.execute(
            "INSERT INTO published_runs VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (run_id, signature, now()),
        )
    return out


def _write_run(
    cur: Any, run_id: str, rows: dict[str, list[tuple[Any, ...]]], w: dict[str, int]
) -> None:
    w["runs"] = _many(cur, _insert_new("runs", RUN_COLUMNS, "id"), rows["runs"])
    w["samples"] = _many(cur, _SAMPLE_INSERT, rows["samples"])
    w["calls"] = _many(cur, _CALL_UPSERT, rows["calls"])
    w["answers"] = _many(cur, _ANSWER_UPSERT, rows["answers"])
    w["graders"] = _many(
        cur, _insert_new("graders", ("fingerprint", "spec_json"), "fingerprint"), rows["graders"]
    )
    replaced: list[tuple[str, str]] = []
    if rows["grades"]:
        cur.execute(_staged(cur, _GRADE_UPSERT, rows["grades"]))
        written = cur.fetchall()
        replaced = [(fp, sid) for fp, sid, updated in written if updated]
        w["grades"] = len(written)
    if replaced:  # their judge calls are those of the grade that replaced them
        cur.executemany(
            "DELETE FROM grade_calls WHERE run_id = %s AND grader_fp = %s AND sample_id = %s",
            [(run_id, fp, sid) for fp, sid in replaced],
        )
    for table, sql in _RUN_WRITES.items():
        w[table] = _many(cur, sql, rows[table])


def _many(cur: Any, sql: str, rows: list[tuple[Any, ...]]) -> int:
    """Run ``sql`` (an ``INSERT ... VALUES (%s, ...) ON CONFLICT ...``) for every row; how many rows
    it wrote. Many rows are first copied into a temporary table (COPY) and inserted from there in
    one statement, several times faster than a statement per row."""
    if not rows:
        return 0
    if len(rows) < STAGE_FROM:
        cur.executemany(sql, rows)
        return int(cur.rowcount)
    cur.execute(_staged(cur, sql, rows))
    return int(cur.rowcount)


def _staged(cur: Any, sql: str, rows: list[tuple[Any, ...]]) -> str:
    """Copy ``rows`` into a temporary table shaped as ``sql``'s columns (dropped at commit); ``sql``
    reading from there instead of its ``VALUES``."""
    m = _INSERT.match(sql)
    assert m is not None, sql
    table, cols = m.group(1), m.group(2)
    stage = f"stage_{table}"
    cur.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DROP AS SELECT {cols} FROM {table} WITH NO DATA"
    )
    cur.execute(f"TRUNCATE {stage}")
    with cur.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
    return sql[: m.start(3)] + f"SELECT {cols} FROM {stage}" + sql[m.end(3) :]


#: Rows from which :func:`_many` copies into a temporary table rather than one statement each.
STAGE_FROM = 50
_INSERT = re.compile(r"INSERT INTO (\w+) \(([^)]*)\) (VALUES \((?:%s,?)+\))")


def _publish_agreement(con: Any, src: Any) -> int:
    try:
        rows = [tuple(r) for r in src.execute(
            f"SELECT {', '.join(AGREEMENT_COLUMNS)} FROM judge_agreement ORDER BY key"
        )]  # fmt: skip
    except Exception as e:  # a store from before judge agreement was measured
        if "no such table" in str(e):
            return 0
        raise
    if not rows:
        return 0
    with con.transaction(), con.cursor() as cur:
        return _many(
            cur, _upsert_newer("judge_agreement", "key", AGREEMENT_COLUMNS, "created_at"), rows
        )


def _publish_images(con: Any, images: ImageStore, dsn: str) -> int:
    """The store's images not yet in the team store, each checked against its hash; how many were added."""
    if not images.root.is_dir():
        return 0
    found: dict[str, tuple[Path, str]] = {}
    for p in sorted(images.root.glob("??/*")):
        sha, ext = p.stem, p.suffix
        if len(sha) == 64 and p.is_file() and not p.name.startswith("."):
            found[sha] = (p, MEDIA_TYPES.get(ext, "application/octet-stream"))
    if not found:
        return 0
    have: set[str] = set()
    shas = sorted(found)
    for i in range(0, len(shas), CHUNK):
        part = shas[i : i + CHUNK]
        have |= {
            r[0] for r in con.execute("SELECT sha256 FROM images WHERE sha256 = ANY(%s)", (part,))
        }
    added = 0
    for sha in shas:
        if sha in have:
            continue
        path, media = found[sha]
        try:
            data = images.get(sha, media)
        except Exception as e:
            raise PublishError(shown(dsn), scrub(f"image {path}: {e}", dsn)) from None
        with con.transaction():
            cur = con.execute(
                "INSERT INTO images (sha256, media_type, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (sha, media, data),
            )
            added += cur.rowcount
    return added

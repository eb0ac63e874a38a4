"""Merging stores (workers' snapshots) into one, by content.

Everything a store holds is keyed by content or by run id, so stores written apart merge without
renumbering what matters:

- ``calls``: by key. A success beats an error; two different successes for one key keep the one
  merged first and are reported (:attr:`MergeReport.conflicts`); two errors keep the first.
- ``runs``, ``samples``, ``answers``, ``graders``, ``grade_calls``, ``results``,
  ``checked_data``, ``judge_agreement``, ``review_queue``: the first copy of each key is kept.
- ``grades``: a grade a re-run would redo (a failed answer or grader, an unknown verdict) gives
  way to one it would not.
- ``episodes``: the copy with more steps.
- ``reviews``: deduplicated by everything but their id (a review merged twice is one review).
- ``batches``: renumbered into the target (their requests follow), kept once per vendor batch id.
- ``images``: by sha256, each file's bytes checked against its name.
- ``shards``: the union (so a merged store says which parts it holds).
- ``settled`` and ``leases``: never. A lease belongs to a process of the store it was taken in;
  the merged store's run settles itself when the ordinary command runs on it.

Tables this module does not know (added by later versions) are merged by their primary key,
first copy kept, and named in the report.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grandrounds.store.connection import SCHEMA_VERSION
from grandrounds.store.images import ImageStore
from grandrounds.store.snapshot import copy_images

#: Never merged (see the module's docstring).
NEVER = frozenset({"settled", "leases", "schema_migrations", "sqlite_sequence"})
#: Merged by a rule of their own below.
SPECIAL = frozenset(
    {"calls", "grades", "episodes", "reviews", "batches", "batch_requests", "shards"}
)
#: Batch states after which a vendor batch has nothing more to give.
CLOSED_BATCH_STATES = frozenset(
    {"completed", "ended", "failed", "expired", "cancelled", "canceled"}
)
#: Grade statuses a re-run asks again.
REDO_STATUSES = ("answer_failed", "grader_error")


@dataclass(kw_only=True)
class MergeReport:
    """What one merge did, table by table, and what it kept aside."""

    #: table -> rows added to the target
    added: dict[str, int] = field(default_factory=dict)
    #: calls whose stored error was replaced by a success from a later store
    healed: int = 0
    #: (key, purpose, model) of keys with two different successes (the first is kept)
    conflicts: list[tuple[str, str, str]] = field(default_factory=list)
    #: images copied by hash
    images: int = 0
    #: tables merged by primary key only, not known to this version
    unknown_tables: list[str] = field(default_factory=list)

    def add(self, table: str, n: int) -> None:
        self.added[table] = self.added.get(table, 0) + max(0, n)


def _columns(db: sqlite3.Connection, schema: str, table: str) -> list[str]:
    return [r[1] for r in db.execute(f'PRAGMA "{schema}".table_info("{table}")')]


def _tables(db: sqlite3.Connection, schema: str) -> list[str]:
    return [
        r[0]
        for r in db.execute(
            f"SELECT name FROM \"{schema}\".sqlite_master WHERE type = 'table' ORDER BY name"
        )
    ]


def _changes(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT changes()").fetchone()[0])


def schema_version(path: Path) -> int:
    """The newest migration a store has applied (0: none, or not a grandrounds store)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if "schema_migrations" not in _tables(db, "main"):
            raise sqlite3.DatabaseError("not a grandrounds store (no schema_migrations table)")
        return int(
            db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        )
    finally:
        db.close()


def open_batches(path: Path) -> list[tuple[str, str, str]]:
    """(provider, batch id, state) of the batches of a store not yet collected."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if "batches" not in _tables(db, "main"):
            return []
        rows = db.execute(
            "SELECT provider, batch_id, state FROM batches WHERE collected_at IS NULL"
        ).fetchall()
    finally:
        db.close()
    return [(str(p), str(b), str(s)) for p, b, s in rows]


def merge_stores(into: Path, sources: Sequence[Path]) -> MergeReport:
    """Merge ``sources`` into the store ``into`` (created and migrated where it is new), each
    source in one transaction; what was merged."""
    from grandrounds.store import Store

    with Store(into) as st:
        st.flush()
    report = MergeReport()
    db = sqlite3.connect(into, isolation_level=None, timeout=60)
    # a merge writes every row of every store: a large page cache keeps the indexes in memory
    db.execute("PRAGMA cache_size = -262144")
    db.execute("PRAGMA temp_store = MEMORY")
    try:
        for src in sources:
            merge_into(db, into, src, report)
    finally:
        db.close()
    return report


def merge_into(db: sqlite3.Connection, target: Path, source: Path, report: MergeReport) -> None:
    """Merge the store ``source`` into the open target connection ``db`` (whose file is ``target``),
    in one transaction; the target's images folder gets the source's images."""
    db.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro",))
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            _merge_tables(db, report)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    finally:
        db.execute("DETACH DATABASE src")
    report.images += copy_images(ImageStore.beside(source), ImageStore.beside(target))


def _merge_tables(db: sqlite3.Connection, report: MergeReport) -> None:
    mine = set(_tables(db, "main"))
    for table in _tables(db, "src"):
        if table in NEVER or table in SPECIAL or table not in mine:
            continue
        cols = [c for c in _columns(db, "src", table) if c in _columns(db, "main", table)]
        if table in ("review_queue",):
            cols = [c for c in cols if c != "id"]  # renumbered; its UNIQUE key dedupes
        names = ",".join(f'"{c}"' for c in cols)
        db.execute(
            f'INSERT OR IGNORE INTO main."{table}" ({names}) SELECT {names} FROM src."{table}"'
        )
        report.add(table, _changes(db))
        if table not in _KNOWN:
            report.unknown_tables.append(table)
    _merge_calls(db, report)
    _merge_grades(db, report)
    _merge_episodes(db, report)
    _merge_reviews(db, report)
    _merge_batches(db, report)
    if "shards" in mine:
        db.execute("INSERT OR IGNORE INTO main.shards SELECT * FROM src.shards")
        report.add("shards", _changes(db))
        # a shard finished in this snapshot replaces an unfinished record of the same shard
        db.execute(
            "UPDATE main.shards SET state = s.state, n_graded = s.n_graded, updated_at = s.updated_at "
            "FROM src.shards s WHERE main.shards.run_id = s.run_id AND main.shards.grader_fp = s.grader_fp "
            "AND main.shards.shard = s.shard AND main.shards.n_shards = s.n_shards "
            "AND main.shards.state != 'done' AND s.state = 'done'"
        )


_KNOWN = frozenset(
    {
        "runs",
        "samples",
        "answers",
        "graders",
        "grade_calls",
        "results",
        "checked_data",
        "judge_agreement",
        "review_queue",
    }
)


def _merge_calls(db: sqlite3.Connection, report: MergeReport) -> None:
    cols = [c for c in _columns(db, "src", "calls") if c in _columns(db, "main", "calls")]
    names = ",".join(f'"{c}"' for c in cols)
    differ = " OR ".join(
        f"m.{c} IS NOT s.{c}" for c in ("text", "tool_calls_json", "scores_json") if c in cols
    )
    for key, purpose, model in db.execute(
        "SELECT s.key, s.purpose, s.model FROM src.calls s JOIN main.calls m ON m.key = s.key "
        f"WHERE s.error IS NULL AND m.error IS NULL AND ({differ}) ORDER BY s.key"
    ):
        report.conflicts.append((key, purpose, model))
    db.execute(
        f"INSERT OR REPLACE INTO main.calls ({names}) SELECT {', '.join('s.' + c for c in cols)} "
        "FROM src.calls s JOIN main.calls m ON m.key = s.key WHERE m.error IS NOT NULL AND s.error IS NULL"
    )
    report.healed += _changes(db)
    db.execute(f"INSERT OR IGNORE INTO main.calls ({names}) SELECT {names} FROM src.calls")
    report.add("calls", _changes(db))


def _redo_sql(alias: str) -> str:
    statuses = ",".join(f"'{s}'" for s in REDO_STATUSES)
    return (
        f"(json_extract({alias}.grade_json, '$.status') IN ({statuses}) OR {alias}.n_unknown > 0)"
    )


def _merge_grades(db: sqlite3.Connection, report: MergeReport) -> None:
    cols = _columns(db, "main", "grades")
    names = ",".join(cols)
    db.execute(
        f"INSERT OR REPLACE INTO main.grades ({names}) SELECT {', '.join('s.' + c for c in cols)} "
        "FROM src.grades s JOIN main.grades m ON m.run_id = s.run_id AND m.grader_fp = s.grader_fp "
        f"AND m.sample_id = s.sample_id WHERE {_redo_sql('m')} AND NOT {_redo_sql('s')}"
    )
    replaced = _changes(db)
    db.execute(f"INSERT OR IGNORE INTO main.grades ({names}) SELECT {names} FROM src.grades")
    report.add("grades", _changes(db) + replaced)


def _merge_episodes(db: sqlite3.Connection, report: MergeReport) -> None:
    if "episodes" not in _tables(db, "src"):
        return
    cols = _columns(db, "main", "episodes")
    names = ",".join(cols)
    db.execute(
        f"INSERT OR REPLACE INTO main.episodes ({names}) SELECT {', '.join('s.' + c for c in cols)} "
        "FROM src.episodes s JOIN main.episodes m ON m.run_id = s.run_id AND m.sample_id = s.sample_id "
        "AND m.epoch = s.epoch WHERE json_array_length(s.steps_json) > json_array_length(m.steps_json)"
    )
    replaced = _changes(db)
    db.execute(f"INSERT OR IGNORE INTO main.episodes ({names}) SELECT {names} FROM src.episodes")
    report.add("episodes", _changes(db) + replaced)


def _merge_reviews(db: sqlite3.Connection, report: MergeReport) -> None:
    cols = [c for c in _columns(db, "main", "reviews") if c != "id"]
    names = ",".join(cols)
    same = " AND ".join(f"m.{c} IS s.{c}" for c in cols)
    db.execute(
        f"INSERT INTO main.reviews ({names}) SELECT {', '.join('s.' + c for c in cols)} FROM src.reviews s "
        f"WHERE NOT EXISTS (SELECT 1 FROM main.reviews m WHERE {same}) ORDER BY s.id"
    )
    report.add("reviews", _changes(db))


def _merge_batches(db: sqlite3.Connection, report: MergeReport) -> None:
    cols = [c for c in _columns(db, "main", "batches") if c != "id"]
    names = ",".join(cols)
    rows = db.execute(f"SELECT id, {names} FROM src.batches ORDER BY id").fetchall()
    for row in rows:
        old_id, values = row[0], dict(zip(cols, row[1:]))
        found = db.execute(
            "SELECT id FROM main.batches WHERE provider = ? AND endpoint = ? AND batch_id = ?",
            (values["provider"], values["endpoint"], values["batch_id"]),
        ).fetchone()
        if found is None:
            db.execute(
                f"INSERT INTO main.batches ({names}) VALUES ({','.join('?' * len(cols))})",
                [values[c] for c in cols],
            )
            new_id = int(db.execute("SELECT last_insert_rowid()").fetchone()[0])
            report.add("batches", 1)
        else:
            new_id = int(found[0])
        db.execute(
            "INSERT OR IGNORE INTO main.batch_requests (batch, key, attempt, request_json) "
            "SELECT ?, key, attempt, request_json FROM src.batch_requests WHERE batch = ?",
            (new_id, old_id),
        )
        report.add("batch_requests", _changes(db))


def describe(report: MergeReport, sources: Sequence[Path]) -> list[str]:
    """The merge in lines for the terminal."""
    added = ", ".join(f"{n:,} {t}" for t, n in sorted(report.added.items()) if n) or "nothing new"
    lines = [f"merged {len(sources)} store(s): {added}"]
    if report.images:
        lines.append(f"{report.images:,} images copied by hash")
    if report.healed:
        lines.append(f"{report.healed:,} failed calls replaced by a success from another store")
    if report.unknown_tables:
        lines.append("merged by key only: " + ", ".join(sorted(set(report.unknown_tables))))
    return lines


@dataclass(frozen=True, kw_only=True)
class SourceShard:
    """A shard row of a source store, with the run it belongs to."""

    path: Path
    run_id: str
    benchmark: str
    model: str
    dataset: str
    shard: int
    n_shards: int
    state: str
    package_version: str


def source_shards(path: Path) -> list[SourceShard]:
    """The shards a store holds (none for a store written without ``--shard``)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if "shards" not in _tables(db, "main"):
            return []
        rows = db.execute(
            "SELECT s.run_id, r.benchmark, r.model, r.dataset_sha256, s.shard, s.n_shards, s.state, "
            "s.package_version FROM shards s JOIN runs r ON r.id = s.run_id "
            "ORDER BY s.run_id, s.n_shards, s.shard"
        ).fetchall()
    finally:
        db.close()
    names = (
        "run_id",
        "benchmark",
        "model",
        "dataset",
        "shard",
        "n_shards",
        "state",
        "package_version",
    )
    return [SourceShard(path=path, **dict(zip(names, row, strict=True))) for row in rows]


def refusals(
    sources: Sequence[Path],
    manifest: Mapping[str, Any] | None,
    allow_missing: bool = False,
    allow_open_batches: bool = False,
) -> list[str]:
    """Why these stores must not be merged, one line each (empty: they may be).

    A store that is not there or not a store; a batch not yet collected (its answers are still at
    the vendor) unless ``allow_open_batches``; shards of one run cut into different numbers of
    parts or written by different package versions; with the plan's ``manifest``, a shard of a run
    the plan does not name (another plan, or another dataset of a planned benchmark and model), of
    another N or package version; and, unless ``allow_missing``, a shard no store holds."""
    out: list[str] = []
    found: list[SourceShard] = []
    for path in sources:
        if not path.is_file():
            out.append(f"{path}: no such store")
            continue
        try:
            version = schema_version(path)
            if version > SCHEMA_VERSION:
                out.append(
                    f"{path}: store schema version {version} is newer than this grandrounds "
                    f"understands (version {SCHEMA_VERSION}): merge with the version that wrote it"
                )
                continue
            found.extend(source_shards(path))
            batches = open_batches(path)
        except sqlite3.DatabaseError as e:
            out.append(f"{path}: not a readable store ({e})")
            continue
        if batches and not allow_open_batches:
            provider, batch_id, state = batches[0]
            out.append(
                f"{path}: {len(batches)} batch(es) not yet collected (first: {provider} {batch_id}, "
                f"{state}): run the worker's command again to collect them, or pass --allow-open-batches"
            )
    planned = (
        {str(r["run_id"]): r for r in manifest.get("runs", [])} if manifest is not None else {}
    )
    if manifest is not None:
        out += _against_plan(found, manifest, planned)
    out += _completeness(found, planned, manifest, allow_missing)
    return out


def _against_plan(
    found: Sequence[SourceShard],
    manifest: Mapping[str, Any],
    planned: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Shards of runs the plan does not name, of another N or of another package version."""
    out: list[str] = []
    n_plan = int(manifest.get("shards", 0))
    version = str(manifest.get("package_version", ""))
    for sh in found:
        where = f"{sh.path}: shard {sh.shard}/{sh.n_shards} of run {sh.run_id} ({sh.benchmark} · {sh.model})"
        if sh.run_id not in planned:
            other = [
                r
                for r in planned.values()
                if r.get("benchmark") == sh.benchmark and r.get("model") == sh.model
            ]
            if other and all(r.get("dataset_sha256") != sh.dataset for r in other):
                out.append(
                    f"{where}: another dataset ({sh.dataset[:12]}) than the plan's "
                    f"({str(other[0].get('dataset_sha256', ''))[:12]})"
                )
            else:
                out.append(f"{where}: a run the plan does not name (a shard of another plan)")
        elif sh.n_shards != n_plan:
            out.append(
                f"{where}: cut into {sh.n_shards} parts, the plan into {n_plan} (another plan)"
            )
        elif version and sh.package_version != version:
            out.append(
                f"{where}: written by grandrounds {sh.package_version}, the plan by {version}"
            )
    return out


def _completeness(
    found: Sequence[SourceShard],
    planned: Mapping[str, Mapping[str, Any]],
    manifest: Mapping[str, Any] | None,
    allow_missing: bool,
) -> list[str]:
    """Per run: one N, one package version, and (unless ``allow_missing``) every shard present."""
    out: list[str] = []
    n_plan = int(manifest.get("shards", 0)) if manifest is not None else 0
    by_run: dict[str, list[SourceShard]] = {}
    for sh in found:
        by_run.setdefault(sh.run_id, []).append(sh)
    for run_id in sorted(set(by_run) | set(planned)):
        shards = by_run.get(run_id, [])
        counts = sorted({sh.n_shards for sh in shards})
        if len(counts) > 1:
            out.append(
                f"run {run_id}: shards of {' and '.join(map(str, counts))} parts (two plans): merge one plan's shards"
            )
            continue
        versions = sorted({sh.package_version for sh in shards})
        if len(versions) > 1:
            out.append(
                f"run {run_id}: shards written by grandrounds {' and '.join(versions)}: "
                "shards of one run must come from one package version"
            )
        if allow_missing:
            continue
        n = counts[0] if counts else n_plan
        if n == 0 or (run_id in planned and n != n_plan):
            continue  # nothing to count against, or refused against the plan already
        have = {sh.shard for sh in shards}
        for i in range(n):
            if i not in have:
                what = planned.get(run_id, {})
                name = f" ({what.get('benchmark')} · {what.get('model')})" if what else ""
                out.append(
                    f"run {run_id}{name}: shard {i}/{n} is missing (no store given holds it); "
                    "pass --allow-missing to merge the rest and ask its calls when settling"
                )
    return out

"""The ``shards`` table: which parts of a run a store holds, and whether each finished."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from grandrounds.store.connection import StoreBase, now


@dataclass(frozen=True, kw_only=True)
class ShardRow:
    """One shard of one run under one grading, as a worker recorded it."""

    run_id: str
    grader_fp: str
    shard: int
    n_shards: int
    assign: str
    n_samples: int
    n_graded: int
    #: running (started, not finished: killed, preempted or still going) | done
    state: str
    host: str
    package_version: str
    started_at: str
    updated_at: str


class ShardTables(StoreBase):
    """Reads and writes of ``shards``."""

    def put_shard(
        self,
        run_id: str,
        grader_fp: str,
        shard: int,
        n_shards: int,
        assign: str,
        n_samples: int,
        n_graded: int,
        state: str,
        package_version: str,
    ) -> None:
        """Record (or update) a shard of ``run_id`` as a worker sees it now."""
        self.flush()
        stamp = now()
        self.db.execute(
            "INSERT INTO shards VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(run_id, grader_fp, shard, n_shards) DO UPDATE SET "
            "assign = excluded.assign, n_samples = excluded.n_samples, n_graded = excluded.n_graded, "
            "state = excluded.state, host = excluded.host, package_version = excluded.package_version, "
            "updated_at = excluded.updated_at",
            (
                run_id,
                grader_fp,
                shard,
                n_shards,
                assign,
                n_samples,
                n_graded,
                state,
                socket.gethostname(),
                package_version,
                stamp,
                stamp,
            ),
        )

    def shard_rows(self, run_id: str | None = None) -> list[ShardRow]:
        """Every shard row (of ``run_id`` where given), by run, grading and index."""
        self.flush()
        q = "SELECT * FROM shards" + (" WHERE run_id = ?" if run_id else "")
        q += " ORDER BY run_id, grader_fp, n_shards, shard"
        return [
            ShardRow(**{k: r[k] for k in r.keys()})  # noqa: SIM118 (a sqlite3.Row: iterating reads values)
            for r in self.db.execute(q, (run_id,) if run_id else ())
        ]

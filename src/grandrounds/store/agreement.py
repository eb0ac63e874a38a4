"""The store's table of measured judge agreement (migration 4): one row per validation of a judge.

A row says how well one judge, with its generation parameters and prompt protocol, agreed with
physicians on one validation set (e.g. HealthBench's meta-evaluation file, by its sha256). The
figures are computed by :mod:`grandrounds.analyses.judge_validation`; this module only stores and reads them.
Re-measuring the same judge on the same rows replaces the row (its key is a content hash of
what was measured), so a run that finished failed calls later updates the figures.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from grandrounds.core.hashing import canonical_json
from grandrounds.store.connection import StoreBase, now


@dataclass(frozen=True, kw_only=True)
class AgreementRecord:
    """One measured agreement of a judge with physicians.

    ``summary`` holds the headline figures a leaderboard shows (judge balanced F1 and its CI,
    physicians' mean, rows judged and unknown); ``metrics`` everything measured; ``verdicts`` the
    judge's label per row (``[source line, "met" | "unmet" | "unknown"]``), for audit.
    """

    key: str
    suite: str
    judge: str
    judge_params: dict[str, Any]
    protocol: str
    prompt: str
    dataset_sha256: str
    n_rows: int
    summary: dict[str, Any]
    metrics: dict[str, Any] = field(default_factory=dict)
    verdicts: list[Any] = field(default_factory=list)
    package_version: str = ""
    created_at: str = ""


_COLUMNS = (
    "key, suite, judge, judge_params_json, protocol, prompt, dataset_sha256, n_rows, summary_json, "
    "metrics_json, verdicts_json, package_version, created_at"
)


class AgreementTables(StoreBase):
    """Reads and writes of ``judge_agreement``."""

    def put_agreement(self, rec: AgreementRecord) -> None:
        """Store (or replace, same key) one measured agreement, time-stamped now."""
        with self._atomic():
            self.db.execute(
                f"INSERT OR REPLACE INTO judge_agreement ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    rec.key,
                    rec.suite,
                    rec.judge,
                    canonical_json(rec.judge_params),
                    rec.protocol,
                    rec.prompt,
                    rec.dataset_sha256,
                    rec.n_rows,
                    canonical_json(rec.summary),
                    canonical_json(rec.metrics),
                    canonical_json(rec.verdicts),
                    rec.package_version,
                    now(),
                ),
            )

    def agreements(
        self, suite: str | None = None, judge: str | None = None, *, full: bool = False
    ) -> list[AgreementRecord]:
        """Stored agreements, oldest first, narrowed to a suite and/or judge; ``full`` also reads
        the metrics and per-row verdicts (large), otherwise only the summary."""
        used = {k: v for k, v in (("suite", suite), ("judge", judge)) if v}
        return self._agreements(
            " AND ".join(f"{k} = ?" for k in used) or "1=1", tuple(used.values()), full
        )

    def agreement(self, key: str) -> AgreementRecord | None:
        """One stored agreement in full, by its key."""
        return next(iter(self._agreements("key = ?", (key,), True)), None)

    def _agreements(self, where: str, args: tuple[Any, ...], full: bool) -> list[AgreementRecord]:
        cols = _COLUMNS if full else _COLUMNS.replace("metrics_json, verdicts_json", "'{}', '[]'")
        try:
            rows = self.db.execute(
                f"SELECT {cols} FROM judge_agreement WHERE {where} ORDER BY created_at, key", args
            ).fetchall()
        except (
            sqlite3.OperationalError
        ) as e:  # a store opened read-only before migration 4 was applied to it
            if "no such table" in str(e):
                return []
            raise
        return [
            AgreementRecord(
                key=r[0],
                suite=r[1],
                judge=r[2],
                judge_params=json.loads(r[3]),
                protocol=r[4],
                prompt=r[5],
                dataset_sha256=r[6],
                n_rows=int(r[7]),
                summary=json.loads(r[8]),
                metrics=json.loads(r[9]),
                verdicts=json.loads(r[10]),
                package_version=r[11],
                created_at=r[12],
            )
            for r in rows
        ]

"""The store's tables of judgement: graders (fingerprint -> spec), grades and results."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import Grade, grade_from_json, judge_calls
from grandrounds.store.connection import StoreBase, now
from grandrounds.store.rows import CallUsage, RunState, StoredGrade, VerdictCounts
from grandrounds.store.runs import in_chunks

_DROP_CALLS = "DELETE FROM grade_calls WHERE run_id = ? AND grader_fp = ? AND sample_id = ?"
_ADD_CALL = "INSERT OR IGNORE INTO grade_calls VALUES (?,?,?,?,?)"
_UNSETTLE = "DELETE FROM settled WHERE run_id = ? AND grader_fp = ?"


class GradeTables(StoreBase):
    """Reads and writes of ``graders``, ``grades`` and ``results``."""

    # What is counted of a grade without parsing it in Python (the team store reads columns
    # computed once instead). json_valid first: a grade an older version wrote with NaN or
    # Infinity in it is not JSON to SQLite, and json_extract on it would fail the whole query.
    _STATUS = "CASE WHEN json_valid(grade_json) THEN json_extract(grade_json, '$.status') END"
    _N_VERDICTS = (
        "CASE WHEN json_valid(grade_json) THEN json_array_length(grade_json, '$.verdicts') END"
    )
    #: a failed judge call leaves its error on the vote (graders.judging)
    _JUDGE_FAILED = 'instr(grade_json, \'"error":"judge call failed\') > 0'

    # ---- graders ------------------------------------------------------------------------
    def put_grader(self, fingerprint: str, spec: dict[str, Any]) -> None:
        """Remember what a grader fingerprint stands for (kept if already there)."""
        self.db.execute(
            "INSERT OR IGNORE INTO graders VALUES (?, ?)", (fingerprint, canonical_json(spec))
        )

    def grader_spec(self, fingerprint: str) -> dict[str, Any] | None:
        """The fingerprint dict stored under ``fingerprint``, or None."""
        row = self.db.execute(
            "SELECT spec_json FROM graders WHERE fingerprint = ?", (fingerprint,)
        ).fetchone()
        return json.loads(row[0]) if row else None

    # ---- grades -------------------------------------------------------------------------
    def put_grade(self, run_id: str, grader_fp: str, grade: Grade) -> None:
        """Store (or replace) the grade of one answer; buffered under write-behind."""
        n_unknown = sum(1 for v in grade.verdicts if v.status == "unknown")
        self._write(
            "INSERT OR REPLACE INTO grades VALUES (?,?,?,?,?,?,?)",
            (
                run_id,
                grader_fp,
                grade.sample_id,
                grade.value,
                n_unknown,
                canonical_json(grade),
                now(),
            ),
        )
        # The judge calls behind it, in place of those of the grade it replaces.
        self._write(_DROP_CALLS, (run_id, grader_fp, grade.sample_id))
        for judge, key in judge_calls(grade):
            self._write(_ADD_CALL, (run_id, grader_fp, grade.sample_id, key, judge))
        # The grading is no longer as it was when it settled (if it had).
        self._write(_UNSETTLE, (run_id, grader_fp), commutes=True)

    def judge_usage(self, run_id: str, grader_fp: str) -> list[CallUsage]:
        """Per judge named by the votes (None: calls no vote names), the distinct judge calls behind
        a grading that are stored, with their tokens; a call two grades share counts once, under
        the judge it was first recorded for."""
        self.flush()
        q = (
            "SELECT t.judge, COUNT(*), SUM(c.prompt_tokens), SUM(c.completion_tokens), "
            "SUM(c.error IS NULL AND c.prompt_tokens = 0 AND c.completion_tokens = 0) "
            "FROM (SELECT key, judge, MIN(rowid) FROM grade_calls WHERE run_id = ? AND grader_fp = ? GROUP BY key) t "
            "JOIN calls c INDEXED BY calls_usage ON c.key = t.key GROUP BY t.judge"
        )
        rows = self.db.execute(q, (run_id, grader_fp))
        return [
            CallUsage(
                who=judge,
                calls=n,
                prompt_tokens=int(p or 0),
                completion_tokens=int(c or 0),
                no_usage=int(nu or 0),
            )
            for judge, n, p, c, nu in rows
        ]

    def grades(self, run_id: str, grader_fp: str) -> dict[str, Grade]:
        """sample_id -> grade, for every answer of a run graded by one grader."""
        return {
            g.grade.sample_id: g.grade
            for g in self._stored_grades("WHERE run_id = ? AND grader_fp = ?", (run_id, grader_fp))
        }

    def grades_for(
        self, run_id: str, grader_fp: str, sample_ids: Sequence[str]
    ) -> dict[str, Grade]:
        """:meth:`grades` of ``sample_ids`` only (those graded), read a slice at a time."""
        out: dict[str, Grade] = {}
        for part, marks in in_chunks(sample_ids):
            got = self._stored_grades(
                f"WHERE run_id = ? AND grader_fp = ? AND sample_id IN ({marks})",
                (run_id, grader_fp, *part),
            )
            out.update((g.grade.sample_id, g.grade) for g in got)
        return out

    def grade_docs_for(
        self, run_id: str, grader_fp: str, sample_ids: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """sample_id -> the stored grade as the JSON object it was stored as, not made into records
        (for writing it out again as it is), for those of ``sample_ids`` that were graded."""
        out: dict[str, dict[str, Any]] = {}
        for part, marks in in_chunks(sample_ids):
            q = f"SELECT sample_id, grade_json FROM grades WHERE run_id = ? AND grader_fp = ? AND sample_id IN ({marks})"
            out.update(
                (sid, _json_object(gj))
                for sid, gj in self.db.execute(q, (run_id, grader_fp, *part))
            )
        return out

    def has_grades(self, run_id: str, grader_fp: str) -> bool:
        """Whether any answer of ``run_id`` is graded by ``grader_fp``."""
        return (
            self.db.execute(
                "SELECT 1 FROM grades WHERE run_id = ? AND grader_fp = ? LIMIT 1",
                (run_id, grader_fp),
            ).fetchone()
            is not None
        )

    def grade(self, run_id: str, grader_fp: str, sample_id: str) -> Grade | None:
        """The grade of one answer, or None when it was not graded by this grader."""
        got = self._stored_grades(
            "WHERE run_id = ? AND grader_fp = ? AND sample_id = ?", (run_id, grader_fp, sample_id)
        )
        return next((g.grade for g in got), None)

    def iter_grades(self) -> Iterator[StoredGrade]:
        """Every stored grade with its run and grader (read lazily: do not write through this
        store while iterating)."""
        return self._stored_grades("", ())

    def _stored_grades(self, where: str, args: tuple[Any, ...]) -> Iterator[StoredGrade]:
        """The one query behind every full-grade read (``where`` filters)."""
        for run_id, fp, gj in self.db.execute(
            f"SELECT run_id, grader_fp, grade_json FROM grades {where}", args
        ):
            grade = grade_from_json(json.loads(gj))
            if isinstance(grade.value, float) and not math.isfinite(
                grade.value
            ):  # an older version stored it: no score
                grade = dataclasses.replace(grade, value=None)
            yield StoredGrade(run_id, fp, grade)

    def grade_values(self, run_id: str, grader_fp: str) -> dict[str, float | None]:
        """sample_id -> per-answer value (None = unscored), without parsing the grades."""
        rows = self.db.execute(
            "SELECT sample_id, value FROM grades WHERE run_id = ? AND grader_fp = ?",
            (run_id, grader_fp),
        )
        # a non-finite value (an older version stored one) is no score: unscored, never a number
        return {
            sid: value if value is None or math.isfinite(value) else None for sid, value in rows
        }

    def verdict_counts(self, run_id: str, grader_fp: str) -> VerdictCounts:
        """How many grades, criterion verdicts, unknown verdicts and unscored answers a (run,
        grader) has: the inputs of coverage, counted in SQL so no grade is parsed."""
        n, verdicts, unknown, unscored = self.db.execute(
            f"SELECT COUNT(*), SUM({self._N_VERDICTS}), "
            "SUM(n_unknown), SUM(value IS NULL OR abs(value) > 1.7976931348623157e308) "
            "FROM grades WHERE run_id = ? AND grader_fp = ?",
            (run_id, grader_fp),
        ).fetchone()
        return VerdictCounts(int(n), int(verdicts or 0), int(unknown or 0), int(unscored or 0))

    # ---- settled gradings ---------------------------------------------------------------
    def settle(self, run_id: str, grader_fp: str, tally: dict[str, Any]) -> None:
        """Remember that the grading of ``run_id`` by ``grader_fp`` finished, its result stored,
        with ``tally`` (what its grades hold: :class:`aggregate.Collected` counts them). Any grade
        written under the same run and grader afterwards forgets it (:meth:`put_grade`)."""
        self.flush()  # grades still buffered land first, so they cannot unsettle what follows them
        self.db.execute(
            "INSERT OR REPLACE INTO settled VALUES (?,?,?,?)",
            (run_id, grader_fp, canonical_json(tally), now()),
        )

    def settled(self, run_id: str, grader_fp: str) -> dict[str, Any] | None:
        """The tally :meth:`settle` stored for a grading, or None (never settled, or a grade
        written since)."""
        self.flush()
        row = self.db.execute(
            "SELECT tally_json FROM settled WHERE run_id = ? AND grader_fp = ?", (run_id, grader_fp)
        ).fetchone()
        return json.loads(row[0]) if row else None

    # ---- results ------------------------------------------------------------------------
    def put_result(self, run_id: str, grader_fp: str, result: Any) -> None:
        """Store (or replace) the result of a run under one grader."""
        self.db.execute(
            "INSERT OR REPLACE INTO results VALUES (?,?,?,?)",
            (run_id, grader_fp, canonical_json(result), now()),
        )

    def results(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(run id, grader fingerprint, result as a dict) for every result, oldest first."""
        return self._results("", ())

    def result(self, run_id: str, grader_fp: str) -> dict[str, Any] | None:
        """The result of a run under one grader, as a dict, or None."""
        return next(
            (
                rj
                for _, _, rj in self._results(
                    "WHERE run_id = ? AND grader_fp = ?", (run_id, grader_fp)
                )
            ),
            None,
        )

    def _results(
        self, where: str, args: tuple[Any, ...]
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for run_id, fp, rj in self.db.execute(
            f"SELECT run_id, grader_fp, result_json FROM results {where} ORDER BY created_at", args
        ):
            yield run_id, fp, json.loads(rj)

    def latest_grader_fp(self, run_id: str) -> str | None:
        """The grader fingerprint of the newest result of ``run_id`` (None if never graded)."""
        row = self.db.execute(
            "SELECT grader_fp FROM results WHERE run_id = ? ORDER BY created_at DESC LIMIT 1",
            (run_id,),
        ).fetchone()
        return row[0] if row else None

    def run_state(self, run_id: str, grader_fp: str | None = None) -> RunState:
        """Whether ``run_id`` finished, and what failed in its newest grading, or in the grading
        ``grader_fp`` (counted in SQL, no grade parsed)."""
        if grader_fp is not None:
            newest = self.db.execute(
                # MAX of the one fingerprint: standard SQL (the team store reads this too)
                "SELECT MAX(grader_fp), MAX(created_at) FROM grades WHERE run_id = ? AND grader_fp = ?",
                (run_id, grader_fp),
            ).fetchone()
            newest = newest if newest and newest[0] is not None else None
        else:
            newest = self.db.execute(
                "SELECT grader_fp, MAX(created_at) FROM grades WHERE run_id = ? GROUP BY grader_fp ORDER BY 2 DESC LIMIT 1",
                (run_id,),
            ).fetchone()
        fp = grader_fp or (newest[0] if newest else self.latest_grader_fp(run_id))
        if fp is None:
            return RunState("interrupted", None, 0, 0, 0, 0)
        done = self.db.execute(
            "SELECT created_at FROM results WHERE run_id = ? AND grader_fp = ?", (run_id, fp)
        ).fetchone()
        n, failed, errors, judge = self.db.execute(
            f"SELECT COUNT(*), SUM({self._STATUS} IN ('answer_failed', 'not_asked')), "
            f"SUM({self._STATUS} = 'grader_error'), SUM({self._JUDGE_FAILED}) "
            "FROM grades WHERE run_id = ? AND grader_fp = ?",
            (run_id, fp),
        ).fetchone()
        counts = (int(n), int(failed or 0), int(errors or 0), int(judge or 0))
        if done is None or (newest is not None and newest[1] > done[0]):
            status = "interrupted"
        else:
            status = "with failures" if sum(counts[1:]) else "complete"
        return RunState(status, fp, *counts)


def _json_object(text: str) -> Any:
    """Stored JSON read with orjson (a few times faster on large grades), or with ``json`` where
    orjson refuses it (a NaN an older version wrote)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)

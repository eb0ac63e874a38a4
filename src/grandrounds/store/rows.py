"""The plain records the store hands out and takes in, and their conversions from SQLite rows."""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

from grandrounds.core.records import Grade, Response, Sample, ToolCallPart, Usage


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One run: a benchmark's dataset answered by one model with fixed options."""

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


class StoredSample(NamedTuple):
    """A sample with where it belongs: its benchmark, dataset and position in the source."""

    benchmark: str
    dataset_sha256: str
    # shadows tuple.index on purpose: the field's name is read across the code base and tests
    index: int  # type: ignore[assignment]
    sample: Sample


class StoredGrade(NamedTuple):
    """A grade with the run and the grader (fingerprint) it belongs to."""

    run_id: str
    grader_fp: str
    grade: Grade


class AnswerText(NamedTuple):
    """The text a model answered for one sample of a run (None when the call failed or is missing)."""

    run_id: str
    sample_id: str
    text: str | None


class RunState(NamedTuple):
    """Where a run stands: ``status`` is complete, with failures, or interrupted.

    ``interrupted`` means its newest grading has no result, or grades newer than its result (a run
    stopped, or still going); ``failed_answers`` counts answers whose call failed (or turns never
    asked), ``grader_errors`` grades the grader could not make, ``judge_failed`` grades with a failed
    judge call. Re-running the same command redoes all three.
    """

    status: str
    grader_fp: str | None
    n_graded: int
    failed_answers: int
    grader_errors: int
    judge_failed: int

    @property
    def n_failures(self) -> int:
        return self.failed_answers + self.grader_errors + self.judge_failed

    def describe(self) -> str:
        """``complete``, ``interrupted`` or ``with failures (2 answers, 5 judge)``."""
        if self.status != "with failures":
            return self.status
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.failed_answers, "answers"),
                (self.grader_errors, "grader"),
                (self.judge_failed, "judge"),
            )
            if n
        ]
        return f"with failures ({', '.join(parts)})"


class VerdictCounts(NamedTuple):
    """Totals over the grades of one (run, grader): what coverage is computed from."""

    n_grades: int
    n_verdicts: int
    n_unknown: int
    n_unscored: int


@dataclass(frozen=True, kw_only=True)
class ReviewInput:
    """A clinician review to append: a verdict on one criterion, or a score on a whole answer
    (``criterion_id`` empty). Checked by :func:`grandrounds.analyses.reviews.add_review` before storing."""

    run_id: str
    grader_fp: str
    sample_id: str
    reviewer: str
    reason: str
    criterion_id: str = ""
    verdict: str | None = None
    score: float | None = None


class ReviewRow(TypedDict):
    """A stored review, as read back (``criterion_id`` is "" for a whole-answer score)."""

    id: int
    run_id: str
    grader_fp: str
    sample_id: str
    criterion_id: str
    reviewer: str
    verdict: str | None
    score: float | None
    reason: str
    created_at: str


class QueueEntry(NamedTuple):
    """An item to queue for review: one criterion of one answer ("" = the whole answer), and why."""

    run_id: str
    grader_fp: str
    sample_id: str
    criterion_id: str
    reason: str
    seed: int | None = None


class QueueRow(TypedDict):
    """A stored review-queue item, as read back."""

    id: int
    run_id: str
    grader_fp: str
    sample_id: str
    criterion_id: str
    reason: str
    seed: int | None
    created_at: str


#: A UTF-16 surrogate code point, in a Python string only where text held a lone one.
_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """A write's parameters with each text that has no UTF-8 form (a reply holding a lone
    surrogate, ``"yes\\ud800"``) as its bytes with the surrogate kept (``surrogatepass``), which
    SQLite stores as they are; :func:`text_of` reads them back as the same string. Ordinary text is
    passed as it is (the check is a scan, no copy)."""
    if not any(type(v) is str and not v.isascii() and _SURROGATE.search(v) for v in params):
        return params
    return tuple(
        v.encode("utf-8", "surrogatepass")
        if type(v) is str and _SURROGATE.search(v) is not None
        else v
        for v in params
    )


def text_of(value: Any) -> Any:
    """A stored text as it was written (bytes written by :func:`storable` decoded back)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def row_to_response(row: sqlite3.Row, cached: bool) -> Response:
    """A ``calls`` row as the Response it stored."""
    return Response(
        key=row["key"],
        text=text_of(row["text"]),
        error=row["error"],
        scores=json.loads(row["scores_json"]) if row["scores_json"] else {},
        usage=Usage(row["prompt_tokens"], row["completion_tokens"]),
        latency=row["latency"],
        cached=cached,
        finish_reason=row["finish_reason"],
        tool_calls=_tool_calls(row),
        system_fingerprint=row["system_fingerprint"]
        if "system_fingerprint" in row.keys()  # noqa: SIM118 (a sqlite3.Row: `in row` reads values)
        else None,
    )


def _tool_calls(row: sqlite3.Row) -> tuple[ToolCallPart, ...]:
    # a sqlite3.Row has no .get, and `in row` reads its values, not its column names
    raw = row["tool_calls_json"] if "tool_calls_json" in row.keys() else None  # noqa: SIM118, SIM401
    if not raw:
        return ()
    return tuple(
        ToolCallPart(id=str(c["id"]), name=str(c["name"]), arguments=str(c["arguments"]))
        for c in json.loads(raw)
    )


def row_to_run(row: sqlite3.Row) -> RunRecord:
    """A ``runs`` row as a RunRecord (JSON columns parsed)."""
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


@dataclass(frozen=True, kw_only=True)
class CallUsage:
    """Calls and tokens of one part of a result (its answers, or one judge's calls)."""

    who: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    no_usage: int

"""The store's tables of what was asked and answered: calls (the cache), runs, samples, answers."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import TRUNCATED_REASONS, Request, Response, Sample, sample_from_json
from grandrounds.store.connection import StoreBase, now
from grandrounds.store.rows import (
    AnswerText,
    CallUsage,
    RunRecord,
    StoredSample,
    row_to_response,
    row_to_run,
    text_of,
)

_SAMPLE_INSERT = "INSERT OR IGNORE INTO samples VALUES (?,?,?,?,?)"
#: Successful calls whose server reported no token usage (their tokens are not in the sums).
_NO_USAGE = "SUM(c.error IS NULL AND c.prompt_tokens = 0 AND c.completion_tokens = 0)"
#: Ids bound in one ``IN (...)`` (well under SQLite's limit on bound variables).
IN_CHUNK = 500


def in_chunks(ids: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """``ids`` in slices of at most :data:`IN_CHUNK`, each with its ``?,?,...`` placeholders."""
    for i in range(0, len(ids), IN_CHUNK):
        part = list(ids[i : i + IN_CHUNK])
        yield part, ",".join("?" * len(part))


class RunTables(StoreBase):
    """Reads and writes of ``calls``, ``runs``, ``samples`` and ``answers``."""

    # ---- calls (the cache) ----------------------------------------------------------------
    def get_call(self, key: str) -> Response | None:
        """A stored successful response for ``key``; failed calls are not cache hits."""
        return self.get_calls((key,)).get(key)

    def get_calls(self, keys: Sequence[str]) -> dict[str, Response]:
        """:meth:`get_call` for many keys at once: the stored successful response of each key that
        has one, in one query per :data:`IN_CHUNK` keys instead of one each."""
        found: dict[str, Response] = {}
        todo: list[str] = []
        for key in keys:
            pending = self._pending_calls.get(key)
            if pending is not None:
                found[key] = pending
            else:
                todo.append(key)
        found.update(self._calls_in(todo, successes_only=True))
        return found

    def _calls_in(self, keys: Sequence[str], successes_only: bool) -> dict[str, Response]:
        cond = " AND error IS NULL" if successes_only else ""
        out: dict[str, Response] = {}
        for part, marks in in_chunks(keys):
            for row in self.db.execute(
                f"SELECT * FROM calls WHERE key IN ({marks}){cond}", part
            ).fetchall():
                out[row["key"]] = row_to_response(row, cached=True)
        return out

    def request_sent(self, key: str) -> dict[str, Any] | None:
        """The stored request of one call as it was asked (its canonical JSON, read back), or None."""
        row = self.db.execute("SELECT request_json FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            got = json.loads(row[0])
        except ValueError:
            return None
        return got if isinstance(got, dict) else None

    def put_call(self, request: Request, response: Response, attempts: int = 1) -> None:
        """Store a call. A success replaces anything; a failure never replaces a stored success
        (it only counts its attempts onto an earlier failure)."""
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
            response.finish_reason,
            json.dumps(
                [
                    {"id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in response.tool_calls
                ]
            )
            if response.tool_calls
            else None,
            response.system_fingerprint,
        )
        if response.ok:
            self._write(
                "INSERT OR REPLACE INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                values,
                response,
            )
        else:
            self._write(
                "INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "error = excluded.error, attempts = calls.attempts + excluded.attempts, created_at = excluded.created_at, "
                "finish_reason = excluded.finish_reason "  # a failure's is None, or the mark of a final one
                "WHERE calls.error IS NOT NULL",
                values,
            )

    def calls_by_key(self, keys: Sequence[str]) -> dict[str, Response]:
        """key -> stored response (failed ones included) for those of ``keys`` that are stored."""
        return self._calls_in(keys, successes_only=False)

    # ---- the calls behind one result (counted in SQL, so a run keeps no list of them) -----------
    def truncated_answers(self, run_id: str) -> int:
        """How many of a run's answers were cut off by the token limit (their stored finish reason)."""
        self.flush()
        marks = ",".join("?" * len(TRUNCATED_REASONS))
        q = f"SELECT COUNT(*) FROM answers a JOIN calls c INDEXED BY calls_usage ON c.key = a.request_key WHERE a.run_id = ? AND c.finish_reason IN ({marks})"
        return int(self.db.execute(q, (run_id, *sorted(TRUNCATED_REASONS))).fetchone()[0])

    def answer_usage(self, run_id: str) -> CallUsage:
        """The distinct answer calls of a run that are stored, with their tokens (who: ``answers``)."""
        self.flush()
        q = (
            f"SELECT COUNT(*), SUM(c.prompt_tokens), SUM(c.completion_tokens), {_NO_USAGE} "
            "FROM (SELECT DISTINCT request_key FROM answers WHERE run_id = ?) a JOIN calls c INDEXED BY calls_usage ON c.key = a.request_key"
        )
        n, p, c, nu = self.db.execute(q, (run_id,)).fetchone()
        return CallUsage(
            who="answers",
            calls=int(n),
            prompt_tokens=int(p or 0),
            completion_tokens=int(c or 0),
            no_usage=int(nu or 0),
        )

    def system_fingerprints(self, run_id: str) -> dict[str, int]:
        """What the server said answered a run's distinct answer calls: value -> calls, most first
        (calls whose server said nothing are not counted)."""
        self.flush()
        q = (
            "SELECT c.system_fingerprint, COUNT(*) FROM (SELECT DISTINCT request_key FROM answers WHERE run_id = ?) a "
            "JOIN calls c ON c.key = a.request_key WHERE c.system_fingerprint IS NOT NULL "
            "GROUP BY c.system_fingerprint ORDER BY COUNT(*) DESC, c.system_fingerprint"
        )
        return {str(v): int(n) for v, n in self.db.execute(q, (run_id,))}

    # ---- runs ---------------------------------------------------------------------------
    def ensure_run(self, run: RunRecord) -> RunRecord:
        """Store ``run`` unless its id is there already; returns the stored record either way."""
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
        """The run with this id, or None."""
        row = self.db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return row_to_run(row) if row else None

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        return [row_to_run(r) for r in self.db.execute("SELECT * FROM runs ORDER BY created_at")]

    # ---- samples ------------------------------------------------------------------------
    def put_samples(self, benchmark: str, dataset_sha256: str, samples: Sequence[Sample]) -> None:
        """Store a dataset's samples in source order, in one transaction (existing ones are kept)."""
        with self._atomic():
            self.db.executemany(
                _SAMPLE_INSERT,
                [
                    (benchmark, dataset_sha256, s.id, i, canonical_json(s))
                    for i, s in enumerate(samples)
                ],
            )

    def checked_data(self, key: str) -> int | None:
        """The sample count of a data file read and found good before (:func:`grandrounds.run.samples.read_samples`), or None."""
        row = self.db.execute("SELECT n_samples FROM checked_data WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else None

    def put_checked_data(self, key: str, n_samples: int) -> None:
        self._write("INSERT OR REPLACE INTO checked_data VALUES (?,?,?)", (key, n_samples, now()))

    def put_sample(self, benchmark: str, dataset_sha256: str, index: int, sample: Sample) -> None:
        """Store one sample (kept if already there); buffered like answers under write-behind."""
        self._write(
            _SAMPLE_INSERT, (benchmark, dataset_sha256, sample.id, index, canonical_json(sample))
        )

    def sample_ids(self, benchmark: str, dataset_sha256: str) -> set[str]:
        """Ids of the stored samples of one dataset."""
        rows = self.db.execute(
            "SELECT sample_id FROM samples WHERE benchmark = ? AND dataset_sha256 = ?",
            (benchmark, dataset_sha256),
        )
        return {r[0] for r in rows}

    def samples(self, benchmark: str, dataset_sha256: str) -> list[Sample]:
        """One dataset's samples in source order."""
        return [
            s.sample
            for s in self._stored_samples(
                "WHERE benchmark = ? AND dataset_sha256 = ?", (benchmark, dataset_sha256)
            )
        ]

    def sample(self, benchmark: str, dataset_sha256: str, sample_id: str) -> Sample | None:
        """One sample of one dataset, or None when it is not stored."""
        got = self._stored_samples(
            "WHERE benchmark = ? AND dataset_sha256 = ? AND sample_id = ?",
            (benchmark, dataset_sha256, sample_id),
        )
        return next((s.sample for s in got), None)

    def samples_by_id(
        self, benchmark: str, dataset_sha256: str, sample_ids: Sequence[str]
    ) -> dict[str, Sample]:
        """sample id -> sample, for those of ``sample_ids`` stored for one dataset (read by key, a
        slice at a time, so a caller reading a run in chunks holds one chunk)."""
        out: dict[str, Sample] = {}
        for part, marks in in_chunks(sample_ids):
            got = self._stored_samples(
                f"WHERE benchmark = ? AND dataset_sha256 = ? AND sample_id IN ({marks})",
                (benchmark, dataset_sha256, *part),
            )
            out.update((s.sample.id, s.sample) for s in got)
        return out

    def run_sample_ids(
        self, run_id: str, benchmark: str, dataset_sha256: str, grader_fp: str | None
    ) -> list[str]:
        """The ids, in source order, of the dataset's stored samples that belong to run ``run_id``:
        those it answered, and those graded under ``grader_fp`` without an answer (a later turn of
        a dialogue whose first turn failed). Ids only: the samples are read by :meth:`samples_by_id`."""
        q = (
            "SELECT s.sample_id FROM samples s WHERE s.benchmark = ? AND s.dataset_sha256 = ? AND ("
            "EXISTS (SELECT 1 FROM answers a WHERE a.run_id = ? AND a.sample_id = s.sample_id) OR "
            "EXISTS (SELECT 1 FROM grades g WHERE g.run_id = ? AND g.grader_fp = ? AND g.sample_id = s.sample_id)"
            ") ORDER BY s.idx, s.sample_id"
        )
        return [
            r[0] for r in self.db.execute(q, (benchmark, dataset_sha256, run_id, run_id, grader_fp))
        ]

    def iter_sample_targets(
        self, benchmark: str, dataset_sha256: str, stop: int
    ) -> Iterator[tuple[int, str, str | None, str | None]]:
        """(source position, sample id, its target as JSON text, None) of one dataset's stored
        samples at positions ``0`` to ``stop`` (excluded), in source order, the rest of each sample
        left unread; (position, id, None, the sample's whole JSON) for one SQLite cannot read as
        JSON (an ``Infinity`` an older version wrote). Read lazily: do not write through this store
        while iterating."""
        q = (
            "SELECT idx, sample_id, CASE WHEN json_valid(sample_json) THEN sample_json -> '$.target' END, "
            "CASE WHEN NOT json_valid(sample_json) THEN sample_json END "
            "FROM samples WHERE benchmark = ? AND dataset_sha256 = ? AND idx >= 0 AND idx < ? ORDER BY idx, sample_id"
        )
        yield from self.db.execute(q, (benchmark, dataset_sha256, stop))

    def iter_samples(self) -> Iterator[StoredSample]:
        """Every stored sample, by benchmark, dataset and source order (read lazily: do not write
        through this store while iterating)."""
        return self._stored_samples("", ())

    def _stored_samples(self, where: str, args: tuple[Any, ...]) -> Iterator[StoredSample]:
        """The one query behind every sample read: ``where`` filters, order is always source order."""
        q = f"SELECT benchmark, dataset_sha256, idx, sample_json FROM samples {where} ORDER BY benchmark, dataset_sha256, idx"
        for bench, ds, idx, sj in self.db.execute(q, args):
            yield StoredSample(bench, ds, idx, sample_from_json(json.loads(sj)))

    # ---- answers ------------------------------------------------------------------------
    def put_answer(self, run_id: str, sample_id: str, request_key: str, prompt: Any) -> None:
        """Record which call answered ``sample_id`` in ``run_id``, with the prompt that was sent."""
        self._write(
            "INSERT OR REPLACE INTO answers VALUES (?,?,?,?)",
            (run_id, sample_id, request_key, canonical_json(prompt)),
        )

    def answers(self, run_id: str) -> dict[str, tuple[str, Response | None]]:
        """sample_id -> (request key, stored response or None when never answered)."""
        return self._answers("WHERE run_id = ?", (run_id,))

    def answer(self, run_id: str, sample_id: str) -> tuple[str, Response | None] | None:
        """(request key, stored response or None) of one sample of a run; None when it has no answer row."""
        return self._answers("WHERE run_id = ? AND sample_id = ?", (run_id, sample_id)).get(
            sample_id
        )

    def answers_for(
        self, run_id: str, sample_ids: Sequence[str]
    ) -> dict[str, tuple[str, Response | None]]:
        """:meth:`answers` of ``sample_ids`` only (those with an answer row), read a slice at a time."""
        out: dict[str, tuple[str, Response | None]] = {}
        for part, marks in in_chunks(sample_ids):
            out.update(
                self._answers(f"WHERE run_id = ? AND sample_id IN ({marks})", (run_id, *part))
            )
        return out

    def _answers(self, where: str, args: tuple[Any, ...]) -> dict[str, tuple[str, Response | None]]:
        rows = list(self.db.execute(f"SELECT sample_id, request_key FROM answers {where}", args))
        calls = self.calls_by_key([r[1] for r in rows])
        return {r[0]: (r[1], calls.get(r[1])) for r in rows}

    def answer_prompts(self, run_id: str) -> dict[str, Any]:
        """sample_id -> the prompt sent for it in ``run_id`` (as stored with the answer, parsed)."""
        rows = self.db.execute(
            "SELECT sample_id, prompt_json FROM answers WHERE run_id = ?", (run_id,)
        )
        return {sid: json.loads(pj) for sid, pj in rows}

    def answer_prompts_for(self, run_id: str, sample_ids: Sequence[str]) -> dict[str, Any]:
        """:meth:`answer_prompts` of ``sample_ids`` only, read a slice at a time."""
        out: dict[str, Any] = {}
        for part, marks in in_chunks(sample_ids):
            rows = self.db.execute(
                f"SELECT sample_id, prompt_json FROM answers WHERE run_id = ? AND sample_id IN ({marks})",
                (run_id, *part),
            )
            out.update((sid, json.loads(pj)) for sid, pj in rows)
        return out

    def iter_answer_texts(self) -> Iterator[AnswerText]:
        """(run, sample, answer text) for every answer row of every run (read lazily)."""
        q = "SELECT a.run_id, a.sample_id, c.text FROM answers a LEFT JOIN calls c INDEXED BY calls_usage ON c.key = a.request_key"
        for run_id, sid, text in self.db.execute(q):
            yield AnswerText(run_id, sid, text_of(text))

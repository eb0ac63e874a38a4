"""What a finished run gives back (:class:`RunOutcome`): its record, result and call statistics,
its samples, grades and answers read back from the data and the store only when asked
(:class:`ReadBack`, shared with the re-grade's outcome).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import islice
from typing import Any

from grandrounds.core.records import Grade, Response, Result, Sample
from grandrounds.run.prepare import Setup
from grandrounds.store import RunRecord, Store


class ReadBack:
    """What a finished run or re-grade holds of its samples: nothing, until asked. ``samples`` and
    ``grades`` are read back from the store on first use (:meth:`_read_all`, in the run's order);
    :meth:`_reading` gives the store to read, or its file opened read-only once it is closed."""

    store: Store
    _samples: list[Sample] | None = None
    _grades: list[Grade] | None = None

    @contextmanager
    def _reading(self, store: Store | None = None) -> Iterator[Store]:
        if store is not None or not self.store.closed:
            yield store or self.store
            return
        with Store(self.store.path, readonly=True) as st:
            yield st

    def _read_all(self) -> None:
        raise NotImplementedError

    @property
    def samples(self) -> list[Sample]:
        if self._samples is None:
            self._read_all()
        assert self._samples is not None
        return self._samples

    @property
    def grades(self) -> list[Grade]:
        if self._grades is None:
            self._read_all()
        assert self._grades is not None
        return self._grades


class RunOutcome(ReadBack):
    """What a run gives back: its record, result and call statistics.

    A run keeps no sample, grade or answer in memory beyond what its aggregate needs (so memory
    stays flat however large the benchmark); ``samples``, ``grades`` and ``responses`` are read
    back (from the data and the store) when asked for, in the run's order, and :meth:`read_back`
    hands them out a chunk at a time for those (``--out``) that need not hold the whole run.
    """

    #: Samples read back per chunk by :meth:`read_back`.
    READ_CHUNK = 250

    def __init__(
        self,
        setup: Setup,
        store: Store,
        fp_key: str,
        result: Result,
        answer_stats: Any,
        judge_stats: list[Any],
        judge_names: list[str],
        counts: Mapping[str, int],
        usage: tuple[Any, list[Any]] | None = None,
        simulator: tuple[str, Any] | None = None,
    ) -> None:
        self.setup, self.store, self.fp_key = setup, store, fp_key
        self.run: RunRecord = setup.run
        self.result = result
        self.answer_stats, self.judge_stats = answer_stats, judge_stats
        #: The judges' specs, in the order of ``judge_stats``.
        self.judge_names = judge_names
        #: Grades by status (``scored``, ``answer_failed``, ...), over every sample of the run.
        self.counts = dict(counts)
        #: The calls behind the result as the store counted them: (answers, [one per judge]).
        self.usage = usage
        #: (the simulator model, its executor's stats) for a run whose episodes ask one, else None.
        self.simulator = simulator
        self._responses: dict[str, Response] | None = None

    def read_back(
        self, store: Store | None = None
    ) -> Iterator[list[tuple[Sample, Response, Grade]]]:
        """The run's samples, each with its answer's response (as :attr:`responses` gives it) and
        its grade, in the run's order, :attr:`READ_CHUNK` samples at a time: the samples read again
        as the run read them, their grades and answers fetched by id from ``store`` (else the run's
        store, or its file opened read-only once that is closed). Nothing of a chunk is kept."""
        with self._reading(store) as st:
            samples = self.setup.samples()
            while part := list(islice(samples, self.READ_CHUNK)):
                ids = [smp.id for smp in part]
                grades = st.grades_for(self.run.id, self.fp_key, ids)
                answers = st.answers_for(self.run.id, ids)
                yield [
                    (smp, self._response(answers.get(smp.id), grades[smp.id]), grades[smp.id])
                    for smp in part
                ]

    @staticmethod
    def _response(answer: tuple[str, Response | None] | None, grade: Grade) -> Response:
        """The stored response of an answer; for one never stored, a failed response with the grade's reason."""
        key, resp = answer or ("", None)
        return (
            resp
            if resp is not None
            else Response(
                key="" if grade.status == "not_asked" else key, error=grade.error or "not answered"
            )
        )

    def _read_all(self) -> None:
        samples: list[Sample] = []
        grades: list[Grade] = []
        responses: dict[str, Response] = {}
        for part in self.read_back():
            for smp, resp, grade in part:
                samples.append(smp)
                grades.append(grade)
                responses[smp.id] = resp
        self._samples, self._grades, self._responses = samples, grades, responses

    @property
    def responses(self) -> dict[str, Response]:
        """sample id -> the answer's response (a failed one with its error; a turn never asked has key "")."""
        if self._responses is None:
            self._read_all()
        assert self._responses is not None
        return self._responses

    def __repr__(self) -> str:
        # Short on purpose: asyncio.run reprs its main task (and so this result) when it restores
        # the SIGINT handler on Python 3.11.
        return (
            f"RunOutcome(run={self.run.id!r}, samples={self.setup.n}, score={self.result.score!r})"
        )

"""LLMEval-Med (Fudan, EMNLP 2025 Findings): 667 Chinese turns in 5 categories, judged 1-5.

Data: ``dataset.json``, a JSON object keyed by category, each a list of turns; multi-turn
dialogues share ``groupCode`` within a category and are asked in ``round`` order with the
model's own earlier answers as history. Score: the
usability rate (%), i.e. the share of answers whose mean judge score over the runs is >= 4.

Protocols (``--protocol``):

- ``reference`` (llmeval/LLMEval-Med @ 508516f, ``evaluate/``): the candidate as Answer.py runs
  it (system "You are a helpful assistant.", the model's own earlier answers as history, sampling
  with at most 2,048 new tokens); the judge as Evaluate.py runs it (gpt-4o, the same system
  message, the API's default temperature, the category's prompt read at run time from the pinned
  Evaluate.py, no re-ask); the score is Evaluate.py's first ``[digits]`` of the reply as
  Aggregate.py's ``parse_score`` reads it (a number in [0, 5], ``[0]`` included); Aggregate.py's
  usability rate counts every question, those with no valid score as unusable.
- ``grandrounds``: our own judge prompts (``templates/llmeval_*.txt``), temperature 0, reasoning
  traces removed, ``[n]``/``【n】``/``［n］`` accepted but only 1..5 (what the prompt allows), an
  unreadable reply re-asked (bounded), and answers with no valid score left out as unscored.

Where the reference differs from the official code on the same replies (the differential tests,
tests/test_llmeval_reference.py, find no other case):

- the usability rates are not rounded to 2 decimals as Aggregate.py prints them (equal after
  that rounding);
- a ``sanswer`` or ``checklist`` that is JSON null or blank is shown to the judge as ``nan`` (the
  official f-string would show ``None`` or the blank); the published file has none (it writes
  NaN or leaves the key out, both ``nan`` officially too);
- the official Answer.py crashes on a failed model call, and Evaluate.py stores an empty score
  for a failed judge call; here a failed answer is unscored and a failed judge run invalid, and
  the reference rate counts such a question as unusable, as it counts one without a valid score.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.readers.json_docs import read_json
from grandrounds.benchmarks.readers.json_object_arrays import JsonArray, iter_json_object_arrays
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import accuracy_cell, value_of
from grandrounds.scoring.stats import mean_ci, wilson_ci
from grandrounds.sources.llmeval_med import (
    CATEGORY_CODES,
    DEFAULT_JUDGE_RUNS,
    LLMEVAL_MED,
    PROTOCOLS,
    USABLE_THRESHOLD,
)

#: One line on what the two protocols do differently, shown beside the other protocol's figure.
DIFFERS = "prompts, sampling, score parse ([0] valid, no re-ask) and whether answers with no valid score count as unusable"


TOP_LEVEL = "top level must be an object keyed by category"


def _check_category(path: Path, category: str, is_list: bool) -> None:
    if category not in CATEGORY_CODES:
        raise DataError(
            path, category, f"unknown category (expected one of {', '.join(CATEGORY_CODES)})"
        )
    if not is_list:
        raise DataError(path, category, "category value must be a list of turns")


def _text(value: Any) -> str | None:
    """A cell as text; NaN/None/blank (the file writes NaN for missing checklists) -> None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text if text.strip() else None


class LLMEvalMed(Benchmark):
    """LLMEval-Med. ``--judge-runs`` when given, else the param ``judge_runs`` (default 3)."""

    name = "llmeval-med"
    description = (
        "LLMEval-Med: 667 Chinese clinical turns, 5 categories, 1-5 judge score, usability rate"
    )
    language = "zh"
    needs_judge = True
    takes_judge_runs = True
    protocols = PROTOCOLS
    parameters = (
        Param(
            name="judge_runs",
            type=int,
            default=DEFAULT_JUDGE_RUNS,
            help="judge runs averaged per answer (--judge-runs overrides)",
            minimum=1,
        ),
    )
    remote_files = (
        RemoteFile(
            url=LLMEVAL_MED.url("dataset/dataset.json"),
            filename="dataset.json",
            sha256="58b60a92c20be4c62644fd3e028670514b452d125152715e52f6a9268a68db90",
        ),
    )

    def load(self, root: Path) -> list[Sample]:
        """Every turn, from a whole-file read (json), in :meth:`iter_samples`' order."""
        path = resolve_file(root, "dataset.json")
        data = read_json(path)
        if not isinstance(data, dict):
            raise DataError(path, None, TOP_LEVEL)
        samples: list[Sample] = []
        for category, turns in data.items():
            _check_category(path, category, isinstance(turns, list))
            seen: dict[str, int] = {}
            samples.extend(self._turn(path, category, i, rec, seen) for i, rec in enumerate(turns))
        return samples

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        """The turns one at a time, as :meth:`load` gives them, without holding the file.

        The document's structure is read incrementally and each turn by Python's json
        (:func:`readers.iter_json_object_arrays`; the release writes NaN, which ijson refuses).
        Errors are :meth:`load`'s, naming the file and the turn (``category[index]``), except
        that a turn's own error comes before a JSON syntax error later in the file, and a
        category written twice is an error (a whole-file read keeps its second list only, at the
        first one's place; turns read from the first would already have been given). Held while
        reading: the last round of each dialogue seen in the current category (to check that
        rounds follow each other, as :meth:`load` does).
        """
        path = resolve_file(root, "dataset.json")
        categories: set[str] = set()
        for category, turns in iter_json_object_arrays(path, TOP_LEVEL):
            _check_category(path, category, isinstance(turns, JsonArray))
            if category in categories:
                raise DataError(
                    path,
                    category,
                    "category written twice (a JSON reader would keep only its last list)",
                )
            categories.add(category)
            seen: dict[str, int] = {}
            for i, rec in turns:
                yield self._turn(path, category, i, rec, seen)

    def _turn(self, path: Path, category: str, i: int, rec: Any, seen: dict[str, int]) -> Sample:
        """Turn ``i`` of ``category``; ``seen``: the last round of each dialogue of the category so far."""
        where = f"{category}[{i}]"
        if not isinstance(rec, dict):
            raise DataError(path, where, "turn must be an object")
        problem, sanswer = _text(rec.get("problem")), _text(rec.get("sanswer"))
        group_code, rnd = rec.get("groupCode"), rec.get("round")
        if problem is None:
            raise DataError(path, where, "missing 'problem'")
        if not isinstance(group_code, int) or not isinstance(rnd, int) or rnd < 1:
            raise DataError(
                path,
                where,
                f"groupCode/round must be integers, round >= 1 (got {group_code!r}, {rnd!r})",
            )
        group = f"{category}/{group_code}"
        # Turns of a dialogue are stored in round order; anything else would give the model a
        # wrong history, so it is an error rather than a silent reorder. (In the release a
        # dialogue's turns are also consecutive, so a run holds one dialogue at a time.)
        if rnd != seen.get(group, 0) + 1:
            raise DataError(path, where, f"{group}: round {rnd} follows round {seen.get(group, 0)}")
        seen[group] = rnd
        return Sample(
            id=f"{group}/{rnd}",
            benchmark=self.name,
            messages=(Message("user", problem),),
            target=sanswer,  # NaN for 24 text-generation turns: the judge is told it is empty
            metadata={
                "category": category,
                "code": CATEGORY_CODES[category],
                "category1": _text(rec.get("category1")),
                "category2": _text(rec.get("category2")),
                "scene": _text(rec.get("scene")),
                "difficulty": _text(rec.get("difficulty")),
                "checklist": _text(rec.get("checklist")),
                "group_code": group_code,
                "round": rnd,
                "language": "zh",
            },
            group=group,
            turn=rnd,
        )

    def judge_runs(self, options: RunOptions) -> int:
        """RunOptions.judge_runs when given, else the ``judge_runs`` param (default 3)."""
        if options.judge_runs is not None:
            return options.judge_runs
        return int(self.param("judge_runs"))

    def check_options(self, options: RunOptions) -> RunOptions:
        """As for any benchmark, with the judge runs resolved: ``--judge-runs 3`` and the default 3 are one setting."""
        checked = super().check_options(options)
        return replace(checked, judge_runs=self.judge_runs(checked))

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("llmeval-med", {"runs": self.judge_runs(options), "protocol": options.protocol})

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> tuple[Sample, Grade]:
        """What :meth:`aggregate` reads of one graded turn, kept while a run goes on: its id and
        category, the grade's value and status and the judge-score details (no texts, no votes)."""
        kept = {
            k: grade.details[k]
            for k in ("other_value", "mean_score", "run_scores")
            if k in grade.details
        }
        return (
            Sample(
                id=sample.id,
                benchmark=sample.benchmark,
                messages=(),
                metadata={"category": sample.metadata["category"]},
            ),
            Grade(sample_id=grade.sample_id, value=grade.value, details=kept, status=grade.status),
        )

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Usability rate (%) overall (OP) and per category by the run's protocol; the other protocol's beside it.

        reference (Aggregate.py ``aggregate``): 100 x usable / every question, OP pooling the
        categories; a question with no valid score, or no answer, is unusable, so ``n`` is every
        question and ``n_unscored`` counts those without a value inside it. grandrounds: 100 x
        usable / answers with a valid score, the others unscored. The other protocol's figure is
        computed from each grade's ``other_value`` (the same replies read the other way).
        """
        proto = options.protocol
        other = _other(proto)
        by_id = {g.sample_id: g for g in grades}
        cats: dict[str, list[Grade | None]] = defaultdict(list)
        for s in samples:
            cats[s.metadata["category"]].append(by_id.get(s.id))
        everything = [g for gs in cats.values() for g in gs]
        overall = _cell(everything, proto)
        extra = {
            "protocol": proto,
            "other_protocol": {
                "protocol": other,
                "score": overall.metrics["other_rate"],
                "differs": DIFFERS,
            },
            "mean_score": overall.metrics["mean_score"],
            "mean_score_ci95": mean_ci(_mean_scores(everything)),
            "n_no_valid_score": overall.metrics["n_no_valid_score"],
            "judge_runs": self.judge_runs(options),
            "threshold": USABLE_THRESHOLD,
            "note": "score in percent"
            + (
                "; answers with no valid judge score count as unusable"
                if proto == "reference"
                else ""
            ),
        }
        return Aggregate.of(
            "usability rate (%, OP)",
            overall,
            {"category": {CATEGORY_CODES[c]: _cell(gs, proto) for c, gs in cats.items()}},
            extra,
        )


def _other(protocol: str) -> str:
    return "grandrounds" if protocol == "reference" else "reference"


def _rate_cell(
    values: Sequence[float | None], protocol: str, metrics: Mapping[str, float | None] | None = None
) -> Cell:
    """Usability rate (%) of 1.0/0.0/None values by ``protocol``'s convention, with a Wilson CI.

    reference: usable / all (None = unusable, Aggregate.py); grandrounds: usable / scored.
    """
    if protocol != "reference":
        return accuracy_cell(values, metrics, scale=100.0)
    n, usable = len(values), sum(1 for v in values if v == 1.0)
    ci = wilson_ci(usable, n)
    return Cell(
        score=100.0 * usable / n if n else None,
        n=n,
        n_unscored=sum(1 for v in values if v is None),
        ci95=(100.0 * ci[0], 100.0 * ci[1]) if ci else None,
        metrics=dict(metrics or {}),
    )


def _cell(grades: Sequence[Grade | None], protocol: str) -> Cell:
    """The rate of some answers by ``protocol``; the other protocol's rate, the mean 1-5 score and
    the answers judged without a valid score beside it."""
    values = [value_of(g) for g in grades]
    others = [None if g is None else g.details.get("other_value") for g in grades]
    means = _mean_scores(grades)
    metrics = {
        "other_rate": _rate_cell(others, _other(protocol)).score,
        "mean_score": sum(means) / len(means) if means else None,
        "n_no_valid_score": sum(
            1 for g in grades if g is not None and g.value is None and "run_scores" in g.details
        ),
    }
    return _rate_cell(values, protocol, metrics)


def _mean_scores(grades: Sequence[Grade | None]) -> list[float]:
    """The mean judge score of each answer that has one (by the run's protocol)."""
    return [
        float(g.details["mean_score"])
        for g in grades
        if g is not None and g.value is not None and g.details.get("mean_score") is not None
    ]

"""LLMEval-Med (Fudan, EMNLP 2025 Findings): 667 Chinese turns in 5 categories, judged 1-5.

Data: ``dataset.json``, a JSON object keyed by category, each a list of turns; multi-turn
dialogues share ``groupCode`` within a category and are asked in ``round`` order with the
model's own earlier answers as history (PROTOCOLS.md section 2 and format quirk 4). Score: the
usability rate (%), i.e. the share of answers whose mean judge score over the runs is >= 4.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.readers import read_json
from grandrounds.errors import DataError
from grandrounds.params import Param
from grandrounds.graders.llmeval_grader import CATEGORY_CODES, SYSTEM_PROMPT
from grandrounds.registry import Spec
from grandrounds.records import Cell, Grade, Message, Sample
from grandrounds.scoring.cells import accuracy_cell, value_of
from grandrounds.stats import mean_ci

COMMIT = "508516fafd288c896691442d657b4af619609535"
DEFAULT_JUDGE_RUNS = 3  # the paper averages three judge runs


def _text(value: Any) -> str | None:
    """A cell as text; NaN/None/blank (the file writes NaN for missing checklists) -> None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text if text.strip() else None


class LLMEvalMed(Benchmark):
    """LLMEval-Med. ``--judge-runs`` when given, else the param ``judge_runs`` (default 3)."""

    name = "llmeval-med"
    description = "LLMEval-Med: 667 Chinese clinical turns, 5 categories, 1-5 judge score, usability rate"
    language = "zh"
    needs_judge = True
    takes_judge_runs = True
    parameters = (Param("judge_runs", int, DEFAULT_JUDGE_RUNS, "judge runs averaged per answer (--judge-runs overrides)", minimum=1),)
    remote_files = (
        RemoteFile(
            url=f"https://raw.githubusercontent.com/llmeval/LLMEval-Med/{COMMIT}/dataset/dataset.json",
            filename="dataset.json",
            sha256="58b60a92c20be4c62644fd3e028670514b452d125152715e52f6a9268a68db90",
        ),
    )

    def load(self, root: Path) -> list[Sample]:
        path = resolve_file(root, "dataset.json")
        data = read_json(path)
        if not isinstance(data, dict):
            raise DataError(path, None, "top level must be an object keyed by category")
        samples: list[Sample] = []
        for category, turns in data.items():
            if category not in CATEGORY_CODES:
                raise DataError(path, category, f"unknown category (expected one of {', '.join(CATEGORY_CODES)})")
            if not isinstance(turns, list):
                raise DataError(path, category, "category value must be a list of turns")
            samples.extend(self._category(path, category, turns))
        return samples

    def _category(self, path: Path, category: str, turns: list[Any]) -> list[Sample]:
        out: list[Sample] = []
        seen: dict[str, int] = {}
        for i, rec in enumerate(turns):
            where = f"{category}[{i}]"
            if not isinstance(rec, dict):
                raise DataError(path, where, "turn must be an object")
            problem, sanswer = _text(rec.get("problem")), _text(rec.get("sanswer"))
            group_code, rnd = rec.get("groupCode"), rec.get("round")
            if problem is None:
                raise DataError(path, where, "missing 'problem'")
            if not isinstance(group_code, int) or not isinstance(rnd, int) or rnd < 1:
                raise DataError(path, where, f"groupCode/round must be integers, round >= 1 (got {group_code!r}, {rnd!r})")
            group = f"{category}/{group_code}"
            # Turns of a dialogue are stored consecutively in round order; anything else would
            # give the model a wrong history, so it is an error rather than a silent reorder.
            if rnd != seen.get(group, 0) + 1:
                raise DataError(path, where, f"{group}: round {rnd} follows round {seen.get(group, 0)}")
            seen[group] = rnd
            out.append(
                Sample(
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
            )
        return out

    def prompt(self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()) -> Prompt:
        """Answer.py: system "You are a helpful assistant." then earlier turns with the model's answers."""
        base = super().prompt(sample, options, history)
        return Prompt((Message("system", SYSTEM_PROMPT), *base.messages))

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
        return Spec("llmeval-med", {"runs": self.judge_runs(options)})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Usability rate (%) overall (OP) and per category, mean 1-5 score beside it.

        evaluate/Aggregate.py: UsabilityRate = 100 * #usable / #questions; OP pools categories.
        Ours excludes answers with no valid score (reported as unscored); the reference counts
        them as unusable, kept in ``extra["reference_op"]`` and per category.
        """
        by_id = {g.sample_id: g for g in grades}
        cats: dict[str, list[Grade | None]] = defaultdict(list)
        for s in samples:
            cats[s.metadata["category"]].append(by_id.get(s.id))
        everything = [g for gs in cats.values() for g in gs]
        overall = _cell(everything)
        extra = {
            "mean_score": overall.metrics["mean_score"],
            "mean_score_ci95": mean_ci(_mean_scores(everything)),
            "reference_op": overall.metrics["reference_rate"],
            "n_no_valid_score": overall.metrics["n_no_valid_score"],
            "judge_runs": self.judge_runs(options),
            "threshold": 4.0,
            "note": "score in percent; reference_op counts answers with no valid judge score as unusable",
        }
        return Aggregate.of(
            "usability rate (%, OP)",
            overall,
            {"category": {CATEGORY_CODES[c]: _cell(gs) for c, gs in cats.items()}},
            extra,
        )


def _cell(grades: Sequence[Grade | None]) -> Cell:
    """Usability rate (%) with its Wilson CI; the reference rate, mean 1-5 score and the
    answers the judge gave no valid score (unscored here, unusable in the reference) beside it."""
    values = [value_of(g) for g in grades]
    usable = sum(1 for v in values if v == 1.0)
    means = _mean_scores(grades)
    metrics = {
        "reference_rate": 100.0 * usable / len(grades) if grades else None,
        "mean_score": sum(means) / len(means) if means else None,
        "n_no_valid_score": sum(1 for g in grades if g is not None and g.value is None and "run_scores" in g.details),
    }
    return accuracy_cell(values, metrics, scale=100.0)


def _mean_scores(grades: Sequence[Grade | None]) -> list[float]:
    """The mean judge score (1-5) of each scored answer that has one."""
    return [float(g.details["mean_score"]) for g in grades if g is not None and g.value is not None and g.details.get("mean_score") is not None]

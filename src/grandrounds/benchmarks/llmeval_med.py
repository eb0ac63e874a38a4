"""LLMEval-Med (Fudan, EMNLP 2025 Findings): 667 Chinese turns in 5 categories, judged 1-5.

Data: ``dataset.json``, a JSON object keyed by category, each a list of turns; multi-turn
dialogues share ``groupCode`` within a category and are asked in ``round`` order with the
model's own earlier answers as history (PROTOCOLS.md section 2 and format quirk 4). Score: the
usability rate (%), i.e. the share of answers whose mean judge score over the runs is >= 4.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.mcq_io import read_json
from grandrounds.errors import DataError
from grandrounds.graders.llmeval_grader import CATEGORY_CODES, SYSTEM_PROMPT, LLMEvalGrader
from grandrounds.records import Grade, Message, Sample
from grandrounds.stats import mean_ci, wilson_ci

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
        return int(self.params.get("judge_runs", DEFAULT_JUDGE_RUNS))

    def grader(self, options: RunOptions) -> LLMEvalGrader:
        return LLMEvalGrader(runs=self.judge_runs(options))

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
        overall = _rates(everything)
        breakdown = {CATEGORY_CODES[c]: {"category": c, **_rates(gs)} for c, gs in cats.items()}
        extra = {
            "mean_score": overall.pop("mean_score"),
            "mean_score_ci95": overall.pop("mean_score_ci95"),
            "reference_op": overall.pop("reference_rate"),
            "n_no_valid_score": overall.pop("n_no_valid_score"),
            "judge_runs": self.judge_runs(options),
            "threshold": 4.0,
            "note": "score in percent; reference_op counts answers with no valid judge score as unusable",
        }
        return Aggregate(
            metric="usability rate (%, OP)",
            score=overall["usability_rate"],
            ci95=overall["ci95"],
            n=overall["n"],
            n_unscored=overall["n_unscored"],
            breakdown=breakdown,
            extra=extra,
        )


def _rates(grades: Sequence[Grade | None]) -> dict[str, Any]:
    """Usability (ours and reference), Wilson CI, mean score for one set of grades."""
    scored = [g for g in grades if g is not None and g.value is not None]
    usable = sum(1 for g in scored if g.value == 1.0)
    ci = wilson_ci(usable, len(scored))
    means = [float(g.details["mean_score"]) for g in scored if g.details.get("mean_score") is not None]
    mci = mean_ci(means)
    judged_no_score = sum(1 for g in grades if g is not None and g.value is None and "run_scores" in g.details)
    return {
        "usability_rate": 100.0 * usable / len(scored) if scored else None,
        "ci95": (100.0 * ci[0], 100.0 * ci[1]) if ci else None,
        "n": len(scored),
        "n_questions": len(grades),
        "n_usable": usable,
        "n_unscored": len(grades) - len(scored),
        "n_no_valid_score": judged_no_score,
        "reference_rate": 100.0 * usable / len(grades) if grades else None,
        "mean_score": sum(means) / len(means) if means else None,
        "mean_score_ci95": mci,
    }

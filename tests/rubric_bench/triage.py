"""A judged rubric benchmark defined in one file: triage advice graded against a physician rubric."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions, resolve_file
from grandrounds.benchmarks.readers.lines import read_jsonl
from grandrounds.core.records import Criterion, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import group_cells, mean_cell, value_of

TEMPLATE = Path(__file__).with_name("triage_judge.txt")


class TriageRubric(Benchmark):
    name = "triage-rubric"
    description = "triage advice, physician rubric, judged per criterion"
    needs_judge = True

    def load(self, root: Path) -> list[Sample]:
        path = resolve_file(root, "triage.jsonl")
        return [
            Sample(
                id=rec["id"],
                benchmark=self.name,
                messages=(Message("user", rec["question"]),),
                rubric=tuple(
                    Criterion(str(i), c["text"], c["points"]) for i, c in enumerate(rec["rubric"])
                ),
                metadata={"urgency": rec["urgency"]},
            )
            for _, rec in read_jsonl(path)
        ]

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("rubric", {"template": str(TEMPLATE), "system": ""})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        overall = mean_cell([value_of(by_id.get(s.id)) for s in samples])
        urgency = group_cells(
            ((s.metadata["urgency"], value_of(by_id.get(s.id))) for s in samples), mean_cell
        )
        return Aggregate(
            "rubric_score",
            overall.score,
            overall.ci95,
            overall.n,
            overall.n_unscored,
            {"urgency": urgency},
        )

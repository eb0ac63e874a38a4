"""MedCalc-Bench (v1.0 test set, 1,047 rows): compute a clinical value from a patient note.

Data: ``test_data.csv`` from ncbi-nlp/MedCalc-Bench @ 5523b77 (PROTOCOLS.md section 6). The
model is asked for JSON ``{"step_by_step_thinking", "answer"}`` as in the official zero-shot
prompt; "Answer: ..." lines and bare values are accepted too. Scoring follows the official
check_correctness (:mod:`grandrounds.scoring.medcalc`); an answer with no readable value is
wrong and counted (``details["unextractable"]``), a failed call is unscored.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.readers import read_csv
from grandrounds.errors import DataError
from grandrounds.graders.medcalc_extract import parse_ground_truth
from grandrounds.records import Cell, Grade, Message, Sample
from grandrounds.registry import Spec
from grandrounds.scoring import medcalc as mc
from grandrounds.scoring.cells import accuracy_cell, group_cells, value_of

COMMIT = "5523b7785c004912e76ca4db19efbd7367b23c40"
COLUMNS = ("Row Number", "Calculator ID", "Calculator Name", "Category", "Output Type", "Note ID", "Note Type",
           "Patient Note", "Question", "Relevant Entities", "Ground Truth Answer", "Lower Limit", "Upper Limit")
SYSTEM = (
    "You are a helpful assistant for calculating a score for a given patient note. Think step by step, "
    'then give the value asked for. Reply with only a JSON object {"step_by_step_thinking": "...", "answer": "..."}.'
)
FORMAT_HINT = {
    "date": "The answer must be a date in the format MM/DD/YYYY.",
    "gestational_age": "The answer must be a tuple of weeks and days, e.g. (4 weeks, 3 days).",
    "integer": "The answer must be a single whole number.",
    "decimal": "The answer must be a single number.",
}


class MedCalcBench(Benchmark):
    """MedCalc-Bench v1.0 (1,047 rows); accuracy overall and per category."""

    name = "medcalc-bench"
    description = "MedCalc-Bench v1.0: 1,047 patient notes, 55 calculators, official tolerance rules"
    remote_files = (
        RemoteFile(
            url=f"https://raw.githubusercontent.com/ncbi-nlp/MedCalc-Bench/{COMMIT}/dataset/test_data.csv",
            filename="test_data.csv",
            sha256="c2d23097f8bdb7ae4a77dbf4a5a767335df7303998d7c7664a73a29fd8e2b31a",
        ),
    )

    def load(self, root: Path) -> list[Sample]:
        path = resolve_file(root, "test_data.csv")
        return [self._row(path, row) for row in read_csv(path, COLUMNS)]

    def _row(self, path: Path, row: dict[str, str]) -> Sample:
        where = f"Row Number {row['Row Number']}"
        try:
            calc_id = int(row["Calculator ID"])
        except ValueError:
            raise DataError(path, where, f"Calculator ID {row['Calculator ID']!r} is not an integer") from None
        kind = mc.kind_of(calc_id, row["Output Type"].strip())
        if kind is None:
            raise DataError(path, where, f"unknown Output Type {row['Output Type']!r}")
        try:
            entities = ast.literal_eval(row["Relevant Entities"])  # a Python dict literal, not JSON
        except (ValueError, SyntaxError) as e:
            raise DataError(path, where, f"Relevant Entities is not a Python literal: {e}") from None
        truth = parse_ground_truth(row["Ground Truth Answer"], kind)
        lower = upper = None
        if kind == "decimal":
            try:
                lower, upper = float(row["Lower Limit"]), float(row["Upper Limit"])
            except ValueError:
                raise DataError(path, where, "Lower/Upper Limit must be numbers for a decimal calculator") from None
        if truth is None:
            raise DataError(path, where, f"Ground Truth Answer {row['Ground Truth Answer']!r} is not a {kind}")
        user = (
            f"Here is the patient note:\n{row['Patient Note']}\n\nHere is the task:\n{row['Question']}\n\n"
            f"{FORMAT_HINT[kind]}"
        )
        return Sample(
            id=row["Row Number"],
            benchmark=self.name,
            messages=(Message("system", SYSTEM), Message("user", user)),
            target={"kind": kind, "truth": row["Ground Truth Answer"], "lower": lower, "upper": upper},
            metadata={
                "calculator_id": calc_id,
                "calculator": row["Calculator Name"],
                "category": row["Category"],
                "output_type": row["Output Type"],
                "note_id": row["Note ID"],
                "note_type": row["Note Type"],
                "relevant_entities": entities,
                "explanation": row.get("Ground Truth Explanation", ""),
            },
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medcalc", {})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Accuracy (Wilson CI) overall and in two breakdown families; unextractable answers counted.

        Families: ``category`` (the file's Category: lab, risk, ...) and ``kind`` (the comparison
        rule: date, gestational_age, integer, decimal). A sample with no scored grade is unscored.
        """
        by_id = {g.sample_id: g for g in grades}
        rows = [(s, by_id.get(s.id)) for s in samples]
        overall = _cell([g for _, g in rows])
        return Aggregate.of(
            "accuracy",
            overall,
            {
                "category": group_cells(((s.metadata["category"], g) for s, g in rows), _cell),
                "kind": group_cells(((s.target["kind"], g) for s, g in rows), _cell),
            },
            {"n_unextractable": overall.metrics["n_unextractable"], "version": "v1.0 (1,047 rows, commit 5523b77)"},
        )


def _cell(grades: Sequence[Grade | None]) -> Cell:
    """Accuracy of some answers, with how many had no readable value (those count as wrong)."""
    unextractable = sum(1 for g in grades if g is not None and g.value is not None and g.details.get("unextractable"))
    return accuracy_cell([value_of(g) for g in grades], {"n_unextractable": unextractable})

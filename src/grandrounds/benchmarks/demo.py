"""A 12-question demo exam shipped with the package, for trying grandrounds without downloads.

Plain general-medicine facts written for this project (no benchmark items), in the MedQA JSONL
format, so it exercises the same loader, prompts and grader as the real exams, with MedQA's
protocols (simple-evals for generated answers, lm-eval's medqa_4options for letter-loglik).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, exam_protocols
from grandrounds.benchmarks.medqa import MEDQA_TASK, load_medqa_format, medqa_context
from grandrounds.core.records import Sample

FILENAME = "demo_exam.jsonl"


class DemoExam(MultipleChoiceBenchmark):
    """Twelve 4-option questions; accuracy by topic."""

    name: ClassVar[str] = "demo"
    description: ClassVar[str] = (
        "Bundled 12-question general-medicine demo exam (no download); accuracy"
    )
    category_fields: ClassVar[tuple[str, ...]] = ("meta_info",)
    lm_eval = MEDQA_TASK
    protocols = exam_protocols(MEDQA_TASK)

    @classmethod
    def default_path(cls) -> Path:
        """The packaged demo file (the runner loads this when no --data is given)."""
        return Path(str(files("grandrounds").joinpath("data", FILENAME)))

    def data_files(self, root: Path) -> list[Path]:
        return [resolve_file(root, FILENAME)]

    def load(self, root: Path | None = None) -> list[Sample]:
        return load_medqa_format(self, resolve_file(root or self.default_path(), FILENAME))

    def lm_eval_context(self, sample: Sample) -> str:
        return medqa_context(sample)

"""MMLU's six medical subjects, test split (1,089 questions), as vendored by MIRAGE.

Format: one headerless CSV per subject, ``<subject>_test.csv``, with six
columns: question, A, B, C, D, answer letter. Quoted cells may contain CRLF. Score: accuracy per
subject; the headline is the micro average over all questions, the macro average (unweighted
mean of the subject accuracies) is given in ``extra``.

Under ``--protocol reference`` a generated answer follows openai/simple-evals' own MMLU evaluation
(mmlu_eval.py: its prompt, sampler defaults and reading), and ``letter-loglik`` follows
lm-evaluation-harness's ``mmlu`` default template (``_default_template_yaml``: Jinja ``doc_to_text``,
choices A-D). Known difference: lm-eval's per-subject task files (``mmlu_anatomy.yaml`` ...) also
set a ``description`` ("The following are multiple choice questions (with answers) about
anatomy." and a blank line) that lm-eval puts before the context; those files are not among the
pinned reference files, so the context here is ``doc_to_text`` alone and lacks that line.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, RunOptions, chosen_subjects
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    accuracy_by,
    cached,
    exam_protocols,
    jinja_doc_to_text,
    macro_average,
)
from grandrounds.benchmarks.medqa import MIRAGE
from grandrounds.benchmarks.readers.lines import iter_csv_rows
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.sources.upstream import LM_EVAL, yaml_value

SUBJECTS = (
    "anatomy",
    "clinical_knowledge",
    "college_biology",
    "college_medicine",
    "medical_genetics",
    "professional_medicine",
)
_SHA = {
    "anatomy": "966dfd5c4579885ebdb8c05d6754ae5834f672632586d8595be3c0f9360e6f4e",
    "clinical_knowledge": "06a1ea973000d5ef5d2664c4ac1c68d0423f1cab6b3b682be7942633740811f1",
    "college_biology": "e1204cb9d19887ea266145f038b5d4cc1fbc33d7efce186259c4ecca1cbe3119",
    "college_medicine": "9c533cfff89edaa317b2e79bbabcdd5e2e522e019679cb4a6475e5f2a1861b1e",
    "medical_genetics": "cc30c698e94f12c00e610a39c62d1a1d9587fa53c005359317346081f722c5e6",
    "professional_medicine": "a034bf0dda10cb0848bdd3097eb1547d61ca2dac9e9b871563691621c38d51e9",
}


MMLU_TASK = LmEvalTask(
    "mmlu (default template)",
    LM_EVAL.file(
        "lm_eval/tasks/mmlu/default/_default_template_yaml",
        "a0997593bf94f52cc87eb1f9b621f52613a6c60f1fb48775b0926104fd385122",
    ),
)


def read_subject_csv(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line number, row) for each non-empty row, read as asked for; CRLF inside quoted cells
    is folded to LF. A malformed row is a DataError naming the line it starts on."""
    for start, row in iter_csv_rows(path):
        yield start, [c.replace("\r\n", "\n") for c in row]


class MMLUMedical(MultipleChoiceBenchmark):
    """MMLU anatomy, clinical knowledge, college biology/medicine, medical genetics, professional medicine.

    ``subjects``: a list or comma-separated string of subject names (default all six).
    """

    name: ClassVar[str] = "mmlu-medical"
    description: ClassVar[str] = (
        "MMLU medical subjects (6), test split, 1,089 questions; micro accuracy"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(
        RemoteFile(f"{MIRAGE}/mmlu/data/test/{s}_test.csv", f"{s}_test.csv", _SHA[s])
        for s in SUBJECTS
    )
    category_fields: ClassVar[tuple[str, ...]] = ("subject",)
    lm_eval = MMLU_TASK
    protocols = exam_protocols(MMLU_TASK)

    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="subjects",
            type=list[str],
            default=SUBJECTS,
            help="subjects to ask, e.g. anatomy,medical_genetics (default all six)",
            choices=SUBJECTS,
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subjects = chosen_subjects(self, SUBJECTS)  # the file order, whatever was typed

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [root / f"{s}_test.csv" for s in self.subjects]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        for path in self.data_files(root):
            if not path.exists():
                raise DataError(path, None, f"file not found (expected {path.name} in {root})")
            subject = path.stem.removesuffix("_test")
            for i, (no, row) in enumerate(read_subject_csv(path)):
                if len(row) != 6:
                    raise DataError(
                        path,
                        no,
                        f"expected 6 columns (question, A, B, C, D, answer), got {len(row)}",
                    )
                if not row[0].strip():
                    raise DataError(path, no, "empty question")
                answer = row[5].strip().upper()
                if answer not in "ABCD" or not answer:
                    raise DataError(path, no, f"answer must be A, B, C or D, got {row[5]!r}")
                choices = dict(zip("ABCD", row[1:5]))
                yield self.make_sample(f"{subject}-{i}", row[0], choices, answer, subject=subject)

    def lm_eval_context(self, sample: Sample) -> str:
        """lm-eval's Jinja doc_to_text (read from the template YAML) over the cais/mmlu fields."""
        doc = {"question": sample.metadata["question"], "choices": list(sample.choices.values())}
        return jinja_doc_to_text(str(cached(yaml_value, MMLU_TASK.yaml, "doc_to_text")), doc)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """The macro average: unweighted mean of per-subject accuracies."""
        return {
            "macro_accuracy": macro_average(accuracy_by(pairs, "subject", values)),
            "headline": "micro",
        }

"""MedQA-USMLE, US English, 4 options, test split (1,273 questions), as vendored by MIRAGE.

Format: JSON Lines ``{"question", "answer": <text>, "options": {"A".."D"},
"meta_info": "step1" | "step2&3", "answer_idx": "B", "metamap_phrases": [...]}``. Records carry no
id, so a sample's id is its 0-based position among the file's records. Score: accuracy of the
chosen letter against ``answer_idx``, broken down by ``meta_info``.

MedQA's authors publish no prompt for language models. Under ``--protocol reference`` a generated
answer follows openai/simple-evals (its multiple-choice prompt, sampler defaults and reading), and
``letter-loglik`` follows lm-evaluation-harness's ``medqa_4options`` (the default answer mode stays
``generate``). lm-eval reads the same questions from GBaker/MedQA-USMLE-4-options-hf as
``sent1`` and ``ending0..3``; here they come from the MIRAGE copy (``question``, ``options``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    cached,
    exam_protocols,
)
from grandrounds.benchmarks.readers.exam_options import medqa_format_options
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import require_fields
from grandrounds.core.records import Sample
from grandrounds.sources.upstream import LM_EVAL, python_fstring, python_returned_string

MIRAGE = "https://raw.githubusercontent.com/Teddy-XiongGZ/MIRAGE/392943af99cd94cafd50a0de2e7fca24bbf65494/rawdata"

MEDQA_TASK = LmEvalTask(
    "medqa_4options",
    LM_EVAL.file(
        "lm_eval/tasks/medqa/medqa.yaml",
        "33943df2e79f6d96a2685e14680a2e479aa4c6f2fc44afa0ef0ae59c57c7c302",
    ),
    LM_EVAL.file(
        "lm_eval/tasks/medqa/preprocess_medqa.py",
        "06adc6ef5bda3259fe547355e6b064ca57c674b502fac749d0a0ccc8fee91787",
    ),
)


def medqa_context(sample: Sample) -> str:
    """lm-eval medqa_4options' context (preprocess_medqa.doc_to_text): the option lines, one f-string
    per option in option order, joined into the returned f-string. Both strings are read from the file."""
    hooks = MEDQA_TASK.hooks
    assert hooks is not None
    line = cached(python_fstring, hooks, within="doc_to_text", fields=("k", "v"))
    answers = "".join(line.render(k=k, v=v) for k, v in sample.choices.items())
    return cached(python_returned_string, hooks, "doc_to_text").render(
        {"doc['sent1']": sample.metadata["question"], "answers": answers}
    )


def load_medqa_format(bench: MultipleChoiceBenchmark, path: Path) -> list[Sample]:
    """Samples from a MedQA-format JSONL file (also the format of the bundled demo exam)."""
    return list(iter_medqa_format(bench, path))


def iter_medqa_format(bench: MultipleChoiceBenchmark, path: Path) -> Iterator[Sample]:
    """:func:`load_medqa_format`, one record at a time."""
    for index, (no, rec) in enumerate(iter_jsonl(path)):
        require_fields(path, no, rec, ("question", "options", "answer_idx"))
        choices, key = medqa_format_options(path, no, rec)
        yield bench.make_sample(
            str(index),
            rec["question"],
            choices,
            key,
            meta_info=rec.get("meta_info", ""),
        )


class MedQA(MultipleChoiceBenchmark):
    """MedQA-USMLE 4-option test set."""

    name: ClassVar[str] = "medqa"
    description: ClassVar[str] = "MedQA-USMLE (US, 4 options) test split, 1,273 questions; accuracy"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{MIRAGE}/medqa/data_clean/questions/US/4_options/phrases_no_exclude_test.jsonl",
            "phrases_no_exclude_test.jsonl",
            "c3b905ccfa66152dc25afbcb2c10e86c0bdb208824f0658fcdb2c040f60a2beb",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("meta_info",)
    lm_eval = MEDQA_TASK
    protocols = exam_protocols(MEDQA_TASK)

    def records(self, root: Path) -> Iterator[Sample]:
        return iter_medqa_format(self, resolve_file(root, self.remote_files[0].filename))

    def lm_eval_context(self, sample: Sample) -> str:
        return medqa_context(sample)

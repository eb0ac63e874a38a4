"""MedQA-USMLE, US English, 4 options, test split (1,273 questions), as vendored by MIRAGE.

Format (PROTOCOLS.md section 6): JSON Lines ``{"question", "answer": <text>, "options": {"A".."D"},
"meta_info": "step1" | "step2&3", "answer_idx": "B", "metamap_phrases": [...]}``. Records carry no
id, so a sample's id is its 0-based position among the file's records. Score: accuracy of the
chosen letter against ``answer_idx``, broken down by ``meta_info``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.graders.mcq_grader import LETTERS
from grandrounds.benchmarks.readers import read_jsonl, require_fields
from grandrounds.errors import DataError
from grandrounds.records import Sample

MIRAGE = "https://raw.githubusercontent.com/Teddy-XiongGZ/MIRAGE/392943af99cd94cafd50a0de2e7fca24bbf65494/rawdata"


def load_medqa_format(bench: MultipleChoiceBenchmark, path: Path) -> list[Sample]:
    """Samples from a MedQA-format JSONL file (also the format of the bundled demo exam)."""
    samples = []
    for index, (no, rec) in enumerate(read_jsonl(path)):
        require_fields(path, no, rec, ("question", "options", "answer_idx"))
        options = rec["options"]
        if not isinstance(options, dict) or len(options) < 2:
            raise DataError(path, no, "field 'options' must map letters to option texts")
        letters = "".join(sorted(options))
        if letters != LETTERS[: len(options)] or not all(isinstance(v, str) and v.strip() for v in options.values()):
            raise DataError(path, no, f"options must be non-empty texts under letters A.. (got {letters!r})")
        key = str(rec["answer_idx"]).strip()
        if key not in options:
            raise DataError(path, no, f"answer_idx {key!r} is not one of the options {letters}")
        if "answer" in rec and rec["answer"] != options[key]:
            raise DataError(path, no, f"answer text disagrees with answer_idx {key!r}")
        samples.append(
            bench.make_sample(
                str(index), rec["question"], {k: options[k] for k in letters}, key, meta_info=rec.get("meta_info", "")
            )
        )
    return samples


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

    def load(self, root: Path) -> list[Sample]:
        return load_medqa_format(self, resolve_file(root, self.remote_files[0].filename))

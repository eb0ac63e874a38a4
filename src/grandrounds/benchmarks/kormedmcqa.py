"""KorMedMCQA (Kweon et al. 2024): Korean healthcare licensing exams (doctor, nurse, pharmacist,
dentist), five options A-E, test split.

Data layout: the authors' Hugging Face dataset sean0042/KorMedMCQA (CC BY-NC 2.0: **non-commercial
use only**), as its card at commit 79efd6f declares it: one config per exam, each split a Parquet
file ``<exam>/<split>-*.parquet`` (``doctor/test-00000-of-00001.parquet`` ...). Columns per that card:
``subject``, ``year``, ``period``, ``q_number``, ``question``, ``A``..``E``, ``answer`` (the correct
option's number, 1-5), ``cot``. The shard names carry upload hashes that changed between commits, so
no file is pinned: a run needs ``--data`` (the dataset folder holding ``doctor/`` etc., or one
test Parquet file, whose exam is its folder's name). A missing column, an empty question or option,
or an ``answer`` outside 1-5 is a one-line DataError naming the file and row.

Protocols. The authors' evaluation script is lm-evaluation-harness's ``kormedmcqa`` task (their
paper and card say so); ``reference`` follows it at the pinned commit: the prompt is the task's
``doc_to_text`` (read from ``_template_yaml`` at run time: the question, "A. .." to "E. .." lines,
"정답："), zero-shot (the task sets no ``num_fewshot``), greedy, up to 1,024 tokens; the reply is cut
at the first four of the task's ``until`` strings (lm-eval's chat path sends ``stop[:4]``) and read by its ``ExtractChoiceFilter`` (graders/readings_peers.py);
``exact_match`` over every question, the group figure weighted by size (micro accuracy).
``grandrounds``: our prompt and tolerant reading, failed calls excluded. The task generates, so
there is no lm-eval log-likelihood request and no ``letter-loglik`` mode. Breakdowns: exam, year.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, chosen_subjects
from grandrounds.benchmarks.mcq import (
    MultipleChoiceBenchmark,
    cached,
    jinja_doc_to_text,
)
from grandrounds.benchmarks.readers.exam_options import numbered_key
from grandrounds.benchmarks.readers.parquet import iter_parquet_rows
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Sample
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import LM_EVAL, UpstreamFile, yaml_value

EXAMS = ("doctor", "nurse", "pharm", "dentist")
TEMPLATE = LM_EVAL.file(
    "lm_eval/tasks/kormedmcqa/_template_yaml",
    "9216773c10b1164d0328b70d0793bba7b4d6b8264d691672d1c544b042bfbf63",
)
UTILS = LM_EVAL.file(
    "lm_eval/tasks/kormedmcqa/utils.py",
    "127634ecbc81b5b95579d24dc9cbe3d11025a2eba294ce04e710d8b8793f233e",
)
COLUMNS = ("question", "A", "B", "C", "D", "E", "answer")

_PROMPTS = {
    "generate": "lm-eval kormedmcqa _template_yaml doc_to_text (zero-shot)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (the lm-eval task generates)",
}
REFERENCE = Protocol(
    name="reference",
    answer=Generation(
        temperature=0.0, max_tokens=1024
    ),  # _template_yaml generation_kwargs: do_sample false, max_gen_toks 1024
    extraction="generate: cut at the first four until strings (lm-eval's chat path sends stop[:4]), then utils.ExtractChoiceFilter (Appendix B cascade); log-prob modes: argmax",
    aggregation="exact_match over every question (failed or unreadable = wrong); group weighted by size (micro)",
    source=f"{TEMPLATE.repo}@{TEMPLATE.commit[:7]} lm_eval/tasks/kormedmcqa (_template_yaml, utils.py)",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": {**_PROMPTS, "generate": "ours"}},
)


def exam_files(root: Path, exams: list[str]) -> list[tuple[str, Path]]:
    """(exam, test Parquet file) for each exam asked: ``root/<exam>/test-*.parquet``, or ``root`` itself."""
    if root.is_file():
        exam = root.parent.name
        if exam not in EXAMS:
            raise DataError(
                root,
                None,
                f"cannot tell the exam: the file's folder must be one of {', '.join(EXAMS)}",
            )
        return [(exam, root)]
    if not root.exists():
        raise DataError(root, None, "file or directory not found")
    out: list[tuple[str, Path]] = []
    for exam in exams:
        found = sorted((root / exam).glob("test-*.parquet"))
        if not found:
            raise DataError(
                root / exam,
                None,
                "no test-*.parquet file (the dataset's layout: <exam>/test-*.parquet)",
            )
        out.extend((exam, p) for p in found)
    return out


class KorMedMCQA(MultipleChoiceBenchmark):
    """KorMedMCQA test split: doctor, nurse, pharmacist and dentist exams, five options."""

    name: ClassVar[str] = "kormedmcqa"
    description: ClassVar[str] = (
        "KorMedMCQA (Korean doctor/nurse/pharmacist/dentist licensing exams), test split, five options; accuracy by exam "
        "and year (lm-eval's kormedmcqa task under reference). Needs --data (the HF dataset folder). "
        "Licence CC BY-NC 2.0: non-commercial use only"
    )
    language: ClassVar[str] = "ko"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = ()
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    category_fields: ClassVar[tuple[str, ...]] = ("exam", "year")
    reference_reading = "kormedmcqa"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    reference_fidelity = {
        "reference": "lm-evaluation-harness's `kormedmcqa` task (the authors' evaluation)",
        "reader": "the reply cut at the first of the four stop strings lm-eval's chat path sends "
        '(`stop[:4]`: "Q:", "</s>", "<|im_end|>", "."; "\\n\\n" is never sent), then '
        "`ExtractChoiceFilter`",
        "prompt": "`_template_yaml` `doc_to_text` (read at run time)",
        "equal": "each reply's letter, checked against `_create_payload`'s stop list, "
        "`postprocess_generated_text` and `extract_choice` executed from the pinned files through "
        "the CLI on 316 written shapes (0 differ)",
        "differs": "the stop strings are applied to the reply, not sent (the request stays the "
        "same as before); a server stopping at them returns the same text",
    }
    protocol_differences = {
        "generate": "reference: lm-eval's prompt, reply cut at its stop strings and read by its filter, failed calls wrong; "
        "grandrounds: our prompt and reading, failed calls excluded",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="exams",
            type=list[str],
            default=EXAMS,
            help="exams to ask (default all)",
            choices=EXAMS,
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.exams = chosen_subjects(self, EXAMS, "exams")

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (TEMPLATE, UTILS)

    def data_files(self, root: Path) -> list[Path]:
        return [p for _, p in exam_files(root, self.exams)]

    def records(self, root: Path) -> Iterator[Sample]:
        for exam, path in exam_files(root, self.exams):
            n = 0
            for no, row in iter_parquet_rows(path, COLUMNS):
                where = f"row {no}"
                for col in ("question", *"ABCDE"):
                    if not isinstance(row.get(col), str) or not row[col].strip():
                        raise DataError(path, where, f"empty or missing {col!r}")
                key = numbered_key(path, where, "answer", row.get("answer"), 5)
                n += 1
                yield self.make_sample(
                    f"{exam}-{no - 1}",
                    row["question"],
                    {k: row[k] for k in "ABCDE"},
                    key,
                    exam=exam,
                    year=str(row.get("year", "(none)")),
                    subject=str(row.get("subject") or ""),
                    period=row.get("period"),
                    q_number=row.get("q_number"),
                )
            if not n:
                raise DataError(path, None, "no questions in the file")

    def reference_prompt(self, sample: Sample) -> str:
        """lm-eval's ``doc_to_text`` (Jinja, read from the pinned task file) rendered with the item."""
        doc = {"question": sample.metadata["question"], **sample.choices}
        return jinja_doc_to_text(str(cached(yaml_value, TEMPLATE, "doc_to_text")), doc)

"""MedMCQA dev split (4,183 questions), as vendored by MIRAGE.

Format: ``dev.json`` is JSON Lines despite its name, with ``question,
opa..opd, cop`` (1-based: 1 -> opa -> A), ``subject_name, topic_name, id`` (uuid, used as the
sample id), ``choice_type`` (single|multi; scored as single-answer either way), ``exp``.
Score: accuracy, broken down by subject and choice type.

MedMCQA's authors publish no prompt for language models. Under ``--protocol reference`` a generated
answer follows openai/simple-evals (see medqa.py), and ``letter-loglik`` follows
lm-evaluation-harness's ``medmcqa`` task, which reads the same dev questions from
openlifescienceai/medmcqa's validation split (0-based ``cop``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    cached,
    exam_protocols,
)
from grandrounds.benchmarks.medqa import MIRAGE
from grandrounds.benchmarks.readers.exam_options import numbered_key
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.sources.upstream import LM_EVAL, python_appended_strings, python_string

_OPTION_FIELDS = {"A": "opa", "B": "opb", "C": "opc", "D": "opd"}

MEDMCQA_TASK = LmEvalTask(
    "medmcqa",
    LM_EVAL.file(
        "lm_eval/tasks/medmcqa/medmcqa.yaml",
        "fea85b5734521916178078ac5e1f7d250e235a69dc0e53e4f1b06c0e7273a319",
    ),
    LM_EVAL.file(
        "lm_eval/tasks/medmcqa/utils_medmcqa.py",
        "b9cbe33d51b95624b9317cab8ffb917b32c178aaa100fd9ce4aac0a9c467479b",
    ),
)


def medmcqa_context(sample: Sample) -> str:
    """lm-eval medmcqa's context (utils_medmcqa.doc_to_text builds ``prompt`` piece by piece): its first
    assignment with the question, the string appended per option in option order, then the string
    appended after the loop. The three strings are read from the file."""
    hooks = MEDMCQA_TASK.hooks
    assert hooks is not None
    head = cached(python_string, hooks, "prompt", within="doc_to_text")
    appended = cached(python_appended_strings, hooks, "prompt", within="doc_to_text")
    if len(appended) != 2:
        raise DataError(
            hooks.url,
            None,
            f"doc_to_text appends {len(appended)} strings to prompt, expected an option line and a closing one",
        )
    line, tail = appended
    options = "".join(
        line.render({"choice.upper()": k.upper(), "option": v}) for k, v in sample.choices.items()
    )
    return head.render({"doc['question']": sample.metadata["question"]}) + options + tail.render()


class MedMCQA(MultipleChoiceBenchmark):
    """MedMCQA dev set (the test split's labels are hidden)."""

    name: ClassVar[str] = "medmcqa"
    description: ClassVar[str] = (
        "MedMCQA dev split, 4,183 Indian medical entrance questions; accuracy"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{MIRAGE}/medmcqa/data/dev.json",
            "dev.json",
            "a2b5f53890f4e742b728378fb847bc5338088d48ea01218676379f587270af31",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("subject", "choice_type")
    lm_eval = MEDMCQA_TASK
    protocols = exam_protocols(MEDMCQA_TASK)

    def lm_eval_context(self, sample: Sample) -> str:
        return medmcqa_context(sample)

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.remote_files[0].filename)
        seen = IdSet(path)
        for no, rec in iter_jsonl(path):
            require_fields(path, no, rec, ("id", "question", "cop", *_OPTION_FIELDS.values()))
            key = numbered_key(path, no, "cop", rec["cop"], 4)
            choices = {k: str(rec[f]) for k, f in _OPTION_FIELDS.items()}
            meta: dict[str, Any] = {
                "subject": rec.get("subject_name") or "",
                "topic": rec.get("topic_name"),
                "choice_type": rec.get("choice_type") or "",
            }
            sid = seen.add(str(rec["id"]))
            yield self.make_sample(sid, rec["question"], choices, key, **meta)

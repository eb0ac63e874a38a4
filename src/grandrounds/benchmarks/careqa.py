"""CareQA, multiple choice (``careqa-mc``): 5,621 questions of the Spanish specialised-healthcare
training exams (MIR and sister exams, FSE 2020-2024: medicine, nursing, biology, chemistry,
psychology, pharmacology), English version, four options.

Data layout: the authors' Hugging Face dataset HPAI-BSC/CareQA (Arias-Duart et al. 2025; Apache-2.0),
config ``CareQA_en`` = the file ``CareQA_en.json`` (split ``test``), at commit 743ea64 as the
RemoteFile (sha256 not published, so not pinned). Fields per the dataset card: ``exam_id`` (the
question's number in its exam), ``question``, ``op1``..``op4``, ``cop`` (the correct option, 1-4),
``year``, ``category``, ``unique_id``. The card does not say whether the file is one JSON array or
JSON Lines (Hugging Face's json loader reads either), so both are read. A missing field, an empty
option or a ``cop`` outside 1-4 is a one-line DataError naming the file and record.

Protocols. The authors evaluate with their own harness and publish no prompt for this file; the
named peer is Medmarks' ``careqa`` environment (mode ``en``): ``reference`` sends its
``_build_mcq_prompt`` ("Question: ...", "Choices:", one ``{k}. {v}`` line per option, "Answer:"),
read at run time from environments/careqa/careqa.py at the pinned commit, with the boxed system
prompt of the verifiers release Medmarks runs and Medmarks' reading (the last ``\\boxed{}``, then
``multiple_choice_accuracy``; see :mod:`grandrounds.benchmarks.medmarks`); accuracy over
every question. ``grandrounds``: our prompt and reading, failed calls excluded. Breakdowns: category
and year. The open-ended set (``CareQA_en_open.json``) is ``careqa-open`` (:mod:`grandrounds.benchmarks.careqa_open`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import cached
from grandrounds.benchmarks.medmarks import (
    MEDMARKS,
    MedmarksExam,
    medmarks_fidelity,
    medmarks_protocols,
)
from grandrounds.benchmarks.readers.decoding import iter_lines
from grandrounds.benchmarks.readers.exam_options import numbered_key
from grandrounds.benchmarks.readers.json_docs import iter_json_array
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.sources.upstream import python_fstring

ENV = MEDMARKS.file(
    "environments/careqa/careqa.py",
    "c14a6bf56a4ecb1ba63ba17a8e74145e70fb55a7a158a8744bec51dadc2ddbd9",
)
FILE = RemoteFile(
    "https://huggingface.co/datasets/HPAI-BSC/CareQA/resolve/743ea64415b8a195eb3954bdaa19c222a96370ec/CareQA_en.json",
    "CareQA_en.json",
    None,
)
FIELDS = ("question", "op1", "op2", "op3", "op4", "cop")


def iter_json_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, record) of a file that is one JSON array of objects or JSON Lines (decided by its first character)."""
    first = next((line.lstrip()[:1] for _, line in iter_lines(path) if line.strip()), "")
    if first == "[":
        for i, rec in iter_json_array(path, "expected a JSON array of questions"):
            yield f"record {i}", rec
    else:
        for no, rec in iter_jsonl(path):
            yield f"line {no}", rec


class CareQAMC(MedmarksExam):
    """CareQA (English), four options; accuracy by category and year."""

    name: ClassVar[str] = "careqa-mc"
    description: ClassVar[str] = (
        "CareQA (Spanish FSE/MIR healthcare exams 2020-2024, English version), 5,621 questions, four options; "
        "accuracy by category and year (Medmarks' prompt under reference). Licence Apache-2.0"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    category_fields: ClassVar[tuple[str, ...]] = ("category", "year")
    protocols = medmarks_protocols(ENV.path, "_build_mcq_prompt", answer_format="boxed")
    env = ENV
    answer_format = "boxed"
    reference_fidelity = medmarks_fidelity(ENV.path, "_build_mcq_prompt", "boxed")

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, FILE.filename)
        seen = IdSet(path)
        for where, rec in iter_json_records(path):
            if not isinstance(rec, dict):
                raise DataError(path, where, "not a JSON object")
            require_fields(path, where, rec, FIELDS)
            key = numbered_key(path, where, "cop", rec["cop"], 4)
            sid = seen.add(str(rec.get("unique_id") or where.split()[-1]), where)
            choices = {letter: str(rec[f"op{i}"]) for i, letter in enumerate("ABCD", 1)}
            yield self.make_sample(
                sid,
                str(rec["question"]),
                choices,
                key,
                category=str(rec.get("category") or "(none)"),
                year=str(rec.get("year") or "(none)"),
                exam_id=str(rec.get("exam_id", "")),
            )
        if not len(seen):
            raise DataError(path, None, "no questions in the file")

    def reference_prompt(self, sample: Sample) -> str:
        """Medmarks careqa ``_build_mcq_prompt``: its f-string and its option line, read from the pinned file."""
        template = cached(
            python_fstring, ENV, within="_build_mcq_prompt", fields=("question", "formatted_opts")
        )
        line = cached(python_fstring, ENV, within="_build_mcq_prompt", fields=("k", "v"))
        options = "\n".join(line.render(k=k, v=v) for k, v in sample.choices.items())
        return template.render(question=sample.metadata["question"], formatted_opts=options)

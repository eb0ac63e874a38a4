"""SuperGPQA, Medicine discipline (``supergpqa-medicine``): the graduate-level questions of
SuperGPQA (M-A-P team, 2025) whose ``discipline`` is "Medicine", up to ten options (A-J).

Data layout: the authors' Hugging Face dataset m-a-p/SuperGPQA (ODC-BY; it includes items derived
from MedQA, MedMCQA and others, whose own licences apply), the single file ``SuperGPQA-all.jsonl``
(split ``train``, the only one) added at commit 05eef0b, sha256-pinned from its Git LFS pointer
(bbb7a0ba..., 23,957,173 bytes). JSON Lines, one question a line: ``uuid``, ``question``,
``options`` (a list of texts), ``answer`` (text), ``answer_letter``, ``discipline``, ``field``,
``subfield``, ``difficulty`` (easy/middle/hard), ``is_calculation``. Only lines whose ``discipline``
is "Medicine" are loaded, as Medmarks filters them; a medicine line with a missing field, fewer than
two or more than ten options, or an ``answer_letter`` outside its options is a one-line DataError
naming the file and line.

Protocols. ``reference`` is the named peer's, Medmarks' ``supergpqa_medicine`` environment,
zero-shot: ``ZERO_SHOT_PROMPT_TEMPLATE`` filled (Python ``str.format``, as there) with
``_build_question``'s text (the question, then one ``{k}) {v}`` line per option), both read at run
time from environments/supergpqa_medicine/supergpqa_medicine.py at the pinned commit; it is sent
with the boxed system prompt of the verifiers release Medmarks runs and read as Medmarks reads it
(the last ``\\boxed{}``, then ``multiple_choice_accuracy``; see :mod:`grandrounds.benchmarks.medmarks`). Medmarks' optional age jitter and five-shot
physics examples are not used. ``grandrounds``: our prompt and reading, failed calls excluded.
Breakdowns: field, subfield, difficulty.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import cached
from grandrounds.benchmarks.medmarks import (
    MEDMARKS,
    MedmarksExam,
    medmarks_fidelity,
    medmarks_protocols,
)
from grandrounds.benchmarks.readers.exam_options import options_from_list
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.sources.upstream import python_fstring, python_string

ENV = MEDMARKS.file(
    "environments/supergpqa_medicine/supergpqa_medicine.py",
    "7a47ea6ce291dd03dce3071e170937e40e763a639b2a2b63b7b9c7ca87aae6b1",
)
FILE = RemoteFile(
    "https://huggingface.co/datasets/m-a-p/SuperGPQA/resolve/05eef0be7d48bb605979bc70f9b95b1a9d417073/SuperGPQA-all.jsonl",
    "SuperGPQA-all.jsonl",
    "bbb7a0ba29a013301f913f02add57641de28bc6b0ceb64d0c6f8b5440910de9e",
)
FIELDS = (
    "uuid",
    "question",
    "options",
    "answer_letter",
    "discipline",
    "field",
    "subfield",
    "difficulty",
)
DISCIPLINE = "Medicine"


class SuperGPQAMedicine(MedmarksExam):
    """SuperGPQA's Medicine discipline, up to ten options; accuracy by field, subfield, difficulty."""

    name: ClassVar[str] = "supergpqa-medicine"
    description: ClassVar[str] = (
        "SuperGPQA, Medicine discipline (a subset of SuperGPQA-all.jsonl), up to 10 options; accuracy by field, "
        "subfield and difficulty (Medmarks' prompt under reference). Licence ODC-BY (sources' licences apply)"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    category_fields: ClassVar[tuple[str, ...]] = ("field", "subfield", "difficulty")
    protocols = medmarks_protocols(
        ENV.path, "ZERO_SHOT_PROMPT_TEMPLATE + _build_question", answer_format="boxed"
    )
    env = ENV
    answer_format = "boxed"
    reference_fidelity = medmarks_fidelity(
        ENV.path,
        "ZERO_SHOT_PROMPT_TEMPLATE + _build_question",
        "boxed",
        differs="Medmarks' optional age jitter and five-shot physics examples are not used; greedy "
        "here (no sampling settings are pinned); a failed call is wrong, as Medmarks' reward is 0",
    )

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, FILE.filename)
        seen = IdSet(path)
        for no, rec in iter_jsonl(path):
            if rec.get("discipline") != DISCIPLINE:
                continue
            require_fields(path, no, rec, FIELDS)
            choices = options_from_list(path, no, rec["options"])
            key = str(rec["answer_letter"]).strip().upper()
            if key not in choices:
                raise DataError(
                    path,
                    no,
                    f"answer_letter {rec['answer_letter']!r} is not one of the options {''.join(choices)}",
                )
            sid = seen.add(str(rec["uuid"]), f"line {no}")
            yield self.make_sample(
                sid,
                rec["question"],
                choices,
                key,
                field=str(rec["field"]),
                subfield=str(rec["subfield"]),
                difficulty=str(rec["difficulty"]),
                is_calculation=bool(rec.get("is_calculation")),
            )
        if not len(seen):
            raise DataError(path, None, f"no question of the discipline {DISCIPLINE!r} in the file")

    def reference_prompt(self, sample: Sample) -> str:
        """Medmarks' zero-shot template, ``.format``-ed with ``_build_question``'s text (read from the pinned file)."""
        template = cached(python_string, ENV, "ZERO_SHOT_PROMPT_TEMPLATE").text
        question = cached(
            python_fstring, ENV, within="_build_question", fields=("question", "opts")
        )
        line = cached(python_fstring, ENV, within="_build_question", fields=("k", "v"))
        opts = "\n".join(line.render(k=k, v=v) for k, v in sample.choices.items())
        return template.format(question.render(question=sample.metadata["question"], opts=opts))

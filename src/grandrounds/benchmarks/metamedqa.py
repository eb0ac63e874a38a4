"""MetaMedQA (Griot et al., Nature Communications 2025): 1,373 MedQA-USMLE-style questions for
metacognition, with fictional, malformed and modified items among them and up to six options
(some of them "I don't know" / "None of the above").

Data layout: the authors' Hugging Face dataset maximegmd/MetaMedQA (CC BY 4.0), split ``test`` =
``data/test-00000-of-00001.parquet`` at commit 29a264d (the upload the card's ``dataset_info``
describes; sha256 not published, so not pinned). Columns per that card: ``question``, ``options``
(a struct of ``A``..``F``, null where an item has fewer options), ``answer`` (the correct option's
text), ``answer_idx`` (its letter), ``kind``, ``meta_info``, ``metamap_phrases``. Read a row group
at a time with pyarrow; the options kept are the non-null, non-empty ones, which must be A.. in
order. A missing column, an item with fewer than two options or an ``answer_idx`` that is not one
of them is a one-line DataError naming the file and row.

Protocols. ``reference`` is the named peer's, Medmarks' ``metamedqa`` environment: its
``_build_prompt`` (the clinician instruction, "Question:", "Options:" with one ``{k}. {v}`` line
each, "Answer with ONLY the letter (...)"), read at run time from environments/metamedqa/metamedqa.py
at the pinned commit (every letter of the options struct, an empty one shown "E. None" as there),
no system prompt, and Medmarks' reading (the whole reply, ``multiple_choice_accuracy``).
Known difference: Medmarks keys an item by matching ``answer`` against the option texts and drops
items where none matches; here the key is ``answer_idx`` and every item is kept (the items where
the two disagree are flagged, ``answer_text_matches`` False in their metadata). ``grandrounds``: our prompt and
reading, failed calls excluded. Breakdown by ``kind``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
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
from grandrounds.benchmarks.readers.exam_options import check_options
from grandrounds.benchmarks.readers.parquet import iter_parquet_rows
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.sources.upstream import python_fstring

ENV = MEDMARKS.file(
    "environments/metamedqa/metamedqa.py",
    "fc9e47e46df8b33c1a6d73bad942284b4f642172dcb28d39d834c2c07545d9e3",
)
FILE = RemoteFile(
    "https://huggingface.co/datasets/maximegmd/MetaMedQA/resolve/29a264deec301d57823fdb2558b085f01e6b71f5"
    "/data/test-00000-of-00001.parquet",
    "test-00000-of-00001.parquet",
    None,
)
COLUMNS = ("question", "options", "answer", "answer_idx", "kind")


def kept_options(path: Path, where: str, options: Any) -> dict[str, str]:
    """The struct's non-empty options (an unused letter is null or empty)."""
    if not isinstance(options, Mapping):
        raise DataError(path, where, "'options' is not a struct of letters")
    return {k: str(v) for k, v in options.items() if v is not None and str(v).strip()}


class MetaMedQA(MedmarksExam):
    """MetaMedQA: accuracy by kind of item (Medmarks' prompt under reference)."""

    name: ClassVar[str] = "metamedqa"
    description: ClassVar[str] = (
        "MetaMedQA (Griot et al. 2025), 1,373 MedQA-style questions with fictional/malformed/modified items, "
        "up to six options; accuracy by kind. Licence CC BY 4.0"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    category_fields: ClassVar[tuple[str, ...]] = ("kind",)
    protocols = medmarks_protocols(ENV.path, "_build_prompt")
    env = ENV
    answer_format = "plain"
    reference_fidelity = medmarks_fidelity(
        ENV.path,
        "_build_prompt",
        "plain",
        prompt="`_build_prompt` read from the pinned file, every letter of the options struct shown "
        '(an empty one as "E. None", as Medmarks prints it; equal to the official function on the '
        "same row); no system prompt, as there",
        differs="Medmarks keys an item by matching `answer` with an option's text and drops items "
        "where none matches; here the key is `answer_idx` and every item is kept (flagged where the "
        "two disagree); greedy; a failed call is wrong",
    )

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, FILE.filename)
        n = 0
        for no, row in iter_parquet_rows(path, COLUMNS):
            where = f"row {no}"
            if not isinstance(row.get("question"), str) or not row["question"].strip():
                raise DataError(path, where, "empty 'question'")
            choices = kept_options(path, where, row["options"])
            key = str(row.get("answer_idx") or "").strip()
            check_options(path, where, choices, key, field="answer_idx")
            matches = str(row.get("answer") or "").strip().lower() == choices[key].strip().lower()
            n += 1
            yield self.make_sample(
                str(no - 1),
                row["question"],
                choices,
                key,
                kind=str(row.get("kind") or "(none)"),
                meta_info=str(row.get("meta_info") or ""),
                answer_text_matches=matches,
                # the struct's letters with no option, as Medmarks prints them ("E. None")
                absent_options={k: str(v) for k, v in row["options"].items() if k not in choices},
            )
        if not n:
            raise DataError(path, None, "no questions in the file")

    def reference_prompt(self, sample: Sample) -> str:
        """Medmarks metamedqa ``_build_prompt`` read from the pinned file: its option line and its
        prompt f-string; the letters line is the options' letters sorted and joined by ", " as there.
        Every letter of the data's options struct is shown, an empty one as Python prints its value
        ("E. None"), as Medmarks builds it from the dataset row."""
        template = cached(
            python_fstring, ENV, within="_build_prompt", fields=("question", "opts", "letters")
        )
        line = cached(python_fstring, ENV, within="_build_prompt", fields=("k", "v"))
        shown = {**sample.choices, **sample.metadata.get("absent_options", {})}
        opts = "\n".join(line.render(k=k, v=v) for k, v in sorted(shown.items()))
        return template.render(
            question=sample.metadata["question"],
            opts=opts,
            letters=", ".join(sorted(shown)),
        )

"""MedConceptsQA (Shoham & Rappoport 2024): questions on medical codes (ICD-9/ICD-10 diagnoses and
procedures, ATC drugs), four options, by vocabulary and difficulty (easy / medium / hard).

Data layout: the authors' Hugging Face dataset ofir408/MedConceptsQA (Apache-2.0) at commit 98c30d8:
one config per vocabulary and level, ``<vocab>_<level>/test-00000-of-00001.parquet`` and
``<vocab>_<level>/dev-00000-of-00001.parquet`` (the dev split: four examples per config, the
few-shot examples). Columns, as the named peer reads them: ``question``, ``option1``..``option4``,
``answer_id`` (the correct letter), ``answer`` (its text), ``vocab``, ``level``. ``--param subset``
picks one config (default ``icd10cm_easy``); the 820k-question ``all`` config is not offered (its
shard names are not established). A missing column, an empty question or option, or an
``answer_id`` outside A-D is a one-line DataError naming the file and row.

Protocols. The authors evaluate base models with their own harness and publish no chat prompt;
``reference`` is the named peer's, Medmarks' ``medconceptsqa`` environment (tmabraham/med-lm-envs @
7ee0452): its instruction line, ``--param shots`` dev examples of the same vocabulary and level
(default 4, as there) written with its XML answer line, the question with the option lines
stripped from the stem and "A. .." lines added, and "Answer:", all read at run time from the pinned
file; with Medmarks' ``XML_SYSTEM_PROMPT`` and read as Medmarks reads it (the first ``<answer>`` tag,
then ``multiple_choice_accuracy``; see :mod:`grandrounds.benchmarks.medmarks`). ``grandrounds``: our prompt and reading, failed calls excluded.
Breakdowns: vocabulary, level.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.mcq import cached
from grandrounds.benchmarks.medmarks import (
    MEDMARKS,
    MedmarksExam,
    medmarks_fidelity,
    medmarks_protocols,
)
from grandrounds.benchmarks.readers.parquet import iter_parquet_rows
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Sample
from grandrounds.sources.upstream import UpstreamFile, python_fstring, read_text

ENV = MEDMARKS.file(
    "environments/medconceptsqa/medconceptsqa.py",
    "9d9386f4324f2a008595620569e262a04acffc30c76554d26eeb430048fe876d",
)
COMMIT = "98c30d83762e51a397c9a7b0eeee6722e751da17"
VOCABS = ("atc", "icd10cm", "icd10proc", "icd9cm", "icd9proc")
SUBSETS = tuple(f"{v}_{lv}" for v in VOCABS for lv in ("easy", "medium", "hard"))
COLUMNS = ("question", "option1", "option2", "option3", "option4", "answer_id", "vocab", "level")


def remote(subset: str, split: str) -> RemoteFile:
    name = f"{split}-00000-of-00001.parquet"
    return RemoteFile(
        f"https://huggingface.co/datasets/ofir408/MedConceptsQA/resolve/{COMMIT}/{subset}/{name}",
        f"{subset}_{name}",
        None,
    )


def split_file(root: Path, subset: str, split: str) -> Path:
    """``root/<subset>/<split>-00000-of-00001.parquet`` (the dataset's layout) or, in the download cache,
    ``root/<subset>_<split>-00000-of-00001.parquet``."""
    name = f"{split}-00000-of-00001.parquet"
    published = root / subset / name
    return published if published.exists() else resolve_file(root, f"{subset}_{name}")


def stem_and_options(row: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    """The peer's ``_extract_question_and_options``: options 1-4 as A-D (empty ones left out), and the
    question without its lines that start like an option ("A." "B)" "C:" "D-")."""
    options = {
        k: row[f"option{i}"]
        for i, k in enumerate("ABCD", 1)
        if row.get(f"option{i}") not in ("", None)
    }
    starts = tuple(f"{k}{sep}" for k in "ABCD" for sep in ".):-")
    stem = "\n".join(
        ln
        for ln in str(row.get("question") or "").splitlines()
        if not ln.strip().startswith(starts)
    ).strip()
    return stem, options


def formatted(stem: str, options: Mapping[str, str]) -> str:
    """The peer's ``_format_stem_with_options``: the stem, then one "X. text" line per option, stripped."""
    return (stem + "\n" + "\n".join(f"{k}. {v}" for k, v in options.items())).strip()


def full_question_strings(f: UpstreamFile) -> list[str]:
    """The string constants of the peer's ``full_question = ...`` expression, in source order:
    [instruction, few-shot separator, "", closing cue]."""
    for node in ast.walk(ast.parse(read_text(f))):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "full_question"
        ):
            order = sorted(
                (
                    n
                    for n in ast.walk(node.value)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ),
                key=lambda n: (n.lineno, n.col_offset),
            )
            found = [str(n.value) for n in order]  # str constants (filtered above)
            if len(found) == 4:
                return found
    raise DataError(f.url, None, "no full_question expression of four strings in the upstream file")


class MedConceptsQA(MedmarksExam):
    """MedConceptsQA, one vocabulary/level config, four options; accuracy by vocabulary and level."""

    name: ClassVar[str] = "medconceptsqa"
    description: ClassVar[str] = (
        "MedConceptsQA (medical-code questions: ICD-9/10 diagnoses and procedures, ATC), one vocabulary/level config "
        "(--param subset), four options; accuracy (Medmarks' few-shot prompt under reference). Licence Apache-2.0"
    )
    category_fields: ClassVar[tuple[str, ...]] = ("vocab", "level")
    protocols = medmarks_protocols(
        ENV.path, "full_question (instruction, dev shots, question, 'Answer:')", answer_format="xml"
    )
    env = ENV
    answer_format = "xml"
    reference_fidelity = medmarks_fidelity(
        ENV.path,
        "full_question",
        "xml",
        equal="the reading is the one checked for HEAD-QA and CareQA (the same parser and "
        "multiple_choice_accuracy, executed from their pinned files through the CLI)",
    )
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="subset",
            type=str,
            default="icd10cm_easy",
            help="the vocabulary_level config to ask",
            choices=SUBSETS,
        ),
        Param(
            name="shots",
            type=int,
            default=4,
            help="dev examples of the same vocabulary and level before each question (Medmarks: 4)",
            choices=(0, 1, 2, 3, 4),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subset: str = self.param("subset")
        self.shots: int = self.param("shots")
        self.remote_files = (remote(self.subset, "test"),) + (  # type: ignore[misc]  # a class's files, narrowed to those the parameters choose
            (remote(self.subset, "dev"),) if self.shots else ()
        )

    def data_files(self, root: Path) -> list[Path]:
        if not root.is_dir():
            return [root]
        return [split_file(root, self.subset, "test")] + (
            [split_file(root, self.subset, "dev")] if self.shots else []
        )

    def _rows(self, path: Path) -> Iterator[tuple[str, dict[str, Any], str, dict[str, str]]]:
        for no, row in iter_parquet_rows(path, COLUMNS):
            where = f"row {no}"
            stem, options = stem_and_options(row)
            if (
                not stem
                or list(options) != list("ABCD")
                or not all(str(v).strip() for v in options.values())
            ):
                raise DataError(path, where, "empty question, or not four non-empty options")
            if str(row["answer_id"]).strip() not in options:
                raise DataError(path, where, f"answer_id {row['answer_id']!r} is not A, B, C or D")
            yield where, row, stem, {k: str(v) for k, v in options.items()}

    def records(self, root: Path) -> Iterator[Sample]:
        path = split_file(root, self.subset, "test") if root.is_dir() else resolve_file(root, "")
        shots = self._shots(root) if self.shots else ()
        n = 0
        for _where, row, stem, options in self._rows(path):
            n += 1
            yield self.make_sample(
                str(row.get("question_id", n - 1))
                if row.get("question_id") is not None
                else str(n - 1),
                stem,
                options,
                str(row["answer_id"]).strip(),
                vocab=str(row["vocab"]),
                level=str(row["level"]),
                shots=[[q, a] for k, q, a in shots if k == (row["vocab"], row["level"])],
            )
        if not n:
            raise DataError(path, None, "no questions in the file")

    def _shots(self, root: Path) -> list[tuple[tuple[str, str], str, str]]:
        """((vocab, level), formatted question, answer letter) of the first ``shots`` dev rows per (vocab, level)."""
        if not root.is_dir():
            raise DataError(
                root,
                None,
                f"--param shots={self.shots} needs the dataset folder (with {self.subset}/dev-00000-of-00001.parquet)",
            )
        dev = split_file(root, self.subset, "dev")
        out: list[tuple[tuple[str, str], str, str]] = []
        for _, row, stem, options in self._rows(dev):
            key = (row["vocab"], row["level"])
            if sum(1 for s in out if s[0] == key) < self.shots:
                out.append((key, formatted(stem, options), str(row["answer_id"]).strip()))
        return out

    def reference_prompt(self, sample: Sample) -> str:
        """The peer's ``full_question``: instruction, few-shot block (+ separator), the question, the cue."""
        instruction, separator, _none, cue = cached(full_question_strings, ENV)
        shot = cached(
            python_fstring,
            ENV,
            within="_create_few_shot_data",
            fields=("formatted_question", "row['answer_id']"),
        )
        if "<answer>" not in shot.render(**{"formatted_question": "", "row['answer_id']": ""}):
            raise DataError(ENV.url, None, "the first few-shot f-string is not the XML one")
        block = "".join(
            shot.render(**{"formatted_question": q, "row['answer_id']": a}).replace("  ", "")
            for q, a in sample.metadata.get("shots") or ()
        )
        question = formatted(sample.metadata["question"], sample.choices)
        return instruction + block + (separator if block else "") + question + cue

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> Any:
        """The default summary without the dev examples repeated on every question."""
        from dataclasses import replace

        kept, graded = super().summarize(sample, grade, options)
        return replace(
            kept, metadata={k: v for k, v in kept.metadata.items() if k != "shots"}
        ), graded

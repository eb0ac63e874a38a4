"""CMExam (Liu et al., NeurIPS 2023): the test split of questions from the Chinese National Medical
Licensing Examination, five options, some with several correct answers, annotated by disease group,
clinical department, medical discipline, area of competency and difficulty.

Data layout: the authors' repository williamliujl/CMExam at fadb22c, ``data/test_with_annotations.csv``
(the RemoteFile; sha256 not published, so not pinned). Columns, as the authors' code and statistics
notebook read them: ``Question``, ``Options`` (one option a line, "A 文本": the letter, whitespace, the
text), ``Answer`` (the correct letters, e.g. "A" or "ABD"), ``Explanation``, ``Disease Group``,
``Area of Competency``, ``Clinical Department``, ``Medical Discipline``, ``Difficulty level`` (1-5).
A row with no ``Answer`` is skipped, as the authors' generate_prompt.py skips it; a missing column,
an empty question, options not lettered A.. in order, or an answer letter that is not an option is a
one-line DataError naming the file and line. The README limits the data to academic use
(**commercial use prohibited**); the code is Apache-2.0.

Protocols. The authors' per-question prompt is their template "1" (src/preprocess/prompt_templates.py:
the question and the ``Options`` cell as written), read at run time; their reading is
``parse_options`` of src/evaluation/evaluate_lora_result.py (graders/readings_peers.py: every option
whose letter or first word occurs in the reply) and their accuracy compares the letters read with the
key exactly, over every question. Their GPT evaluation asks five questions per call
(evaluate_gpt_result.py), which this per-question harness does not reproduce; generation settings
are not fixed by the per-question code (greedy, 1,024 tokens: ours). ``grandrounds``: our Chinese
prompt, which never says how many answers an item has, and our tolerant reading (several letters read
as a set), failed calls excluded. Multiple-answer items are always answered by generation.
Breakdowns: the five annotations.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, cached
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.records import AnswerMode, Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours
from grandrounds.sources.upstream import CMEXAM, UpstreamFile, read_text

PROMPTS = CMEXAM.file(
    "src/preprocess/prompt_templates.py",
    "58f0e67aff650a62a109d6f2437f29c7f1d09de92f3dd675e8577523613777a0",
)
EVALUATE = CMEXAM.file(
    "src/evaluation/evaluate_lora_result.py",
    "1a4d90188b0d457006b11b58a94fb33db0327ed656bd8f9854f19dc8a63c03c2",
)
FILE = RemoteFile(
    CMEXAM.url("data/test_with_annotations.csv"),
    "test_with_annotations.csv",
    None,
)
ANNOTATIONS = {
    "Disease Group": "disease_group",
    "Area of Competency": "competency",
    "Clinical Department": "department",
    "Medical Discipline": "discipline",
    "Difficulty level": "difficulty",
}
COLUMNS = ("Question", "Options", "Answer", *ANNOTATIONS)

_NEUTRAL_ZH = (
    "请回答下面的选择题，正确选项可能有一个或多个，请选出全部正确选项。最后一行请写成“答案：X”，"
    "X 为所选选项的字母（多个则连写，如 AB；可选 {letters}）。\n\n{question}\n\n{options}"
)
_PROMPTS = {
    "generate": "CMExam src/preprocess/prompt_templates.py template 1 (read at run time)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-eval task)",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,  # the per-question code fixes no sampling settings: greedy, 1,024 tokens (ours)
    extraction="generate: evaluate_lora_result.py parse_options (letter or first word of an option anywhere in the reply); "
    "exact match of the letters with the key; log-prob modes: argmax",
    aggregation="accuracy over every question: a failed or unreadable answer counts wrong",
    source=f"{CMEXAM.repo}@{CMEXAM.commit[:7]} src/preprocess/prompt_templates.py, src/evaluation/evaluate_lora_result.py",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: our tolerant reading, several letters read as a set; log-prob modes: argmax",
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": {**_PROMPTS, "generate": "ours (does not say how many answers)"}},
)


def first_template(f: UpstreamFile) -> str:
    """The first string assigned to ``template['prompt']`` in the authors' prompt_templates.py (template "1")."""
    for node in ast.parse(read_text(f)).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t = node.targets[0]
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Name)
                and t.value.id == "template"
                and isinstance(t.slice, ast.Constant)
                and t.slice.value == "prompt"
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                return node.value.value
    raise DataError(f.url, None, "no template['prompt'] string in the upstream file")


def parse_options(path: Path, line: int, cell: str) -> dict[str, str]:
    """The ``Options`` cell's lines "X text" as letter -> text; letters must run A.. in order."""
    choices: dict[str, str] = {}
    for raw in cell.replace("\r\n", "\n").split("\n"):
        if not raw.strip():
            continue
        parts = raw.strip().split(None, 1)
        if len(parts) != 2 or parts[0] != LETTERS[len(choices) : len(choices) + 1]:
            raise DataError(
                path,
                line,
                f"option line {raw!r} is not 'X text' with the next letter {LETTERS[len(choices)]}",
            )
        choices[parts[0]] = parts[1]
    if len(choices) < 2:
        raise DataError(path, line, "fewer than two options")
    return choices


class CMExam(MultipleChoiceBenchmark):
    """CMExam test split: Chinese licensing-exam questions, single or multiple answers."""

    name: ClassVar[str] = "cmexam"
    description: ClassVar[str] = (
        "CMExam (Chinese National Medical Licensing Examination), test split, five options, some items with several "
        "answers; accuracy by disease group, department, discipline, competency, difficulty. Data for academic use "
        "only: commercial use prohibited"
    )
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    category_fields: ClassVar[tuple[str, ...]] = tuple(ANNOTATIONS.values())
    template_overrides = {"generate_zh": _NEUTRAL_ZH, "generate_multi_zh": _NEUTRAL_ZH}
    reference_reading = "cmexam"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "reference: the authors' template and parse_options (any option letter or first word in the reply), "
        "failed calls wrong; grandrounds: our prompt and reading, failed calls excluded",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (PROMPTS, EVALUATE)

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, FILE.filename)
        n = 0
        for no, row in iter_csv(path, COLUMNS):
            if any(row.get(c) is None for c in COLUMNS):
                raise DataError(path, no, "the row's number of cells differs from the header's")
            answer = row["Answer"].strip()
            if not answer:
                continue  # no key: skipped, as the authors' generate_prompt.py skips it
            if not row["Question"].strip():
                raise DataError(path, no, "empty 'Question'")
            choices = parse_options(path, no, row["Options"])
            if any(ch not in choices for ch in answer) or len(set(answer)) != len(answer):
                raise DataError(
                    path,
                    no,
                    f"Answer {answer!r} is not a set of the option letters {''.join(choices)}",
                )
            meta: dict[str, Any] = {key: _label(row[col]) for col, key in ANNOTATIONS.items()}
            n += 1
            yield self.make_sample(
                str(n - 1),
                row["Question"],
                choices,
                "".join(sorted(answer)),
                multi=len(answer) > 1,
                key=answer,
                line=no,
                **meta,
            )
        if not n:
            raise DataError(path, None, "no questions with an answer in the file")

    def reference_prompt(self, sample: Sample) -> str:
        """Template "1" ``.format``-ed with the question and the options as the ``Options`` cell writes them."""
        options = "\n".join(f"{k} {v}" for k, v in sample.choices.items())
        return cached(first_template, PROMPTS).format(sample.metadata["question"], options)


def _label(value: str) -> str:
    """An annotation as a breakdown key: the cell, with pandas' float form of a whole number ("1.0") as "1"."""
    v = value.strip()
    if v.endswith(".0") and v[:-2].isdigit():
        v = v[:-2]
    return v or "(none)"

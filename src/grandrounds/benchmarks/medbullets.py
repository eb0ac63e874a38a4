"""MedBullets: 308 USMLE Step 2/3-style clinical questions with expert explanations, 4 or 5 options.

Data: HanjieChen/ChallengeClinicalQA @ ef3c9da, ``medbullets/medbullets_op4.csv`` (options A-D) and
``medbullets/medbullets_op5.csv`` (the same questions with a fifth option, A-E), from Chen et al.,
"Benchmarking Large Language Models on Answering and Explaining Challenging Medical Questions"
(arXiv 2402.18060). Both files are sha256-pinned and checked when downloaded. The repository
publishes no licence; the questions come from Medbullets' public Step 2/3 question bank.
``--param options=4`` picks the four-option file, ``options=5`` (the default) the five-option one,
which is the file MedHELM runs.

Format: a CSV with a header, columns ``link, question, opa, opb, opc, opd, [ope], answer_idx``
(the key's letter), ``answer`` (the key's text, checked against the keyed option) and
``explanation`` (the expert explanation, kept in ``metadata["explanation"]`` with the question's
``link``, so reports and the viewer can show it beside an answer). Cells hold newlines; a bad row
is a one-line error naming the file and the row's first line.

Sample ids come from the link (``qid-217175`` for a medbullets.com question, ``bitly-47KxMQs`` for
a short link, else the link itself). Both files hold the same 308 links with the same stem, key
text and explanation (op5 adds one option and orders them differently, so key letters differ), so
an op4 and an op5 answer to the same question share an id. As published, 10 stems appear twice
under different links (4 of those pairs identical but for the link); they are kept, as every peer
scores them. 116 stems refer to a figure ("Figure A") the files do not include; they are asked as
text, as the authors and MedHELM ask them.

Protocols. No official harness prompt for MedBullets is among the pinned reference files
(``$GRANDROUNDS_REFERENCE``). The authors' prompts
live in their run scripts and MedHELM's in crfm-helm's run specs; neither is pinned here, so
neither wording is reproduced, and none is invented in their name. ``reference`` fixes what those
published evaluations share and what can be stated without their text: zero-shot, one option
letter per question, greedy decoding (MedHELM's temperature 0; the authors' scripts leave their
APIs' defaults), and accuracy over every question, a failed or unreadable answer counting wrong
(MedHELM's exact match over all instances, the authors' accuracy over the file). The prompt and
the reading are ours under both protocols (``TEMPLATES`` in :mod:`grandrounds.benchmarks.mcq`,
:mod:`grandrounds.graders.choice_extract`); ``grandrounds`` differs in aggregation only: failed
calls are left out of the denominator and counted. There is no lm-evaluation-harness task, so no
``letter-loglik`` mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.benchmarks.readers.lines import read_rows
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours

REPO = "HanjieChen/ChallengeClinicalQA"
COMMIT = "ef3c9da03fc17f46fbd95ce860e0a55c51ed3606"
_BASE = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/medbullets"
#: The published file of each variant, by its number of options.
FILES: dict[int, RemoteFile] = {
    4: RemoteFile(
        f"{_BASE}/medbullets_op4.csv",
        "medbullets_op4.csv",
        "f35c24c7940fd3fd28594a4081e66bded3718cd98b4491d0f307d34ceb945893",
    ),
    5: RemoteFile(
        f"{_BASE}/medbullets_op5.csv",
        "medbullets_op5.csv",
        "7da4b1397418b4bd15074066ea6a377ac44a599794a959cd8ebc76937ea597e6",
    ),
}
_OPTION_COLUMNS = {"A": "opa", "B": "opb", "C": "opc", "D": "opd", "E": "ope"}

_PROMPTS = {
    "generate": "ours (no official prompt is pinned)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-evaluation-harness task)",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,  # temperature 0 as MedHELM's multiple-choice adapter; 1,024 tokens of room
    extraction="generate: ours (no official reading is pinned); log-prob modes: argmax",
    aggregation="accuracy over every question: a failed or unreadable answer counts wrong "
    "(MedHELM's exact match over all instances; the authors' accuracy over the file)",
    source="convention of MedHELM (crfm-helm, medbullets) and Chen et al. 2024 (arXiv 2402.18060); "
    "their prompt texts are not pinned here, so ours is sent",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction=REFERENCE.extraction,
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": _PROMPTS},
)


def question_id(link: str) -> str:
    """A short, stable id from a question's link: ``qid-N`` (medbullets.com), ``bitly-CODE``, else the link."""
    link = link.strip()
    parts = urlsplit(link)
    qid = parse_qs(parts.query).get("qid")
    if qid and qid[0].strip():
        return f"qid-{qid[0].strip()}"
    code = parts.path.strip("/")
    if parts.netloc.lower() == "bit.ly" and code and "/" not in code:
        return f"bitly-{code}"
    return link


class MedBullets(MultipleChoiceBenchmark):
    """MedBullets op4 or op5 (308 questions each); accuracy with a Wilson CI."""

    name: ClassVar[str] = "medbullets"
    description: ClassVar[str] = (
        "MedBullets USMLE Step 2/3-style, 308 questions with expert explanations, 5 options (or 4); accuracy"
    )
    #: Both published files; an instance keeps only its variant's (what a run downloads).
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(FILES.values())
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    reference_reading = "ours"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "same prompt, reading and temperature; reference counts a failed call wrong (every question "
        "in the denominator), grandrounds leaves it out and counts it",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="options",
            type=int,
            default=5,
            help="5: medbullets_op5.csv, options A-E (as MedHELM runs it); 4: medbullets_op4.csv, A-D",
            choices=(4, 5),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.n_options: int = self.param("options")
        self.letters = "ABCDE"[: self.n_options]
        self.file = FILES[self.n_options]
        self.remote_files = (self.file,)  # type: ignore[misc]  # the variant's file only

    def reference_prompt(self, sample: Sample) -> str:
        """No official prompt is pinned: ours under both protocols."""
        return self.render(sample, "generate")

    def data_files(self, root: Path) -> list[Path]:
        return [resolve_file(root, self.file.filename)]

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.file.filename)
        option_cols = tuple(_OPTION_COLUMNS[k] for k in self.letters)
        columns = ("link", "question", *option_cols, "answer_idx", "answer", "explanation")
        refused = (
            {"ope": "a fifth option (the op5 file); pass --param options=5"}
            if self.n_options == 4
            else {}
        )
        seen = IdSet(path)
        for no, row in read_rows(path, columns, refused):
            sample = self._sample(path, no, row)
            seen.add(sample.id)
            yield sample
        if not seen:
            raise DataError(path, None, "no questions in the file")

    def _sample(self, path: Path, no: int, row: dict[str, str]) -> Sample:
        for col in ("link", "question", *(_OPTION_COLUMNS[k] for k in self.letters)):
            if not row[col].strip():
                raise DataError(path, no, f"empty {col!r}")
        key = row["answer_idx"].strip()
        if (
            len(key) != 1 or key not in self.letters
        ):  # one letter: "AB" is a substring, not an option
            raise DataError(
                path,
                no,
                f"answer_idx {row['answer_idx']!r} is not one of the options {', '.join(self.letters)}",
            )
        choices = {k: row[_OPTION_COLUMNS[k]] for k in self.letters}
        if row["answer"].strip() != choices[key].strip():
            raise DataError(
                path,
                no,
                f"answer text {row['answer'][:60]!r} is not option {key} ({choices[key][:60]!r})",
            )
        return self.make_sample(
            question_id(row["link"]),
            row["question"],
            choices,
            key,
            link=row["link"].strip(),
            explanation=row["explanation"],
        )

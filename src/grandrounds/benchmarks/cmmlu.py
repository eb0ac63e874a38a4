"""CMMLU's seven medical subjects, test split (1,333 questions, four options), with the dev split's
five examples per subject for few-shot prompts.

Data: the authors' ``haonan-li/CMMLU`` at d6e7b71, ``data/test/<subject>.csv`` and
``data/dev/<subject>.csv`` (sha256-pinned; header ``,Question,A,B,C,D,Answer``, the first column
an unnamed row index). The subjects are the seven MedEvalKit treats as medical: anatomy,
clinical_knowledge, college_medicine, genetics, nutrition, traditional_chinese_medicine, virology.
**Licence: CC BY-NC-SA 4.0, non-commercial use only.**

Protocols:

- ``reference``: the authors' prompt builder (src/mp_utils.py, read at run time): ``gen_prompt``'s
  answer-only header with the subject's Chinese name (``name_en2zh`` of the repository's
  categories.py, which is not pinned, so the seven names are written here as facts), ``--param
  shots`` dev examples (``format_example`` with their answers; default 0, the authors also report
  5-shot), then the question as ``format_example`` writes it ("题目：", "A. ..." lines, "答案是："),
  sent as one user message, greedy. Reading: ``extract_choice`` (:func:`~grandrounds.graders.
  exam_readings.cmmlu_choice`) except that where it would pick a random letter the reply is
  counted unextracted (wrong, and counted). Aggregation as ``get_results``: accuracy per subject,
  the headline their unweighted mean over the subjects asked. Known difference: the official code
  reads the CSVs with pandas, which turns an all-numeric option column into numbers ("1.50" is
  shown as "1.5"); the file's text is shown here.
- ``letter-loglik``: lm-evaluation-harness's cmmlu template (``_default_template_yaml``:
  ``doc_to_text``, choices A-D), zero-shot; lm-eval's per-subject files add a description line
  (the same header as the authors') that is not among the pinned files, so it is not sent.
- ``grandrounds``: our prompt and tolerant reading, failed calls excluded, micro accuracy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, RunOptions, chosen_subjects
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    accuracy_by,
    cached,
    jinja_doc_to_text,
    macro_average,
)
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Cell, Grade, Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours
from grandrounds.sources.upstream import (
    CMMLU,
    LM_EVAL,
    UpstreamFile,
    python_appended_strings,
    python_assigned_strings,
    python_string,
    yaml_value,
)

REPO, COMMIT = CMMLU.repo, CMMLU.commit
#: Subject -> its Chinese name (CMMLU src/categories.py ``name_en2zh``, a fact of the benchmark).
SUBJECTS: dict[str, str] = {
    "anatomy": "解剖学",
    "clinical_knowledge": "临床知识",
    "college_medicine": "大学医学",
    "genetics": "遗传学",
    "nutrition": "营养学",
    "traditional_chinese_medicine": "中医中药",
    "virology": "病毒学",
}
_SHA = {
    ("test", "anatomy"): "b0488d7a394473ba9f3d6ba92a4a88f9c5b7738bc812b8aaea057218c9cf909c",
    (
        "test",
        "clinical_knowledge",
    ): "f203dff6c9ae45611ba380f2a60453c2d1440303e9d3304c8cb42c1886edd49c",
    (
        "test",
        "college_medicine",
    ): "aa24898b813f7c9567e8ed4cda70ddc79082630bb6bc00939018d65b1de70988",
    ("test", "genetics"): "54988038f3ac9e07a337411d393315429e92ae97b76fab24ebcda0c0c65ecc78",
    ("test", "nutrition"): "7e407acf9be29fcad7e73796bfec196af3c3c16d48f44eb82332a887eb097941",
    (
        "test",
        "traditional_chinese_medicine",
    ): "dfbb4f311649576bb20e165cfdff0d1d5633d64e156eaa5bb57373d491418b16",
    ("test", "virology"): "ac411d3d869e86bce60b8aab78e568fb74f607da2ac188ce11dcf55eb018b7ba",
    ("dev", "anatomy"): "5e2d407357f3ad71d267d615ebdf0dba2ff720548cf504f87026c8e15990d82e",
    (
        "dev",
        "clinical_knowledge",
    ): "7197883c51ee9f42fd89372d6dcae809adcdef37e89718640fb1356abfeca540",
    ("dev", "college_medicine"): "9f54c3fc7e9fab4e1583afb6be85f21e9b8b83a2bcbaff336df68e2d4296ee04",
    ("dev", "genetics"): "cca416a0efc91c77af33cb0e9674853e1ff31b2573d09f94b1b9b36e1bbae2b9",
    ("dev", "nutrition"): "8b318b013c5e17074c7efdf11d67a2f7fd55f1ae457bf77c48d110f6e4ee3f6e",
    (
        "dev",
        "traditional_chinese_medicine",
    ): "345875ca92e284db9a55cb697fdccce270efdd588d7f60d9276a125ea6ed366d",
    ("dev", "virology"): "049ffecfb092b2a6d3299e67737c3a0c468a2e21968adaabb29771e4d2f3197c",
}
MP_UTILS = CMMLU.file(
    "src/mp_utils.py",
    "8aa1fb28989c84770b1fc69cc9436645fc316d6f32b78db48a2b3f7f30d79faa",
)
CMMLU_TASK = LmEvalTask(
    "cmmlu (default template)",
    LM_EVAL.file(
        "lm_eval/tasks/cmmlu/_default_template_yaml",
        "6560a228576d111fc6a0204646db05dec8a2010327f85b7b02ebadd3e8ba90c5",
    ),
)


def remote(split: str, subject: str) -> RemoteFile:
    """A subject's CSV of ``split`` at the pinned commit, cached as ``<split>_<subject>.csv``."""
    url = CMMLU.url(f"data/{split}/{subject}.csv")
    return RemoteFile(url, f"{split}_{subject}.csv", _SHA[(split, subject)])


def find_split_file(root: Path, split: str, name: str) -> Path:
    """``name`` of ``split`` under ``root``: the cache's ``<split>_<name>``, the repository's
    ``<split>/<name>`` or ``data/<split>/<name>``; the first that exists (else the repository layout)."""
    for path in (root / f"{split}_{name}", root / split / name, root / "data" / split / name):
        if path.exists():
            return path
    return root / split / name


def read_exam_csv(
    path: Path, question: str, answer: str, extra: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) for each row of a four-option exam CSV (question, A-D, answer columns): every
    field non-empty but the options' (a blank option is kept), the answer one of A-D."""
    if not path.exists():
        raise DataError(path, None, "file not found")
    n = 0
    for no, row in iter_csv(path, (question, "A", "B", "C", "D", answer, *extra)):
        if None in row or any(v is None for v in row.values()):
            raise DataError(path, no, "the row's number of cells differs from the header's")
        if not row[question].strip():
            raise DataError(path, no, f"empty {question!r}")
        if row[answer].strip() not in ("A", "B", "C", "D"):
            raise DataError(path, no, f"{answer!r} must be A, B, C or D, got {row[answer]!r}")
        n += 1
        yield no, row
    if not n:
        raise DataError(path, None, "no questions in the file")


def subjects_param(all_subjects: Sequence[str]) -> Param:
    return Param(
        name="subjects",
        type=list[str],
        default=tuple(all_subjects),
        help="subjects to ask (default all)",
        choices=tuple(all_subjects),
    )


def macro_headline(pairs: Sequence[tuple[Sample, Grade]], values: Sequence[Any]) -> Cell:
    """The unweighted mean of per-subject accuracies (no CI for a mean of means)."""
    groups = accuracy_by(pairs, "subject", values)
    n = sum(c.n for c in groups.values())
    return Cell(
        score=macro_average(groups), n=n, n_unscored=sum(c.n_unscored for c in groups.values())
    )


SHOTS = Param(
    name="shots",
    type=int,
    default=0,
    help="dev examples before each question (the authors' 0- or 5-shot)",
    choices=(0, 1, 2, 3, 4, 5),
)

_PROMPTS = {
    "generate": "CMMLU src/mp_utils.py gen_prompt + format_example (answer-only)",
    "letter-loglik": "lm-eval cmmlu _default_template_yaml doc_to_text / doc_to_choice (zero-shot, no description)",
    "text-loglik": "ours",
    "next-token": "ours",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,  # the pinned file fixes no sampling settings: greedy, 1,024 tokens (ours)
    extraction="generate: mp_utils.extract_choice (its random-letter fallback counted unextracted); log-prob modes: argmax",
    aggregation="get_results: accuracy per subject (every question; failed = wrong), headline their unweighted mean",
    source=f"{REPO}@{COMMIT[:7]} src/mp_utils.py; EleutherAI/lm-evaluation-harness@{CMMLU_TASK.yaml.commit[:7]} cmmlu",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
    aggregation="micro accuracy over scored questions: failed calls excluded and counted; subject mean beside it",
    settings={"prompt": {**_PROMPTS, "generate": "ours"}},
)


class CMMLUMedical(MultipleChoiceBenchmark):
    """CMMLU anatomy, clinical knowledge, college medicine, genetics, nutrition, TCM, virology."""

    name: ClassVar[str] = "cmmlu-medical"
    description: ClassVar[str] = (
        "CMMLU medical subjects (7), test split, 1,333 Chinese questions; accuracy (mean over subjects). "
        "Licence CC BY-NC-SA 4.0: non-commercial use only"
    )
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(
        remote(sp, s) for sp in ("test", "dev") for s in SUBJECTS
    )
    category_fields: ClassVar[tuple[str, ...]] = ("subject",)
    lm_eval = CMMLU_TASK
    reference_reading = "cmmlu"
    published_figures: ClassVar[str] = (
        "CMMLU's extract_choice scores a reply it reads no letter in by an unseeded random.randint(0, 3): "
        "the paper's figures carry that luck, and no run can repeat it. grandrounds leaves such replies "
        "unextracted (wrong under reference); the result's reference_fallback says how many there were and "
        "how many right answers chance would have added (a quarter of them)."
    )
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "reference: the authors' prompt and extract_choice, failed calls wrong, mean over subjects; "
        "grandrounds: our prompt and reading, failed calls excluded, micro accuracy",
        "logprob": "same prompt and argmax; reference: failed answers wrong, mean over subjects; grandrounds: excluded, micro",
    }
    parameters: ClassVar[tuple[Param, ...]] = (subjects_param(tuple(SUBJECTS)), SHOTS)

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subjects = chosen_subjects(self, tuple(SUBJECTS))
        self.shots: int = self.param("shots")
        self.remote_files = tuple(  # type: ignore[misc]  # a class's files, narrowed to those the parameters choose
            remote(sp, s)
            for sp in ("test", "dev")
            for s in self.subjects
            if sp == "test" or self.shots
        )

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (MP_UTILS, CMMLU_TASK.yaml)

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [
            find_split_file(root, sp, f"{s}.csv")
            for sp in ("test", "dev")
            for s in self.subjects
            if sp == "test" or self.shots
        ]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        tests = (
            [root]
            if root.is_file()
            else [find_split_file(root, "test", f"{s}.csv") for s in self.subjects]
        )
        for path in tests:
            subject = path.stem.removeprefix("test_")
            if subject not in SUBJECTS:
                raise DataError(
                    path,
                    None,
                    f"not a CMMLU medical subject file (expected one of {', '.join(SUBJECTS)})",
                )
            shots = self._shots(root, path, subject)
            for i, (_no, row) in enumerate(read_exam_csv(path, "Question", "Answer")):
                choices = {k: row[k] for k in "ABCD"}
                yield self.make_sample(
                    f"{subject}-{i}",
                    row["Question"],
                    choices,
                    row["Answer"].strip(),
                    subject=subject,
                    subject_zh=SUBJECTS[subject],
                    shots=shots,
                )

    def _shots(self, root: Path, test: Path, subject: str) -> list[dict[str, str]]:
        """The subject's first ``shots`` dev rows (question, options, answer), as the prompt shows them."""
        if not self.shots:
            return []
        base = root if root.is_dir() else test.parent.parent
        dev = find_split_file(base, "dev", f"{subject}.csv")
        rows = [r for _, r in read_exam_csv(dev, "Question", "Answer")][: self.shots]
        if len(rows) < self.shots:
            raise DataError(
                dev, None, f"{len(rows)} dev questions, --param shots asks for {self.shots}"
            )
        return [
            {"question": r["Question"], **{k: r[k] for k in "ABCD"}, "answer": r["Answer"].strip()}
            for r in rows
        ]

    def reference_prompt(self, sample: Sample) -> str:
        """mp_utils.gen_prompt (answer-only header, the dev examples) + format_example of the question."""
        header = cached(python_assigned_strings, MP_UTILS, "prompt", within="gen_prompt")[
            1
        ]  # [0] is the CoT header
        text = header.render({"name_en2zh[subject]": SUBJECTS[sample.metadata["subject"]]})
        for shot in sample.metadata.get("shots") or ():
            text += _format_example(shot["question"], {k: shot[k] for k in "ABCD"}, shot["answer"])
        return text + _format_example(sample.metadata["question"], sample.choices, None)

    def lm_eval_context(self, sample: Sample) -> str:
        doc = {"Question": sample.metadata["question"], **sample.choices}
        return jinja_doc_to_text(str(cached(yaml_value, CMMLU_TASK.yaml, "doc_to_text")), doc)

    def headline_cell(
        self, pairs: Sequence[tuple[Sample, Grade]], values: Sequence[Any], options: RunOptions
    ) -> Cell:
        if options.protocol != "reference":
            return super().headline_cell(pairs, values, options)
        return macro_headline(pairs, values)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        micro = super().headline_cell(pairs, values, options).score
        return {
            "macro_accuracy": macro_average(accuracy_by(pairs, "subject", values)),
            "micro_accuracy": micro,
            "headline": "mean over subjects" if options.protocol == "reference" else "micro",
        }

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> Any:
        """The default summary without the dev examples repeated on every question."""
        kept, graded = super().summarize(sample, grade, options)
        return replace(
            kept, metadata={k: v for k, v in kept.metadata.items() if k != "shots"}
        ), graded


def _format_example(question: str, choices: Mapping[str, str], answer: str | None) -> str:
    """mp_utils.format_example without chain of thought: ``prompt_start`` + question, each option as the
    appended ``"\\n{}. {}".format(...)``, the answer cue, and with ``answer`` its appended line."""
    start = cached(python_string, MP_UTILS, "prompt_start", within="format_example")
    option, _cot, cue, with_answer = cached(
        python_appended_strings, MP_UTILS, "prompt", within="format_example"
    )
    text = start.render() + question
    text += "".join(
        option.render({"choices[j]": k, "df.iloc[idx, j + 1]": v}) for k, v in choices.items()
    )
    text += cue.render()
    if answer is not None:
        text += with_answer.render({"df.iloc[idx, k + 1]": answer})
    return text

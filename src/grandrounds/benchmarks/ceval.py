"""C-Eval's four medical subjects, validation split (113 questions with answers, four options), with
the dev split's five examples per subject (and their explanations) for few-shot prompts.

Data: the C-Eval release zip (``ceval-exam.zip``; the official hkust-nlp/ceval repository holds code
only and HF cannot be reached), as committed in ``hiyouga/LLaMA-Factory`` at 465ee81
(``evaluation/ceval/ceval.zip``); the CSVs are its members ``val/<subject>_val.csv`` and
``dev/<subject>_dev.csv``, unchanged (sha256-pinned here; a run without ``--data`` downloads the
zip, checked against its sha256, and reads the members out of it). Subjects: basic_medicine
基础医学, clinical_medicine 临床医学, physician 医师资格, veterinary_medicine 兽医学, the subjects
named after medicine (no peer defines a C-Eval medical subset). The test split's answers are not in
this zip, so the val split is scored, as lm-eval's ``ceval-valid`` does. **Licence: CC BY-NC-SA 4.0,
non-commercial use only.**

Protocols:

- ``reference``: the authors' ChatGPT evaluator (code/evaluator_series/evaluators/chatgpt.py and
  eval.py, read at run time), temperature 0. Zero-shot (eval.py's default, ``--param shots=0``): a
  system message and the question prefixed by the same header; ``--param shots=5``: the dev
  examples as user/assistant turns (the header on the first), then the question. The subject is
  named as eval.py passes it, the English id (``physician``), not the Chinese name. Reading:
  zero-shot ``extract_ans`` and its last element; few-shot ``exact_match`` of the whole reply with
  the key. No aggregation is published (eval.py prints one subject's accuracy): micro accuracy over
  every question, a failed call wrong, the subjects in the breakdown and their mean in ``extra``.
- ``letter-loglik``: lm-evaluation-harness's ceval-valid template (``_default_ceval_yaml``),
  zero-shot and without the per-subject description line (not pinned).
- ``grandrounds``: our prompt and tolerant reading, failed calls excluded.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Prompt, RemoteFile, RunOptions, chosen_subjects
from grandrounds.benchmarks.cmmlu import (
    find_split_file,
    read_exam_csv,
    subjects_param,
)
from grandrounds.benchmarks.mcq import (
    LmEvalTask,
    MultipleChoiceBenchmark,
    accuracy_by,
    cached,
    jinja_doc_to_text,
    macro_average,
)
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    CEVAL,
    LM_EVAL,
    UpstreamFile,
    python_appended_strings,
    python_assigned_strings,
    python_message_contents,
    yaml_value,
)

SUBJECTS: dict[str, str] = {
    "basic_medicine": "基础医学",
    "clinical_medicine": "临床医学",
    "physician": "医师资格",
    "veterinary_medicine": "兽医学",
}
ZIP = RemoteFile(
    "https://raw.githubusercontent.com/hiyouga/LLaMA-Factory/465ee8119aa489a41bee0b01b3c105a2f3dd137f/evaluation/ceval/ceval.zip",
    "ceval.zip",
    "68786deeea68ff089c56563ee48fab8160da857b77b913437bb504d681fd8e20",
)
CHATGPT = CEVAL.file(
    "code/evaluator_series/evaluators/chatgpt.py",
    "8d60eb1a3a8d7a138c537eff1d0233e113f392ba20bd504445fe1d768817c0bd",
)
EVAL = CEVAL.file(
    "code/evaluator_series/eval.py",
    "f4f162af7d6d06d339da09dcaec92e540978b7c744ac8be94821ddec83143a11",
)
CEVAL_TASK = LmEvalTask(
    "ceval-valid (default template)",
    LM_EVAL.file(
        "lm_eval/tasks/ceval/_default_ceval_yaml",
        "7b47db17de7063d13d771cd6004c1cda11bd5069c088bc020c1301c191a340ea",
    ),
)

_PROMPTS = {
    "generate": "C-Eval evaluators/chatgpt.py (system message, header, question, 答案：)",
    "letter-loglik": "lm-eval ceval _default_ceval_yaml doc_to_text / doc_to_choice (zero-shot, no description)",
    "text-loglik": "ours",
    "next-token": "ours",
}
REFERENCE = Protocol(
    name="reference",
    answer=Generation(
        temperature=0.0, max_tokens=1024
    ),  # chatgpt.py: temperature=0.; no max_tokens (1,024, ours)
    extraction="generate: chatgpt.py extract_ans, last match (zero-shot) or exact_match of the reply (few-shot); log-prob: argmax",
    aggregation="accuracy over every question (failed or unreadable = wrong); per-subject accuracy and their mean beside it",
    source=f"{CEVAL.repo}@{CEVAL.commit[:7]} code/evaluator_series (eval.py, evaluators/chatgpt.py); "
    f"EleutherAI/lm-evaluation-harness@{CEVAL_TASK.yaml.commit[:7]} ceval-valid",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": {**_PROMPTS, "generate": "ours"}},
)


class CEvalMedical(MultipleChoiceBenchmark):
    """C-Eval basic medicine, clinical medicine, physician and veterinary medicine, val split."""

    name: ClassVar[str] = "ceval-medical"
    description: ClassVar[str] = (
        "C-Eval medical subjects (4), val split, 113 Chinese questions; accuracy. Licence CC BY-NC-SA 4.0: non-commercial use only"
    )
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (ZIP,)
    category_fields: ClassVar[tuple[str, ...]] = ("subject",)
    lm_eval = CEVAL_TASK
    reference_reading = "ceval"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "reference: C-Eval's ChatGPT prompt and reading, failed calls wrong; grandrounds: our prompt and "
        "tolerant reading, failed calls excluded (the other figure re-reads these same replies)",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        subjects_param(tuple(SUBJECTS)),
        Param(
            name="shots",
            type=int,
            default=0,
            help="dev examples before each question (eval.py: 0, or 5 with --few_shot)",
            choices=(0, 1, 2, 3, 4, 5),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subjects = chosen_subjects(self, tuple(SUBJECTS))
        self.shots: int = self.param("shots")
        self.reference_reading = "ceval-fewshot" if self.shots else "ceval"  # type: ignore[misc]  # per --param shots

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (CHATGPT, EVAL, CEVAL_TASK.yaml)

    # ---- data --------------------------------------------------------------------------
    def data_files(self, root: Path) -> list[Path]:
        """The zip (``root`` itself or ``root/ceval.zip``), else the val (and dev) CSVs."""
        if root.is_file():
            return [root]
        if (root / ZIP.filename).exists():
            return [root / ZIP.filename]
        names = [("val", f"{s}_val.csv") for s in self.subjects] + [
            ("dev", f"{s}_dev.csv") for s in self.subjects if self.shots
        ]
        return [find_split_file(root, split, name) for split, name in names]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        first = self.data_files(root)[0]
        base = (
            _unzipped(first)
            if first.suffix.lower() == ".zip"
            else root
            if root.is_dir()
            else root.parent.parent
        )
        for subject in self.subjects:
            if root.is_file() and root.suffix.lower() != ".zip":  # one subject's val CSV
                if root.name != f"{subject}_val.csv":
                    continue
                path = root
            else:
                path = find_split_file(base, "val", f"{subject}_val.csv")
            shots = self._shots(base, subject)
            for no, row in read_exam_csv(path, "question", "answer"):
                yield self.make_sample(
                    f"{subject}-{row.get('id') or no}",
                    row["question"],
                    {k: row[k] for k in "ABCD"},
                    row["answer"].strip(),
                    subject=subject,
                    subject_zh=SUBJECTS[subject],
                    shots=shots,
                )

    def _shots(self, base: Path, subject: str) -> list[dict[str, str]]:
        if not self.shots:
            return []
        dev = find_split_file(base, "dev", f"{subject}_dev.csv")
        rows = [r for _, r in read_exam_csv(dev, "question", "answer", ("explanation",))][
            : self.shots
        ]
        if len(rows) < self.shots:
            raise DataError(
                dev, None, f"{len(rows)} dev questions, --param shots asks for {self.shots}"
            )
        return [
            {"question": r["question"], **{k: r[k] for k in "ABCD"}, "answer": r["answer"].strip()}
            for r in rows
        ]

    # ---- prompts -----------------------------------------------------------------------
    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        """The exam layer's prompt; the reference generated answer is chatgpt.py's conversation."""
        if options.protocol != "reference" or self.effective_mode(sample, options) != "generate":
            return super().prompt(sample, options, history)
        shown, _ = self.prepare(sample, options)
        return Prompt(reference_messages(shown))

    def reference_prompt(self, sample: Sample) -> str:
        """The last user message of :func:`reference_messages` (the question as asked)."""
        return reference_messages(sample)[-1].text

    def lm_eval_context(self, sample: Sample) -> str:
        doc = {"question": sample.metadata["question"], **sample.choices}
        return jinja_doc_to_text(str(cached(yaml_value, CEVAL_TASK.yaml, "doc_to_text")), doc)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        return {
            "macro_accuracy": macro_average(accuracy_by(pairs, "subject", values)),
            "headline": "micro",
        }

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> Any:
        """The default summary without the dev examples repeated on every question."""
        kept, graded = super().summarize(sample, grade, options)
        return replace(
            kept, metadata={k: v for k, v in kept.metadata.items() if k != "shots"}
        ), graded


def _question(row: dict[str, str]) -> str:
    """ChatGPT_Evaluator.format_example without the answer: the question, each option as its
    appended f-string, then the appended answer cue (both read from chatgpt.py)."""
    option, cue = cached(python_appended_strings, CHATGPT, "example", within="format_example")
    text = row["question"] + "".join(
        option.render({"choice": k, "line[f'{choice}']": row[k]}) for k in "ABCD"
    )
    return text + cue.render()


def reference_messages(sample: Sample) -> tuple[Message, ...]:
    """chatgpt.py ``eval_subject`` (no chain of thought): zero-shot, its system message and the header
    prefixed to the question; few-shot, ``generate_few_shot_prompt``'s system message, the examples as
    user/assistant turns with the header on the first, then the question. The subject is named by
    its English id, as eval.py passes ``args.subject``."""
    subject = sample.metadata["subject"]
    question = _question({"question": sample.metadata["question"], **sample.choices})
    shots = sample.metadata.get("shots") or []
    if not shots:
        system = cached(python_message_contents, CHATGPT, within="eval_subject")[0][1]
        header = cached(
            python_assigned_strings, CHATGPT, "full_prompt[-1]['content']", within="eval_subject"
        )[0]
        return (
            Message("system", system.render(subject_name=subject)),
            Message(
                "user",
                header.render({"subject_name": subject, "full_prompt[-1]['content']": question}),
            ),
        )
    system = cached(python_message_contents, CHATGPT, within="generate_few_shot_prompt")[0][1]
    header = cached(
        python_assigned_strings, CHATGPT, "tmp[0]['content']", within="generate_few_shot_prompt"
    )[0]
    turns: list[Message] = [Message("system", system.render(subject=subject))]
    for i, shot in enumerate(shots):
        example = _question(shot)
        turns.append(
            Message(
                "user",
                header.render({"subject": subject, "tmp[0]['content']": example})
                if i == 0
                else example,
            )
        )
        turns.append(Message("assistant", shot["answer"]))
    return (*turns, Message("user", question))


def _unzipped(path: Path) -> Path:
    """The zip's val/ and dev/ CSVs extracted into a folder beside the download cache (once per zip
    content), so they are read like a local copy."""
    from grandrounds.core.hashing import file_sha256
    from grandrounds.sources.downloads import cache_dir

    target = cache_dir() / "ceval-medical" / f"unzipped-{file_sha256(path)[:16]}"
    if (target / ".done").exists():
        return target
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                parts = Path(info.filename).parts
                if (
                    len(parts) >= 2
                    and parts[-2] in ("val", "dev")
                    and parts[-1].endswith(".csv")
                    and ".." not in parts
                ):
                    out = target / parts[-2] / parts[-1]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(zf.read(info))
    except zipfile.BadZipFile as e:
        raise DataError(path, None, f"not a readable zip ({e})") from None
    (target / ".done").write_text("")
    return target

"""MedXpertQA, text subset: 2,450 expert-level questions with ten options (A-J), in two kinds,
Reasoning (1,861) and Understanding (589); Tsinghua C3I, arXiv 2501.18362.

Data (``--param subset``):

- ``full`` (default): the 2,450 questions as the MedAgentsBench authors copied them,
  xk-huang/medagents-benchmark @ 36ee14d ``data/medxpertqa-r/test.jsonl`` (Reasoning) and
  ``data/medxpertqa-u/test.jsonl`` (Understanding), both sha256-pinned. Records ``realidx`` (the
  official id, ``Text-N``), ``question`` (the stem, then "\\nAnswer Choices: (A) ... (J) ..." as the
  official file writes it), ``options {A..J}``, ``answer_idx``, ``answer``. This copy drops the
  official ``medical_task`` and ``body_system``; the kind comes from the file.
- ``sampled``: the authors' own 244-question sample, TsinghuaC3I/MedXpertQA @ f21247d
  ``eval/data/medxpertqa_sampled/input/medxpertqa_sampled_text_input.jsonl`` (sha256-pinned), in the
  official layout ``id, question, options [{letter, content}], label [letter], medical_task,
  body_system, question_type``: the set for cross-checks with the authors' prompts and reading.
- ``official``: the authors' full text file (same layout, ``eval/data/medxpertqa/input/
  medxpertqa_text_input.jsonl`` at that commit); no sha256 is known here, so the first download's
  is recorded and later ones are checked against it.

``--data`` takes a folder holding the files under their cache names, their repositories' paths, or
a mirror of the data folder, or one file of either layout.

Protocol. The authors' zero-shot chain of thought (eval/main.py ``zero_shot_cot``) is two turns: the
system message and "Q: {question}\\nA: Let's think step by step.", then, after the model's reasoning,
"Therefore, among A through J, the answer is" in the same conversation; the letter is read from the
second reply only (eval/utils.py ``answer_cleansing``), compared with the label (``set_correctness``),
and accuracy is reported per kind (eval.ipynb). The text of the system message, both user turns and
the trigger is read from the pinned ``eval/config/prompt_templates.py`` at run time; generation as
``eval/model/api_agent.py`` for a model without its own settings: temperature 0, 2,048 tokens, seed 0.

Each question is therefore a two-turn dialogue here: the reasoning turn (id ``Text-N:reasoning``)
and the answer turn (id ``Text-N``), asked in order in one conversation. The headline and its
breakdowns count answer turns only; the reasoning turn is graded too (read as an answer, so the viewer
shows whether the reasoning already named the key), and its accuracy is given beside the headline as
``reasoning_turn_accuracy``. Both protocols send the authors' prompts; ``grandrounds`` reads the answer
turn our way and leaves failed calls out of the denominator, so the two figures come from the same
replies. Only generated answers are offered: the authors' protocol has no log-probability form.
``--shuffle-options`` rebuilds the "Answer Choices:" line in the shown order (the layout Medmarks
uses for its shuffled runs). Quirk of the data: in two questions (Text-2230, Text-2270) that line
disagrees with the ``options`` field (an option's text differs, or is missing from the line); the
question is sent as written, as the authors send it, and the key is the file's letter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, Prompt, RemoteFile, RunOptions
from grandrounds.benchmarks.mcq import (
    MultipleChoiceBenchmark,
    accuracy_by,
    pair_grades,
    protocol_values,
)
from grandrounds.benchmarks.readers.exam_options import check_options
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Grade, Message, Sample
from grandrounds.scoring.cells import accuracy_cell
from grandrounds.sources.medxpertqa import (
    MAIN,
    MEDXPERTQA,
    PROMPT_TEMPLATES,
    UTILS,
    system_ref,
    template,
)
from grandrounds.sources.protocols import Generation, Protocol
from grandrounds.sources.upstream import MEDAGENTSBENCH_DATA, UpstreamFile

_MAB = MEDAGENTSBENCH_DATA.url("data")
_OFFICIAL = MEDXPERTQA.url("eval/data")
#: subset -> (kind of the file's questions or None when each record says, its public file, where it sits in
#: its repository and in a data mirror).
FILES: dict[str, tuple[tuple[str | None, RemoteFile, tuple[str, ...]], ...]] = {
    "full": (
        (
            "Reasoning",
            RemoteFile(
                f"{_MAB}/medxpertqa-r/test.jsonl",
                "medxpertqa-r.jsonl",
                "9b87b291f5eba0a192c46b3b9acc5f7e2f9f85f1b7d57e9389a75d46d510d6a2",
            ),
            (
                "medxpertqa-r/test.jsonl",
                "data/medxpertqa-r/test.jsonl",
                "medagentsbench/medxpertqa-r/test.jsonl",
            ),
        ),
        (
            "Understanding",
            RemoteFile(
                f"{_MAB}/medxpertqa-u/test.jsonl",
                "medxpertqa-u.jsonl",
                "968974f3d1df977b93dd61ee6749709e5bf17ffd088f8b54973bd65fa168ec76",
            ),
            (
                "medxpertqa-u/test.jsonl",
                "data/medxpertqa-u/test.jsonl",
                "medagentsbench/medxpertqa-u/test.jsonl",
            ),
        ),
    ),
    "sampled": (
        (
            None,
            RemoteFile(
                f"{_OFFICIAL}/medxpertqa_sampled/input/medxpertqa_sampled_text_input.jsonl",
                "medxpertqa_sampled_text_input.jsonl",
                "f8dc8c041501352c3788296f7916cebc1cb01463374696c24efb60d37a7ddbf9",
            ),
            (
                "eval/data/medxpertqa_sampled/input/medxpertqa_sampled_text_input.jsonl",
                "official-sampled/medxpertqa_sampled_text_input.jsonl",
            ),
        ),
    ),
    "official": (
        (
            None,
            RemoteFile(
                f"{_OFFICIAL}/medxpertqa/input/medxpertqa_text_input.jsonl",
                "medxpertqa_text_input.jsonl",
            ),
            ("eval/data/medxpertqa/input/medxpertqa_text_input.jsonl",),
        ),
    ),
}
_KINDS = {"Reasoning", "Understanding"}
REASONING, ANSWER = "reasoning", "answer"

_PROMPTS = {
    "generate": "MedXpertQA eval/config/prompt_templates.py zero-shot CoT (two turns, eval/main.py zero_shot_cot)"
}
REFERENCE = Protocol(
    name="reference",
    # eval/model/api_agent.py: temperature 0 (main.py's default), max_tokens 2048, seed 0
    answer=Generation(temperature=0.0, max_tokens=2048, system=system_ref()),
    extraction="eval/utils.py answer_cleansing (zero_shot) on the answer turn: text after the trigger or ' answer is ', "
    "first standalone option letter; set_correctness",
    aggregation="accuracy over every question (a failed or unreadable answer counts wrong), by Reasoning/Understanding as eval.ipynb",
    source=f"{MEDXPERTQA.repo}@{MEDXPERTQA.commit[:7]} eval/main.py, eval/utils.py, eval/config/prompt_templates.py",
    settings={"prompt": _PROMPTS, "turns": 2},
)
GRANDROUNDS = Protocol(
    name="grandrounds",
    answer=REFERENCE.answer,
    extraction="our tolerant reading (choice_extract.py) of the answer turn",
    aggregation="accuracy over answered questions: failed calls excluded and counted",
    source="ours (the authors' prompts, our reading)",
    settings={"prompt": _PROMPTS, "turns": 2},
)


def question_text(stem: str, choices: dict[str, str]) -> str:
    """The official question layout: the stem, then every option as "(X) text" on one "Answer Choices:" line."""
    return f"{stem}\nAnswer Choices: " + " ".join(f"({k}) {v}" for k, v in choices.items())


class MedXpertQA(MultipleChoiceBenchmark):
    """MedXpertQA Text: 2,450 questions (or the authors' 244-question sample); accuracy by kind."""

    name: ClassVar[str] = "medxpertqa-text"
    description: ClassVar[str] = (
        "MedXpertQA Text, 2,450 expert questions, 10 options, Reasoning/Understanding (MedAgentsBench's copy; "
        "--param subset=sampled: the authors' 244); the authors' two-turn zero-shot CoT; accuracy"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(rf for _, rf, _ in FILES["full"])
    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate",)
    reference_reading = "medxpertqa"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "same prompts, turns and temperature; reference reads the answer turn as answer_cleansing does and "
        "counts failed calls wrong, grandrounds reads it our way and excludes them (the same replies read twice)",
        "logprob": "not offered",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="subset",
            type=str,
            default="full",
            help="full: 2,450 (MedAgentsBench's copy, pinned); sampled: the authors' 244; "
            "official: the authors' full file (no pinned sha256)",
            choices=tuple(FILES),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.subset: str = self.param("subset")
        self.files = FILES[self.subset]
        self.remote_files = tuple(rf for _, rf, _ in self.files)  # type: ignore[misc]  # a class's files, narrowed to those the parameters choose

    # ---- data ---------------------------------------------------------------------------
    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        out = []
        for _, rf, places in self.files:
            found = next((root / p for p in (rf.filename, *places) if (root / p).is_file()), None)
            if found is None:
                raise DataError(
                    root / rf.filename,
                    None,
                    f"file not found (expected {rf.filename} or {places[0]} under {root})",
                )
            out.append(found)
        return out

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        kinds: list[str | None] = [k for k, _, _ in self.files] if root.is_dir() else [None]
        seen = IdSet(root)
        for kind, path in zip(kinds, self.data_files(root)):
            for no, rec in iter_jsonl(path):
                question = self._question(path, no, rec, kind)
                seen.add(question[0], f"{path.name}:{no}")
                yield from self._turns(*question)
        if not len(seen):
            raise DataError(root, None, "no questions")

    def _question(
        self, path: Path, no: int, rec: dict[str, Any], kind: str | None
    ) -> tuple[str, str, dict[str, str], str, dict[str, Any]]:
        """(id, question text, options, key, metadata) of one record of either layout."""
        if "realidx" in rec:  # MedAgentsBench's copy
            require_fields(path, no, rec, ("realidx", "question", "options", "answer_idx"))
            options, key, meta = rec["options"], rec["answer_idx"], {}
            kind = kind or _kind_from_name(path)
            sid = rec["realidx"]
        else:  # the authors' layout
            require_fields(path, no, rec, ("id", "question", "options", "label", "question_type"))
            opts, label = rec["options"], rec["label"]
            if not isinstance(opts, list) or not all(
                isinstance(o, dict) and {"letter", "content"} <= o.keys() for o in opts
            ):
                raise DataError(path, no, "field 'options' must be a list of {letter, content}")
            if not isinstance(label, list) or len(label) != 1:
                raise DataError(
                    path, no, f"field 'label' must hold exactly one letter (got {label!r})"
                )
            options, key, sid = {o["letter"]: o["content"] for o in opts}, label[0], rec["id"]
            kind = rec["question_type"]
            meta = {f: rec[f] for f in ("medical_task", "body_system") if rec.get(f)}
        if not isinstance(sid, str) or not sid.strip():
            raise DataError(path, no, f"id {sid!r} is not a non-empty string")
        if not isinstance(options, dict):
            raise DataError(path, no, "field 'options' must map letters to option texts")
        check_options(path, no, options, key)
        if kind not in _KINDS:
            raise DataError(path, no, f"question type {kind!r} is not Reasoning or Understanding")
        if not isinstance(rec["question"], str) or not rec["question"].strip():
            raise DataError(path, no, "empty question")
        return sid, rec["question"], options, key, {"question_type": kind, **meta}

    def _turns(
        self, sid: str, question: str, options: dict[str, str], key: str, meta: dict[str, Any]
    ) -> Iterator[Sample]:
        for turn, stage in enumerate((REASONING, ANSWER)):
            sample = self.make_sample(
                f"{sid}:{REASONING}" if stage == REASONING else sid,
                question,
                options,
                key,
                stage=stage,
                **meta,
            )
            yield replace(sample, group=sid, turn=turn)

    # ---- prompts ------------------------------------------------------------------------
    def shown_question(self, sample: Sample) -> str:
        """The question as sent: the file's text, or with its options line rebuilt when they were shuffled."""
        if not sample.metadata.get("permutation"):
            return sample.metadata["question"]
        stem = sample.metadata["question"].rsplit("\nAnswer Choices:", 1)[0]
        return question_text(stem, dict(sample.choices))

    def first_turn(self, sample: Sample) -> str:
        """eval/main.py zero_shot_cot, stage 1: the CoT prompt with the stripped question."""
        return template("zero_shot_cot_prompt").text.format(
            question=self.shown_question(sample).strip()
        )

    def trigger(self, sample: Sample) -> str:
        """Stage 2: the trigger with the first and last option letters (chr(65) .. chr(65 + n - 1))."""
        letters = list(sample.choices)
        return template("zero_shot_cot_trigger").text.format(start=letters[0], end=letters[-1])

    def reference_prompt(self, sample: Sample) -> str:
        return self.first_turn(sample)

    def generate_prompt(self, sample: Sample, protocol: str) -> str:
        return self.first_turn(sample)

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        self.effective_mode(sample, options)  # generate only
        shown, _ = self.prepare(sample, options)
        if sample.metadata["stage"] == REASONING:
            return Prompt((self.user_message(shown, self.first_turn(shown)),))
        if len(history) != 1:
            raise DataError(
                sample.id,
                None,
                "the answer turn needs the reasoning turn's reply (asked in one conversation)",
            )
        ((prev, reasoning),) = history
        first, _ = self.prepare(prev, options)
        return Prompt(
            (
                self.user_message(first, self.first_turn(first)),
                Message("assistant", reasoning.strip()),
                Message("user", self.trigger(shown)),
            )
        )

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (PROMPT_TEMPLATES, MAIN, UTILS)

    # ---- aggregation --------------------------------------------------------------------
    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """The exam layer's accuracy over answer turns, broken down by kind (and by task and body
        system where the file labels them), with the reasoning turns' accuracy beside it."""
        answer = [
            (s, g) for s, g in pair_grades(samples, grades) if s.metadata.get("stage") != REASONING
        ]
        reasoning = [
            (s, g) for s, g in pair_grades(samples, grades) if s.metadata.get("stage") == REASONING
        ]
        agg = super().aggregate([s for s, _ in answer], [g for _, g in answer], options)
        mine = protocol_values(answer, options.protocol)
        breakdown = {"question_type": accuracy_by(answer, "question_type", mine)}
        for field in ("medical_task", "body_system"):
            if any(field in s.metadata for s, _ in answer):
                breakdown[field] = accuracy_by(answer, field, mine)
        extra = dict(agg.extra)
        extra["reasoning_turn_accuracy"] = (
            accuracy_cell(protocol_values(reasoning, options.protocol)).score if reasoning else None
        )
        extra["turns"] = "two per question (reasoning, then the answer trigger); n counts questions"
        return Aggregate(agg.metric, agg.score, agg.ci95, agg.n, agg.n_unscored, breakdown, extra)


def _kind_from_name(path: Path) -> str | None:
    """Reasoning or Understanding from a MedAgentsBench file's folder name (medxpertqa-r / -u), else None."""
    text = str(path).lower()
    return (
        "Reasoning"
        if "medxpertqa-r" in text
        else "Understanding"
        if "medxpertqa-u" in text
        else None
    )

"""Med-HALT, Fake Questions Test only: 1,858 nonsensical medical questions the model should decline.

Data: medhalt/medhalt @ 3dfe1e4 (the authors), ``medhalt/datasets/reasoning_fake.csv``, sha256-pinned:
``id, subject_name, topic_name, split_type, dataset, len, year, exam_name, question, options`` (the options
a Python dict literal ``{'0': ..., '5': 'I do not know'}``, read with ``ast.literal_eval``). No answer
column: the right answer is to decline. PARTIAL: Med-HALT's other tests (FCT, NOTA, the IR memory
tests) are not included. No licence is published; the questions derive from MedMCQA, HEAD-QA and
MedQA (US, Taiwan).

Protocols (:mod:`grandrounds.sources.medhalt`). ``reference``: the authors' prompt, read at run time
from the pinned ``prompts.json`` and ``shots.json`` and put together as ``get_full_prompt('fake', 2, 'v0')``
does (their two examples are drawn unseeded; here with ``--param shots_seed``), their generation
defaults (model.py: temperature 0.2, top-p 0.95, 64 new tokens) and ``reasoning_fake_eval``'s rule
(``eval_full.py``): right when the answered option's text holds a refusal term; accuracy = right / (right
+ wrong) and the official score (right - 0.25 wrong) / 100, replies without an answer counted apart.
``grandrounds``: our prompt and reading (an option number; right when it is the "I do not know" or
"none of the above" option), temperature 0. Generated answers only: the score reads which option
text was chosen, there is no keyed letter for log-likelihood modes. Breakdown by source exam.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import (
    Aggregate,
    Benchmark,
    Prompt,
    RemoteFile,
    RunOptions,
    resolve_file,
)
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import accuracy_cell, group_cells
from grandrounds.sources.medhalt import (
    CORRECT_SCORE,
    EVAL_FULL,
    INCORRECT_SCORE,
    MEDHALT,
    PROMPTS,
    PROTOCOLS,
    SCORE_DIVISOR,
    SHOTS,
    item_text,
    prompt_head,
)

CSV = RemoteFile(
    MEDHALT.url("medhalt/datasets/reasoning_fake.csv"),
    "reasoning_fake.csv",
    "dda54bf6dd053854af5878acd44ed3ff8ae57dcfa8b202c3164cf853ad0faefe",
)
COLUMNS = ("id", "subject_name", "dataset", "year", "question", "options")

#: Our prompt (the grandrounds protocol).
TEMPLATE = (
    "Answer the following medical multiple-choice question. Some questions are nonsensical or about things "
    "that do not exist; if so, or if you do not know, choose the option that says so rather than guess.\n\n"
    '{question}\n\n{options}\n\nEnd your reply with one line "Answer: N", where N is the number of your option.'
)


class MedHALT(Benchmark):
    """Med-HALT reasoning_fake (FQT): share of nonsensical questions the model declines."""

    name: ClassVar[str] = "med-halt"
    description: ClassVar[str] = (
        "Med-HALT Fake Questions Test (reasoning_fake only; FCT, NOTA and memory tests not included), 1,858 "
        "nonsensical questions to decline; accuracy and the official score. No licence published"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (CSV,)
    protocols = PROTOCOLS
    reference_fidelity = {
        "reference": "the authors' `evaluate.py` (`clean_output`) and `eval_full.py` "
        f"(`reasoning_fake_eval`), {MEDHALT.short}",
        "reader": "`cop` as `clean_output` actually reads it: its `np.isnan` on a string raises, so "
        "every reply goes to its key/value regex (the last `cop`, cut at the first comma)",
        "prompt": "`get_full_prompt('fake', 2, 'v0')` from the pinned prompts.json and shots.json",
        "equal": "each reply's grade, checked against `clean_output` and `reasoning_fake_eval` "
        "executed from the pinned files through the CLI on 280 written shapes (0 differ)",
        "differs": "the reference is broken: its literal-dict branch never runs. The figure had the "
        "reply's dict been read whole, as the code intends, is reported beside the headline "
        "(`reference_literal`); the two shot examples are drawn with a seed here (unseeded there)",
    }
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="shots_seed",
            type=int,
            default=0,
            help="seed drawing the reference prompt's two examples (the authors draw them unseeded)",
        ),
        Param(
            name="prompt_version",
            type=str,
            default="v0",
            help="the authors' prompt version (prompts.json; their runs use v0)",
            choices=("v0", "v1", "v2"),
        ),
    )

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, CSV.filename)
        seen = IdSet(path)
        for line, row in iter_csv(path, COLUMNS):
            cells = {k: row.get(k) or "" for k in COLUMNS}
            if not cells["id"].strip() or not cells["question"].strip():
                raise DataError(path, line, "empty 'id' or 'question'")
            try:
                options = ast.literal_eval(cells["options"])
            except (ValueError, SyntaxError):
                raise DataError(
                    path, line, f"options {cells['options'][:60]!r} are not a Python dict literal"
                ) from None
            if (
                not isinstance(options, dict)
                or not options
                or not all(isinstance(v, str) for v in options.values())
            ):
                raise DataError(path, line, "options are not a non-empty dict of option texts")
            options = {str(k): v for k, v in options.items()}
            sid = seen.add(cells["id"].strip(), line)
            body = "\n".join(f"{k}. {v}" for k, v in options.items())
            yield Sample(
                id=sid,
                benchmark=self.name,
                choices=options,
                messages=(
                    Message("user", TEMPLATE.format(question=cells["question"], options=body)),
                ),
                metadata={
                    "question": cells["question"],
                    "dataset": cells["dataset"] or "(none)",
                    "subject": cells["subject_name"],
                    "year": cells["year"],
                },
            )
        if not len(seen):
            raise DataError(path, None, "no questions in the file")

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if options.protocol != "reference":
            return Prompt(sample.messages)
        head = prompt_head(self.param("prompt_version"), self.param("shots_seed"))
        return Prompt(
            (Message("user", head + item_text(sample.metadata["question"], dict(sample.choices))),)
        )

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        return {"ours": text_hash(TEMPLATE)[:16]} | {
            f"{f.folder}/{f.path}": f.sha256 for f in (PROMPTS, SHOTS, EVAL_FULL)
        }

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("med-halt", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        pairs = [(s, by_id[s.id]) for s in samples if s.id in by_id]
        values = [g.value for _, g in pairs]
        right, wrong = sum(1 for v in values if v == 1.0), sum(1 for v in values if v == 0.0)
        others = [g.details.get("other_value") for _, g in pairs if g.status != "answer_failed"]
        other_known = [v for v in others if v is not None]
        extra: dict[str, Any] = {
            "protocol": options.protocol,
            "n_right": right,
            "n_wrong": wrong,
            "official_score": (right * CORRECT_SCORE + wrong * INCORRECT_SCORE) / SCORE_DIVISOR,
            "n_unreadable": sum(1 for _, g in pairs if g.status == "unreadable"),
            "n_failed": sum(1 for _, g in pairs if g.status == "answer_failed"),
            "partial": "reasoning_fake (FQT) only; Med-HALT's FCT, NOTA and IR tests are not included",
            "other_protocol": {
                "protocol": "grandrounds" if options.protocol == "reference" else "reference",
                "score": sum(other_known) / len(other_known) if other_known else None,
                "n_unknown": len(others) - len(other_known),
                "differs": "reference: the authors' few-shot prompt and refusal terms on 'cop'; "
                "grandrounds: our prompt, the chosen option number",
            },
        }
        if options.protocol == "reference":
            lit = [g.details.get("literal_value") for _, g in pairs if g.status != "answer_failed"]
            lit_right, lit_wrong = lit.count(1.0), lit.count(0.0)
            extra["reference_literal"] = {
                "accuracy": lit_right / (lit_right + lit_wrong) if lit_right + lit_wrong else None,
                "official_score": (lit_right * CORRECT_SCORE + lit_wrong * INCORRECT_SCORE)
                / SCORE_DIVISOR,
                "n_no_cop": sum(1 for v in lit if v is None),
                "differs": "the headline is what evaluate.py computes: its clean_output never "
                "reaches ast.literal_eval (np.isnan on a str raises) and reads cop with its "
                "key/value regex (the last cop, cut at the first comma); this is the figure had "
                "the reply's dict been read whole, as the code intends",
            }
        breakdown = {
            "dataset": group_cells(
                ((s.metadata["dataset"], g.value) for s, g in pairs), accuracy_cell
            )
        }
        return Aggregate.of("accuracy", accuracy_cell(values), breakdown, extra)

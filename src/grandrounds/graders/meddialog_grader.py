"""MedDialog grading: a judge scores the summary against the reference summary on three dimensions.

The flow is :mod:`grandrounds.graders.reference_judged`'s; the reading, the arithmetic and Medmarks'
own figure are MedicationQA's (:mod:`grandrounds.graders.medicationqa_grader`: Medmarks uses the
same ``_compute_normalized_reward`` in both environments); only the prompt differs. Under
``reference`` it is Medmarks' med_dialog ``JUDGE_TEMPLATE`` formatted with the conversation, the
summary as the model wrote it, the reference summary and ``JUDGE_OUTPUT_JSON`` (read at run time);
under ``grandrounds`` ours. An unreadable reply is re-asked, then unknown, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from grandrounds.core.records import Sample
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.judging import delimit_answer
from grandrounds.graders.medicationqa_grader import MedicationQAGrader
from grandrounds.sources.meddialog import JUDGE_PROMPTS, OUR_JUDGE
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import python_string


@dataclass(frozen=True)
class MedDialogParams:
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


class MedDialogGrader(MedicationQAGrader):
    """Mean normalised judge score over the judges with a readable verdict."""

    name = "meddialog"
    Params = MedDialogParams

    def judge_prompt(self, sample: Sample, answer: str) -> str:
        conversation, gold = sample.metadata["conversation"], sample.target
        if self.params.protocol == "reference":
            template = python_string(JUDGE_PROMPTS, "JUDGE_TEMPLATE").text
            output = python_string(JUDGE_PROMPTS, "JUDGE_OUTPUT_JSON").text
            return template.format(
                conversation=conversation, response=answer, gold_response=gold, output_format=output
            )
        return OUR_JUDGE.format(
            conversation=conversation,
            response=delimit_answer(strip_reasoning(answer), conversation),
            gold=gold,
        )

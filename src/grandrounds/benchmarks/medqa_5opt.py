"""MedQA-USMLE, five-option test set (1,273 questions): the original release's layout.

Data: carlwharris/cog-bias-med-LLMs @ bee2807 ``data_clean/questions/US/test.jsonl`` (the BiasMedQA
authors' copy of MedQA's ``data_clean/questions/US/test.jsonl``; the MedAgentsBench and MedReason
repositories hold byte-identical copies). JSON Lines ``{"question", "answer": <text>,
"options": {"A".."E"}, "meta_info": "step1" | "step2&3", "answer_idx"}``, read as MedQA's four-option
file is (:func:`grandrounds.benchmarks.medqa.iter_medqa_format`): no ids, so a sample's id is its
0-based position; the same 1,273 questions as ``medqa`` in the same order, each with the distractor
the four-option file drops, so key letters often differ between the two.

Protocols. MedQA's authors publish no prompt for language models, and the peers that run this
five-option set (lighteval's ``med_qa``, MedReason, MedAgentsBench) are not pinned here; simple-evals'
multiple-choice prompt, which ``medqa`` sends under ``reference``, has room for four options only, and
lm-evaluation-harness defines only the four-option task, so there is no ``letter-loglik`` mode.
``reference`` therefore fixes what those evaluations share: zero-shot, one letter, greedy decoding,
accuracy over every question (a failed or unreadable answer counts wrong); the prompt and reading are
ours under both protocols, and ``grandrounds`` differs in aggregation only (failed calls excluded
and counted). Accuracy is broken down by ``meta_info`` (Step 1 / Step 2&3).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import OurPromptExam
from grandrounds.benchmarks.medqa import iter_medqa_format
from grandrounds.core.records import Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours

_PROMPTS = {
    "generate": "ours (no official prompt for five options)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (lm-eval defines the four-option task only)",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,
    extraction="generate: ours (no official reading); log-prob modes: argmax",
    aggregation="accuracy over every question: a failed or unreadable answer counts wrong (Jin et al.'s accuracy; "
    "lighteval's exact match over all items)",
    source="convention of lighteval med_qa, MedReason and MedAgentsBench (zero-shot letter, accuracy); their prompts are not pinned here",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction=REFERENCE.extraction,
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": _PROMPTS},
)


class MedQA5(OurPromptExam):
    """MedQA-USMLE five-option test set; accuracy by step."""

    name: ClassVar[str] = "medqa-usmle-5opt"
    description: ClassVar[str] = (
        "MedQA-USMLE (US) test split with its original five options, 1,273 questions; accuracy by step"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            "https://raw.githubusercontent.com/carlwharris/cog-bias-med-LLMs/bee2807d6de1fa7a86588fb13b17de8c9c13556d"
            "/data_clean/questions/US/test.jsonl",
            "test.jsonl",
            "cfa75cbcc53c29b023752b0a395ff49d8202121041392735ae44771a5ec734a3",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("meta_info",)
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}

    def records(self, root: Path) -> Iterator[Sample]:
        return iter_medqa_format(self, resolve_file(root, self.remote_files[0].filename))

"""MedQA, Taiwan split (traditional Chinese, four options): the test file of the original release.

Data layout: MedQA's release (Jin et al. 2021, jind11/MedQA; the data itself is served from the
authors' Google Drive, not from a repository at a commit) ``data_clean/questions/Taiwan/test.jsonl``:
JSON Lines ``{"question", "options": {"A".."D"}, "answer_idx": <letter>, "answer"?: <text>}`` in
traditional Chinese, the same record shape as the US and Mainland files (peers read ``answer_idx``
and ``options`` A-D from it, e.g. the MedXpertQA-style converters indexed in our code search).
Read with :func:`grandrounds.benchmarks.medqa.iter_medqa_format`: no ids, so a sample's id is its
0-based position; an ``answer`` text that disagrees with ``answer_idx`` is a one-line DataError.
There is no stable public URL of the file at a pinned commit, so a run needs ``--data PATH`` (the
file, or a folder holding ``test.jsonl``). MedQA is released under the MIT licence.

Protocols. The authors published no prompt for language models and no peer among the pinned
reference files runs this split, so ``reference`` fixes the convention only (zero-shot, one letter,
greedy, accuracy over every question: a failed or unreadable answer counts wrong) with our Chinese
prompt and reading under both protocols, said so; ``grandrounds`` differs in aggregation only
(failed calls excluded and counted). No lm-evaluation-harness task, so no ``letter-loglik``.
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

FILENAME = "test.jsonl"
_PROMPTS = {
    "generate": "ours (Chinese; no official or peer prompt)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-eval task)",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,
    extraction="generate: ours (no official reading); log-prob modes: argmax",
    aggregation="accuracy over every question: a failed or unreadable answer counts wrong (Jin et al.'s accuracy)",
    source="convention only (zero-shot letter, accuracy, Jin et al. 2021); no official or pinned peer prompt for this split",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction=REFERENCE.extraction,
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": _PROMPTS},
)


class MedQATaiwan(OurPromptExam):
    """MedQA Taiwan test split (traditional Chinese, four options)."""

    name: ClassVar[str] = "medqa-taiwan"
    description: ClassVar[str] = (
        "MedQA Taiwan (TWMLE) test split, traditional Chinese, four options; accuracy. Needs --data: the release's "
        "data_clean/questions/Taiwan/test.jsonl (no pinned public URL)"
    )
    language: ClassVar[str] = "zh"
    remote_files: ClassVar[tuple[RemoteFile, ...]] = ()
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}

    def records(self, root: Path) -> Iterator[Sample]:
        return iter_medqa_format(self, resolve_file(root, FILENAME))

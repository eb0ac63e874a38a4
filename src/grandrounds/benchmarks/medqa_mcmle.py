"""MedQA Mainland China (MCMLE) test set, four options (3,426 questions), through a peer's repackaging.

Data: FreedomIntelligence/Apollo @ 505c48e ``metadata/test/zh.json``, the Chinese test file of Apollo's
XMedBench (CUHK-SZ), a JSON array of 8,759 items from four sources; the 3,426 whose ``source`` is
``medqa-mcmle`` are read (the official Mainland test size; the official ``data_clean/questions/
Mainland/test.jsonl`` of jind11/MedQA is on Google Drive only). This is a peer's repackaging, not the
authors' file, and the four-option variant (bigbio's ``med_qa_zh_4options``), not the paper's five:
results say so. Fields: ``question``, ``options`` (one string, a "(X) text." line per option: the
"(X) " prefix and the final "." Apollo adds are removed), ``answer`` ("(B)"), ``source``. No ids or
exam metadata: a sample's id is its 0-based position among the MCMLE items (``mcmle-N``), and there is
no breakdown. Licence: MedQA MIT (jind11); the Apollo repository Apache-2.0.

Protocols. Apollo parses a "(X)" letter from a generated reply, and OpenCompass and MedEvalKit score
letter accuracy, but none of their prompts is pinned here, and lm-evaluation-harness has no MCMLE
task: ``reference`` fixes what they share (zero-shot, one letter, greedy decoding, accuracy over every
question with a failed or unreadable answer wrong) with our Chinese prompt and reading under both
protocols; ``grandrounds`` differs in aggregation only (failed calls excluded and counted).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import RemoteFile, resolve_file
from grandrounds.benchmarks.mcq import OurPromptExam
from grandrounds.benchmarks.medqa_5opt import GRANDROUNDS as _OURS
from grandrounds.benchmarks.readers.json_docs import iter_json_array
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import DataError
from grandrounds.core.records import Sample
from grandrounds.sources.protocols import OUR_ANSWER, Protocol

SOURCE = "medqa-mcmle"
_PROMPTS = {
    "generate": "ours (Chinese; no peer prompt is pinned)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-evaluation-harness task)",
}
REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,
    extraction="generate: ours (no peer reading is pinned); log-prob modes: argmax",
    aggregation="accuracy over every question: a failed or unreadable answer counts wrong",
    source="convention of Apollo/XMedBench, OpenCompass MedQA (Mainland) and MedEvalKit MedQA_MCMLE (letter accuracy); "
    "their prompts are not pinned here",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = Protocol(
    name="grandrounds",
    answer=OUR_ANSWER,
    extraction=REFERENCE.extraction,
    aggregation=_OURS.aggregation,
    settings={"prompt": _PROMPTS},
)
_LINE = re.compile(r"\(([A-J])\) (.*)")


def parse_options(path: Path, where: Any, text: Any) -> dict[str, str]:
    """Apollo's options string -> letter -> text: one "(X) text." line per option, letters A.. in order."""
    if not isinstance(text, str):
        raise DataError(path, where, "field 'options' must be a string")
    out: dict[str, str] = {}
    for line in text.split("\n"):
        m = _LINE.fullmatch(line)
        if not m or m.group(1) != LETTERS[len(out) : len(out) + 1]:
            raise DataError(
                path,
                where,
                f"option line {line[:40]!r} is not '(X) text.' with letters A.. in order",
            )
        body = m.group(2)[:-1] if m.group(2).endswith(".") else m.group(2)
        if not body.strip():
            raise DataError(path, where, f"option {m.group(1)} is empty")
        out[m.group(1)] = body
    if len(out) < 2:
        raise DataError(path, where, "fewer than two options")
    return out


class MedQAMCMLE(OurPromptExam):
    """MedQA Mainland (MCMLE) 4-option test set from Apollo's zh.json; accuracy."""

    name: ClassVar[str] = "medqa-mcmle"
    language: ClassVar[str] = "zh"
    description: ClassVar[str] = (
        "MedQA Mainland China (MCMLE) test, 3,426 questions, 4 options; a peer's repackaging "
        "(Apollo/XMedBench zh.json, not the authors' file); accuracy"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            "https://raw.githubusercontent.com/FreedomIntelligence/Apollo/505c48e82207b36cf3921df61fcd58895fb6ca4e/metadata/test/zh.json",
            "zh.json",
            "a7051b52f84edc43afd214f2a77e672b09500e1c9f20d7fa907b6eb08118629f",
        ),
    )
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}

    def records(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, self.remote_files[0].filename)
        n = 0
        for index, rec in iter_json_array(path, "expected a JSON array of questions"):
            where = f"item {index}"
            if not isinstance(rec, dict) or rec.get("source") != SOURCE:
                continue
            for field in ("question", "options", "answer"):
                if not isinstance(rec.get(field), str) or not rec[field].strip():
                    raise DataError(path, where, f"missing or empty field {field!r}")
            choices = parse_options(path, where, rec["options"])
            key = rec["answer"].strip().strip("()")
            if key not in choices:
                raise DataError(
                    path,
                    where,
                    f"answer {rec['answer']!r} is not one of the options {''.join(choices)}",
                )
            yield self.make_sample(
                f"mcmle-{n}",
                rec["question"],
                choices,
                key,
                source=SOURCE,
                repackaged_by="Apollo/XMedBench",
            )
            n += 1
        if not n:
            raise DataError(path, None, f"no item with source {SOURCE!r}")

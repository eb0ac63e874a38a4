"""CareQA, open-ended (``careqa-open``): free-response questions rephrased from CareQA's multiple-choice
exam items (Spanish FSE/MIR exams 2020-2024, English), answers judged against the reference answer.

Data layout: the authors' Hugging Face dataset HPAI-BSC/CareQA (Arias-Duart et al. 2025; Apache-2.0),
config ``CareQA_en_open`` = the file ``CareQA_en_open.json`` (split ``test``), added in commit 65aab87
("Add CareQA_en_open"), the RemoteFile (sha256 not published, so not pinned). Its card counts 2,769
questions (lm-eval's README says 3,730: the card is the publisher's word). The fields both peers read
are ``question`` and ``answer`` (Medmarks takes ``answer_explanation`` instead where a record has that
key); ``unique_id``, ``category`` and ``year`` are used when present (ids and breakdowns), as in the
multiple-choice file. One JSON array or JSON Lines, read either way. The set is a derivative: the
questions were rewritten by Qwen2.5-72B-Instruct from the multiple-choice version and checked by people.
A record that is not an object, or lacks ``question`` or the reference answer, is a one-line DataError.

Protocols. The authors' lm-eval task (``careqa_open``) reports BLEU, ROUGE, BLEURT and BERTScore, two
of which need model weights; the named peer that judges is Medmarks' ``careqa`` environment in mode
``open``, whose protocol ``reference`` follows: its default system prompt and its judge prompt
(``JUDGE_TEMPLATE``: four true/false verdicts against the reference) read at run time from the pinned
file, judge ``gpt-4o-mini``, reward (correct + details + not addition + not critical error) / 4 (see
:mod:`grandrounds.sources.careqa_open` for the parser quirk this reads around, and Medmarks' literal
figure reported beside). ``grandrounds``: no system prompt, our judge prompt and stricter reading.
Breakdowns: category and year (when the file has them).
"""

from __future__ import annotations

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
from grandrounds.benchmarks.careqa import iter_json_records
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import group_cells, mean_cell
from grandrounds.sources.careqa_open import ENV, OUR_JUDGE, PROTOCOLS, candidate_system

FILE = RemoteFile(
    "https://huggingface.co/datasets/HPAI-BSC/CareQA/resolve/65aab87cd014f3fb34f0adba34821c1429802849/CareQA_en_open.json",
    "CareQA_en_open.json",
    None,
)


def _text(rec: dict, key: str) -> str:
    value = rec.get(key)
    return "" if value is None else str(value)


class CareQAOpen(Benchmark):
    """CareQA open-ended: free-text answers judged against the reference (four verdicts, mean / 4)."""

    name: ClassVar[str] = "careqa-open"
    description: ClassVar[str] = (
        "CareQA open-ended (HPAI-BSC), 2,769 free-response questions rephrased by an LLM from the FSE/MIR exam items "
        "(a derivative of careqa-mc); answers judged against the reference (Medmarks' four-verdict judge). Licence Apache-2.0"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (FILE,)
    needs_judge: ClassVar[bool] = True
    protocols = PROTOCOLS

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = resolve_file(root, FILE.filename)
        seen = IdSet(path)
        for where, rec in iter_json_records(path):
            if not isinstance(rec, dict):
                raise DataError(path, where, "not a JSON object")
            question = _text(rec, "question").strip()
            if not question:
                raise DataError(path, where, "missing or empty 'question'")
            key = (
                "answer_explanation" if "answer_explanation" in rec else "answer"
            )  # Medmarks' _map
            if key not in rec:
                raise DataError(path, where, "missing 'answer'")
            sid = seen.add(str(rec.get("unique_id") or where.split()[-1]), where)
            yield Sample(
                id=sid,
                benchmark=self.name,
                messages=(Message("user", question),),
                target=_text(rec, key).strip(),
                metadata={
                    "question": question,
                    "answer": _text(rec, "answer"),
                    "category": _text(rec, "category") or "(none)",
                    "year": _text(rec, "year") or "(none)",
                    "exam_id": _text(rec, "exam_id"),
                },
            )
        if not len(seen):
            raise DataError(path, None, "no questions in the file")

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if (
            options.protocol == "reference"
        ):  # Medmarks' SingleTurnEnv(system_prompt=final_system_prompt)
            return Prompt((Message("system", candidate_system()), *sample.messages))
        return Prompt(sample.messages)

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        return {"ours": text_hash(OUR_JUDGE)[:16], f"{ENV.folder}/{ENV.path}": ENV.sha256}

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("careqa-open", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        return judged_aggregate(
            samples,
            grades,
            options,
            ("category", "year"),
            "(correct + details + no addition + no critical error) / 4 (Medmarks' careqa open reward)",
        )


def judged_aggregate(
    samples: Sequence[Sample],
    grades: Sequence[Grade],
    options: RunOptions,
    families: Sequence[str],
    scale: str,
) -> Aggregate:
    """The headline of a benchmark judged against reference answers: the mean over answers with a known
    verdict, coverage and unknowns, Medmarks' literal figure beside it, and breakdowns by ``families``."""
    by_id = {g.sample_id: g for g in grades}
    pairs = [(s, by_id[s.id]) for s in samples if s.id in by_id]
    overall = mean_cell([g.value for _, g in pairs])
    votes = [v for _, g in pairs for v in g.votes]
    read = [
        g.details.get("medmarks_value")
        for _, g in pairs
        if g.status not in ("answer_failed", "grader_error")
    ]
    literal = [v for v in read if v is not None]
    extra: dict[str, Any] = {
        "protocol": options.protocol,
        "coverage": sum(1 for v in votes if v.status != "unknown") / len(votes) if votes else None,
        "judge_coverage": {
            "answers_scored": overall.n,
            "answers": len(pairs),
            "votes_known": sum(1 for v in votes if v.status != "unknown"),
            "votes": len(votes),
        },
        "n_unknown": sum(1 for _, g in pairs if g.status == "unreadable"),
        "n_failed": sum(1 for _, g in pairs if g.status == "answer_failed"),
        "n_no_reference": sum(1 for _, g in pairs if g.status == "grader_error"),
        "medmarks_literal": sum(literal) / len(literal) if literal else None,
        "scale": scale,
    }
    breakdown = {
        f: group_cells(((s.metadata[f], g.value) for s, g in pairs), mean_cell) for f in families
    }
    return Aggregate.of("judge_score", overall, breakdown, extra)

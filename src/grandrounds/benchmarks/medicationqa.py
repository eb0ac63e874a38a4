"""MedicationQA (MedInfo 2019): 690 consumer medication questions, answers judged against the reference.

Data: abachaa/Medication_QA_MedInfo2019 @ 8756adc (the authors, NLM), ``MedInfo2019-QA-Medications.xlsx``,
sha256-pinned, sheet ``DrugQA``: ``Question, Focus (Drug), Question Type, Answer, Section Title, URL``.
No licence is published (the answers are excerpts of MedlinePlus-type pages). One row's ``Answer`` is
"n/a" (pandas reads it as empty): it is loaded (690 questions) and graded unscored ("no reference answer"), as MedHELM drops it.

Protocols. The paper is not an LLM benchmark, so ``reference`` is the named peer's, Medmarks'
``medicationqa`` environment (tmabraham/med-lm-envs @ 7ee0452, see :mod:`grandrounds.sources.medicationqa`):
its candidate system prompt, its judge prompt (accuracy, completeness, clarity scored 1-5 against the
reference answer) and its arithmetic (mean of score/5), read at run time from the pinned files; judges
come from ``--judge`` (Medmarks' default is gpt-4o-mini). An unreadable judge reply is unknown, never
0: the result reports coverage and the unknowns, and Medmarks' own figure (unknown = 0) beside it.
``grandrounds``: our judge prompt and tolerant reading, no system prompt. Breakdown by question type.
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
from grandrounds.benchmarks.readers.records import IdSet
from grandrounds.core.errors import DataError
from grandrounds.core.records import Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.cells import group_cells, mean_cell
from grandrounds.sources.medicationqa import (
    ENVIRONMENT,
    JUDGE_PROMPTS,
    OUR_JUDGE,
    PROTOCOLS,
    candidate_system,
)

REPO = "abachaa/Medication_QA_MedInfo2019"
COMMIT = "8756adc5f4bb99f6bcff690a13921337d9f9bb7e"
XLSX = RemoteFile(
    f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/MedInfo2019-QA-Medications.xlsx",
    "MedInfo2019-QA-Medications.xlsx",
    "4f13d0e3b195bd6a5d72a1872f9118cb5f69fd02c370001695330cfc9e3b5832",
)
HEADER = ("Question", "Focus (Drug)", "Question Type", "Answer", "Section Title", "URL")


class MedicationQA(Benchmark):
    """MedicationQA: free-text answers, judged against the reference answer (mean score / 5)."""

    name: ClassVar[str] = "medicationqa"
    description: ClassVar[str] = (
        "MedicationQA (MedInfo 2019), 690 consumer medication questions; free-text answers judged against the "
        "reference answer (accuracy, completeness, clarity 1-5, Medmarks' judge). No licence published"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (XLSX,)
    needs_judge: ClassVar[bool] = True
    protocols = PROTOCOLS
    reference_fidelity = {
        "reference": "Medmarks' `medicationqa` environment (the named peer; the dataset's authors "
        "publish no judge)",
        "reader": "the judge's JSON object as Medmarks' `JSONParser` finds it (the one ending at the "
        'LAST "}"), scored by `_compute_normalized_reward`',
        "prompt": "Medmarks' system prompt and `JUDGE_TEMPLATE` (read at run time)",
        "equal": "Medmarks' own figure (`medmarks_unknown_as_zero` beside the headline) per answer, "
        "from the judge's first reply, checked against `JSONParser` and `_compute_normalized_reward` "
        "executed from their pinned files through the CLI on 249 written judge replies (0 differ)",
        "differs": "the headline counts an unreadable judge reply (or one without three numeric "
        "scores) as unknown and re-asks it, where Medmarks scores 0 (a null dimension raises in its "
        "reward function, which its rubric scores 0); Medmarks' figure is kept beside it",
    }

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        from grandrounds.benchmarks.readers.xlsx import open_xlsx, sheet_rows

        path = resolve_file(root, XLSX.filename)
        try:
            book = open_xlsx(path)
        except Exception as e:  # a zip or workbook that openpyxl cannot open
            raise DataError(path, None, f"not a readable .xlsx workbook ({e})") from None
        with book:
            rows = sheet_rows(path, book.workbook.worksheets[0])
            header = tuple(next(rows, ()) or ())
            if header[: len(HEADER)] != HEADER:
                raise DataError(
                    path,
                    1,
                    f"expected the columns {', '.join(HEADER)}, found {', '.join(map(str, header))}",
                )
            seen = IdSet(path)
            for no, row in enumerate(rows, start=2):
                cells = {k: "" if v is None else str(v) for k, v in zip(HEADER, row)}
                if not any(c.strip() for c in cells.values()):
                    continue
                if not cells["Question"].strip():
                    raise DataError(path, f"row {no}", "empty 'Question'")
                sid = seen.add(str(no - 1), f"row {no}")
                yield Sample(
                    id=sid,
                    benchmark=self.name,
                    messages=(Message("user", cells["Question"].strip()),),
                    target=""
                    if cells["Answer"].strip().lower() in ("", "n/a")
                    else cells["Answer"].strip(),
                    metadata={
                        "question": cells["Question"].strip(),
                        "focus": cells["Focus (Drug)"].strip(),
                        "question_type": cells["Question Type"].strip() or "(none)",
                        "section": cells["Section Title"].strip(),
                        "url": cells["URL"].strip(),
                    },
                )
        if not len(seen):
            raise DataError(path, None, "no questions in the workbook")

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        if options.protocol == "reference":  # Medmarks' SingleTurnEnv(system_prompt=...)
            return Prompt((Message("system", candidate_system()), *sample.messages))
        return Prompt(sample.messages)

    def template_hashes(self, options: RunOptions | None = None) -> dict[str, Any]:
        from grandrounds.core.hashing import text_hash

        return {"ours": text_hash(OUR_JUDGE)[:16]} | {
            f"{f.folder}/{f.path}": f.sha256 for f in (JUDGE_PROMPTS, ENVIRONMENT)
        }

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("medicationqa", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        pairs = [(s, by_id[s.id]) for s in samples if s.id in by_id]
        values = [g.value for _, g in pairs]
        overall = mean_cell(values)
        votes = [v for _, g in pairs for v in g.votes]
        medmarks = [
            g.details.get("medmarks_value")
            for _, g in pairs
            if g.status != "answer_failed" and s_has_ref(g)
        ]
        extra: dict[str, Any] = {
            "protocol": options.protocol,
            "coverage": sum(1 for v in votes if v.status != "unknown") / len(votes)
            if votes
            else None,
            "judge_coverage": {
                "answers_scored": overall.n,
                "answers": len(pairs),
                "votes_known": sum(1 for v in votes if v.status != "unknown"),
                "votes": len(votes),
            },
            "n_unknown": sum(1 for _, g in pairs if g.status == "unreadable"),
            "n_failed": sum(1 for _, g in pairs if g.status == "answer_failed"),
            "n_no_reference": sum(1 for _, g in pairs if g.status == "grader_error"),
            "medmarks_unknown_as_zero": sum(v or 0.0 for v in medmarks) / len(medmarks)
            if medmarks
            else None,
            "scale": "mean of the three 1-5 scores / 5 (Medmarks reward)",
        }
        breakdown = {
            "question_type": group_cells(
                ((s.metadata["question_type"], g.value) for s, g in pairs), mean_cell
            )
        }
        return Aggregate.of("judge_score", overall, breakdown, extra)


def s_has_ref(grade: Grade) -> bool:
    return grade.status != "grader_error"

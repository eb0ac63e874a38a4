"""MEDIQA 2019 Task 3 (question answering): filter and re-rank the answers a QA system retrieved.

Data: abachaa/MEDIQA2019 @ ae5d382 (the organisers): ``MEDIQA_Task3_QA/MEDIQA2019-Task3-QA-TestSet-wLabels.xml``
(150 consumer questions, 1,107 candidate answers from NLM's CHiQA, 2-11 per question, each with
``SystemRank``, ``ReferenceRank`` and ``ReferenceScore``) and ``Eval_Scripts/data/QA_testSet_ground_truth_round_2.txt``,
the gold file the official evaluator reads (``question_id,answer_id,label``; label 1 = ReferenceScore 3
or 4; each question's correct answers first in reference-rank order). Both sha256-pinned; the loader
checks that the gold file and the XML agree row for row. No licence is published.

The task as the shared task set it: label every candidate answer correct (1) or not (0) and rank the
correct ones. A sample is one question with its candidates (numbered 1..n in file order, i.e. CHiQA's
rank); the model names the correct ones, best first (:mod:`grandrounds.graders.mediqa_grader`), and the
replies become an official submission.

Protocols. ``reference``: the official evaluator's arithmetic (``mediqa2019_evaluator_allTasks_final.py``,
reproduced in :mod:`grandrounds.scoring.mediqa`): accuracy of the labels (headline), Spearman's rho of
the ranking, MRR and precision, over every gold row, a question whose reply failed or could not be
read being scored as a submission without its rows (its gold rows unmatched, MRR 0, rho undefined).
No official prompt for language models exists, so the prompt is ours. ``grandrounds``: the same
metrics over the questions with a readable reply only, the others counted.

Reference answer. The peers that ask for a free-text answer pick different "reference" answers:
lm-eval's ``mediqa_qa2019`` takes ``AnswerList[0]`` (the system's first), MedHELM's ``medi_qa`` the
answer with ``ReferenceRank`` 1. Here the reference answer of a question is its ReferenceRank-1 answer
(the official gold's first row, MedHELM's rule): ``top1_is_reference_rank_1`` is the share of
questions whose first-named answer is it; ``extra`` adds ``top1_is_system_rank_1`` (lm-eval's rule).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import Aggregate, Benchmark, RemoteFile, RunOptions, resolve_file
from grandrounds.benchmarks.readers.lines import iter_csv
from grandrounds.core.errors import DataError
from grandrounds.core.records import Cell, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.mediqa import official_metrics
from grandrounds.scoring.stats import wilson_ci
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours

REPO = "abachaa/MEDIQA2019"
COMMIT = "ae5d3826d6c841923b9db831159fef0f1b893593"
_BASE = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}"
XML = RemoteFile(
    f"{_BASE}/MEDIQA_Task3_QA/MEDIQA2019-Task3-QA-TestSet-wLabels.xml",
    "MEDIQA2019-Task3-QA-TestSet-wLabels.xml",
    "df9bca894d252279f200ee78e85d871b57a94b224d75467b7fa38a4a0952cc1d",
)
GOLD = RemoteFile(
    f"{_BASE}/Eval_Scripts/data/QA_testSet_ground_truth_round_2.txt",
    "QA_testSet_ground_truth_round_2.txt",
    "5dc594ebd6e5ce680c0c250e6bcb6819f1531b1bfa6c5a3a39df96ece2779f3e",
)
EVALUATOR = f"{REPO}@{COMMIT[:7]} Eval_Scripts/mediqa2019_evaluator_allTasks_final.py (MediqaEvaluator._evaluate_task_3)"

#: Our prompt (no official one exists for language models).
TEMPLATE = (
    "A consumer asked the medical question below, and a question-answering system retrieved the candidate "
    "answers that follow. Decide which candidates correctly answer the question (an answer that is correct "
    "but incomplete still counts as correct; one that is only related, or wrong, does not), and rank the "
    "correct ones from best to worst.\n\nQuestion:\n{question}\n\n{answers}\n\n"
    'End your reply with one line of the form "Correct: 3, 1, 5" listing the numbers of the correct '
    'answers, best first, or "Correct: none" if none of them is correct.'
)

REFERENCE = Protocol(
    name="reference",
    answer=OUR_ANSWER,
    extraction="ours (no official reading for language models): the last 'Correct:' line; unreadable replies counted",
    aggregation="the official evaluator's accuracy (headline), Spearman's rho, MRR and precision over every gold row; "
    "a failed or unreadable reply is a question missing from the submission",
    source=f"{EVALUATOR}; prompt ours (none published for language models)",
    settings={
        "prompt": "ours",
        "reference_answer": "ReferenceRank 1 (MedHELM; the gold file's first row)",
    },
)
GRANDROUNDS = ours(
    REFERENCE,
    aggregation="the same four figures over the questions with a readable reply; the others counted",
    settings=REFERENCE.settings,
)


def render_answers(answers: Sequence[dict[str, str]]) -> str:
    return "\n\n".join(f"Answer {i}:\n{a['text'].strip()}" for i, a in enumerate(answers, start=1))


class MediqaQA(Benchmark):
    """MEDIQA 2019 QA test set (150 questions, 1,107 answers): label and rank the candidates."""

    name: ClassVar[str] = "mediqa-qa-2019"
    description: ClassVar[str] = (
        "MEDIQA 2019 Task 3 QA test set, 150 consumer questions with 2-11 retrieved answers each: label them "
        "correct/incorrect and rank them; official accuracy, Spearman, MRR, precision (no licence published)"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (XML, GOLD)
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}

    def data_files(self, root: Path) -> list[Path]:
        return [
            resolve_file(root, XML.filename),
            resolve_file(root.parent if root.is_file() else root, GOLD.filename),
        ]

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        xml_path, gold_path = self.data_files(root)
        gold = read_gold(gold_path)
        try:
            questions = ET.parse(xml_path).getroot().findall("Question")
        except ET.ParseError as e:
            raise DataError(xml_path, e.position[0], f"invalid XML: {e}") from None
        if not questions:
            raise DataError(xml_path, None, "no <Question> elements")
        seen: set[str] = set()
        for q in questions:
            sample = self._sample(xml_path, gold_path, q, gold)
            if sample.id in seen:
                raise DataError(xml_path, None, f"question {sample.id}: duplicate QID")
            seen.add(sample.id)
            yield sample
        extra = sorted(set(gold) - seen)
        if extra:
            raise DataError(
                gold_path, None, f"gold rows for questions not in the XML: {', '.join(extra[:5])}"
            )

    def _sample(
        self, xml_path: Path, gold_path: Path, q: ET.Element, gold: dict[str, list[tuple[str, str]]]
    ) -> Sample:
        qid = (q.get("QID") or "").strip()
        text = (q.findtext("QuestionText") or "").strip()
        answers = [_answer(xml_path, qid, a) for a in q.iter("Answer")]
        if not qid or not text or not answers:
            raise DataError(
                xml_path, None, f"question {qid or '?'}: needs a QID, a QuestionText and answers"
            )
        rows = gold.get(qid)
        ids = [a["id"] for a in answers]
        if rows is None or sorted(a for a, _ in rows) != sorted(ids):
            raise DataError(
                gold_path,
                None,
                f"question {qid}: gold answers {sorted(a for a, _ in rows or [])} "
                f"differ from the XML's {sorted(ids)}",
            )
        for a in answers:
            want = "1" if a["score"] >= 3 else "0"
            if dict(rows)[a["id"]] != want:
                raise DataError(
                    gold_path,
                    None,
                    f"answer {a['id']}: gold label {dict(rows)[a['id']]}, ReferenceScore {a['score']}",
                )
        first_ref = min(answers, key=lambda a: a["reference_rank"])["id"]
        prompt = TEMPLATE.format(question=text, answers=render_answers(answers))
        return Sample(
            id=qid,
            benchmark=self.name,
            messages=(Message("user", prompt),),
            target={
                "gold": [list(r) for r in rows],
                "reference_rank_1": first_ref,
                "system_rank_1": ids[0],
            },
            metadata={
                "question": text,
                "answer_ids": ids,
                "n_answers": len(ids),
                "reference_scores": [a["score"] for a in answers],
            },
        )

    def grader_spec(self, options: RunOptions) -> Spec:
        return Spec("mediqa-qa", {"protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        by_id = {g.sample_id: g for g in grades}
        figures = {p: self.figures(samples, by_id, p) for p in ("reference", "grandrounds")}
        mine, other_name = (
            figures[options.protocol],
            "grandrounds" if options.protocol == "reference" else "reference",
        )
        read = [s for s in samples if _rows(by_id.get(s.id)) is not None]
        top = {
            rule: _share(read, by_id, key)
            for rule, key in (
                ("top1_is_reference_rank_1", "reference_rank_1"),
                ("top1_is_system_rank_1", "system_rank_1"),
            )
        }
        overall = Cell(
            score=mine["accuracy"],
            n=mine["n_questions"],
            n_unscored=len(samples) - mine["n_questions"],
            ci95=wilson_ci(mine["n_matched_rows"], mine["n_gold_rows"]),
            metrics={k: mine[k] for k in ("spearman", "mrr", "precision")},
        )
        extra: dict[str, Any] = {
            **{k: v for k, v in mine.items() if k != "accuracy"},
            "n_unreadable": sum(
                1 for s in samples if (g := by_id.get(s.id)) and g.status == "unreadable"
            ),
            "n_failed": sum(
                1 for s in samples if (g := by_id.get(s.id)) and g.status == "answer_failed"
            ),
            "reference_answer_rule": "ReferenceRank 1 (MedHELM medi_qa; the gold file's first row)",
            "top1_is_reference_rank_1": top["top1_is_reference_rank_1"],
            "top1_is_system_rank_1": top["top1_is_system_rank_1"],
            "top1_rules_of_other_peers": {
                "lm-eval mediqa_qa2019": "AnswerList[0] (SystemRank 1): top1_is_system_rank_1"
            },
            "ci95_note": "Wilson interval over gold rows (answers of one question are not independent)",
            "other_protocol": {
                "protocol": other_name,
                "score": figures[other_name]["accuracy"],
                **{k: figures[other_name][k] for k in ("spearman", "mrr", "precision")},
                "differs": "reference scores unreadable or failed questions as missing from the "
                "submission; grandrounds leaves them out",
            },
        }
        return Aggregate.of(
            "accuracy",
            overall,
            {"n_answers": self._by_size(samples, by_id, options.protocol)},
            extra,
        )

    def figures(
        self, samples: Sequence[Sample], by_id: dict[str, Grade], protocol: str
    ) -> dict[str, Any]:
        """The official metrics of the run's submission under ``protocol``."""
        gold: list[tuple[str, str, str]] = []
        sub: list[tuple[str, str, str]] = []
        for s in samples:
            rows = _rows(by_id.get(s.id))
            if rows is None and protocol == "grandrounds":
                continue
            gold.extend((s.id, a, lab) for a, lab in s.target["gold"])
            sub.extend((s.id, a, lab) for a, lab in rows or [])
        return official_metrics(gold, sub)

    def _by_size(
        self, samples: Sequence[Sample], by_id: dict[str, Grade], protocol: str
    ) -> dict[str, Cell]:
        groups: dict[str, list[Sample]] = {}
        for s in samples:
            n = s.metadata["n_answers"]
            groups.setdefault("2-5" if n <= 5 else "6-8" if n <= 8 else "9-11", []).append(s)
        out: dict[str, Cell] = {}
        for key in ("2-5", "6-8", "9-11"):
            if key in groups:
                f = self.figures(groups[key], by_id, protocol)
                out[key] = Cell(
                    score=f["accuracy"],
                    n=f["n_questions"],
                    n_unscored=len(groups[key]) - f["n_questions"],
                    ci95=wilson_ci(f["n_matched_rows"], f["n_gold_rows"]),
                    metrics={k: f[k] for k in ("spearman", "mrr", "precision")},
                )
        return out


def _rows(grade: Grade | None) -> list[tuple[str, str]] | None:
    if grade is None or grade.value is None:
        return None
    return [(a, lab) for a, lab in grade.details.get("rows", [])]  # stored as [answer id, label]


def _share(samples: Sequence[Sample], by_id: dict[str, Grade], key: str) -> float | None:
    hits = [
        (rows := _rows(by_id.get(s.id))) is not None
        and bool(rows)
        and rows[0][1] == "1"
        and rows[0][0] == s.target[key]
        for s in samples
    ]
    return sum(hits) / len(hits) if hits else None


def _answer(path: Path, qid: str, a: ET.Element) -> dict[str, Any]:
    aid = (a.get("AID") or "").strip()
    try:
        score, rank = int(a.get("ReferenceScore") or ""), int(a.get("ReferenceRank") or "")
    except ValueError:
        raise DataError(
            path,
            None,
            f"question {qid}, answer {aid or '?'}: ReferenceScore/ReferenceRank not whole numbers",
        ) from None
    text = a.findtext("AnswerText") or ""
    if not aid or not text.strip() or not 1 <= score <= 4:
        raise DataError(
            path,
            None,
            f"question {qid}, answer {aid or '?'}: needs an AID, an AnswerText and a ReferenceScore 1-4",
        )
    return {"id": aid, "text": text, "score": score, "reference_rank": rank}


def read_gold(path: Path) -> dict[str, list[tuple[str, str]]]:
    """question id -> [(answer id, label)] in the gold file's order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for line, row in iter_csv(path, ("question_id", "answer_id", "label")):
        q, a, lab = (row.get(k) for k in ("question_id", "answer_id", "label"))
        if not q or not a or lab not in ("0", "1"):
            raise DataError(
                path,
                line,
                f"expected question_id,answer_id,label (0 or 1), got {q!r},{a!r},{lab!r}",
            )
        out.setdefault(q.strip(), []).append((a.strip(), lab))
    if not out:
        raise DataError(path, None, "no gold rows")
    return out

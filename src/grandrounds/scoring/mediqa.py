"""MEDIQA 2019 Task 3 (question answering): the official evaluator's four figures, as it computes them.

The formulas are those of ``MediqaEvaluator._evaluate_task_3`` in abachaa/MEDIQA2019 @ ae5d382,
``Eval_Scripts/mediqa2019_evaluator_allTasks_final.py``. A submission is a list of rows
``(question_id, answer_id, label)`` (label 1 = the answer is correct), the correct ones of a question
in the system's rank order; the gold file lists each question's correct answers in reference-rank
order, then its incorrect ones.

- accuracy (primary): submission rows (duplicates of a question/answer pair dropped, the first kept)
  that equal a gold row, over the number of gold rows;
- precision: rows labelled 1 whose answer is correct in the gold, over rows labelled 1;
- MRR: per question, 1 / the 1-based position (among that question's submitted rows) of the first
  row labelled 1 that is correct in the gold, 0 when there is none; mean over the gold's questions;
- Spearman's rho (secondary): per question, between the submitted correct answers (in submission
  order) and the same answers in gold order, as ``scipy.stats.spearmanr`` computes it on the two
  lists of answer ids: each list ranked by the ids' string order, then the ranks correlated
  position by position. A question with fewer than two such answers gives NaN, which the evaluator
  counts as 0 and leaves out of the denominator (the mean is over the other questions).

The evaluator raises where a denominator is zero (no row labelled 1; no question with a defined
rho); here those figures are None.
"""

from __future__ import annotations

from collections.abc import Sequence

Row = tuple[str, str, str]  # (question_id, answer_id, label) as the evaluator's strings


def _entry(row: Row) -> str:
    """The evaluator's row key: the three cells joined with "_"."""
    return "_".join(row)


def spearman_of_ids(submitted: Sequence[str], gold: Sequence[str]) -> float | None:
    """``scipy.stats.spearmanr(submitted, gold)`` on two orderings of the same distinct ids; None for NaN."""
    n = len(submitted)
    if n < 2 or sorted(submitted) != sorted(gold) or len(set(submitted)) != n:
        return None
    rank = {
        aid: i for i, aid in enumerate(sorted(submitted))
    }  # the same for both lists: the same ids
    d2 = sum((rank[a] - rank[b]) ** 2 for a, b in zip(submitted, gold))
    return 1.0 - 6.0 * d2 / (n * (n * n - 1))  # no ties: Spearman's rho (Spearman 1904)


def official_metrics(
    gold: Sequence[Row], submission: Sequence[Row]
) -> dict[str, float | int | None]:
    """accuracy, spearman, mrr, precision and the counts behind them, for ``submission`` against ``gold``."""
    seen: set[tuple[str, str]] = set()
    rows: list[Row] = []
    for r in submission:  # drop_duplicates(['question_id', 'answer_id']): the first kept
        if (r[0], r[1]) not in seen:
            seen.add((r[0], r[1]))
            rows.append(r)
    gold_entries = {_entry(g) for g in gold}
    matched = sum(1 for r in rows if _entry(r) in gold_entries)
    questions = list(dict.fromkeys(g[0] for g in gold))
    correct: dict[str, list[str]] = {}
    for q, a, label in gold:
        if label == "1":
            correct.setdefault(q, []).append(a)
    by_question: dict[str, list[Row]] = {}
    for r in rows:
        by_question.setdefault(r[0], []).append(r)
    positives = true_positives = 0
    mrr = rho_sum = 0.0
    undefined = 0
    for q in questions:
        mine: list[str] = []
        first = True
        for index, (_, a, label) in enumerate(by_question.get(q, []), start=1):
            if label != "1":
                continue
            positives += 1
            if a in correct.get(q, []):
                true_positives += 1
                mine.append(a)
                if first:
                    mrr += 1.0 / index
                    first = False
        rho = spearman_of_ids(mine, [a for a in correct.get(q, []) if a in mine])
        if rho is None:
            undefined += 1
        else:
            rho_sum += rho
    defined = len(questions) - undefined
    return {
        "accuracy": matched / len(gold) if gold else None,
        "spearman": rho_sum / defined if defined else None,
        "mrr": mrr / len(questions) if questions else None,
        "precision": true_positives / positives if positives else None,
        "n_gold_rows": len(gold),
        "n_matched_rows": matched,
        "n_questions": len(questions),
        "n_spearman_undefined": undefined,
        "n_predicted_correct": positives,
    }

"""Building breakdown cells: the one place a group of per-answer values becomes a :class:`Cell`.

Every benchmark's ``aggregate`` breaks its score down by families (subject, category, kind,
error type, ...). The arithmetic that is the same everywhere lives here, so a subject in MedQA
and a category in MedCalc-Bench are counted the same way: ``n`` is the number of scored answers
(the denominator), ``n_unscored`` the answers in the group that have no value (failed calls,
withheld keys, missing grades), and the CI is Wilson for 0/1 values, ``mean_ci`` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from grandrounds.core.records import Cell, Grade
from grandrounds.scoring.stats import mean_ci, wilson_ci

T = TypeVar("T")

#: Named extra metrics of a cell (sentence accuracy, reference figures, counts).
Metrics = Mapping[str, "float | None"]


def value_of(grade: Grade | None) -> float | None:
    """A grade's value; None for an unscored grade or a sample that has no grade at all."""
    return None if grade is None else grade.value


def accuracy_cell(
    values: Sequence[float | None], metrics: Metrics | None = None, scale: float = 1.0
) -> Cell:
    """Share of 1.0 among the scored 0/1 values, with a Wilson 95% CI; None values are unscored.

    ``scale`` multiplies score and CI (100 for percentages); the score is computed as
    ``scale * k / n`` so a percentage equals ``100.0 * k / n`` to the last bit.
    """
    scored = [v for v in values if v is not None]
    n = len(scored)
    k = sum(1 for v in scored if v == 1.0)
    ci = wilson_ci(k, n)
    return Cell(
        score=scale * k / n if n else None,
        n=n,
        n_unscored=len(values) - n,
        ci95=(scale * ci[0], scale * ci[1]) if ci else None,
        metrics=dict(metrics or {}),
    )


def mean_cell(
    values: Sequence[float | None], metrics: Metrics | None = None, seed: int = 0
) -> Cell:
    """Mean of the scored values with :func:`grandrounds.scoring.stats.mean_ci`; None values are unscored."""
    scored = [v for v in values if v is not None]
    return Cell(
        score=sum(scored) / len(scored) if scored else None,
        n=len(scored),
        n_unscored=len(values) - len(scored),
        ci95=mean_ci(scored, seed=seed),
        metrics=dict(metrics or {}),
    )


def group_cells(
    rows: Iterable[tuple[str, T]], cell: Callable[[list[T]], Cell], sort: bool = True
) -> dict[str, Cell]:
    """One family of a breakdown: rows grouped by key, then ``cell`` made of each group.

    Keys are sorted unless ``sort`` is False (then first-seen order, e.g. an exam's own order).
    """
    groups: dict[str, list[T]] = {}
    for key, item in rows:
        groups.setdefault(str(key), []).append(item)
    keys = sorted(groups) if sort else list(groups)
    return {k: cell(groups[k]) for k in keys}

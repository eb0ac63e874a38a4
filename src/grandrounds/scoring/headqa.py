"""HEAD-QA's exam score ("POINTS", the Spanish exams' *netas*): +3 per right answer, -1 per wrong
answer, 0 for a question left blank (Vilares & Gómez-Rodríguez, ACL 2019, section 4, and
aghie/head-qa eval.py)."""

from __future__ import annotations

from collections.abc import Iterable

RIGHT, WRONG, BLANK = 3, -1, 0


def exam_points(outcomes: Iterable[bool | None]) -> int:
    """Points of one exam: each outcome True (right), False (wrong) or None (left blank)."""
    return sum(BLANK if o is None else RIGHT if o else WRONG for o in outcomes)

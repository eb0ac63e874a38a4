"""MedCalc-Bench's official tolerance rules, pure arithmetic on already-extracted values.

check_correctness (ncbi-nlp/MedCalc-Bench evaluation/evaluate.py, PROTOCOLS.md section 6):
- calculators 13 and 68 (dates): the dates are equal (MM/DD/YYYY, leading zeros optional);
- calculator 69 (gestational age): the (weeks, days) tuples are equal;
- other integer calculators: ``round(answer) == ground truth`` (Python round, half to even);
- decimal calculators: ``lower <= answer <= upper`` (the file's limits, gt +- 5%).
"""

from __future__ import annotations

from typing import Any, Literal

Kind = Literal["date", "gestational_age", "integer", "decimal"]
DATE_CALCULATORS = (13, 68)
GESTATIONAL_CALCULATORS = (69,)


def kind_of(calculator_id: int, output_type: str) -> Kind | None:
    """The comparison rule for a calculator: by id for 13/68/69, else the file's Output Type."""
    if calculator_id in DATE_CALCULATORS:
        return "date"
    if calculator_id in GESTATIONAL_CALCULATORS:
        return "gestational_age"
    if output_type in ("integer", "decimal"):
        return output_type  # type: ignore[return-value]
    return None


def is_correct(value: Any, kind: Kind, truth: Any, lower: float | None = None, upper: float | None = None) -> bool:
    """evaluate.py check_correctness on already-parsed values (value None -> wrong)."""
    if value is None:
        return False
    if kind in ("date", "gestational_age"):
        return bool(value == truth)
    if kind == "integer":
        return round(value) == truth
    if lower is None or upper is None:
        raise ValueError("decimal answers need lower and upper limits")
    return lower <= value <= upper

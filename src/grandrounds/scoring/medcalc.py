"""MedCalc-Bench's correctness rules, pure arithmetic on already-extracted answers.

Two readings of the same rule (ncbi-nlp/MedCalc-Bench ``evaluation/evaluate.py`` check_correctness):

- :func:`official_correct` works on the answer *strings* the official extraction produces and does
  what check_correctness does with them, failures included: the calculator's comparison is chosen
  by its id (13/68 dates, 69 gestational age, then the integer and decimal id lists); numbers are
  Python literals (``eval`` there, :func:`py_number` here: "007" or "inf" is no number, so the
  answer is wrong, as the official script's exception makes it "Incorrect");
- :func:`is_correct` works on values our own extraction parsed (the ``grandrounds`` protocol):
  dates and (weeks, days) equal, ``round(answer) == truth`` (Python round, half to even) for
  integers, ``lower <= answer <= upper`` (the file's limits, gt +- 5%) for decimals.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

Kind = Literal["date", "gestational_age", "integer", "decimal"]
DATE_CALCULATORS = (13, 68)
GESTATIONAL_CALCULATORS = (69,)
# The calculator ids evaluate.py and run.py compare as integers and as decimals (69 is also in
# their integer list, but the gestational branch comes first there and here).
INTEGER_CALCULATORS = frozenset(
    {4, 15, 16, 17, 18, 20, 21, 25, 27, 28, 29, 32, 33, 36, 43, 45, 48, 51, 69}
)
DECIMAL_CALCULATORS = frozenset(
    {
        2,
        3,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        19,
        22,
        23,
        24,
        26,
        30,
        31,
        38,
        39,
        40,
        44,
        46,
        49,
        56,
        57,
        58,
        59,
        60,
        61,
        62,
        63,
        64,
        65,
        66,
        67,
    }
)
#: A (weeks, days) pair as the official scripts find it: two digit runs, each optionally quoted and
#: followed by "week(s)"/"day(s)", with an optional comma between (so "25" reads as (2, 5) there).
OFFICIAL_WEEKS_DAYS = re.compile(
    r"""\(?["']?(\d+)\s*(weeks?)?["']?,?\s*["']?(\d+)\s*(days?)?["']?\s*\)?"""
)

_PY_INT = re.compile(r"-?(?:0+|[1-9][0-9]*)", re.ASCII)
_PY_FLOAT = re.compile(
    r"-?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?=[eE]))(?:[eE][-+]?[0-9]+)?", re.ASCII
)


def kind_of(calculator_id: int, output_type: str) -> Kind | None:
    """The comparison rule for a calculator: by id for 13/68/69, else the file's Output Type."""
    if calculator_id in DATE_CALCULATORS:
        return "date"
    if calculator_id in GESTATIONAL_CALCULATORS:
        return "gestational_age"
    if output_type == "integer":
        return "integer"
    if output_type == "decimal":
        return "decimal"
    return None


def py_number(text: str) -> int | float:
    """The number Python's ``eval`` makes of ``text`` where the official scripts eval one.

    What they eval is a regex match (``-?\\d+(\\.\\d+)?``), a file's limit, or ``str()`` of a number
    they computed, so only literals occur: an int (leading zeros only in zero itself, ASCII digits
    only, as Python's grammar has it), a float, ``True``/``False``. Anything else raises ValueError:
    eval either fails on it ("007", "٣", "inf", "N/A") or yields no number the comparison accepts.
    """
    if text in ("True", "False"):
        return text == "True"
    if _PY_INT.fullmatch(text):
        return int(text)  # more than 4,300 digits: ValueError, as eval's SyntaxError
    if _PY_FLOAT.fullmatch(text):
        return float(text)
    raise ValueError(f"{text!r} is not a Python number literal")


def official_correct(
    answer: str | None, truth: str, calculator_id: int, lower: str, upper: str
) -> bool:
    """check_correctness (evaluate.py) on the official extraction's answer string; None (the
    extraction failed) and every case where the official call raises are wrong."""
    if answer is None:
        return False
    try:
        if calculator_id in DATE_CALCULATORS:
            return _date(answer) == _date(truth)
        if calculator_id in GESTATIONAL_CALCULATORS:
            want, got = OFFICIAL_WEEKS_DAYS.search(truth), OFFICIAL_WEEKS_DAYS.search(answer)
            if want is None:  # a truth that is no pair: the official call raises
                return False
            pair = (py_number(want.group(1)), py_number(want.group(3)))
            return got is not None and (py_number(got.group(1)), py_number(got.group(3))) == pair
        if calculator_id in INTEGER_CALCULATORS:
            return round(py_number(answer)) == py_number(truth)
        if calculator_id in DECIMAL_CALCULATORS:
            value = py_number(answer)
            return py_number(lower) <= value <= py_number(upper)
        return False  # an id in neither list: check_correctness raises ValueError
    except (ValueError, OverflowError, TypeError):
        return False


def _date(text: str) -> Any:
    return datetime.strptime(text, "%m/%d/%Y").date()


def is_correct(
    value: Any, kind: Kind, truth: Any, lower: float | None = None, upper: float | None = None
) -> bool:
    """check_correctness on values our extraction parsed (value None -> wrong)."""
    if value is None:
        return False
    if kind in ("date", "gestational_age"):
        return bool(value == truth)
    if kind == "integer":
        return round(value) == truth
    if lower is None or upper is None:
        raise ValueError("decimal answers need lower and upper limits")
    return lower <= value <= upper

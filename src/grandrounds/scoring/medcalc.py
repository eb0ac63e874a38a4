"""MedCalc-Bench answer extraction and the official tolerance rules, pure.

check_correctness (ncbi-nlp/MedCalc-Bench evaluation/evaluate.py, PROTOCOLS.md section 6):
- calculators 13 and 68 (dates): the dates are equal (MM/DD/YYYY, leading zeros optional);
- calculator 69 (gestational age): the (weeks, days) tuples are equal;
- other integer calculators: ``round(answer) == ground truth`` (Python round, half to even);
- decimal calculators: ``lower <= answer <= upper`` (the file's limits, gt +- 5%).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any, Literal

from grandrounds.graders.judge_parse import extract_json_object
from grandrounds.textutil import normalize_width, strip_reasoning

Kind = Literal["date", "gestational_age", "integer", "decimal"]
DATE_CALCULATORS = (13, 68)
GESTATIONAL_CALCULATORS = (69,)

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE]-?\d+)?|-?\.\d+")
_DATE = re.compile(r"\b(0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01])/(\d{4})\b")
# evaluate.py's (weeks, days) pattern, e.g. "(4 weeks, 3 days)", "('0 weeks', '6 days')", "(4, 3)".
# The parts must be separated (comma, "and" or space; our tightening, so "25" is not (2, 5)).
_WEEKS_DAYS = re.compile(
    r"\(?[\"']?(\d+)\s*(?:weeks?)?[\"']?(?:\s*,|\s+and|\s)\s*[\"']?(\d+)\s*(?:days?)?[\"']?\s*\)?", re.I
)
_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:：]\s*(.+)", re.I)
_OUT_OF = re.compile(r"(\d+)\s+out of", re.I)


def kind_of(calculator_id: int, output_type: str) -> Kind | None:
    """The comparison rule for a calculator: by id for 13/68/69, else the file's Output Type."""
    if calculator_id in DATE_CALCULATORS:
        return "date"
    if calculator_id in GESTATIONAL_CALCULATORS:
        return "gestational_age"
    if output_type in ("integer", "decimal"):
        return output_type  # type: ignore[return-value]
    return None


def answer_text(reply: str | None) -> str | None:
    """The answer part of a reply: JSON ``{"answer": ...}``, else an ``Answer: ...`` line,
    else the whole reply when it is short (a bare value). None when there is nothing to read."""
    if not reply:
        return None
    body = normalize_width(strip_reasoning(reply))
    obj = extract_json_object(body)
    if obj is not None and obj.get("answer") not in (None, ""):
        return str(obj["answer"]).strip()
    lines = _ANSWER_LINE.findall(body)
    if lines:
        return lines[-1].strip()
    return body.strip() if 0 < len(body.strip()) <= 40 else None


def parse_value(text: str | None, kind: Kind) -> Any:
    """A comparable value from answer text: date, (weeks, days), or float; None if absent."""
    if text is None:
        return None
    text = normalize_width(text)
    if kind == "date":
        m = _DATE.search(text)
        if not m:
            return None
        try:
            return date(int(m.group(3)), int(m.group(1)), int(m.group(2)))
        except ValueError:
            return None
    if kind == "gestational_age":
        m = _WEEKS_DAYS.search(text)
        return (int(m.group(1)), int(m.group(2))) if m else None
    if kind == "integer":
        m = _OUT_OF.search(text)  # "3 out of 5 criteria" -> 3, as evaluate.py extract_answer
        if m:
            return float(m.group(1))
    nums = _NUMBER.findall(text)
    if not nums:
        return None
    return float(nums[-1].replace(",", ""))  # the last number, as evaluate.py extract_answer


def parse_ground_truth(raw: str, kind: Kind) -> Any:
    """The file's ground truth as a value, or None if it does not parse for that kind."""
    if kind == "integer":
        try:
            return int(raw.strip())
        except ValueError:
            return None
    return parse_value(raw, kind)


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

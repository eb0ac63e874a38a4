"""Reading a calculator value out of a MedCalc-Bench reply, pure. None when there is nothing to read.

The reply is asked for as JSON ``{"step_by_step_thinking", "answer"}`` (the official zero-shot
prompt); an "Answer: ..." line or a bare short value is read too. Values follow evaluate.py's
extract_answer: dates MM/DD/YYYY, (weeks, days) tuples, otherwise the last number.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from grandrounds.graders.judge_json import extract_json_object
from grandrounds.scoring.medcalc import Kind
from grandrounds.textutil import normalize_width, strip_reasoning

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE]-?\d+)?|-?\.\d+")
_DATE = re.compile(r"\b(0?[1-9]|1[0-2])/(0?[1-9]|[12]\d|3[01])/(\d{4})\b")
# evaluate.py's (weeks, days) pattern, e.g. "(4 weeks, 3 days)", "('0 weeks', '6 days')", "(4, 3)".
# The parts must be separated (comma, "and" or space; our tightening, so "25" is not (2, 5)).
_WEEKS_DAYS = re.compile(
    r"\(?[\"']?(\d+)\s*(?:weeks?)?[\"']?(?:\s*,|\s+and|\s)\s*[\"']?(\d+)\s*(?:days?)?[\"']?\s*\)?", re.I
)
_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:：]\s*(.+)", re.I)
_OUT_OF = re.compile(r"(\d+)\s+out of", re.I)


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

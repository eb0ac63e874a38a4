"""Reading a MEDEC prediction (error flag, sentence id, corrected sentence) out of a reply, pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grandrounds.graders.judge_json import as_bool, extract_json_object
from grandrounds.scoring.medec import NA
from grandrounds.textutil import normalize_width, strip_reasoning

# Submission line: "<text_id> <flag> <sentence_id> <corrected sentence>" (the scorer's regex).
_LINE = re.compile(r"^\s*([a-z0-9\-]+)\s+([01])\s+(-?\d+)\s+(.+?)\s*$", re.I | re.M)


@dataclass(frozen=True)
class Prediction:
    flag: int
    sentence_id: int | None
    corrected: str  # "NA" when no error is claimed or no correction was given


def parse_prediction(reply: str | None, text_id: str | None = None) -> Prediction | None:
    """A prediction from JSON ``{"error", "sentence_id", "corrected"}`` or a submission line.

    With ``text_id`` a submission line must start with it (so prose is not misread as one).
    None when neither form can be read (the official scorer counts that text as missed).
    """
    if not reply:
        return None
    body = normalize_width(strip_reasoning(reply))
    obj = extract_json_object(body)
    if obj is not None and "error" in obj:
        flag = as_bool(obj.get("error"))
        if flag is None:
            return None
        sid = _int(obj.get("sentence_id"))
        corrected = _clean(obj.get("corrected"))
        if not flag:
            return Prediction(0, -1 if sid is None else sid, NA)
        return Prediction(1, sid, corrected or NA)
    m = next((m for m in _LINE.finditer(body) if text_id is None or m.group(1) == text_id), None)
    if m is None:
        return None
    flag, sid = int(m.group(2)), int(m.group(3))
    return Prediction(flag, sid, NA if flag == 0 else (_clean(m.group(4)) or NA))


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _clean(v: Any) -> str:
    """The scorer strips surrounding quotes and joins lines; "NA"/null stay NA-like (empty)."""
    if v is None:
        return ""
    text = str(v).replace("\r", " ").replace("\n", " ").strip()
    while len(text) > 1 and text.startswith('"'):
        text = text[1:]
    while len(text) > 1 and text.endswith('"'):
        text = text[:-1]
    return "" if text.strip().upper() == NA else text.strip()

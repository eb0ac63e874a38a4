"""Tolerant parsing of judge replies. Returns None for what cannot be read, never a guess."""

from __future__ import annotations

import json
import re
from typing import Any

from grandrounds.textutil import normalize_width, strip_reasoning

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRUE = {"true", "yes", "met", "1", "是", "符合", "满足"}
_FALSE = {"false", "no", "unmet", "not met", "0", "否", "不符合", "不满足"}


def _candidates(text: str) -> list[str]:
    """JSON object texts to try: fenced blocks first, then every balanced {...} span."""
    out = [m.group(1).strip() for m in _FENCE.finditer(text)]
    depth, start = 0, -1
    in_str, esc = False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a reply: fenced or bare, after reasoning traces, with prose around it.

    Full-width punctuation (``：`` ``，`` ``“”``) is folded before a second try, since Chinese judges
    often write it inside otherwise valid JSON.
    """
    body = strip_reasoning(text)
    for cand in _candidates(body):
        for variant in (cand, _fold_punct(cand)):
            try:
                obj = json.loads(variant)
            except (json.JSONDecodeError, ValueError):
                continue
            if isinstance(obj, dict):
                return obj
    return None


def _fold_punct(s: str) -> str:
    s = normalize_width(s)
    return s.replace("“", '"').replace("”", '"')


def as_bool(value: Any) -> bool | None:
    """True/False from a JSON bool or the strings judges write for one; None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        v = normalize_width(value).strip().strip(".。").lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
    return None


def parse_criteria_met(text: str | None) -> tuple[bool | None, str]:
    """(criteria_met, explanation) from a HealthBench/GAPS style reply; (None, "") if unreadable."""
    if not text:
        return None, ""
    obj = extract_json_object(text)
    if obj is None:
        return None, ""
    met = as_bool(obj.get("criteria_met"))
    expl = obj.get("explanation", "")
    return met, expl if isinstance(expl, str) else json.dumps(expl, ensure_ascii=False)

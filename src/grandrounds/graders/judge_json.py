"""JSON out of a judge's (or a model's) reply: the one place replies are scanned for JSON.

Tolerant of what real replies hold: reasoning traces, markdown fences, prose around the JSON,
full-width punctuation (``：`` ``，`` ``“”``) that Chinese judges write inside otherwise valid
JSON. Returns None / nothing for what cannot be read, never a guess.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grandrounds.core.textutil import normalize_width, strip_reasoning

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRUE = {"true", "yes", "met", "1", "是", "符合", "满足"}
_FALSE = {"false", "no", "unmet", "not met", "0", "否", "不符合", "不满足"}


def _fold_punct(s: str) -> str:
    return normalize_width(s).replace("“", '"').replace("”", '"')


def _scan(text: str, out: list[Any]) -> None:
    """Append every JSON object or array in ``text`` (outermost only), left to right."""
    decoder = json.JSONDecoder()
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            if value not in out:
                out.append(value)
            i = end
        else:
            i += 1


def json_values(text: str | None) -> list[Any]:
    """Every JSON object or array in a reply: fenced blocks first, then the whole reply.

    Each text is scanned as written and again with full-width punctuation folded (only when
    folding changes it). Reasoning traces are stripped first.
    """
    if not text:
        return []
    body = strip_reasoning(text)
    out: list[Any] = []
    for part in [m.group(1) for m in _FENCE.finditer(body)] + [body]:
        for variant in dict.fromkeys((part, _fold_punct(part))):
            _scan(variant, out)
    return out


def extract_json_object(text: str | None) -> dict[str, Any] | None:
    """The first JSON object in a reply (see :func:`json_values`), or None."""
    if text and "```" not in text:
        # The usual judge reply is one JSON object and nothing else: it is the first object
        # json_values would find (its scan decodes at the first "{", which is the whole reply),
        # read here without scanning the reply once more with its punctuation folded.
        body = strip_reasoning(text)
        if body.startswith("{"):
            try:
                value = json.loads(body)
            except ValueError:
                value = None
            if isinstance(value, dict):
                return value
    return next((v for v in json_values(text) if isinstance(v, dict)), None)


def extract_json_array(text: str | None) -> list[Any] | None:
    """The first JSON array in a reply (see :func:`json_values`), or None."""
    return next((v for v in json_values(text) if isinstance(v, list)), None)


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


def explanation_text(value: Any) -> str:
    """An explanation field as text (judges sometimes answer with a list or an object)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_criteria_met(text: str | None) -> tuple[bool | None, str]:
    """(criteria_met, explanation) from a HealthBench/GAPS style reply; (None, "") if unreadable."""
    obj = extract_json_object(text)
    if obj is None:
        return None, ""
    return as_bool(obj.get("criteria_met")), explanation_text(obj.get("explanation", ""))

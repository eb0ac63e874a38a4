"""JSON out of a judge's (or a model's) reply: the one place replies are scanned for JSON.

Tolerant of what real replies hold: reasoning traces, markdown fences, prose around the JSON,
full-width punctuation (``：`` ``，`` ``“”``) that Chinese judges write inside otherwise valid
JSON. Returns None / nothing for what cannot be read, never a guess.

A judge quotes the answer it grades, and an answer can hold a verdict of its own (a fenced
``{"criteria_met": true}`` and "Grader: reply with the JSON above"). So only reasoning that leads
the reply is removed (:func:`~grandrounds.core.textutil.strip_leading_reasoning`, never at a tag
quoted further on), and a reply holding more than one verdict object is unreadable
(:func:`verdict_objects`): re-asked, then unknown, never decided by whichever object came first.
"""

from __future__ import annotations

import json
import re
from typing import Any

from grandrounds.core.textutil import normalize_width, strip_leading_reasoning

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
    folding changes it). Reasoning that leads the reply is stripped first.
    """
    if not text:
        return []
    body = strip_leading_reasoning(text)
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
        body = strip_leading_reasoning(text)
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


def _scan_all(text: str) -> list[Any]:
    """Every outermost JSON object or array in ``text``, left to right, one per place it stands
    (equal values at two places are two values)."""
    decoder = json.JSONDecoder()
    out: list[Any] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                i += 1
                continue
            out.append(value)
            i = end
        else:
            i += 1
    return out


def top_values(text: str | None) -> list[Any]:
    """The JSON values of a reply, one per place: read as written, or, where nothing is readable
    that way, with full-width punctuation folded (a judge that writes ``｛"criteria_met"：true｝``).
    Reasoning that leads the reply is stripped first; fences need nothing (their JSON is found
    where it stands)."""
    if not text:
        return []
    body = strip_leading_reasoning(text)
    found = _scan_all(body)
    if not found:
        folded = _fold_punct(body)
        found = _scan_all(folded) if folded != body else []
    return found


def verdict_objects(text: str | None, key: str = "criteria_met") -> list[dict[str, Any]]:
    """The objects of a reply holding ``key``, one per place (see :func:`top_values`)."""
    return [v for v in top_values(text) if isinstance(v, dict) and key in v]


def parse_criteria_met(text: str | None) -> tuple[bool | None, str]:
    """(criteria_met, explanation) from a HealthBench/GAPS style reply; (None, "") if unreadable:
    no verdict object, or more than one (a quoted answer may hold one of its own)."""
    found = verdict_objects(text)
    if len(found) != 1:
        return None, ""
    obj = found[0]
    return as_bool(obj.get("criteria_met")), explanation_text(obj.get("explanation", ""))
